import APNs
import Foundation
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Jobs a careless or hostile producer writes with XADD, mixed among good ones, through the
    /// real worker, a private redis-server and the emulator over TLS + HTTP/2: every hostile job
    /// is dead-lettered with its reason and a one-line message, every good job is still delivered,
    /// and the worker never traps.
    @Suite
    struct HostileJobs {
        @Test
        func hostileFieldsAreDeadLetteredAndTheAppKeepsDelivering() async throws {
            // 429 once for tokens starting "7e", then accepted: the retry path runs on the latest expiration.
            try await withWorkerBed(emulator: { $0.throttlePrefix = "7e"; $0.throttleCount = 1 }) { bed in
                let good = 200
                let bad: [(fields: [(String, String)], reason: String)] = [
                    ([("token", String(repeating: "ab", count: 8_100)), ("payload", "{}")], "device_token_too_long"),
                    ([("token", String(repeating: "cd", count: 100_000)), ("payload", "{}")], "device_token_too_long"),
                    ([("token", "0123456789abcd"), ("payload", "{}")], "device_token_too_short"),
                    ([("token", WorkerHarness.deviceToken(1)), ("payload", "{}"), ("topic", String(repeating: "t", count: 5_000))], "topic_too_long"),
                    ([("token", WorkerHarness.deviceToken(2)), ("payload", "{}"), ("attempts", "9223372036854775807")], "bad_attempts"),
                    ([("token", WorkerHarness.deviceToken(3)), ("payload", "{}"), ("enqueued_at", "-9223372036854775808")], "bad_enqueued_at"),
                    ([("token", WorkerHarness.deviceToken(4)), ("payload", "{}"), ("expiration", "9223372036854775807")], "bad_expiration"),
                    ([("token", WorkerHarness.deviceToken(5)), ("payload", "{}"), ("origin", "18446744073709551615-0")], "bad_origin"),
                    ([("token", WorkerHarness.deviceToken(6)), ("payload", "{}"), ("push_type", "alert\n\u{1B}[2J\u{7}")], "unknown_push_type"),
                    ([("token", WorkerHarness.deviceToken(7)), ("payload", "{}"), ("app", "evil\r\napp")], "unknown_app"),
                ]
                let throttled = [("token", WorkerHarness.deviceToken(8, prefix: "7e")), ("payload", WorkerHarness.payload(8)),
                                 ("expiration", "253402300799")]
                let total = good + bad.count + 1
                try await bed.enqueue(total) { index in
                    if index < bad.count { return bad[index].fields }
                    if index == bad.count { return throttled }
                    return [("token", WorkerHarness.deviceToken(index, prefix: "90")), ("payload", WorkerHarness.payload(index))]
                }
                try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: total)

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique == good + 1 && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == bad.count, "\(ledger)")
                #expect(ledger.rejected.values.reduce(0, +) == 1 && ledger.rejected.keys.allSatisfy { $0.contains("TooManyRequests") },
                        "the one 429 and nothing hostile reached the emulator: \(ledger)")
                let dead = try await bed.client.entries(bed.keys.dead)
                #expect(dead.map { $0["reason"] ?? "?" }.sorted() == bad.map(\.reason).sorted(), "\(dead.map { $0["reason"] })")
                for entry in dead {
                    let message = entry["message"] ?? ""
                    #expect(!message.isEmpty && message.utf8.count < 600, "\(entry["reason"] ?? "?"): \(message.prefix(200))")
                    #expect(!message.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "one printable line: \(message)")
                }
                // The dead letter keeps the huge token byte for byte, so the producer can find it.
                #expect(dead.contains { $0["token"] == String(repeating: "cd", count: 100_000) })
            }
        }

        /// Field names and values that are not UTF-8 (or look like Herald's own escapes) come back
        /// in the dead letter byte for byte, and the message that quotes producer text is one
        /// escaped line.
        @Test
        func binaryFieldNamesAndValuesAreKeptByteForByte() async throws {
            try await withWorkerBed { bed in
                let names: [[UInt8]] = [[0xFF, 0xFE, 0x00, 0x41], [0xEF, 0x9C, 0x80, 0x7A], Array("nom\u{1B}[31m".utf8), [0xC3]]
                let value: [UInt8] = [0x00, 0xFF, 0x0A, 0x0D, 0x22, 0x5C]
                var arguments: [RedisArgument] = ["XADD", .text(bed.keys.jobs), "*", "token", .text(WorkerHarness.deviceToken(1)),
                                                  "payload", "{}", "push_type", .bytes([0x61, 0x0A, 0x1B, 0xFF])]
                for name in names { arguments += [.bytes(name), .bytes(value)] }
                let added = try await bed.client.send(arguments: arguments)
                try #require(added.string != nil, "\(added)")
                try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: 1)
                #expect(ledger.settled && ledger.deadLettered == 1, "\(ledger)")

                let reply = try await bed.client.send(arguments: ["XRANGE", .text(bed.keys.dead), "-", "+"])
                guard case .array(let rows) = reply, case .array(let parts) = rows.first, parts.count == 2,
                      case .array(let flat) = parts[1] else { Issue.record("no dead letter: \(reply)"); return }
                var fields: [([UInt8], [UInt8])] = []
                var index = 0
                while index + 1 < flat.count {
                    if case .bulk(let name) = flat[index], case .bulk(let value) = flat[index + 1] { fields.append((name, value)) }
                    index += 2
                }
                for name in names {
                    #expect(fields.contains { $0.0 == name && $0.1 == value }, "field \(name) kept exactly: \(fields.map(\.0))")
                }
                #expect(fields.contains { $0.0 == Array("push_type".utf8) && $0.1 == [0x61, 0x0A, 0x1B, 0xFF] })
                let message = fields.first { $0.0 == Array("message".utf8) }.map { String(decoding: $0.1, as: UTF8.self) } ?? ""
                #expect(fields.contains { $0.0 == Array("reason".utf8) && $0.1 == Array("unknown_push_type".utf8) }, "\(message)")
                #expect(!message.isEmpty && !message.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "one printable line: \(message)")
            }
        }
    }
}
