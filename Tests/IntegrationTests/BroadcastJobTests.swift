import APNs
import Foundation
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Broadcast jobs (`channel_id`) through the worker, a real redis-server and the emulator
    /// over TLS + HTTP/2: every job counted, whatever a producer wrote.
    @Suite
    struct BroadcastJobs {
        static let update = #"{"aps":{"timestamp":1732370000,"event":"update","content-state":{"score":1}}}"#

        /// Hostile broadcast jobs sit among device pushes: each is dead-lettered with its own
        /// reason and never sent, the device pushes are all delivered once, nothing is left over.
        @Test
        func hostileBroadcastJobsAreDeadLetteredWithTheirReasons() async throws {
            try await withWorkerBed { bed in
                let good = 500
                let channel = "dHN0LXNyY2gtY2hubA=="
                let bad: [(reason: String, fields: [(String, String)])] = [
                    ("channel_and_tokens", [("channel_id", channel), ("token", WorkerHarness.deviceToken(90_001)), ("payload", Self.update)]),
                    ("empty_channel_id", [("channel_id", ""), ("payload", Self.update)]),
                    ("channel_id_too_long", [("channel_id", String(repeating: "QUJD", count: 40)), ("payload", Self.update)]),
                    ("bad_channel_id", [("channel_id", "bad id\r\napns-topic: x"), ("payload", Self.update)]),
                    ("broadcast_push_type", [("channel_id", channel), ("payload", Self.update), ("push_type", "alert")]),
                    ("broadcast_collapse_id", [("channel_id", channel), ("payload", Self.update), ("collapse_id", "score")]),
                    ("bad_priority", [("channel_id", channel), ("payload", Self.update), ("priority", "1")]),
                    ("payload_too_large", [("channel_id", channel),
                                           ("payload", #"{"aps":{"timestamp":1,"event":"update"},"x":""# + String(repeating: "x", count: 5_200) + #""}"#)]),
                    ("live_activity_missing_event", [("channel_id", channel), ("payload", #"{"aps":{"timestamp":1}}"#)]),
                ]
                let spacing = good / bad.count
                let total = good + bad.count
                let layout: [Int?] = (0..<total).map { index in
                    index % (spacing + 1) == spacing / 2 && index / (spacing + 1) < bad.count ? index / (spacing + 1) : nil
                }
                #expect(layout.compactMap { $0 }.count == bad.count)
                _ = try await bed.enqueue(total) { index in
                    if let which = layout[index] { return bad[which].fields }
                    return [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let worker = try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: total)

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique == good && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == bad.count && ledger.feedback == 0 && ledger.rejected.isEmpty, "\(ledger)")
                let dead = try await bed.client.entries(bed.keys.dead)
                #expect(dead.compactMap { $0["reason"] }.sorted() == bad.map(\.reason).sorted(), "one dead letter per job: \(dead)")
                for job in bad {
                    guard let entry = dead.first(where: { $0["reason"] == job.reason }) else { continue }
                    #expect(entry["channel_id"] == job.fields.first { $0.0 == "channel_id" }?.1, "the dead letter keeps the channel: \(entry)")
                    #expect(entry["status"] == "0" && entry["attempts"] == "0" && !(entry["message"] ?? "").isEmpty, "never sent: \(entry)")
                }
                let statistics = try await bed.emulator.statistics()
                #expect(statistics.acceptedUnique == good, "no broadcast reached the emulator: \(statistics)")
                let counters = try await worker.counters()
                #expect(counters.deadLettered == bad.count && counters.accepted == good, "\(counters)")
            }
        }
    }
}
