import APNs
import Foundation
import Glibc
import HeraldTestSupport
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Priority lanes: each queue's urgent stream (`herald:{q}:jobs:urgent`) is read first and its
    /// tokens jump the bulk ones, so urgent jobs added behind a bulk backlog are answered long
    /// before the backlog is done; both lanes drained with every job counted in its own lane;
    /// pending entries of both lanes taken over after a crash; a retry goes back to its lane;
    /// `herald enqueue` routes by push type and priority. Real redis-server, the emulator over
    /// TLS and HTTP/2, the worker on its own loop, the `herald` binary for enqueue.
    @Suite
    struct PriorityLanes {
        @Test
        func urgentJobsAreAnsweredLongBeforeTheBulkBacklogIsDone() async throws {
            // 10 ms answers and 50 streams: about 5,000 notifications a second at best, so the
            // backlog takes seconds; urgent jobs must not wait for it.
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 10 }) { bed in
                let keys = QueueKeys(queue: "lanes")
                let backlog = 20_000
                let urgentCount = 100
                let bulkJobs = try await addJobs(bed, keys.jobs, backlog, prefix: "0b")
                let worker = try await bed.startWorker(connections: 1, maxStreams: 50) { $0.queues = [keys] }
                try await waitFor("the worker is busy with the backlog", timeout: .seconds(60)) {
                    try await bed.emulator.statistics().acceptedUnique >= 500
                }
                let urgentJobs = try await addJobs(bed, keys.urgentJobs, urgentCount, prefix: "0c")
                var bulkLeftWhenUrgentDone = 0
                try await waitFor("the urgent jobs are done", timeout: .seconds(60), interval: .milliseconds(10)) {
                    let left = try await bed.client.integer("XLEN", keys.urgentJobs)
                    let pending = try await bed.client.pendingCount(keys.urgentJobs, group: keys.group)
                    guard left == 0 && pending == 0 else { return false }
                    bulkLeftWhenUrgentDone = try await bed.client.integer("XLEN", keys.jobs)
                    return true
                }
                let urgentLedger = try await PerQueueLedger.read(bed, keys.urgentLane, jobs: urgentJobs)
                print("urgentJobsAreAnsweredLongBeforeTheBulkBacklogIsDone: \(bulkLeftWhenUrgentDone) of \(backlog) bulk jobs still waiting when the urgent ones were done; \(urgentLedger)")
                #expect(urgentLedger.accepted == urgentCount && urgentLedger.duplicates == 0, "\(urgentLedger)")
                // Read in stream order behind the backlog, the urgent jobs would finish with it.
                #expect(bulkLeftWhenUrgentDone > backlog / 2,
                        "the urgent jobs finished while \(bulkLeftWhenUrgentDone) of \(backlog) bulk jobs still waited")

                try await waitFor("the backlog is drained", timeout: .seconds(120), interval: .milliseconds(200)) {
                    let left = try await bed.client.integer("XLEN", keys.jobs)
                    let pending = try await bed.client.pendingCount(keys.jobs, group: keys.group)
                    return left == 0 && pending == 0
                }
                let bulkLedger = try await PerQueueLedger.read(bed, keys, jobs: bulkJobs)
                #expect(bulkLedger.settled && bulkLedger.duplicates == 0 && bulkLedger.deadLetters.isEmpty, "\(bulkLedger)")
                let urgentAfter = try await PerQueueLedger.read(bed, keys.urgentLane, jobs: urgentJobs)
                #expect(urgentAfter.settled && urgentAfter.duplicates == 0 && urgentAfter.deadLetters.isEmpty, "\(urgentAfter)")
                let statistics = try await bed.emulator.statistics()
                #expect(statistics.acceptedUnique == backlog + urgentCount, "nothing else was sent: \(statistics.json())")
                let counters = try await worker.queueCounters()
                #expect(counters.map(\.accepted) == [backlog + urgentCount], "a queue's lanes count as the queue: \(counters.map(\.accepted))")
                // Alerts without a priority go at APNs' default, 10: every send counts against the budget.
                let app = try await worker.counters().apps[0]
                #expect(app.sentPriority10 >= backlog + urgentCount && app.sentPriority5 == 0, "\(app)")
            }
        }

        @Test
        func pendingEntriesOfBothLanesAreTakenOverAfterACrash() async throws {
            try await withWorkerBed { bed in
                let keys = QueueKeys(queue: "crashlanes")
                let bulkJobs = try await addJobs(bed, keys.jobs, 60, prefix: "0d")
                let urgentJobs = try await addJobs(bed, keys.urgentJobs, 40, prefix: "0e")
                // A worker that read both lanes and died: its entries sit in both pending lists.
                for stream in [keys.jobs, keys.urgentJobs] {
                    try await bed.client.command("XGROUP", "CREATE", stream, keys.group, "0", "MKSTREAM")
                    try await bed.client.command("XREADGROUP", "GROUP", keys.group, "crashed", "COUNT", "1000", "STREAMS", stream, ">")
                }
                #expect(try await bed.client.pendingCount(keys.urgentJobs, group: keys.group) == 40)
                try await bed.startWorker(connections: 2) {
                    $0.queues = [keys]
                    $0.claimIdleMilliseconds = 1_000
                }
                var ledgers: [PerQueueLedger] = []
                try await waitFor("both lanes are drained after the takeover", timeout: .seconds(60), interval: .milliseconds(200)) {
                    ledgers = [try await PerQueueLedger.read(bed, keys, jobs: bulkJobs),
                               try await PerQueueLedger.read(bed, keys.urgentLane, jobs: urgentJobs)]
                    return ledgers.allSatisfy(\.settled)
                }
                for ledger in ledgers {
                    #expect(ledger.duplicates == 0 && ledger.missing == 0 && ledger.deadLetters.isEmpty, "\(ledger)")
                }
            }
        }

        @Test
        func aRetryGoesBackToTheStreamOfItsLane() async throws {
            try await withWorkerBed { bed in
                let keys = QueueKeys(queue: "retrylanes")
                let urgentToken = WorkerHarness.deviceToken(1, prefix: "0f")
                let bulkToken = WorkerHarness.deviceToken(2, prefix: "0f")
                // Retry-set members as the worker writes them: the urgent one carries lane=urgent.
                let payload = WorkerHarness.payload(0).replacingOccurrences(of: "\"", with: "\\\"")
                let urgentMember = #"["token","\#(urgentToken)","payload","\#(payload)","lane","urgent","attempts","1","origin","1700000000000-1","retry_id","a"]"#
                let bulkMember = #"["token","\#(bulkToken)","payload","\#(payload)","attempts","1","origin","1700000000000-2","retry_id","b"]"#
                try await bed.client.command("ZADD", keys.retry, "0", urgentMember)
                try await bed.client.command("ZADD", keys.retry, "0", bulkMember)
                try await bed.startWorker { $0.queues = [keys] }
                let ids = [StableID.apnsID(namespace: keys.queue, origin: "1700000000000-1", token: urgentToken),
                           StableID.apnsID(namespace: keys.queue, origin: "1700000000000-2", token: bulkToken)]
                try await waitFor("both retries are delivered", timeout: .seconds(30)) {
                    try await bed.emulator.acceptedCounts(ids) == [1, 1]
                }
                // Each stream delivered exactly one entry to the group: the urgent retry came back
                // through the urgent stream, the bulk one through the bulk stream. (Redis 6.2
                // counts no `entries-read`: there each stream delivered something, and the two
                // acceptances above are all there were.)
                if RedisServer.isRedis7 {
                    #expect(try await entriesRead(bed, keys.urgentJobs, group: keys.group) == 1)
                    #expect(try await entriesRead(bed, keys.jobs, group: keys.group) == 1)
                } else {
                    let urgentLast = try #require(try await groupField(bed, keys.urgentJobs, group: keys.group, "last-delivered-id")?.string)
                    let bulkLast = try #require(try await groupField(bed, keys.jobs, group: keys.group, "last-delivered-id")?.string)
                    #expect(urgentLast != "0-0" && bulkLast != "0-0", "\(urgentLast) \(bulkLast)")
                }
                #expect(try await bed.client.integer("ZCARD", keys.retry) == 0)
            }
        }

        @Test
        func enqueueRoutesByPushTypeAndPriorityAndLaneOverrides() async throws {
            try await withWorkerBed { bed in
                let keys = QueueKeys(queue: "routing")
                let token = WorkerHarness.deviceToken(3, prefix: "10")
                let base = ["enqueue"] + bed.redis.cliArguments + ["--queue", keys.queue, "--token", token, "--topic", "com.example.app",
                                                     "--payload", #"{"aps":{"alert":"x"}}"#]
                let cases: [(extra: [String], lane: JobLane)] = [
                    ([], .urgent),  // alert, no priority: APNs' default 10
                    (["--priority", "10"], .urgent),
                    (["--push-type", "voip", "--topic", "com.example.app.voip"], .urgent),
                    (["--priority", "5"], .bulk),
                    (["--push-type", "background", "--payload", #"{"aps":{"content-available":1}}"#], .bulk),
                    (["--priority", "10", "--lane", "bulk"], .bulk),
                    (["--priority", "5", "--lane", "urgent"], .urgent),
                ]
                var expected: [JobLane: Int] = [:]
                for (extra, lane) in cases {
                    let run = try runHerald(base + extra)
                    #expect(run.status == 0, "herald enqueue \(extra): \(run.stderr)")
                    expected[lane, default: 0] += 1
                    let urgent = try await bed.client.integer("XLEN", keys.urgentJobs)
                    let bulk = try await bed.client.integer("XLEN", keys.jobs)
                    #expect(urgent == expected[.urgent, default: 0] && bulk == expected[.bulk, default: 0],
                            "after \(extra): urgent \(urgent), bulk \(bulk); expected \(expected)")
                }
                let refused = try runHerald(base + ["--lane", "fast"])
                #expect(refused.status == 64 && refused.stderr.contains("--lane"), "\(refused)")
            }
        }
    }
}

/// Adds `count` single-token jobs to `stream`; tokens start with `prefix`.
private func addJobs(_ bed: WorkerBed, _ stream: String, _ count: Int, prefix: String) async throws -> [QueueJob] {
    let ids = try await bed.client.xadd(stream, count: count) { index in
        [("token", WorkerHarness.deviceToken(index, prefix: prefix)), ("payload", WorkerHarness.payload(index))]
    }
    return ids.enumerated().map { QueueJob(id: $1, token: WorkerHarness.deviceToken($0, prefix: prefix)) }
}

/// The group's `entries-read` on `stream` (Redis 7): how many entries it has delivered.
private func entriesRead(_ bed: WorkerBed, _ stream: String, group: String) async throws -> Int {
    Int(try await groupField(bed, stream, group: group, "entries-read")?.integer ?? -1)
}

/// One field of `group`'s `XINFO GROUPS` row on `stream`; nil when the group or field is missing.
private func groupField(_ bed: WorkerBed, _ stream: String, group: String, _ field: String) async throws -> RedisReply? {
    guard case .array(let groups) = try await bed.client.command("XINFO", "GROUPS", stream) else { return nil }
    for entry in groups {
        guard case .array(let pairs) = entry else { continue }
        var fields: [String: RedisReply] = [:]
        var index = 0
        while index + 1 < pairs.count {
            if let name = pairs[index].string { fields[name] = pairs[index + 1] }
            index += 2
        }
        if fields["name"]?.string == group { return fields[field] }
    }
    return nil
}

/// Runs the herald binary to its end; no HERALD_* settings from the developer's shell.
private func runHerald(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = TestProcess()
    process.executableURL = URL(fileURLWithPath: try WorkerHarness.heraldBinary())
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    let stderr = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
}

extension RedisClient {
    /// Entries of both lanes of a queue (bulk `jobs` and `jobs:urgent`), in entry-id order: what
    /// the producer tools wrote, wherever their routing put it.
    func laneEntries(_ keys: QueueKeys) async throws -> [Entry] {
        let all = try await entries(keys.jobs) + entries(keys.urgentJobs)
        return all.sorted { (StreamEntryID($0.id) ?? StreamEntryID(milliseconds: 0, sequence: 0)) < (StreamEntryID($1.id) ?? StreamEntryID(milliseconds: 0, sequence: 0)) }
    }

    /// Entries in both lanes of a queue.
    func laneLength(_ keys: QueueKeys) async throws -> Int {
        try await integer("XLEN", keys.jobs) + integer("XLEN", keys.urgentJobs)
    }
}
