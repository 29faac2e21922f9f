import APNs
import Foundation
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// `QueueWorker` in process against a private redis-server and the emulator over TLS + HTTP/2:
    /// every job enqueued is counted as accepted (per apns-id, at the emulator), dead-lettered,
    /// reported as a dead token or superseded, and the queue ends empty with nothing pending.
    @Suite
    struct WorkerDelivery {
        @Test
        func hundredThousandJobsDeliveredExactlyOnce() async throws {
            try await withWorkerBed { bed in
                let count = 100_000
                let enqueueStart = ContinuousClock.now
                try await bed.enqueue(count)
                let enqueueTime = ContinuousClock.now - enqueueStart
                let start = ContinuousClock.now
                let worker = try await bed.startWorker(connections: 4)
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(150))
                let elapsed = ContinuousClock.now - start
                let counters = try await worker.counters()
                print("hundredThousandJobsDeliveredExactlyOnce: \(count) jobs delivered in \(elapsed) (enqueue \(enqueueTime)); \(ledger)")

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique == count, "\(ledger)")
                #expect(ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0 && ledger.rejected.isEmpty, "\(ledger)")
                #expect(counters.accepted == count && counters.jobsFinished == count, "\(counters)")
                #expect(counters.notificationsSent == count && counters.retried == 0 && counters.superseded == 0, "\(counters)")
            }
        }

        @Test
        func unregisteredTokensLandInFeedback() async throws {
            try await withWorkerBed(emulator: { $0.unregisteredPrefix = "dead" }) { bed in
                let count = 2_000
                // Every tenth job goes to a token APNs says is no longer registered.
                let isDead: @Sendable (Int) -> Bool = { $0 % 10 == 3 }
                let token: @Sendable (Int) -> String = { WorkerHarness.deviceToken($0, prefix: isDead($0) ? "dead" : "00") }
                let startedAt = Int64(Date().timeIntervalSince1970 * 1000)
                let ids = try await bed.enqueue(count) { [("token", token($0)), ("payload", WorkerHarness.payload($0))] }
                let worker = try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                let finishedAt = Int64(Date().timeIntervalSince1970 * 1000)
                let deadIndices = (0..<count).filter(isDead)

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.feedback == deadIndices.count, "\(ledger)")
                #expect(ledger.acceptedUnique == count - deadIndices.count && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == 0, "dead tokens are feedback, never dead letters: \(ledger)")
                #expect(ledger.rejected == ["Unregistered": deadIndices.count], "never retried: \(ledger)")

                let feedback = try await bed.client.entries(bed.keys.feedback)
                let expected = Dictionary(uniqueKeysWithValues: deadIndices.map { (token($0), ids[$0]) })
                #expect(Set(feedback.compactMap { $0["token"] }) == Set(expected.keys), "one feedback entry per dead token")
                for entry in feedback {
                    let timestamp = entry["timestamp"].flatMap { Int64($0) }
                    let ok = entry["token"].flatMap { expected[$0] } == entry["job"]
                        && entry["topic"] == WorkerHarness.bundleID && entry["reason"] == "Unregistered"
                        && timestamp.map { $0 >= startedAt - 1000 && $0 <= finishedAt + 1000 } == true
                    #expect(ok, "feedback entry \(entry) should name the token, topic, reason Unregistered, APNs' timestamp and its job")
                    if !ok { break }
                }
                let counters = try await worker.counters()
                #expect(counters.deadTokens == deadIndices.count && counters.retried == 0, "\(counters)")
            }
        }

        @Test
        func throttledTokenIsRetriedLaterThenDelivered() async throws {
            try await withWorkerBed(emulator: { $0.throttlePrefix = "7777"; $0.throttleCount = 1 }) { bed in
                let count = 500
                let isThrottled: @Sendable (Int) -> Bool = { $0 % 25 == 7 }
                try await bed.enqueue(count) {
                    [("token", WorkerHarness.deviceToken($0, prefix: isThrottled($0) ? "7777" : "00")), ("payload", WorkerHarness.payload($0))]
                }
                let throttled = (0..<count).filter(isThrottled).count
                let start = ContinuousClock.now
                let worker = try await bed.startWorker()
                // The others are not held up by the throttled ones: they are accepted first.
                try await waitFor("every unthrottled job is accepted", timeout: .seconds(30)) {
                    try await bed.emulator.statistics().acceptedUnique >= count - throttled
                }
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                let elapsed = ContinuousClock.now - start
                let counters = try await worker.counters()

                #expect(ledger.settled && ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0, "\(ledger)")
                #expect(ledger.rejected == ["TooManyRequests": throttled], "\(ledger)")
                // Each throttled token went through the retry set once (token backoff starts at ~1 s).
                #expect(counters.retried == throttled, "\(counters)")
                #expect(elapsed >= .milliseconds(800), "a 429 retry waits about a second; everything took \(elapsed)")
            }
        }

        @Test
        func serviceUnavailableStormAndGoAwaysLoseNothing() async throws {
            try await withWorkerBed(emulator: {
                $0.injectedErrors = [InjectedError(status: 503, reason: "ServiceUnavailable", rate: 0.2)]
                $0.goAwayAfterStreams = 500
            }) { bed in
                let count = 2_000
                try await bed.enqueue(count)
                let worker = try await bed.startWorker(connections: 4) { $0.maxAttempts = 4 }
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(90))
                let counters = try await worker.counters()
                let statistics = try await bed.emulator.statistics()
                print("serviceUnavailableStormAndGoAwaysLoseNothing: \(ledger); goaways \(statistics.goAwaysSent), connections \(statistics.connections); \(counters)")

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.acceptedUnique + ledger.deadByReason["max_attempts", default: 0] == count, "\(ledger)")
                #expect(Set(ledger.deadByReason.keys).isSubset(of: ["max_attempts"]), "\(ledger)")
                #expect(ledger.feedback == 0, "\(ledger)")
                #expect((ledger.rejected["ServiceUnavailable"] ?? 0) > 0 && statistics.goAwaysSent > 0, "the faults happened: \(statistics.json())")
                #expect(counters.accepted == ledger.acceptedUnique, "\(counters)")
                // Each dead letter says how many attempts were made and what APNs answered last.
                for entry in try await bed.client.entries(bed.keys.dead) {
                    #expect(entry["attempts"] == "4" && entry["status"] == "503", "\(entry)")
                }
            }
        }

        @Test
        func malformedJobsAreDeadLetteredWithDistinctReasons() async throws {
            try await withWorkerBed { bed in
                let good = 1_000
                let bad: [(reason: String, fields: [(String, String)])] = [
                    ("payload_not_json", [("token", WorkerHarness.deviceToken(90_001)), ("payload", #"{"aps":{"alert":"unclosed"}"#)]),
                    ("payload_too_large", [("token", WorkerHarness.deviceToken(90_002)),
                                           ("payload", #"{"aps":{"alert":""# + String(repeating: "x", count: 5_000) + #""}}"#)]),
                    ("bad_device_token", [("token", "zz" + String(repeating: "0", count: 62)), ("payload", WorkerHarness.payload(3))]),
                    ("device_token_odd_length", [("token", String(repeating: "a", count: 63)), ("payload", WorkerHarness.payload(4))]),
                    ("unknown_push_type", [("token", WorkerHarness.deviceToken(90_005)), ("payload", WorkerHarness.payload(5)),
                                           ("push_type", "carrier-pigeon")]),
                    ("missing_payload", [("token", WorkerHarness.deviceToken(90_006)), ("topic", WorkerHarness.bundleID)]),
                ]
                // The bad jobs sit among the good ones.
                let spacing = good / bad.count
                let total = good + bad.count
                let layout: [Int?] = (0..<total).map { index in
                    index % (spacing + 1) == spacing / 2 && index / (spacing + 1) < bad.count ? index / (spacing + 1) : nil
                }
                let ids = try await bed.enqueue(total) { index in
                    if let which = layout[index] { return bad[which].fields }
                    return [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                #expect(layout.compactMap { $0 }.count == bad.count)
                try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: total)

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique == good && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == bad.count && ledger.feedback == 0 && ledger.rejected.isEmpty, "\(ledger)")
                let dead = try await bed.client.entries(bed.keys.dead)
                #expect(Set(dead.compactMap { $0["reason"] }) == Set(bad.map(\.reason)), "distinct reasons: \(dead)")
                for (which, job) in bad.enumerated() {
                    let entryID = ids[layout.firstIndex { $0 == which }!]
                    guard let entry = dead.first(where: { $0["reason"] == job.reason }) else {
                        Issue.record("no dead letter with reason \(job.reason) (job \(entryID)): \(dead)")
                        continue
                    }
                    for (name, value) in job.fields {
                        #expect(entry[name] == value, "the dead letter keeps the job's \(name): \(entry)")
                    }
                    #expect(entry["status"] == "0" && entry["attempts"] == "0", "never sent: \(entry)")
                    #expect(entry["failed_at"].flatMap { Int64($0) } != nil && !(entry["message"] ?? "").isEmpty, "\(entry)")
                }
            }
        }

        @Test
        func jobPastItsExpirationWhenReadIsDeadLetteredUnsent() async throws {
            try await withWorkerBed { bed in
                let count = 200
                let past = Int64(Date().timeIntervalSince1970) - 60
                let isExpired: @Sendable (Int) -> Bool = { $0 % 4 == 1 }
                try await bed.enqueue(count) { index in
                    var fields = [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                    if isExpired(index) { fields.append(("expiration", String(past))) }
                    return fields
                }
                let worker = try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                let expired = (0..<count).filter(isExpired).count
                let counters = try await worker.counters()

                #expect(ledger.settled && ledger.acceptedUnique == count - expired && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadByReason == ["expired": expired], "\(ledger)")
                #expect(counters.notificationsSent == count - expired, "an expired job is never sent: \(counters)")
            }
        }

        @Test
        func collapseIdSupersedes() async throws {
            try await withWorkerBed { bed in
                // Four versions of a score for each of five devices, plus unrelated jobs between them;
                // all enqueued before the worker starts, so they arrive in one batch.
                let devices = 5
                let versions = 4
                let others = 20
                struct Job { let token: String; let collapseID: String?; let id: String; let newest: Bool }
                var jobs: [Job] = []
                for version in 0..<versions {
                    for device in 0..<devices {
                        jobs.append(Job(token: WorkerHarness.deviceToken(device, prefix: "c0"), collapseID: "score",
                                        id: UUIDString.make(high: 0xC0, low: UInt64(version * 100 + device)), newest: version == versions - 1))
                    }
                    for other in 0..<(others / versions) {
                        let index = version * 100 + other
                        jobs.append(Job(token: WorkerHarness.deviceToken(index, prefix: "0e"), collapseID: "other-\(index)",
                                        id: UUIDString.make(high: 0x0E, low: UInt64(index)), newest: true))
                    }
                }
                let settled = jobs
                try await bed.enqueue(jobs.count) { index in
                    let job = settled[index]
                    return [("token", job.token), ("payload", #"{"aps":{"alert":"v\#(index)"}}"#), ("id", job.id)]
                        + (job.collapseID.map { [("collapse_id", $0)] } ?? [])
                }
                let worker = try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: jobs.count)
                let counts = try await bed.emulator.acceptedCounts(jobs.map(\.id))
                let counters = try await worker.counters()
                let older = jobs.filter { !$0.newest }.count

                #expect(ledger.settled, "\(ledger)")
                #expect(counters.superseded == older && ledger.superseded == older, "\(counters)")
                #expect(ledger.acceptedUnique == jobs.count - older && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0, "nothing superseded is dead-lettered: \(ledger)")
                for (job, count) in zip(jobs, counts) {
                    #expect(count == (job.newest ? 1 : 0), "job \(job.id) (token \(job.token.prefix(6)), newest \(job.newest)) accepted \(count) times")
                }
            }
        }

        @Test
        func fanOutOfTenThousandTokens() async throws {
            try await withWorkerBed(emulator: { $0.unregisteredPrefix = "dead" }) { bed in
                let count = 10_000
                let isDead: @Sendable (Int) -> Bool = { $0 % 10 == 9 }
                let tokens = (0..<count).map { WorkerHarness.deviceToken($0, prefix: isDead($0) ? "dead" : "fa") }
                let list = tokens.joined(separator: ",")
                let ids = try await bed.enqueue(1) { _ in [("tokens", list), ("payload", #"{"aps":{"alert":"everyone"}}"#)] }
                let worker = try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                let counters = try await worker.counters()
                let dead = (0..<count).filter(isDead).count

                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique == count - dead && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.feedback == dead && ledger.deadLettered == 0, "\(ledger)")
                // One entry, acknowledged once when every token had its outcome.
                #expect(counters.jobsRead == 1 && counters.jobsFinished == 1, "\(counters)")
                #expect(counters.notificationsSent == count && counters.accepted == count - dead && counters.deadTokens == dead, "\(counters)")
                let feedback = try await bed.client.entries(bed.keys.feedback)
                #expect(feedback.allSatisfy { $0["job"] == ids[0] && $0["reason"] == "Unregistered" }, "every feedback entry names the fan-out job")
                #expect(Set(feedback.compactMap { $0["token"] }) == Set(tokens.enumerated().filter { isDead($0.offset) }.map(\.element)))
            }
        }

        /// A fan-out job's dead letter holds some of its tokens: it carries the job's `id` as
        /// `id_base`, so requeueing a letter of one token derives that token's apns-id again
        /// instead of sending the raw `id` (which every such letter would then share).
        @Test
        func fanOutDeadLetterCarriesIDBaseNotTheRawID() async throws {
            try await withWorkerBed { bed in
                let id = "0f0f0f0f-0000-8000-8000-000000000001"
                let good = WorkerHarness.deviceToken(1, prefix: "fb")
                let bad = "zz" + String(repeating: "0", count: 62)
                try await bed.enqueue(1) { _ in [("tokens", good + "," + bad), ("payload", WorkerHarness.payload(1)), ("id", id)] }
                _ = try await bed.startWorker()
                try await waitFor("the bad token is dead-lettered and the good one accepted", timeout: .seconds(30)) {
                    let letters = try await bed.client.entries(bed.keys.dead)
                    let accepted = try await bed.emulator.statistics().acceptedUnique
                    return letters.count == 1 && accepted == 1
                }
                let letter = try #require(try await bed.client.entries(bed.keys.dead).first)
                #expect(letter["token"] == bad && letter["reason"] == "bad_device_token", "\(letter)")
                #expect(letter["id"] == nil && letter["id_base"] == id, "\(letter)")
            }
        }

        @Test
        func missingGroupIsRecreated() async throws {
            try await withWorkerBed { bed in
                let batch = 500
                let fields: @Sendable (Int) -> @Sendable (Int) -> [(String, String)] = { phase in
                    { index in [("token", WorkerHarness.deviceToken(phase * 10_000 + index)), ("payload", WorkerHarness.payload(index))] }
                }
                try await bed.enqueue(batch, fields: fields(0))
                let worker = try await bed.startWorker()
                var ledger = try await bed.waitUntilSettled(enqueued: batch)
                #expect(ledger.acceptedUnique == batch, "\(ledger)")

                // The stream (and its group) vanishes while the worker waits on it.
                try await bed.client.command("DEL", bed.keys.jobs)
                try await bed.enqueue(batch, fields: fields(1))
                ledger = try await bed.waitUntilSettled(enqueued: 2 * batch, timeout: .seconds(30))
                #expect(ledger.acceptedUnique == 2 * batch && ledger.duplicates == 0, "after DEL: \(ledger)")

                // Redis loses everything (a restart without data).
                try await bed.client.command("FLUSHALL")
                try await bed.enqueue(batch, fields: fields(2))
                ledger = try await bed.waitUntilSettled(enqueued: 3 * batch, timeout: .seconds(30))
                #expect(ledger.settled && ledger.acceptedUnique == 3 * batch && ledger.duplicates == 0, "after FLUSHALL: \(ledger)")
                let groups = try await bed.client.command("XINFO", "GROUPS", bed.keys.jobs)
                #expect(groups.array?.count == 1, "the group was recreated: \(groups)")
                let counters = try await worker.counters()
                #expect(counters.accepted == 3 * batch, "\(counters)")
            }
        }
    }
}
