import Foundation
import Glibc
import HeraldTestSupport
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// The least-privilege Redis users of `Deploy/redis/herald-acl.txt` (the lines
    /// docs/operations.md shows), created exactly as written: the worker, `herald enqueue`, a
    /// backend's own XADD, `stats`, `dead-letters` and `feedback` all work under them with every
    /// job counted; a permission taken away is named (NOPERM and the command) by the tools, which
    /// exit non-zero, and by the worker, which logs it, backs off and recovers once it is granted.
    @Suite(.serialized)
    struct RedisACLTests {
        static let password = "acl-Test-pw-7"

        /// The `ACL SETUSER` lines of Deploy/redis/herald-acl.txt, by user name.
        static func documentedUsers(filePath: String = #filePath) throws -> [String: [String]] {
            // #filePath = <repo>/Tests/IntegrationTests/RedisACLTests.swift
            let repository = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            let text = try String(contentsOf: repository.appendingPathComponent("Deploy/redis/herald-acl.txt"), encoding: .utf8)
            var users: [String: [String]] = [:]
            for line in text.split(separator: "\n") where line.hasPrefix("ACL SETUSER ") {
                let words = line.split(separator: " ").map(String.init)
                users[words[2]] = words
            }
            return users
        }

        /// Creates `user` as documented (plus `extra` rules, e.g. one permission taken away). On
        /// Redis 6.2 the producer's write-only key patterns (`%W~`, 7.0) become read-write (`~`),
        /// as docs/operations.md tells 6.2 users to write them.
        static func create(_ user: String, on client: RedisClient, extra: [String] = []) async throws {
            var line = try #require(try documentedUsers()[user], "Deploy/redis/herald-acl.txt has no \(user)")
            if !RedisServer.isRedis7 { line = line.map { $0.hasPrefix("%W~") ? "~" + $0.dropFirst(3) : $0 } }
            let reply = try await client.send(line + extra + [">" + password])
            #expect(reply == .status("OK"), "\(line.joined(separator: " ")): \(reply)")
        }

        /// `user:@`: a lone `name@` would be read as a password, as redis-cli reads it.
        static func url(_ user: String, _ redis: RedisServer) -> String { "redis://\(user):@127.0.0.1:\(redis.port)" }

        /// Runs `herald arguments…` as `user` (password in HERALD_REDIS_PASSWORD) to the end.
        static func herald(_ arguments: [String], user: String, redis: RedisServer) throws -> (status: Int32, stdout: String, stderr: String) {
            let directory = try TemporaryDirectory(prefix: "herald-acl-run")
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: try WorkerHarness.heraldBinary())
            process.arguments = arguments + ["--redis", url(user, redis)]
            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
            environment["HERALD_REDIS_PASSWORD"] = password
            process.environment = environment
            _ = FileManager.default.createFile(atPath: directory.path("out"), contents: nil)
            _ = FileManager.default.createFile(atPath: directory.path("err"), contents: nil)
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: directory.path("out")))
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: directory.path("err")))
            try process.run()
            process.waitUntilExit()
            return (process.terminationStatus, try String(contentsOfFile: directory.path("out"), encoding: .utf8),
                    try String(contentsOfFile: directory.path("err"), encoding: .utf8))
        }

        /// `herald worker` as `user`, its password in a file.
        static func startWorker(_ bed: WorkerBed, user: String, extra: [String] = []) throws -> WorkerProcess {
            let passwordFile = bed.emulator.directory.path("\(user).password")
            try password.write(toFile: passwordFile, atomically: true, encoding: .utf8)
            chmod(passwordFile, 0o600)
            return try WorkerProcess(
                arguments: ["--redis", url(user, bed.redis), "--redis-password-file", passwordFile, "--metrics-port", "0",
                            "--drain-timeout", "5"] + bed.emulator.workerArguments + extra,
                logPath: bed.emulator.directory.path("worker-\(user).log"))
        }

        @Test
        func workerProducersAndToolsWorkUnderTheDocumentedUsers() async throws {
            try await withWorkerBed(emulator: { $0.unregisteredPrefix = "dead" }) { bed in
                for user in ["herald-worker", "herald-producer", "herald-operator"] { try await Self.create(user, on: bed.client) }
                // herald enqueue as the producer: 400 good jobs and 20 to tokens APNs calls unregistered.
                let good = try Self.herald(["enqueue", "--token", WorkerHarness.deviceToken(1), "--payload", WorkerHarness.payload(1),
                                            "--count", "400", "--distinct-tokens", "400"], user: "herald-producer", redis: bed.redis)
                #expect(good.status == 0, "\(good.stderr)")
                let dead = try Self.herald(["enqueue", "--token", WorkerHarness.deviceToken(1, prefix: "dead"), "--payload", WorkerHarness.payload(2),
                                            "--count", "20", "--distinct-tokens", "20"], user: "herald-producer", redis: bed.redis)
                #expect(dead.status == 0, "\(dead.stderr)")
                // A backend's own client as the producer: 30 jobs the worker dead-letters (no token).
                var producerEndpoint = bed.redis.endpoint
                producerEndpoint.user = "herald-producer"
                producerEndpoint.password = Self.password
                let backend = try RedisClient(endpoint: producerEndpoint)
                defer { backend.shutdown() }
                for index in 0..<30 {
                    let id = try await backend.send(["XADD", bed.keys.jobs, "*", "payload", WorkerHarness.payload(index)])
                    #expect(id.string != nil, "\(id)")
                }
                let enqueued = 450
                // herald enqueue's alerts (priority 10 by default) are in the urgent lane, the backend's in bulk.
                #expect(try await bed.client.integer("XLEN", bed.keys.jobs) + bed.client.integer("XLEN", bed.keys.urgentJobs) == enqueued)

                // A consumer a scaled-down worker left: removed by the worker's script, under its ACL user.
                _ = try await bed.client.send(["XGROUP", "CREATE", bed.keys.jobs, bed.keys.group, "0"])
                _ = try await bed.client.send(["XGROUP", "CREATECONSUMER", bed.keys.jobs, bed.keys.group, "scaled-down-0"])
                let worker = try Self.startWorker(bed, user: "herald-worker", extra: ["--idle-consumer-timeout", "1"])
                try await waitFor("the worker removes the idle consumer", timeout: .seconds(30)) {
                    guard case .array(let rows) = try await bed.client.send(["XINFO", "CONSUMERS", bed.keys.jobs, bed.keys.group]) else { return false }
                    return !rows.map(RedisReplyReader.map).contains { $0["name"]?.string == "scaled-down-0" }
                }
                let ledger: QueueLedger
                do {
                    ledger = try await waitForSettledLedger(enqueued: enqueued, redis: bed.client, emulator: bed.emulator)
                } catch {
                    throw WaitTimeout(description: "\(error)\nworker log:\n\(worker.logTail())")
                }
                #expect(ledger.settled && ledger.acceptedUnique == 400 && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.feedback == 20 && ledger.deadByReason == ["missing_token": 30], "\(ledger)")
                #expect(!worker.logTail(100_000).contains("NOPERM"), "the documented worker user lacks a permission:\n\(worker.logTail())")

                // The tools: stats and dead letters as the operator, feedback as the producer.
                let stats = try Self.herald(["stats", "--json"], user: "herald-operator", redis: bed.redis)
                #expect(stats.status == 0, "\(stats.stderr)")
                let statsJSON = try? JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any]
                let queue = (statsJSON?["queues"] as? [[String: Any]])?.first
                #expect(queue?["dead_letters"] as? Int == 30 && queue?["feedback"] as? Int == 20, "\(stats.stdout)")
                let all = try Self.herald(["stats", "--all-queues"], user: "herald-operator", redis: bed.redis)
                #expect(all.status == 0, "\(all.stderr)")
                let letters = try Self.herald(["dead-letters", "list", "--json"], user: "herald-operator", redis: bed.redis)
                #expect(letters.status == 0 && letters.stdout.contains("missing_token"), "\(letters.stderr)")
                let requeue = try Self.herald(["dead-letters", "requeue", "--reason", "missing_token", "--dry-run"], user: "herald-operator", redis: bed.redis)
                #expect(requeue.status == 0, "\(requeue.stderr)")
                let purge = try Self.herald(["dead-letters", "purge", "--yes"], user: "herald-operator", redis: bed.redis)
                #expect(purge.status == 0, "\(purge.stderr)")
                #expect(try await bed.client.integer("XLEN", bed.keys.dead) == 0)
                let feedback = try Self.herald(["feedback", "tail", "--count", "100", "--json"], user: "herald-producer", redis: bed.redis)
                #expect(feedback.status == 0 && feedback.stdout.split(separator: "\n").count == 20, "\(feedback.stderr)")
                // A backend consuming feedback with a group of its own, as docs/examples/feedback_consumer.py does.
                let created = try await backend.send(["XGROUP", "CREATE", bed.keys.feedback, "backend", "0", "MKSTREAM"])
                #expect(created == .status("OK"), "\(created)")
                let read = try await backend.send(["XREADGROUP", "GROUP", "backend", "app-1", "COUNT", "100", "STREAMS", bed.keys.feedback, ">"])
                let ids = read.array?.first?.array?.last?.array?.compactMap { $0.array?.first?.string } ?? []
                #expect(ids.count == 20, "\(read)")
                let acknowledged = try await backend.send(["XACK", bed.keys.feedback, "backend"] + ids)
                #expect(acknowledged == .integer(20), "\(acknowledged)")
                let claimed = try await backend.send(["XAUTOCLAIM", bed.keys.feedback, "backend", "app-1", "60000", "0"])
                #expect(!claimed.isError, "\(claimed)")
                // ROLE, which Herald asks of the master the sentinels name (--sentinel).
                let role = try await backend.send(["ROLE"])
                #expect(role.array?.first?.string == "master", "\(role)")
                // And it cannot touch the jobs: reading them is not among its rights (from Redis
                // 7.0, `%W~`; a 6.2 producer's key patterns are read-write).
                let peek = try await backend.send(["XRANGE", bed.keys.jobs, "-", "+"])
                if RedisServer.isRedis7 {
                    #expect(peek.isError && (peek.string ?? "\(peek)").contains("NOPERM"), "\(peek)")
                } else {
                    #expect(!peek.isError, "\(peek)")
                }

                worker.signal(SIGTERM)
                let exit = try await worker.waitForExit(timeout: .seconds(20))
                #expect(exit?.status == 0, "\(worker.logTail())")
            }
        }

        /// Waits up to 2 minutes until every one of `count` jobs is accepted exactly once and the
        /// queue is empty; a timeout names the worker's log.
        static func expectEveryJobOnce(_ bed: WorkerBed, count: Int, worker: WorkerProcess) async throws {
            let ledger: QueueLedger
            do {
                ledger = try await waitForSettledLedger(enqueued: count, redis: bed.client, emulator: bed.emulator, timeout: .seconds(120))
            } catch {
                throw WaitTimeout(description: "\(error)\nworker log:\n\(worker.logTail())")
            }
            #expect(ledger.settled && ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
        }

        /// A user that may run the lease script but not a command inside it (XINFO GROUPS): the
        /// read ran before the script's refusal was known, without its lease. Those entries are
        /// sent and kept in the pending list meanwhile; nothing is lost or sent twice.
        @Test(.enabled(if: RedisServer.isRedis7, "takes one subcommand away (-xinfo|groups), which ACL rules can do from Redis 7.0"))
        func aLeaseScriptRefusedInsideRedisLosesNothing() async throws {
            try await withWorkerBed { bed in
                try await Self.create("herald-worker", on: bed.client, extra: ["-xinfo|groups"])
                let count = 300
                try await bed.enqueue(count)
                let worker = try Self.startWorker(bed, user: "herald-worker")
                try await waitFor("the worker sends what it read without a lease", timeout: .seconds(60)) {
                    try await bed.emulator.statistics().acceptedUnique > 0
                }
                #expect(worker.logTail(100_000).contains("the lease script failed"), "\(worker.logTail())")
                #expect(worker.isRunning)
                #expect(try await bed.client.send(["ACL", "SETUSER", "herald-worker", "+xinfo|groups"]) == .status("OK"))
                try await Self.expectEveryJobOnce(bed, count: count, worker: worker)
                #expect(try await bed.client.send(["HLEN", bed.keys.leases]) == .integer(0))
            }
        }

        /// As above, and the move of those entries to the pending list is refused too (no
        /// XCLAIM) while they are in flight: the worker sends the move again at its claim ticks,
        /// so once it is allowed the entries are in the pending list before their outcomes. A
        /// worker killed then loses none of them: its successor takes them from there.
        /// How many entries the worker's group has handed out (`XINFO GROUPS`' `entries-read`).
        static func entriesRead(_ bed: WorkerBed) async throws -> Int {
            guard case .array(let groups) = try await bed.client.send(["XINFO", "GROUPS", bed.keys.jobs]) else { return -1 }
            for group in groups {
                guard case .array(let fields) = group else { continue }
                var index = 0
                while index + 1 < fields.count {
                    if fields[index].string == "entries-read" { return Int(fields[index + 1].integer ?? -1) }
                    index += 2
                }
            }
            return -1
        }

        @Test(.enabled(if: RedisServer.isRedis7, "takes one subcommand away (-xinfo|groups), which ACL rules can do from Redis 7.0"))
        func aRefusedMoveIsSentAgainSoAKilledWorkerLosesNothing() async throws {
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 3_000 }) { bed in
                try await Self.create("herald-worker", on: bed.client, extra: ["-xinfo|groups", "-xclaim"])
                let count = 200
                try await bed.enqueue(count)
                let worker = try Self.startWorker(bed, user: "herald-worker", extra: ["--consumer", "moves", "--claim-idle", "2"])
                try await waitFor("a read without a lease, its move refused", timeout: .seconds(30)) {
                    worker.logTail(100_000).contains("the lease script failed")
                }
                #expect(try await bed.client.pendingListCount(bed.keys.jobs, group: bed.keys.group) == 0, "the move was refused")
                #expect(try await bed.client.send(["ACL", "SETUSER", "herald-worker", "+xclaim"]) == .status("OK"))
                // The refused moves sent again at a claim tick (or a later read's move): every entry
                // the group handed out is in the pending list now. Each read has its own move, so
                // waiting for the first one only (as this test once did) let the kill come between
                // two moves, and the entries of the second were lost with the worker (once in CI).
                try await waitFor("every entry handed out in the pending list", timeout: .seconds(5)) {
                    let pending = try await bed.client.pendingListCount(bed.keys.jobs, group: bed.keys.group)
                    let handedOut = try await Self.entriesRead(bed)
                    return pending > 0 && pending == handedOut
                }
                // Before the first answers (3 s): every entry read is in flight or queued.
                worker.signal(SIGKILL)
                _ = try? await worker.waitForExit(timeout: .seconds(5))
                #expect(try await bed.client.send(["ACL", "SETUSER", "herald-worker", "+xinfo|groups"]) == .status("OK"))
                // The same consumer name: it takes its predecessor's pending entries at once.
                let successor = try Self.startWorker(bed, user: "herald-worker", extra: ["--consumer", "moves"])
                let ledger: QueueLedger
                do {
                    ledger = try await waitForSettledLedger(enqueued: count, redis: bed.client, emulator: bed.emulator, timeout: .seconds(120))
                } catch {
                    throw WaitTimeout(description: "\(error)\nfirst worker:\n\(worker.logTail())\nsuccessor:\n\(successor.logTail())")
                }
                #expect(ledger.acceptedUnique == count, "every job delivered at least once: \(ledger)")
                #expect(try await bed.client.pendingListCount(bed.keys.jobs, group: bed.keys.group) == 0)
            }
        }

        @Test
        func aMissingPermissionIsNamedAndTheWorkerBacksOffThenRecovers() async throws {
            try await withWorkerBed { bed in
                // The tools: exit non-zero with NOPERM and the command.
                try await Self.create("herald-producer", on: bed.client, extra: ["-xadd"])
                let enqueue = try Self.herald(["enqueue", "--token", WorkerHarness.deviceToken(1), "--payload", WorkerHarness.payload(1)],
                                              user: "herald-producer", redis: bed.redis)
                #expect(enqueue.status != 0 && enqueue.stderr.contains("NOPERM") && enqueue.stderr.contains("xadd"), "\(enqueue.stderr)")
                let stats = try Self.herald(["stats"], user: "herald-producer", redis: bed.redis)
                #expect(stats.status != 0 && stats.stderr.contains("NOPERM"), "\(stats.stderr)")
                #expect(stats.stderr.contains("'time'") || stats.stderr.contains("xinfo"), "the message names the command: \(stats.stderr)")

                try await Self.create("herald-operator", on: bed.client, extra: ["-xrange", "-xrevrange"])
                for tool in [["dead-letters", "list"], ["feedback", "tail"]] {
                    let run = try Self.herald(tool, user: "herald-operator", redis: bed.redis)
                    #expect(run.status != 0 && run.stderr.contains("NOPERM") && run.stderr.contains("xrevrange"),
                            "\(tool.joined(separator: " ")): \(run.stderr)")
                }

                // The worker without XREADGROUP: logs it once, does not spin or exit, recovers when granted.
                try await Self.create("herald-worker", on: bed.client, extra: ["-xreadgroup"])
                let count = 300
                try await bed.enqueue(count)
                let worker = try Self.startWorker(bed, user: "herald-worker")
                try await waitFor("the worker logs NOPERM for XREADGROUP", timeout: .seconds(30)) {
                    let log = worker.logTail(100_000)
                    return log.contains("NOPERM") && log.contains("xreadgroup")
                }
                func refusedReads() async throws -> Int {
                    guard case .array(let entries) = try await bed.client.send(["ACL", "LOG"]) else { return 0 }
                    return entries.map(RedisReplyReader.map).filter { $0["object"]?.string == "xreadgroup" }
                        .reduce(0) { $0 + Int($1["count"]?.integer ?? 0) }
                }
                // It asks again (a second refusal)...
                try await waitFor("the worker retries XREADGROUP", timeout: .seconds(30)) { try await refusedReads() >= 2 }
                // ...but with a backoff: a loop without one makes thousands of refused calls in that time.
                let refused = try await refusedReads()
                #expect(refused < 30, "\(refused) refused XREADGROUP calls: the worker does not back off")
                #expect(worker.isRunning, "\(worker.logTail())")
                let log = worker.logTail(100_000)
                // One line per stream the worker reads: the queue's bulk stream and its urgent lane.
                #expect(log.components(separatedBy: "lack of permission").count - 1 == 2, "one error line per missing permission and stream:\n\(log)")
                #expect(log.contains("docs/operations.md"), "the log says where the users are documented:\n\(log)")

                // Not ready while Redis refuses its reads; ready again once the right is granted.
                let portLine = try #require(log.split(separator: "\n").first { $0.hasPrefix("metrics on ") }, "\(log)")
                let http = OperationsHTTP(port: try #require(Int(portLine.dropFirst("metrics on ".count))))
                try await waitFor("/readyz is 503 while reads are refused", timeout: .seconds(10)) { try http.status("/readyz") == 503 }

                let granted = try await bed.client.send(["ACL", "SETUSER", "herald-worker", "+xreadgroup"])
                #expect(granted == .status("OK"))
                try await Self.expectEveryJobOnce(bed, count: count, worker: worker)
                try await waitFor("/readyz is 200 again", timeout: .seconds(10)) { try http.status("/readyz") == 200 }
                worker.signal(SIGTERM)
                let exit = try await worker.waitForExit(timeout: .seconds(20))
                #expect(exit?.status == 0, "\(worker.logTail())")
            }
        }
    }
}
