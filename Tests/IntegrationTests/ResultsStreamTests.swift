import APNs
import Foundation
import HeraldTestSupport
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Receipts: the results stream through the real worker, a private redis-server and the
    /// emulator over TLS + HTTP/2. Every notification gets exactly one result with the outcome it
    /// really had; nothing is written when results are off unless a job asks; the cap holds; and
    /// `herald results tail --json` prints what a backend can parse.
    @Suite
    struct ResultsStream {
        static let deadPrefix = "dead"

        static func results(_ bed: WorkerBed) async throws -> [[String: String]] {
            let exists = try await bed.client.integer("EXISTS", bed.keys.results)
            if exists == 0 { return [] }
            return try await bed.client.entries(bed.keys.results).map(\.fields)
        }

        @Test
        func everyNotificationHasExactlyOneResultWithItsOutcome() async throws {
            try await withWorkerBed(emulator: {
                $0.unregisteredPrefix = ResultsStream.deadPrefix
                $0.uniqueIDs = true  // as APNs' sandbox
            }) { bed in
                let good = 40
                let dead = 8
                let token = { (index: Int) in WorkerHarness.deviceToken(index, prefix: "5a") }
                let collapseToken = WorkerHarness.deviceToken(9_999, prefix: "c0")
                let fanOut = [WorkerHarness.deviceToken(1, prefix: "f0"), WorkerHarness.deviceToken(2, prefix: Self.deadPrefix),
                              WorkerHarness.deviceToken(3, prefix: "f0")]
                let explicitID = "123e4567-e89b-12d3-a456-426614174000"
                // Entries, in stream order: the collapse pair first (read in one batch: the older is superseded).
                var jobs: [[(String, String)]] = [
                    [("token", collapseToken), ("payload", #"{"aps":{"alert":"old score"}}"#), ("collapse_id", "score")],
                    [("token", collapseToken), ("payload", #"{"aps":{"alert":"new score"}}"#), ("collapse_id", "score")],
                    [("tokens", fanOut.joined(separator: ",")), ("payload", #"{"aps":{"alert":"fan"}}"#)],
                    [("tokens", WorkerHarness.deviceToken(4, prefix: "f1") + ",xyz"), ("payload", #"{"aps":{"alert":"half"}}"#)],
                    [("token", token(100_000)), ("payload", #"{"aps":{"alert":"mine"}}"#), ("id", explicitID)],
                    [("token", token(100_001)), ("payload", "{not json")],
                    [("token", token(100_002)), ("payload", #"{"aps":{}}"#), ("expiration", "1000000000")],
                ]
                for index in 0..<good { jobs.append([("token", token(index)), ("payload", WorkerHarness.payload(index))]) }
                for index in 0..<dead {
                    jobs.append([("token", WorkerHarness.deviceToken(index, prefix: Self.deadPrefix)), ("payload", WorkerHarness.payload(index))])
                }
                let all = jobs
                let ids = try await bed.enqueue(all.count) { all[$0] }
                try await bed.startWorker { $0.results = .all }
                let notifications = all.count - 2 + fanOut.count + 2
                let ledger = try await bed.waitUntilSettled(enqueued: notifications)
                #expect(ledger.settled, "\(ledger)")
                let results = try await Self.results(bed)

                // Exactly one result per notification: (job, token) pairs are unique and cover them all.
                #expect(results.count == notifications, "\(results.count) results for \(notifications) notifications")
                let pairs = results.map { ($0["job"] ?? "?") + "/" + ($0["token"] ?? "?") }
                #expect(Set(pairs).count == pairs.count, "a notification with two results: \(pairs)")
                var byStatus: [String: Int] = [:]
                for result in results { byStatus[result["status"] ?? "?", default: 0] += 1 }
                #expect(byStatus == ["accepted": good + 1 + 1 + 2 + 1, "dead_token": dead + 1, "dead_lettered": 3, "superseded": 1], "\(byStatus)")
                let counters = try await bed.counters()
                #expect(byStatus["superseded"] == counters.superseded && byStatus["accepted"] == ledger.acceptedUnique
                        && byStatus["dead_token"] == ledger.feedback && byStatus["dead_lettered"] == ledger.deadLettered, "\(ledger)")

                func result(job: Int, token: String) -> [String: String]? {
                    results.first { $0["job"] == ids[job] && $0["token"] == token }
                }
                // The collapse pair: the older superseded (never sent, status 0), the newer accepted.
                #expect(result(job: 0, token: collapseToken)?["status"] == "superseded")
                #expect(result(job: 0, token: collapseToken)?["http_status"] == "0")
                #expect(result(job: 1, token: collapseToken)?["status"] == "accepted")
                // The fan-out job: each token with its index; the dead one with APNs' reason and status.
                for (index, fanToken) in fanOut.enumerated() {
                    let entry = result(job: 2, token: fanToken)
                    #expect(entry?["index"] == String(index), "\(String(describing: entry))")
                    #expect(entry?["status"] == (index == 1 ? "dead_token" : "accepted"), "\(String(describing: entry))")
                }
                #expect(result(job: 2, token: fanOut[1])?["reason"] == "Unregistered")
                #expect(result(job: 2, token: fanOut[1])?["http_status"] == "410")
                // A fan-out token Herald refused: dead-lettered with the token rule's reason, never sent.
                let refused = result(job: 3, token: "xyz")
                #expect(refused?["status"] == "dead_lettered" && refused?["reason"] == "bad_device_token", "\(String(describing: refused))")
                #expect(refused?["apns_unique_id"] == nil && refused?["http_status"] == "0")
                #expect(result(job: 3, token: WorkerHarness.deviceToken(4, prefix: "f1"))?["status"] == "accepted")
                // The producer's own id is the apns-id.
                #expect(result(job: 4, token: token(100_000))?["apns_id"] == explicitID)
                #expect(result(job: 4, token: token(100_000))?["index"] == nil, "a one-token job has no index")
                #expect(result(job: 5, token: token(100_001))?["reason"] == "payload_not_json")
                #expect(result(job: 6, token: token(100_002))?["reason"] == "expired")
                // What APNs answered carries its apns-unique-id; every result a time and a UUID apns-id when sent.
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                for entry in results {
                    let at = Int64(entry["at"] ?? "") ?? 0
                    #expect(at > now - 600_000 && at <= now + 1_000, "\(entry)")
                    let answered = entry["status"] == "accepted" || entry["status"] == "dead_token"
                    if answered {
                        #expect(entry["apns_unique_id"].map(UUIDString.isCanonical) == true, "\(entry)")
                        #expect(entry["apns_id"].map(UUIDString.isCanonical) == true, "\(entry)")
                    } else {
                        #expect(entry["apns_unique_id"] == nil, "\(entry)")
                    }
                }
                let uniqueIDs = results.compactMap { $0["apns_unique_id"] }
                #expect(Set(uniqueIDs).count == uniqueIDs.count, "APNs' unique ids are unique")
            }
        }

        @Test
        func resultsOffWriteNothingButJobsWithReceiptGetTheirs() async throws {
            try await withWorkerBed { bed in
                let plain = 30
                try await bed.enqueue(plain) { index in
                    [("token", WorkerHarness.deviceToken(index, prefix: "6b")), ("payload", WorkerHarness.payload(index))]
                }
                try await bed.startWorker()
                _ = try await bed.waitUntilSettled(enqueued: plain)
                #expect(try await bed.client.integer("EXISTS", bed.keys.results) == 0, "results are off: no results stream")

                // Jobs that ask: a good one, a fan-out of two, one Herald refuses whole; others around them do not ask.
                let asking: [[(String, String)]] = [
                    [("token", WorkerHarness.deviceToken(1, prefix: "7c")), ("payload", WorkerHarness.payload(1)), ("receipt", "1")],
                    [("tokens", WorkerHarness.deviceToken(2, prefix: "7c") + "," + WorkerHarness.deviceToken(3, prefix: "7c")),
                     ("payload", WorkerHarness.payload(2)), ("receipt", "true")],
                    [("token", WorkerHarness.deviceToken(4, prefix: "7c")), ("payload", "[]"), ("receipt", "1")],
                    [("token", WorkerHarness.deviceToken(5, prefix: "7c")), ("payload", WorkerHarness.payload(5)), ("receipt", "0")],
                ]
                let more = 20
                let all = asking + (0..<more).map { [("token", WorkerHarness.deviceToken($0, prefix: "8d")), ("payload", WorkerHarness.payload($0))] }
                let ids = try await bed.enqueue(all.count) { all[$0] }
                _ = try await bed.waitUntilSettled(enqueued: plain + all.count + 1)
                let results = try await Self.results(bed)
                #expect(results.count == 4, "\(results)")
                #expect(Set(results.map { $0["job"] ?? "" }) == Set(ids[0..<3]), "\(results.map { $0["job"] })")
                #expect(results.first { $0["job"] == ids[2] }?["reason"] == "payload_not_object", "\(results)")
                #expect(results.filter { $0["job"] == ids[1] }.compactMap { $0["index"] }.sorted() == ["0", "1"])
                // The emulator plays production here, which sends no apns-unique-id (only the sandbox does).
                #expect(results.allSatisfy { $0["apns_unique_id"] == nil }, "\(results)")
                let unknown = try await bed.counters().unknownFields
                #expect(unknown == 0, "receipt is a field Herald knows: \(unknown) unknown")
            }
        }

        @Test
        func resultsOfOneQueueOnlyInAMultiQueueWorker() async throws {
            try await withWorkerBed { bed in
                let other = QueueKeys(queue: "other")
                let count = 12
                try await bed.enqueue(count)
                _ = try await bed.client.xadd(other.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index, prefix: "9e")), ("payload", WorkerHarness.payload(index))]
                }
                try await bed.startWorker {
                    $0.queues = [QueueKeys(), other]
                    $0.results = .queues(["other"])
                }
                try await waitFor("both queues drained", timeout: .seconds(60)) {
                    try await bed.emulator.statistics().acceptedUnique == 2 * count
                }
                try await waitFor("other's results written", timeout: .seconds(30)) {
                    try await bed.client.integer("XLEN", other.results) == count
                }
                #expect(try await bed.client.integer("EXISTS", bed.keys.results) == 0, "the default queue has results off")
            }
        }

        @Test
        func theCapHolds() async throws {
            try await withWorkerBed { bed in
                let total = 600
                try await bed.enqueue(total)
                try await bed.startWorker {
                    $0.results = .all
                    $0.resultsMaxLength = 10
                }
                _ = try await bed.waitUntilSettled(enqueued: total)
                let length = try await bed.client.integer("XLEN", bed.keys.results)
                // MAXLEN ~ trims whole stream nodes (100 entries each by default): about 10, never the 600 written.
                #expect(length >= 10 && length <= 10 + 100, "results stream holds \(length) entries")
            }
        }

        @Test
        func resultsTailJSONIsWhatABackendParses() async throws {
            try await withWorkerBed(emulator: {
                $0.unregisteredPrefix = ResultsStream.deadPrefix
                $0.uniqueIDs = true  // as APNs' sandbox
            }) { bed in
                try await bed.enqueue(6) { index in
                    [("token", WorkerHarness.deviceToken(index, prefix: index < 4 ? "ab" : Self.deadPrefix)), ("payload", WorkerHarness.payload(index))]
                }
                try await bed.startWorker { $0.results = .all }
                _ = try await bed.waitUntilSettled(enqueued: 6)

                let directory = try TemporaryDirectory(prefix: "herald-results")
                let out = directory.path("tail.out")
                _ = FileManager.default.createFile(atPath: out, contents: nil)
                let process = TestProcess()
                process.executableURL = URL(fileURLWithPath: try QueueToolingHarness.binary())
                process.arguments = ["results", "tail", "--json", "--count", "100", "--show-tokens"]
                var environment = ProcessInfo.processInfo.environment
                environment["HERALD_REDIS"] = bed.redis.url
                environment["HERALD_QUEUE"] = nil
                process.environment = environment
                process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
                try process.run()
                process.waitUntilExit()
                #expect(process.terminationStatus == 0)
                let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n")
                #expect(lines.count == 6, "\(lines)")
                var statuses: [String: Int] = [:]
                for line in lines {
                    let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
                    statuses[object["status"] as? String ?? "?", default: 0] += 1
                    #expect((object["token"] as? String)?.count == 64, "full tokens with --show-tokens: \(line)")
                    #expect(object["job"] is String && object["at_ms"] is Int && object["http_status"] is Int, "\(line)")
                    #expect((object["apns_unique_id"] as? String).map(UUIDString.isCanonical) == true, "\(line)")
                }
                #expect(statuses == ["accepted": 4, "dead_token": 2], "\(statuses)")
            }
        }
    }
}
