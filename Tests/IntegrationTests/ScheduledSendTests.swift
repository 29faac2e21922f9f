import APNs
import Foundation
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Scheduled sends (`deliver_at`) end to end: a real redis-server, the emulator over TLS and
    /// HTTP/2, and `QueueWorker`s in process. Every job is counted (accepted at the emulator per
    /// apns-id, dead-lettered with its reason) and the jobs stream, pending list, retry set and
    /// scheduled set end empty.
    @Suite
    struct ScheduledSends {
        static func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

        /// Jobs due a few seconds ahead are held (in the scheduled set, nothing sent) until then
        /// and all delivered after; jobs whose deliver_at has passed are sent at once.
        @Test
        func futureJobsWaitAndPastJobsGoAtOnce() async throws {
            try await withWorkerBed { bed in
                let held = 200, past = 100
                let deliverAt = Self.nowMilliseconds() + 6_000
                let rfc3339 = DeliverAt.format(deliverAt)
                try await bed.enqueue(held) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)),
                     ("deliver_at", index % 2 == 0 ? String(deliverAt) : rfc3339)]
                }
                let pastAt = Self.nowMilliseconds() - 60_000
                try await bed.enqueue(past) { index in
                    [("token", WorkerHarness.deviceToken(10_000 + index)), ("payload", WorkerHarness.payload(index)),
                     ("deliver_at", index % 2 == 0 ? String(pastAt) : DeliverAt.format(pastAt))]
                }
                let worker = try await bed.startWorker()
                // The past ones are delivered while the held ones wait in the scheduled set.
                try await waitFor("the jobs whose deliver_at passed are delivered and the others held", timeout: .seconds(30)) {
                    let ledger = try await bed.ledger(enqueued: held + past)
                    return ledger.acceptedUnique == past && ledger.scheduled == held
                }
                // Until deliver_at (less 50 ms for clock granularity), nothing held is sent.
                var looks = 0
                while Self.nowMilliseconds() < deliverAt - 50 {
                    let statistics = try await bed.emulator.statistics()
                    #expect(statistics.acceptedUnique == past, "a held job was sent \(deliverAt - Self.nowMilliseconds()) ms before its deliver_at")
                    looks += 1
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(looks > 0, "the held jobs were observed before their deliver_at")
                let ledger = try await bed.waitUntilSettled(enqueued: held + past)
                #expect(Self.nowMilliseconds() >= deliverAt)
                let counters = try await worker.counters()
                #expect(ledger.settled && ledger.acceptedUnique == held + past && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == 0, "\(ledger)")
                #expect(counters.scheduled == held, "each held job counted once as scheduled: \(counters)")
                // Read twice (held, then promoted), sent once.
                #expect(counters.jobsRead == held * 2 + past && counters.notificationsSent == held + past, "\(counters)")
            }
        }

        /// A job whose apns-expiration passes before its deliver_at is dead-lettered `expired` when
        /// read; one that expires while it waits (no worker to promote it in time) is dead-lettered
        /// `expired` when it comes due. Bad deliver_at values are dead-lettered `bad_deliver_at`.
        @Test
        func expiredAndBadValuesAreDeadLettered() async throws {
            try await withWorkerBed { bed in
                let now = Self.nowMilliseconds()
                // Expires (in 2 s) before it is due (in 1 h).
                try await bed.enqueue(10) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)),
                     ("deliver_at", String(now + 3_600_000)), ("expiration", String(now / 1000 + 2))]
                }
                let bad = ["tomorrow", "-1", "2026-02-30T09:00:00Z", "253402300800000", "2026-11-24T09:00:00", "1.5e12"]
                try await bed.enqueue(bad.count) { index in
                    [("token", WorkerHarness.deviceToken(100 + index)), ("payload", WorkerHarness.payload(index)), ("deliver_at", bad[index])]
                }
                // Due in 8 s, expires 2 to 3 s later: held by the first worker, which stops before it is due.
                try await bed.enqueue(20) { index in
                    [("token", WorkerHarness.deviceToken(200 + index)), ("payload", WorkerHarness.payload(index)),
                     ("deliver_at", String(now + 8_000)), ("expiration", String(now / 1000 + 10))]
                }
                let first = try await bed.startWorker()
                try await waitFor("the first worker held the 20 and dead-lettered the rest", timeout: .seconds(30)) {
                    let ledger = try await bed.ledger(enqueued: 36)
                    return ledger.scheduled == 20 && ledger.deadLettered == 16
                }
                try await first.drain()
                // Nobody promotes them until they have expired.
                try await waitFor("the held jobs' apns-expiration passed", timeout: .seconds(20)) {
                    Self.nowMilliseconds() > (now / 1000 + 10) * 1000 + 200
                }
                try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: 36)
                #expect(ledger.settled && ledger.acceptedUnique == 0, "\(ledger)")
                #expect(ledger.deadByReason == ["expired": 30, "bad_deliver_at": bad.count], "\(ledger)")
                let letters = try await bed.client.entries(bed.keys.dead)
                let badLetter = try #require(letters.first { $0["reason"] == "bad_deliver_at" })
                #expect(badLetter["message"]?.contains("RFC 3339") == true, "\(badLetter)")
                let early = try #require(letters.first { $0["reason"] == "expired" && $0["message"]?.contains("before its deliver_at") == true })
                #expect(early["deliver_at"] == String(now + 3_600_000), "the dead letter keeps the job's deliver_at: \(early)")
                #expect(letters.contains { $0["reason"] == "expired" && $0["scheduled"] != nil }, "a promoted job expired when read again")
            }
        }

        /// A worker stopped while jobs are scheduled loses none: another worker promotes and sends
        /// each exactly once.
        @Test
        func restartWhileScheduledLosesNothing() async throws {
            try await withWorkerBed { bed in
                let count = 500
                let deliverAt = Self.nowMilliseconds() + 6_000
                try await bed.enqueue(count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)), ("deliver_at", String(deliverAt))]
                }
                let first = try await bed.startWorker()
                try await waitFor("every job is held", timeout: .seconds(30)) {
                    try await bed.client.integer("ZCARD", bed.keys.scheduled) == count
                }
                try await first.drain()
                #expect(try await bed.emulator.statistics().acceptedUnique == 0)
                let second = try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                #expect(ledger.settled && ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                #expect(try await second.counters().scheduled == 0, "promoted jobs are sent, never held again")
            }
        }

        /// 20,000 jobs due at the same moment: promoted in batches while the stream's backlog stays
        /// under the limit the script checks, and all delivered, each once.
        @Test
        func twentyThousandDueAtOnceAllDelivered() async throws {
            try await withWorkerBed { bed in
                let count = 20_000
                let limit = 3_000
                // Far enough ahead that the worker reads all of them before any is due.
                let deliverAt = Self.nowMilliseconds() + 12_000
                try await bed.enqueue(count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)), ("deliver_at", String(deliverAt))]
                }
                let worker = try await bed.startWorker { $0.promotionBacklogLimit = limit }
                try await waitFor("every job is held", timeout: .seconds(60)) {
                    try await bed.client.integer("ZCARD", bed.keys.scheduled) == count
                }
                #expect(try await bed.client.integer("XLEN", bed.keys.jobs) < count, "held jobs left the stream")
                // While they drain, the stream never holds more than the limit.
                var largest = 0
                try await waitFor("the scheduled set drained", timeout: .seconds(120), interval: .milliseconds(20)) {
                    largest = max(largest, try await bed.client.integer("XLEN", bed.keys.jobs))
                    return try await bed.client.integer("ZCARD", bed.keys.scheduled) == 0
                }
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(120))
                #expect(ledger.settled && ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                #expect(largest <= limit, "the stream held \(largest) entries, more than the promotion limit \(limit)")
                let counters = try await worker.counters()
                #expect(counters.scheduled == count && counters.accepted == count, "\(counters)")
            }
        }

        /// The promote script on its own: a full batch when more are due, never past the backlog
        /// limit, only members due by the given time, in due order.
        @Test
        func promoteScriptMovesBatchesUnderTheBacklogLimit() async throws {
            let server = try RedisServer()
            defer { server.stop() }
            let client = try RedisClient(endpoint: server.endpoint)
            defer { client.shutdown() }
            let keys = QueueKeys(queue: "promote")
            for index in 0..<2_500 {
                _ = try await client.send(["ZADD", keys.scheduled, String(1_000 + index), #"["token","\#(index)","payload","{}"]"#])
            }
            func promote(_ now: Int = 10_000, _ batch: Int = 1000, _ limit: Int = 0, retry: Bool = false) async throws -> Int {
                let reply = try await client.send(["EVAL", QueueScripts.promoteDueRetries, "2", retry ? keys.retry : keys.scheduled,
                                                   keys.jobs, String(now), String(batch), String(limit)])
                guard let moved = reply.integer else { throw WaitTimeout(description: "the promote script answered \(reply)") }
                return Int(moved)
            }
            #expect(try await promote(999, 1000, 0) == 0, "nothing due yet")
            #expect(try await promote(1_499, 1000, 0) == 500, "only those due by then")
            #expect(try await promote(10_000, 1000, 1_200) == 700, "up to the backlog limit")
            #expect(try await promote(10_000, 1000, 1_200) == 0, "the stream is at the limit")
            #expect(try await promote(10_000, 1000, 0) == 1000, "a full batch")
            #expect(try await promote(10_000, 1000, 0) == 300)
            #expect(try await client.integer("ZCARD", keys.scheduled) == 0)
            let entries = try await client.entries(keys.jobs)
            #expect(entries.map { $0["token"] ?? "" } == (0..<2_500).map(String.init), "promoted in due order")

            // Members Herald did not write: each comes out as one `malformed_member` field (the
            // worker dead-letters it with its text), none stops the members behind it.
            let hostile = ["not json", #"{"a":1}"#, #"["odd"]"#, #"["a",["nested"]]"#, "[]",
                           "[" + Array(repeating: #""f","v""#, count: 10_000).joined(separator: ",") + "]"]
            for (index, member) in hostile.enumerated() {
                _ = try await client.send(["ZADD", keys.retry, String(index), member])
            }
            _ = try await client.send(["ZADD", keys.retry, "99", #"["token","good","payload","{}"]"#])
            #expect(try await promote(retry: true) == hostile.count + 1)
            #expect(try await client.integer("ZCARD", keys.retry) == 0)
            let after = try await client.entries(keys.jobs).suffix(hostile.count + 1)
            #expect(Array(after.prefix(hostile.count)).map { $0["malformed_member"] } == hostile.map { Optional($0) })
            #expect(after.last?["token"] == "good")
        }

        /// `herald api` takes `deliver_at` as a number or a string and refuses a bad one with 422.
        @Test
        func apiAcceptsAndChecksDeliverAt() async throws {
            try await withAPIBed { bed in
                let token = String(repeating: "cd", count: 32)
                let good = try await bed.request("POST", "/v1/notifications", json: """
                    {"notifications":[
                      {"token":"\(token)","payload":{"aps":{"alert":"a"}},"deliver_at":1795510800000},
                      {"token":"\(token)","payload":{"aps":{"alert":"b"}},"deliver_at":"2026-11-24T10:00:00+01:00"}
                    ]}
                    """)
                #expect(good.status == 202, "\(good)")
                // Alerts at the default priority go to the urgent stream (priority lanes).
                let entries = try await bed.client.entries(QueueKeys().urgentJobs)
                #expect(entries.map { $0["deliver_at"] } == ["1795510800000", "2026-11-24T10:00:00+01:00"])
                for bad in [#""tomorrow""#, "-5", #""2026-11-24T09:00:00""#, "253402300800000", "[1]"] {
                    let answer = try await bed.request("POST", "/v1/notifications",
                                                       json: #"{"token":"\#(token)","payload":{"aps":{}},"deliver_at":\#(bad)}"#)
                    #expect(answer.status == 422, "\(bad): \(answer)")
                    #expect(answer.text.contains(bad == "[1]" ? "bad_field_type" : "bad_deliver_at"), "\(bad): \(answer.text)")
                }
                #expect(try await bed.client.integer("XLEN", QueueKeys().urgentJobs) == 2, "nothing bad was enqueued")
            }
        }

        /// `herald enqueue --at` writes deliver_at (absolute as given, +DURATION as ms), refuses a
        /// bad time, and `herald stats` counts the scheduled set.
        @Test
        func enqueueAtAndStats() throws {
            let harness = try QueueToolingHarness()
            let token = String(repeating: "ab", count: 32)
            let payload = #"{"aps":{"alert":"later"}}"#
            let before = Self.nowMilliseconds()
            let relative = try harness.herald("enqueue", "--queue", "tooling", "--token", token, "--payload", payload,
                                              "--topic", "com.example.app", "--at", "+10m")
            #expect(relative.status == 0, "\(relative.stderr)")
            let absolute = try harness.herald("enqueue", "--queue", "tooling", "--token", token, "--payload", payload,
                                              "--topic", "com.example.app", "--at", "2030-01-02T03:04:05+01:00")
            #expect(absolute.status == 0, "\(absolute.stderr)")
            let bad = try harness.herald("enqueue", "--queue", "tooling", "--token", token, "--payload", payload,
                                         "--topic", "com.example.app", "--at", "next tuesday")
            #expect(bad.status == 64 && bad.stderr.contains("RFC 3339"), "\(bad.status) \(bad.stderr)")
            // Alerts at the default priority go to the urgent stream (priority lanes).
            let entries = try harness.entries(harness.keys.urgentJobs)
            #expect(entries.count == 2)
            let written = entries.compactMap { $0.text(JobField.deliverAt) }
            let relativeAt = try #require(written.first.flatMap { Int64($0) })
            #expect(relativeAt >= before + 600_000 && relativeAt <= Self.nowMilliseconds() + 600_000, "\(written)")
            #expect(written.last == "2030-01-02T03:04:05+01:00")

            // The scheduled set as a worker writes it: members scored by deliver_at.
            let now = Self.nowMilliseconds()
            for (index, due) in [now - 5_000, now + 30_000, now + 600_000, now + 7_200_000].enumerated() {
                try harness.command("ZADD", harness.keys.scheduled, String(due), #"["token","\#(index)"]"#)
            }
            let run = try harness.herald("stats", "--queue", "tooling", "--json")
            #expect(run.status == 0, "\(run.stderr)")
            let queue = try #require((try run.json()["queues"] as? [[String: Any]])?.first)
            #expect(queue["scheduled"] as? Int == 4, "\(queue)")
            #expect(queue["scheduled_due"] as? Int == 1, "\(queue)")
            #expect(queue["scheduled_next_minute"] as? Int == 1, "\(queue)")
            #expect(queue["scheduled_next_hour"] as? Int == 2, "\(queue)")
            #expect((queue["next_scheduled_at_ms"] as? NSNumber)?.int64Value == now - 5_000, "\(queue)")
            #expect((queue["keys"] as? [String: Any])?["scheduled"] as? String == harness.keys.scheduled)
            let table = try harness.herald("stats", "--queue", "tooling")
            #expect(table.stdout.contains("scheduled sends") && table.stdout.contains("NEXT HOUR"), "\(table.stdout)")
        }
    }
}
