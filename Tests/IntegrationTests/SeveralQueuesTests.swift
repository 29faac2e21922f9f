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
    /// One worker reading several queues (`--queues`, `--shards`): every job of every queue counted
    /// in its own queue's keys, fairness between a large backlog and a small late queue, a SIGTERM
    /// drain over several queues, and producers' shards following the documented hash. Real
    /// redis-server, the emulator over TLS and HTTP/2, the `herald` binary where a process is meant.
    @Suite
    struct SeveralQueues {
        @Test
        func oneWorkerDrainsThreeQueuesEachJobCountedInItsQueue() async throws {
            try await withWorkerBed { bed in
                let queues = [QueueKeys(queue: "alpha"), QueueKeys(queue: "beta"), QueueKeys(queue: "gamma")]
                let counts = [1_500, 700, 300]
                var jobs: [[QueueJob]] = []
                for (index, keys) in queues.enumerated() {
                    // Each queue gets its own tokens (prefix by queue) and one malformed job at the end,
                    // whose dead letter must land in that queue's :dead and nowhere else.
                    jobs.append(try await enqueueJobs(bed, keys, counts[index], prefix: "0\(index + 1)"))
                    try await bed.client.command("XADD", keys.jobs, "*", "token", "not-hex", "payload", #"{"aps":{}}"#)
                }
                let worker = try bed.startProcess(["--queues", queues.map(\.queue).joined(separator: ","), "--connections", "2"])
                var ledgers: [PerQueueLedger] = []
                try await waitFor("every queue is drained", timeout: .seconds(90)) {
                    guard worker.isRunning else { throw WaitTimeout(description: "herald worker exited: \(worker.logTail())") }
                    ledgers = []
                    for (index, keys) in queues.enumerated() {
                        ledgers.append(try await PerQueueLedger.read(bed, keys, jobs: jobs[index]))
                    }
                    return ledgers.allSatisfy { $0.jobsLength == 0 && $0.pending == 0 && $0.accepted == $0.enqueued }
                }
                print("oneWorkerDrainsThreeQueuesEachJobCountedInItsQueue: \(ledgers)")
                for (index, ledger) in ledgers.enumerated() {
                    #expect(ledger.accepted == counts[index] && ledger.duplicates == 0 && ledger.missing == 0,
                            "every job of \(queues[index].queue) accepted once, under its queue's apns-id: \(ledger)")
                    #expect(ledger.deadLetters.count == 1, "the queue's own malformed job is in its own :dead: \(ledger)")
                    #expect(ledger.deadLetters.first?.token == "not-hex", "\(ledger)")
                    #expect(ledger.retry == 0 && ledger.feedback == 0, "\(ledger)")
                }
                let statistics = try await bed.emulator.statistics()
                #expect(statistics.acceptedUnique == counts.reduce(0, +), "nothing else was sent: \(statistics.json())")
                worker.signal(SIGTERM)
                let ended = try await worker.waitForExit(timeout: .seconds(20))
                #expect(ended?.status == 0, "SIGTERM after the drain exits 0: \(worker.logTail())")
            }
        }

        @Test
        func smallQueueIsNotStarvedByALargeBacklog() async throws {
            // 10 ms answers and 50 streams: about 5,000 notifications a second at best, so the
            // backlog takes seconds while a fair worker needs a fraction of one for 100 jobs.
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 10 }) { bed in
                let big = QueueKeys(queue: "backlog")
                let small = QueueKeys(queue: "urgent")
                let backlog = 20_000
                let late = 100
                let bigJobs = try await enqueueJobs(bed, big, backlog, prefix: "0b")
                let worker = try await bed.startWorker(connections: 1, maxStreams: 50) {
                    $0.queues = [big, small]
                }
                try await waitFor("the worker is busy with the backlog", timeout: .seconds(60)) {
                    try await bed.emulator.statistics().acceptedUnique >= 500
                }
                let smallJobs = try await enqueueJobs(bed, small, late, prefix: "0c")
                var remainingWhenSmallDone = 0
                try await waitFor("the late queue is done", timeout: .seconds(60), interval: .milliseconds(10)) {
                    let smallLeft = try await bed.client.integer("XLEN", small.jobs)
                    let smallPending = try await bed.client.pendingCount(small.jobs, group: small.group)
                    guard smallLeft == 0 && smallPending == 0 else { return false }
                    remainingWhenSmallDone = try await bed.client.integer("XLEN", big.jobs)
                    return true
                }
                let smallLedger = try await PerQueueLedger.read(bed, small, jobs: smallJobs)
                print("smallQueueIsNotStarvedByALargeBacklog: \(remainingWhenSmallDone) of \(backlog) backlog jobs still waiting when the late queue finished; \(smallLedger)")
                #expect(smallLedger.accepted == late && smallLedger.duplicates == 0, "\(smallLedger)")
                // Unfair reading (the backlog first) would leave nothing of it when the late queue finishes.
                #expect(remainingWhenSmallDone > backlog / 2,
                        "the late queue finished while \(remainingWhenSmallDone) of \(backlog) backlog jobs still waited")

                try await waitFor("the backlog is drained", timeout: .seconds(120), interval: .milliseconds(200)) {
                    let left = try await bed.client.integer("XLEN", big.jobs)
                    let pending = try await bed.client.pendingCount(big.jobs, group: big.group)
                    return left == 0 && pending == 0
                }
                let bigLedger = try await PerQueueLedger.read(bed, big, jobs: bigJobs)
                #expect(bigLedger.accepted == backlog && bigLedger.duplicates == 0 && bigLedger.missing == 0, "\(bigLedger)")
                let perQueue = try await worker.queueCounters()
                #expect(perQueue.map(\.accepted) == [backlog, late], "the worker counted each queue's outcomes under it: \(perQueue.map(\.accepted))")
            }
        }

        @Test
        func sigtermDrainsEveryQueueAndLosesNothing() async throws {
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 200 }) { bed in
                let queues = QueueShards.names(base: "drain", shards: 3).map { QueueKeys(queue: $0) }
                let perQueue = 700
                var jobs: [[QueueJob]] = []
                for (index, keys) in queues.enumerated() {
                    jobs.append(try await enqueueJobs(bed, keys, perQueue, prefix: "0\(index + 4)"))
                }
                let first = try bed.startProcess([
                    "--queue", "drain", "--shards", "3", "--connections", "2", "--max-streams", "50", "--drain-timeout", "10", "--claim-idle", "2",
                ])
                try await waitFor("herald worker \(first.pid) has delivered some jobs", timeout: .seconds(30)) {
                    guard first.isRunning else { throw WaitTimeout(description: "herald worker exited early: \(first.logTail())") }
                    return try await bed.emulator.statistics().acceptedUnique >= 200
                }
                first.signal(SIGTERM)
                let ended = try await first.waitForExit(timeout: .seconds(15))
                try #require(ended != nil, "herald worker did not exit within the drain timeout: \(first.logTail())")
                #expect(ended?.status == 0 && ended?.signalled == false, "exit status \(String(describing: ended)): \(first.logTail())")
                var pendingAfterExit: [Int] = []
                for keys in queues { pendingAfterExit.append(try await bed.client.pendingCount(keys.jobs, group: keys.group)) }
                let acceptedAtExit = try await bed.emulator.statistics().acceptedUnique
                try #require(acceptedAtExit < perQueue * queues.count, "SIGTERM came too late to test anything")
                #expect(pendingAfterExit == [0, 0, 0], "a clean drain leaves nothing pending in any queue: \(pendingAfterExit)\n\(first.logTail())")

                try await bed.startWorker(connections: 2, maxStreams: 50) {
                    $0.queues = queues
                    $0.claimIdleMilliseconds = 2_000
                }
                var ledgers: [PerQueueLedger] = []
                try await waitFor("every queue is drained after the restart", timeout: .seconds(90), interval: .milliseconds(200)) {
                    ledgers = []
                    for (index, keys) in queues.enumerated() { ledgers.append(try await PerQueueLedger.read(bed, keys, jobs: jobs[index])) }
                    return ledgers.allSatisfy { $0.settled }
                }
                print("sigtermDrainsEveryQueueAndLosesNothing: \(acceptedAtExit) accepted before the exit; \(ledgers)")
                for ledger in ledgers {
                    #expect(ledger.accepted == perQueue && ledger.missing == 0, "none lost: \(ledger)")
                    #expect(ledger.duplicates == 0, "a drain finishes or hands back, it never sends twice: \(ledger)")
                    #expect(ledger.deadLetters.isEmpty && ledger.feedback == 0, "\(ledger)")
                }
            }
        }

        @Test
        func metricsAreLabelledPerQueueAndTheConfigFileNamesTheQueues() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator(["--unregistered-prefix", "dead"])
                let first = QueueKeys(queue: "mail"), second = QueueKeys(queue: "chat")
                _ = try await bed.client.xadd(first.jobs, count: 305) { index in
                    index < 300 ? [("token", WorkerHarness.deviceToken(index, prefix: "0a")), ("payload", WorkerHarness.payload(index))]
                        : [("token", WorkerHarness.deviceToken(index, prefix: "0a"))]  // missing_payload
                }
                _ = try await bed.client.xadd(second.jobs, count: 103) { index in
                    [("token", WorkerHarness.deviceToken(index, prefix: index < 100 ? "0c" : "dead")), ("payload", WorkerHarness.payload(index))]
                }
                let config = bed.directory.path("herald.yaml")
                try "queues: [mail, chat]\n".write(toFile: config, atomically: true, encoding: .utf8)
                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--config", config, "--bundle-id", "com.example.app"]
                                                         + emulator.workerArguments)
                try await waitFor("the worker drains both queues", timeout: .seconds(60), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    let mail = try await bed.drained(first)
                    let chat = try await bed.drained(second)
                    return mail && chat
                }
                let scrape = try await http.scrape(until: "/metrics shows every queue's outcomes and gauges", process: worker) { scrape in
                    scrape.count("herald_notifications_total", ["queue": "mail"]) >= 305 && scrape.count("herald_notifications_total", ["queue": "chat"]) >= 103
                        && scrape.count("herald_dead_letter_stream_length", ["queue": "mail"]) == 5
                        && scrape.count("herald_feedback_stream_length", ["queue": "chat"]) == 3
                }
                let notifications = scrape.series("herald_notifications_total")
                #expect(scrape.count("herald_notifications_total", ["queue": "mail", "outcome": "accepted"]) == 300, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["queue": "mail", "outcome": "dead_lettered"]) == 5, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["queue": "chat", "outcome": "accepted"]) == 100, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["queue": "chat", "outcome": "dead_token"]) == 3, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["queue": "chat", "outcome": "dead_lettered"]) == 0, "\(notifications)")
                #expect(scrape.count("herald_jobs_read_total", ["queue": "mail"]) == 305 && scrape.count("herald_jobs_read_total", ["queue": "chat"]) == 103)
                for gauge in ["herald_queue_depth", "herald_queue_pending", "herald_consumer_lag", "herald_retry_set_size"] {
                    #expect(scrape.count(gauge, ["queue": "mail"]) == 0 && scrape.count(gauge, ["queue": "chat"]) == 0,
                            "one \(gauge) series per queue: \(scrape.series(gauge))")
                }
                #expect(scrape.count("herald_dead_letter_stream_length", ["queue": "chat"]) == 0 && scrape.count("herald_feedback_stream_length", ["queue": "mail"]) == 0)
                #expect(scrape.count("herald_queue_depth", ["queue": "default"]) == -1, "no series for a queue the worker does not read")
                #expect(try http.status("/readyz") == 200)
                #expect(try await worker.terminate() == 0, "SIGTERM drains and exits 0: \(worker.outputTail())")
            }
        }

        @Test
        func aBrokenQueueDoesNotStopTheOthersNorSpin() async throws {
            try await withWorkerBed { bed in
                let good = QueueKeys(queue: "good"), broken = QueueKeys(queue: "broken")
                // The broken queue's stream key holds a string: every read and group creation on it
                // fails with WRONGTYPE.
                try await bed.client.command("SET", broken.jobs, "not a stream")
                let jobs = try await enqueueJobs(bed, good, 1_000, prefix: "0e")
                let worker = try bed.startProcess(["--queues", "broken,good", "--connections", "2"])
                var ledger = PerQueueLedger()
                try await waitFor("the good queue is drained", timeout: .seconds(60)) {
                    guard worker.isRunning else { throw WaitTimeout(description: "herald worker exited: \(worker.logTail())") }
                    ledger = try await PerQueueLedger.read(bed, good, jobs: jobs)
                    return ledger.settled
                }
                #expect(ledger.accepted == 1_000 && ledger.duplicates == 0 && ledger.missing == 0, "\(ledger)")
                // Let the broken queue fail for a while longer: its reads back off and a repeated
                // error is logged once, not once per retry-promotion tick (4 a second) or per read.
                let watchedFrom = ContinuousClock.now
                try await waitFor("three seconds of a broken queue", timeout: .seconds(10), failOnTimeout: false) {
                    ContinuousClock.now - watchedFrom >= .seconds(3)
                }
                #expect(worker.isRunning, "a broken queue does not end the worker: \(worker.logTail())")
                let log = worker.logTail(200_000)
                let errorLines = log.split(separator: "\n").filter { $0.contains("WRONGTYPE") }
                #expect(!errorLines.isEmpty, "the broken queue is reported: \(log.suffix(2000))")
                #expect(errorLines.count <= 5, "repeated errors are not logged every time: \(errorLines.count) lines\n\(errorLines.prefix(10).joined(separator: "\n"))")
                #expect(try await bed.client.command("GET", broken.jobs).string == "not a stream", "the broken key is left alone")
                worker.signal(SIGTERM)
                let ended = try await worker.waitForExit(timeout: .seconds(20))
                #expect(ended?.status == 0, "SIGTERM drains and exits 0: \(worker.logTail())")
            }
        }

        @Test
        func aKilledShardedWorkersEntriesAreTakenOverPerQueue() async throws {
            // 200 ms answers keep notifications in flight in every shard when the worker is killed.
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 200 }) { bed in
                let queues = QueueShards.names(base: "claim", shards: 2).map { QueueKeys(queue: $0) }
                var jobs: [[QueueJob]] = []
                for (index, keys) in queues.enumerated() { jobs.append(try await enqueueJobs(bed, keys, 1_000, prefix: "1\(index)")) }
                let first = try bed.startProcess(["--queue", "claim", "--shards", "2", "--connections", "2", "--max-streams", "50", "--claim-idle", "2"])
                try await waitFor("herald worker \(first.pid) has delivered some jobs", timeout: .seconds(30)) {
                    guard first.isRunning else { throw WaitTimeout(description: "herald worker exited early: \(first.logTail())") }
                    return try await bed.emulator.statistics().acceptedUnique >= 200
                }
                first.signal(SIGKILL)
                _ = try await first.waitForExit(timeout: .seconds(10))
                var pendingAtKill: [Int] = []
                for keys in queues { pendingAtKill.append(try await bed.client.pendingCount(keys.jobs, group: keys.group)) }
                #expect(pendingAtKill.allSatisfy { $0 > 0 }, "the killed worker left entries pending in every shard: \(pendingAtKill)")

                let second = try await bed.startWorker(connections: 2, maxStreams: 50) {
                    $0.queues = queues
                    $0.claimIdleMilliseconds = 2_000
                }
                var ledgers: [PerQueueLedger] = []
                try await waitFor("every shard is drained by the second worker", timeout: .seconds(90), interval: .milliseconds(200)) {
                    ledgers = []
                    for (index, keys) in queues.enumerated() { ledgers.append(try await PerQueueLedger.read(bed, keys, jobs: jobs[index])) }
                    return ledgers.allSatisfy { $0.settled }
                }
                let perQueue = try await second.queueCounters()
                print("aKilledShardedWorkersEntriesAreTakenOverPerQueue: pending at the kill \(pendingAtKill); reclaimed \(perQueue.map(\.jobsReclaimed)); \(ledgers)")
                for ledger in ledgers {
                    #expect(ledger.accepted == 1_000 && ledger.missing == 0, "none lost: \(ledger)")
                    #expect(ledger.duplicates <= 2 * 50, "duplicates only from what was in flight at the kill: \(ledger)")
                }
                #expect(perQueue.allSatisfy { $0.jobsReclaimed > 0 }, "each shard's idle entries were claimed in that shard: \(perQueue.map(\.jobsReclaimed))")
            }
        }

        @Test
        func enqueueShardsFollowTheDocumentedHash() throws {
            let harness = try QueueToolingHarness(queue: "push")
            let base = "ab" + String(repeating: "0", count: 62)
            let run = try harness.herald("enqueue", "--lane", "bulk", "--queue", "push", "--shards", "4", "--token", base, "--count", "400",
                                         "--distinct-tokens", "400", "--payload", #"{"aps":{"alert":"hi"}}"#)
            #expect(run.status == 0, "\(run.stderr)")
            var total = 0
            var tokens = Set<String>()
            for shard in 0..<4 {
                let keys = QueueKeys(queue: "push-\(shard)")
                let entries = try harness.entries(keys.jobs)
                #expect(!entries.isEmpty, "shard \(shard) got jobs (400 distinct tokens over 4 shards)")
                for entry in entries {
                    let token = try #require(entry.fields.first { $0.name == "token" }.map { String(decoding: $0.value, as: UTF8.self) })
                    #expect(QueueShards.shard(token: token, shards: 4) == shard, "\(token) is in push-\(shard)")
                    #expect(Int(referenceCRC32(token) % 4) == shard, "the independent CRC-32 agrees for \(token)")
                    tokens.insert(token)
                }
                total += entries.count
            }
            #expect(total == 400 && tokens.count == 400, "every job in exactly one shard: \(total) jobs, \(tokens.count) tokens")
            #expect(run.stdout.contains("enqueued 400 jobs to 4 shards"), "\(run.stdout)")
            #expect(try harness.length(QueueKeys(queue: "push").jobs) == 0, "nothing in the unsharded queue")

            // A fan-out job is split: each shard's entry holds exactly the tokens that hash to it.
            let fanOut = (0..<12).map { WorkerHarness.deviceToken($0, prefix: "cd") }
            let split = try harness.herald("enqueue", "--lane", "bulk", "--queue", "fan", "--shards", "3", "--tokens", fanOut.joined(separator: ","),
                                           "--payload", #"{"aps":{"alert":"hi"}}"#)
            #expect(split.status == 0, "\(split.stderr)")
            var seen: [String] = []
            for shard in 0..<3 {
                for entry in try harness.entries(QueueKeys(queue: "fan-\(shard)").jobs) {
                    let list = entry.fields.first { $0.name == "tokens" }.map { String(decoding: $0.value, as: UTF8.self) } ?? ""
                    for token in list.split(separator: ",").map(String.init) {
                        #expect(QueueShards.shard(token: token, shards: 3) == shard, "\(token) in fan-\(shard)")
                        seen.append(token)
                    }
                }
            }
            #expect(seen.sorted() == fanOut.sorted(), "every token of the fan-out job once, in its shard")

            // --queues is not a shard layout: refused with what to do.
            let refused = try harness.herald("enqueue", "--queues", "a,b", "--token", base, "--payload", #"{"aps":{}}"#)
            #expect(refused.status != 0 && refused.stderr.contains("--shards"), "\(refused.stderr)")
        }

        @Test
        func shardHashMatchesTheDocumentsTableAndItsPythonProducer() throws {
            let document = try String(contentsOfFile: repositoryPath("docs/job-format.md"), encoding: .utf8)
            let vectors = shardVectors(in: document)
            try #require(vectors.count >= 6, "docs/job-format.md holds the shard test vectors between <!-- shard-vectors --> markers")
            for vector in vectors {
                #expect(String(format: "%08x", QueueShards.crc32(Array(vector.token.lowercased().utf8))) == vector.crc,
                        "CRC-32 of \(vector.token)")
                for (shards, expected) in vector.shards {
                    #expect(QueueShards.shard(token: vector.token, shards: shards) == expected, "\(vector.token) mod \(shards)")
                }
            }
            // The Python function the document gives producers, run on the same tokens.
            let python = try #require(codeBlock(in: document, after: "<!-- shard-python -->"), "the Python shard function in docs/job-format.md")
            let script = python + "\nimport sys\nfor line in sys.stdin:\n    t, n = line.split()\n    print(shard(t, int(n)))\n"
            var input = ""
            var expected: [Int] = []
            for vector in vectors {
                for (shards, shard) in vector.shards {
                    input += "\(vector.token) \(shards)\n"
                    expected.append(shard)
                }
            }
            let output = try runPython(script, input: input)
            #expect(output.split(separator: "\n").compactMap { Int($0) } == expected, "the documented Python producer agrees: \(output)")
        }

        @Test
        func statsShowsEveryQueueAndTheirTotal() throws {
            let harness = try QueueToolingHarness(queue: "s")
            for (shard, count) in [(0, 3), (1, 5), (2, 0)] {
                let keys = QueueKeys(queue: "s-\(shard)")
                for index in 0..<count {
                    try harness.command("XADD", keys.jobs, "*", "token", WorkerHarness.deviceToken(index), "payload", #"{"aps":{}}"#)
                }
                try harness.command("XGROUP", "CREATE", keys.jobs, keys.group, "0", "MKSTREAM")
            }
            try harness.command("XADD", QueueKeys(queue: "s-1").dead, "*", "token", "x", "reason", "BadDeviceToken")
            let json = try harness.herald("stats", "--queue", "s", "--shards", "3", "--json")
            #expect(json.status == 0, "\(json.stderr)")
            let object = try json.json()
            let queues = try #require(object["queues"] as? [[String: Any]])
            #expect(queues.compactMap { $0["queue"] as? String } == ["s-0", "s-1", "s-2"])
            #expect(queues.compactMap { $0["depth"] as? Int } == [3, 5, 0])
            let total = try #require(object["total"] as? [String: Any])
            #expect(total["depth"] as? Int == 8 && total["lag"] as? Int == 8 && total["dead_letters"] as? Int == 1
                    && total["queues"] as? Int == 3, "\(total)")

            let text = try harness.herald("stats", "--queues", "s-0,s-1,s-2")
            #expect(text.status == 0, "\(text.stderr)")
            let totalRow = text.stdout.split(separator: "\n").first { $0.hasPrefix("TOTAL") }.map(String.init) ?? ""
            #expect(totalRow.split(separator: " ").prefix(2) == ["TOTAL", "8"], "a TOTAL row with the summed depth: \(text.stdout)")

            let clash = try harness.herald("stats", "--queues", "a,b", "--shards", "2")
            #expect(clash.status != 0 && clash.stderr.contains("exclude each other"), "\(clash.stderr)")
            let letters = try harness.herald("dead-letters", "list", "--shards", "3", "--queue", "s")
            #expect(letters.status == 0 && letters.stdout.contains("== s-1") && letters.stdout.contains("BadDeviceToken"), "\(letters.stdout)\(letters.stderr)")
            let requeue = try harness.herald("dead-letters", "requeue", "--shards", "3", "--queue", "s", "--dry-run")
            #expect(requeue.status == 0 && requeue.stdout.contains("would requeue 1 dead letter to herald:{s-1}:jobs"), "\(requeue.stdout)\(requeue.stderr)")
            let follow = try harness.herald("feedback", "tail", "--shards", "3", "--queue", "s")
            #expect(follow.status != 0 && follow.stderr.contains("one queue at a time"), "\(follow.stderr)")
        }
    }
}

// MARK: helpers

/// One enqueued job: its entry id and token (its apns-id derives from both and the queue's name).
struct QueueJob: Sendable {
    let id: String
    let token: String
}

/// Adds `count` single-token jobs to `keys`' stream; tokens start with `prefix`.
private func enqueueJobs(_ bed: WorkerBed, _ keys: QueueKeys, _ count: Int, prefix: String) async throws -> [QueueJob] {
    let ids = try await bed.client.xadd(keys.jobs, count: count) { index in
        [("token", WorkerHarness.deviceToken(index, prefix: prefix)), ("payload", WorkerHarness.payload(index))]
    }
    return ids.enumerated().map { QueueJob(id: $1, token: WorkerHarness.deviceToken($0, prefix: prefix)) }
}

/// One queue's outcome: each job's acceptances at the emulator (by the apns-id derived in that
/// queue's namespace), and what is left in that queue's keys.
struct PerQueueLedger: CustomStringConvertible {
    var queue = ""
    var enqueued = 0
    var accepted = 0
    var duplicates = 0
    var missing = 0
    var jobsLength = 0
    var pending = 0
    var retry = 0
    var feedback = 0
    var deadLetters: [(token: String, reason: String)] = []

    var settled: Bool { accepted == enqueued && jobsLength == 0 && pending == 0 && retry == 0 }

    var description: String {
        "\(queue): enqueued \(enqueued), accepted \(accepted) (+\(duplicates) duplicates, \(missing) missing), stream \(jobsLength), "
            + "pending \(pending), retry \(retry), feedback \(feedback), dead \(deadLetters.map { "\($0.token):\($0.reason)" })"
    }

    static func read(_ bed: WorkerBed, _ keys: QueueKeys, jobs: [QueueJob]) async throws -> PerQueueLedger {
        var ledger = PerQueueLedger(queue: keys.queue, enqueued: jobs.count)
        let counts = try await bed.emulator.acceptedCounts(jobs.map { StableID.apnsID(namespace: keys.queue, origin: $0.id, token: $0.token) })
        for count in counts {
            if count >= 1 { ledger.accepted += 1 } else { ledger.missing += 1 }
            ledger.duplicates += max(0, count - 1)
        }
        ledger.jobsLength = try await bed.client.integer("XLEN", keys.jobs)
        ledger.pending = try await bed.client.pendingCount(keys.jobs, group: keys.group)
        ledger.retry = try await bed.client.integer("ZCARD", keys.retry)
        ledger.feedback = try await bed.client.integer("XLEN", keys.feedback)
        if try await bed.client.integer("XLEN", keys.dead) > 0 {
            ledger.deadLetters = try await bed.client.entries(keys.dead).map { ($0["token"] ?? $0["tokens"] ?? "?", $0["reason"] ?? "?") }
        }
        return ledger
    }
}

/// CRC-32 (IEEE) written out bit by bit, independent of Herald's table-driven one.
private func referenceCRC32(_ text: String) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in text.lowercased().utf8 {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = (crc >> 1) ^ (0xEDB8_8320 & (0 &- (crc & 1))) }
    }
    return ~crc
}

private func repositoryPath(_ relative: String, filePath: String = #filePath) -> String {
    // #filePath = <repo>/Tests/IntegrationTests/SeveralQueuesTests.swift
    URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(relative).path
}

/// The rows of the table between `<!-- shard-vectors -->` and `<!-- /shard-vectors -->`:
/// | `token` | `crc32 hex` | shard of 3 | shard of 4 | shard of 10 |
private func shardVectors(in document: String) -> [(token: String, crc: String, shards: [(Int, Int)])] {
    guard let start = document.range(of: "<!-- shard-vectors -->"), let end = document.range(of: "<!-- /shard-vectors -->") else { return [] }
    var vectors: [(token: String, crc: String, shards: [(Int, Int)])] = []
    for line in document[start.upperBound..<end.lowerBound].split(separator: "\n") {
        let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "`", with: "") }
        guard cells.count == 5, cells[0].count == 64, let three = Int(cells[2]), let four = Int(cells[3]), let ten = Int(cells[4]) else { continue }
        vectors.append((cells[0], cells[1], [(3, three), (4, four), (10, ten)]))
    }
    return vectors
}

/// The first fenced code block after `marker`.
private func codeBlock(in document: String, after marker: String) -> String? {
    guard let start = document.range(of: marker) else { return nil }
    let rest = document[start.upperBound...]
    guard let open = rest.range(of: "```"), let lineEnd = rest[open.upperBound...].firstIndex(of: "\n"),
          let close = rest[lineEnd...].range(of: "\n```") else { return nil }
    return String(rest[rest.index(after: lineEnd)..<close.lowerBound])
}

private func runPython(_ script: String, input: String) throws -> String {
    let directory = try TemporaryDirectory(prefix: "herald-shard-py")
    let scriptPath = directory.path("shard.py")
    try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
    let process = TestProcess()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", scriptPath]
    let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    try process.run()
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    let errors = stderr.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw QueueToolingFailure("python3 failed (\(process.terminationStatus)): \(String(decoding: errors, as: UTF8.self))")
    }
    return String(decoding: output, as: UTF8.self)
}
