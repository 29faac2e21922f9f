import APNs
import Foundation
import Glibc
import HeraldTestSupport
import MockAPNs
import Queue
import Synchronization
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// Redis Sentinel, all real: a master, a replica and three sentinels (`SentinelGroup`), the
    /// emulator over TLS and HTTP/2, and the `herald` binary as worker and tools. Every job is
    /// counted, and each job's apns-id is checked to have been accepted at least once.
    @Suite(.serialized)
    struct Sentinel {
        /// A valid alert (or, every 100th, a malformed one: priority 7) with its own apns-id.
        static func job(_ index: Int, seed: UInt64) -> [(String, String)] {
            var fields = [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)),
                          ("id", UUIDString.make(high: seed, low: UInt64(index)))]
            if index % 100 == 99 { fields.append(("priority", "7")) }
            return fields
        }

        /// Every job of `Sentinel.job` by its own id after a failover: each valid one accepted at
        /// least once (by apns-id), each malformed one dead-lettered at least once (by the `id`
        /// field the dead letter keeps), nothing left in the stream, the pending list or the retry
        /// set. Twice is allowed (at least once) and counted: acknowledgements the old master
        /// took but never replicated, and outcome batches Redis ran but never confirmed (written
        /// again after reconnecting).
        struct FailoverCount: CustomStringConvertible {
            var neverAccepted: [Int] = []
            var acceptedTwice = 0
            var neverDeadLettered: [Int] = []
            var deadLettersTwice = 0
            var left = (stream: 0, pending: 0, retry: 0)
            var complete: Bool { neverAccepted.isEmpty && neverDeadLettered.isEmpty && left == (0, 0, 0) }
            var description: String {
                "never accepted \(neverAccepted.count) \(neverAccepted.prefix(10)), accepted twice \(acceptedTwice), "
                    + "never dead-lettered \(neverDeadLettered.count) \(neverDeadLettered.prefix(10)), dead letters twice \(deadLettersTwice), "
                    + "left: stream \(left.stream), pending \(left.pending), retry set \(left.retry)"
            }

            static func read(count: Int, seed: UInt64, redis: RedisClient, emulator: EmulatorHost) async throws -> FailoverCount {
                let keys = QueueKeys()
                var result = FailoverCount()
                let valid = (0..<count).filter { $0 % 100 != 99 }
                let accepted = try await emulator.acceptedCounts(valid.map { UUIDString.make(high: seed, low: UInt64($0)) })
                result.neverAccepted = zip(valid, accepted).filter { $0.1 == 0 }.map(\.0)
                result.acceptedTwice = accepted.reduce(0) { $0 + max(0, $1 - 1) }
                var dead: [String: Int] = [:]
                for entry in try await redis.entries(keys.dead) { dead[entry["id"] ?? "?", default: 0] += 1 }
                let malformed = (0..<count).filter { $0 % 100 == 99 }
                result.neverDeadLettered = malformed.filter { dead[UUIDString.make(high: seed, low: UInt64($0))] == nil }
                result.deadLettersTwice = dead.values.reduce(0) { $0 + max(0, $1 - 1) }
                result.left = (try await redis.integer("XLEN", keys.jobs), try await redis.pendingCount(keys.jobs, group: keys.group),
                               try await redis.integer("ZCARD", keys.retry))
                return result
            }

            /// Polls until every job is counted; on timeout throws with the last count and `context`.
            static func waitUntilComplete(count: Int, seed: UInt64, redis: RedisClient, emulator: EmulatorHost,
                                          context: () -> String) async throws -> FailoverCount {
                var last = FailoverCount()
                let done = try await waitFor("every job is counted", timeout: .seconds(120), interval: .milliseconds(200), failOnTimeout: false) {
                    guard let current = try? await read(count: count, seed: seed, redis: redis, emulator: emulator) else { return false }
                    last = current
                    return current.complete
                }
                if !done {
                    let leases = (try? await redis.send(["HGETALL", QueueKeys().leases])).map { "\($0)" } ?? "?"
                    let pending = (try? await redis.send(["XPENDING", QueueKeys().jobs, QueueKeys().group, "-", "+", "5"])).map { "\($0)" } ?? "?"
                    throw WaitTimeout(description: "not every job was counted within 120 s: \(last)\nleases: \(leases)\npending: \(pending)\n\(context())")
                }
                return last
            }
        }

        @Test
        func workerFollowsTheMasterWhenItIsKilledMidDrain() async throws {
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup()
            // 100 ms answers and at most 100 in flight: about 1,000 a second, so the kill lands mid-drain.
            let emulator = try await EmulatorHost { $0.latencyMilliseconds = 100 }
            let keys = QueueKeys()
            let oldMaster = group.servers[0].port
            let producer = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: oldMaster))
            var newClient: RedisClient? = nil
            var worker: WorkerProcess? = nil
            defer {
                if let worker, worker.isRunning { worker.signal(SIGKILL); worker.process.waitUntilExit() }
                producer.shutdown()
                newClient?.shutdown()
                emulator.shutdown()
                group.stop()
            }
            let count = 4_000
            let seed = UInt64.random(in: 1..<(1 << 60))
            _ = try await producer.xadd(keys.jobs, count: count) { Sentinel.job($0, seed: seed) }
            // As a careful producer does: the jobs are acknowledged once the replica has them too.
            let replicated = try await producer.integer("WAIT", "1", "10000")
            try #require(replicated == 1, "the replica confirmed the jobs")

            let process = try WorkerProcess(arguments: [
                "--sentinel", group.sentinelList, "--sentinel-master", SentinelGroup.masterName,
                "--connections", "2", "--max-streams", "50", "--metrics-port", "0", "--log-level", "info",
            ] + emulator.workerArguments, logPath: emulator.directory.path("worker.log"))
            worker = process
            try await waitFor("the worker has delivered some jobs through the first master", timeout: .seconds(60)) {
                guard process.isRunning else { throw WaitTimeout(description: "herald worker exited early:\n\(process.logTail())") }
                return try await emulator.statistics().acceptedUnique >= 500
            }
            group.server(port: oldMaster)?.kill()
            let atKill = try await emulator.statistics().acceptedUnique
            try #require(atKill < count - count / 100, "the kill came too late to test anything (\(atKill) accepted)")

            let newMaster = try await group.waitForFailover(from: oldMaster)
            let client = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: newMaster))
            newClient = client
            let counted = try await FailoverCount.waitUntilComplete(count: count, seed: seed, redis: client, emulator: emulator) {
                "worker log:\n\(process.logTail(6000))\n\(group.logTails())"
            }
            #expect(process.isRunning, "the worker survived the failover: \(process.logTail())")
            #expect(try await emulator.statistics().duplicates == counted.acceptedTwice, "the emulator's duplicates are these")
            let log = process.logTail(20_000)
            #expect(log.contains("127.0.0.1:\(newMaster)"), "the worker names the new master in its log:\n\(log)")
            print("sentinel-failover | enqueued \(count) | every job counted | accepted before the kill \(atKill) "
                  + "| delivered twice \(counted.acceptedTwice) | dead letters twice \(counted.deadLettersTwice) | old master \(oldMaster) → new \(newMaster)")
        }

        /// With `minReplicasToWrite` 1 (on every data server) the old master refuses writes as
        /// soon as its only replica is promoted, which closes the window in which acknowledgements
        /// go to it and are lost; the new master then refuses them too until the old one is its
        /// replica. Either way every job is counted; the duplicates are printed for the docs.
        @Test(arguments: [0, 1])
        func workerFollowsASwitchoverAndTheWatcherHearsOfIt(minReplicasToWrite: Int) async throws {
            // SENTINEL FAILOVER: the master is demoted to a replica (not killed) and its clients
            // are disconnected; the watcher hears +switch-master, and the worker goes on against
            // the promoted replica.
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup()
            for server in group.servers where minReplicasToWrite > 0 {
                #expect(group.ask(port: server.port, ["CONFIG", "SET", "min-replicas-to-write", .text(String(minReplicasToWrite))]) == .status("OK"))
            }
            let emulator = try await EmulatorHost { $0.latencyMilliseconds = 100 }
            let keys = QueueKeys()
            let oldMaster = group.servers[0].port
            let producer = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: oldMaster))
            let watching = try EventLoopThread()
            let switches = Mutex<[Int]>([])
            let resolverBox = LoopBox<RedisSentinelResolver>()
            var newClient: RedisClient? = nil
            var worker: WorkerProcess? = nil
            defer {
                if let worker, worker.isRunning { worker.signal(SIGKILL); worker.process.waitUntilExit() }
                watching.submitAndWait { resolverBox.value?.stopWatching(); resolverBox.value = nil }
                watching.shutdown()
                producer.shutdown()
                newClient?.shutdown()
                emulator.shutdown()
                group.stop()
            }
            let configuration = group.configuration
            try await watching.submit {
                let resolver = RedisSentinelResolver(loop: watching.loop, configuration: configuration, base: RedisEndpoint())
                resolver.watch { master in switches.withLock { $0.append(master.port) } }
                resolverBox.value = resolver
            }
            let count = 3_000
            let seed = UInt64.random(in: 1..<(1 << 60))
            _ = try await producer.xadd(keys.jobs, count: count) { Sentinel.job($0, seed: seed) }
            try #require(try await producer.integer("WAIT", "1", "10000") == 1, "the replica confirmed the jobs")
            let process = try WorkerProcess(arguments: [
                "--sentinel", group.sentinelList, "--sentinel-master", SentinelGroup.masterName,
                "--connections", "2", "--max-streams", "50", "--metrics-port", "0",
            ] + emulator.workerArguments, logPath: emulator.directory.path("worker.log"))
            worker = process
            try await waitFor("the worker has delivered some jobs", timeout: .seconds(60)) {
                guard process.isRunning else { throw WaitTimeout(description: "herald worker exited early:\n\(process.logTail())") }
                return try await emulator.statistics().acceptedUnique >= 500
            }
            let answer = group.ask(port: group.sentinels[0].port, sentinel: true, ["SENTINEL", "FAILOVER", .text(SentinelGroup.masterName)])
            try #require(answer == .status("OK"), "SENTINEL FAILOVER: \(String(describing: answer))")
            let newMaster = try await group.waitForFailover(from: oldMaster)
            try await waitFor("the watcher heard +switch-master", timeout: .seconds(30)) {
                switches.withLock { $0.contains(newMaster) }
            }
            let client = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: newMaster))
            newClient = client
            let counted = try await FailoverCount.waitUntilComplete(count: count, seed: seed, redis: client, emulator: emulator) {
                "worker log:\n\(process.logTail(6000))\n\(group.logTails())"
            }
            #expect(process.isRunning)
            // The sentinels turn the old master into a replica once they see it again (their INFO
            // round comes every 10 s); from then on it refuses writes (READONLY).
            try await waitFor("the old master serves on as a replica", timeout: .seconds(40), interval: .milliseconds(200)) {
                group.role(port: oldMaster) == "slave"
            }
            #expect(try await emulator.statistics().duplicates == counted.acceptedTwice, "the emulator's duplicates are these")
            let log = process.logTail(1_000_000)
            let netReleases = log.components(separatedBy: "a lease still counts entries").count - 1
            print("sentinel-switchover | min-replicas-to-write \(minReplicasToWrite) | enqueued \(count) | every job counted "
                  + "| delivered twice \(counted.acceptedTwice) | dead letters twice \(counted.deadLettersTwice) | old master \(oldMaster) → new \(newMaster) "
                  + "| leases released by the safety net \(netReleases)")
            if netReleases > 0 { print(log) }
        }

        @Test
        func toolsAuthenticateToPasswordProtectedSentinels() async throws {
            let secret = "sentinel-Secret-42"
            let group = try await SentinelGroup(sentinelPassword: secret)
            defer { group.stop() }
            let directory = try TemporaryDirectory(prefix: "herald-sentinel-auth")
            let sentinel = ["--sentinel", group.sentinelList, "--sentinel-master", SentinelGroup.masterName]
            let job = ["--token", WorkerHarness.deviceToken(1), "--payload", WorkerHarness.payload(1)]
            let refused = try runHerald(["enqueue", "--lane", "bulk"] + sentinel + job, in: directory)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("--sentinel-password-file"), "the message says how to give the password: \(refused)")
            let fromEnvironment = try runHerald(["enqueue", "--lane", "bulk"] + sentinel + job, environment: ["HERALD_SENTINEL_PASSWORD": secret], in: directory)
            #expect(fromEnvironment.status == 0, "\(fromEnvironment)")
            let file = directory.path("sentinel.pass")
            try (secret + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            chmod(file, 0o600)
            let fromFile = try runHerald(["stats", "--json", "--sentinel-password-file", file] + sentinel, in: directory)
            #expect(fromFile.status == 0, "\(fromFile)")
            #expect(fromFile.stdout.contains("\"depth\":1") || fromFile.stdout.contains("\"depth\": 1"), "\(fromFile)")
            for run in [refused, fromEnvironment, fromFile] {
                #expect(!run.stdout.contains(secret) && !run.stderr.contains(secret), "the password is never printed")
            }
        }

        @Test
        func toolsFindTheMasterThroughSentinelsPastOneThatIsDown() async throws {
            let group = try await SentinelGroup()
            defer { group.stop() }
            let directory = try TemporaryDirectory(prefix: "herald-sentinel-tools")
            let down = try RedisServer.freePort()  // nothing listens here
            let list = "127.0.0.1:\(down),\(group.sentinelList)"
            let sentinel = ["--sentinel", list, "--sentinel-master", SentinelGroup.masterName]
            let token = WorkerHarness.deviceToken(7)

            let enqueued = try runHerald(["enqueue", "--lane", "bulk"] + sentinel + ["--token", token, "--payload", WorkerHarness.payload(7),
                                                                  "--wait-replicas", "1", "--wait-timeout", "5000"], in: directory)
            #expect(enqueued.status == 0, "\(enqueued)")
            let master = group.servers[0].port, replica = group.servers[1].port
            #expect(group.ask(port: master, ["XLEN", "herald:{default}:jobs"])?.integer == 1, "the job is on the master")
            #expect(group.ask(port: replica, ["XLEN", "herald:{default}:jobs"])?.integer == 1, "--wait-replicas 1: and on the replica")

            // Asking for more replicas than there are: added all the same, and said so.
            let short = try runHerald(["enqueue", "--lane", "bulk"] + sentinel + ["--token", token, "--payload", WorkerHarness.payload(8),
                                                                "--wait-replicas", "2", "--wait-timeout", "200"], in: directory)
            #expect(short.status != 0, "\(short)")
            #expect(short.stderr.contains("only 1 of 2 replicas confirmed them within 200 ms"), "\(short)")
            #expect(group.ask(port: master, ["XLEN", "herald:{default}:jobs"])?.integer == 2, "the job was added all the same")
            try #require(group.ask(port: master, ["DEL", "herald:{default}:jobs"])?.integer == 1)
            _ = group.ask(port: master, ["XADD", "herald:{default}:jobs", "*", "token", .text(token), "payload", "{}"])

            // The same through the environment, for stats, dead-letters and feedback.
            let environment = ["HERALD_SENTINEL": list, "HERALD_SENTINEL_MASTER": SentinelGroup.masterName]
            let stats = try runHerald(["stats", "--json"], environment: environment, in: directory)
            #expect(stats.status == 0, "\(stats)")
            #expect(stats.stdout.contains("\"depth\":1") || stats.stdout.contains("\"depth\": 1"), "\(stats)")
            #expect(stats.stdout.contains("127.0.0.1:\(master)"), "stats names the master it found: \(stats)")
            let dead = try runHerald(["dead-letters", "list"], environment: environment, in: directory)
            #expect(dead.status == 0, "\(dead)")
            let feedback = try runHerald(["feedback", "tail"], environment: environment, in: directory)
            #expect(feedback.status == 0, "\(feedback)")

            // Wrong settings fail with a message that says what to fix.
            let unknown = try runHerald(["stats", "--sentinel", group.sentinelList, "--sentinel-master", "no-such-master"], in: directory)
            #expect(unknown.status != 0)
            #expect(unknown.stderr.contains("monitors no master named 'no-such-master'"), "\(unknown)")
            #expect(unknown.stderr.contains("--sentinel-master"), "\(unknown)")
            let allDown = try runHerald(["enqueue", "--sentinel", "127.0.0.1:\(down)", "--sentinel-master", SentinelGroup.masterName,
                                         "--token", token, "--payload", "{}"], in: directory)
            #expect(allDown.status != 0)
            #expect(allDown.stderr.contains("sentinel 127.0.0.1:\(down)"), "\(allDown)")
            let both = try runHerald(["stats", "--redis", "redis://127.0.0.1:\(master)"] + sentinel, in: directory)
            #expect(both.status != 0)
            #expect(both.stderr.contains("may not name a host"), "\(both)")
            let noName = try runHerald(["stats", "--sentinel", group.sentinelList], in: directory)
            #expect(noName.status != 0)
            #expect(noName.stderr.contains("--sentinel-master"), "\(noName)")
            let notSentinel = try runHerald(["stats", "--sentinel", "127.0.0.1:\(master)", "--sentinel-master", SentinelGroup.masterName],
                                            in: directory)
            #expect(notSentinel.status != 0)
            #expect(notSentinel.stderr.contains("is not a sentinel"), "\(notSentinel)")
            // User and database may stay in --redis.
            let database = try runHerald(["stats", "--json", "--redis", "redis:///3"] + sentinel, in: directory)
            #expect(database.status == 0, "\(database)")
            #expect(database.stdout.contains("127.0.0.1:\(master)/3"), "\(database)")
        }

        @Test
        func aStaleSentinelNamingAReplicaIsPassedOverAndTheWorkerDelivers() async throws {
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup()
            let replica = group.servers[1].port
            // A real sentinel that monitors the replica under the master's name: as stale as a
            // sentinel partitioned away during a failover, it names a server that is not the master.
            let stale = try RedisProcess.start(name: "stale-sentinel", directory: group.directory) { port, dir in
                let path = "\(dir)/sentinel.conf"
                try """
                    port \(port)
                    bind 127.0.0.1
                    protected-mode no
                    dir \(dir)
                    logfile \(dir)/redis.log
                    sentinel monitor \(SentinelGroup.masterName) 127.0.0.1 \(replica) 1
                    """.write(toFile: path, atomically: true, encoding: .utf8)
                return [path, "--sentinel"]
            }
            let emulator = try await EmulatorHost()
            let down = try RedisServer.freePort()
            let client = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: group.servers[0].port))
            var worker: WorkerProcess? = nil
            defer {
                if let worker, worker.isRunning { worker.signal(SIGKILL); worker.process.waitUntilExit() }
                client.shutdown()
                emulator.shutdown()
                stale.kill()
                group.stop()
            }
            guard case .array(let named)? = group.ask(port: stale.port, sentinel: true,
                                                      ["SENTINEL", "get-master-addr-by-name", .text(SentinelGroup.masterName)]) else {
                Issue.record("the stale sentinel names no master")
                return
            }
            try #require(named.last?.string == String(replica), "the stale sentinel names the replica: \(named)")

            // The resolver itself, on a loop of its own: past a dead sentinel, a stalled one
            // (SIGSTOP: it accepts connections and never answers) and the stale one.
            let loop = try EventLoop()
            var configuration = group.configuration
            let stalled = group.sentinels[0]
            configuration.sentinels.removeFirst()
            configuration.sentinels.insert(.init(host: "127.0.0.1", port: stale.port), at: 0)
            configuration.sentinels.insert(.init(host: "127.0.0.1", port: stalled.port), at: 0)
            configuration.sentinels.insert(.init(host: "127.0.0.1", port: down), at: 0)
            stalled.signal(SIGSTOP)
            let resolver = RedisSentinelResolver(loop: loop, configuration: configuration, base: RedisEndpoint(host: "unused.invalid"))
            resolver.attemptTimeoutMilliseconds = 1_000
            let found = try #require(resolver.resolveTurningLoop())
            stalled.signal(SIGCONT)
            #expect(try found.get().port == group.servers[0].port)
            // Every sentinel passed over, with the reason, when none names a usable master.
            configuration.sentinels = Array(configuration.sentinels.prefix(3))
            stalled.signal(SIGSTOP)
            let failing = RedisSentinelResolver(loop: loop, configuration: configuration, base: RedisEndpoint(host: "unused.invalid"))
            failing.attemptTimeoutMilliseconds = 1_000
            let failure = "\(String(describing: failing.resolveTurningLoop()))"
            stalled.signal(SIGCONT)
            #expect(failure.contains("sentinel 127.0.0.1:\(down): Connection refused"), "\(failure)")
            #expect(failure.contains("sentinel 127.0.0.1:\(stalled.port)") && failure.contains("within 1000 ms"), "\(failure)")
            #expect(failure.contains("names 127.0.0.1:\(replica), which says its role is 'slave', not master"), "\(failure)")

            let count = 500
            let seed = UInt64.random(in: 1..<(1 << 60))
            _ = try await client.xadd(QueueKeys().jobs, count: count) { Sentinel.job($0, seed: seed) }
            // This worker takes its Sentinel settings from a config file.
            let list = "127.0.0.1:\(down),127.0.0.1:\(stale.port),\(group.sentinelList)"
            let config = emulator.directory.path("herald.yaml")
            try "sentinel: \(list)\nsentinel_master: \(SentinelGroup.masterName)\nredis: redis:///0\n"
                .write(toFile: config, atomically: true, encoding: .utf8)
            let process = try WorkerProcess(arguments: ["--config", config, "--metrics-port", "0", "--log-level", "debug"]
                                            + emulator.workerArguments, logPath: emulator.directory.path("worker.log"))
            worker = process
            let ledger: QueueLedger
            do {
                ledger = try await waitForSettledLedger(enqueued: count, redis: client, emulator: emulator, timeout: .seconds(60))
            } catch {
                Issue.record("\(error)\nworker log:\n\(process.logTail(6000))")
                throw error
            }
            #expect(ledger.acceptedUnique == count - count / 100 && ledger.duplicates == 0, "\(ledger)")
            #expect(ledger.deadByReason == ["bad_priority": count / 100], "\(ledger)")
            #expect(group.ask(port: replica, ["XLEN", "herald:{default}:dead"])?.integer == Int64(count / 100),
                    "the replica got the dead letters from the master, which the worker wrote to")
        }

        @Test
        func aWorkerPointedAtAReplicaBacksOffInsteadOfLooping() async throws {
            // No Sentinel: --redis names a replica. Every XGROUP it sends is refused READONLY; each
            // refusal must cost a reconnect with backoff, never a retry loop on the same connection.
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup(sentinels: 0)
            let replica = group.servers[1].port
            let emulator = try await EmulatorHost()
            defer { emulator.shutdown(); group.stop() }
            let process = try WorkerProcess(arguments: ["--redis", "redis://127.0.0.1:\(replica)", "--metrics-port", "0"]
                                            + emulator.workerArguments, logPath: emulator.directory.path("worker.log"))
            defer { if process.isRunning { process.signal(SIGKILL); process.process.waitUntilExit() } }
            // Redis 7 counts a command refused before it ran (READONLY) as `rejected_calls`, per
            // subcommand. Redis 6.2 counts refused commands nowhere but in its error statistics,
            // so there every READONLY answer stands for one attempt.
            let tried = { (command: String) -> Int in
                Sentinel.commandStat(group: group, port: replica, command, field: "calls")
                    + Sentinel.commandStat(group: group, port: replica, command, field: "rejected_calls")
            }
            let refusals = { Sentinel.errorCount(group: group, port: replica, "READONLY") }
            try await waitFor("the worker tried to create the group on the replica three times", timeout: .seconds(30), interval: .milliseconds(100)) {
                guard process.isRunning else { throw WaitTimeout(description: "herald worker exited:\n\(process.logTail())") }
                guard RedisServer.isRedis7 else { return refusals() >= 3 }
                let reads = tried("xreadgroup")
                guard reads == 0 else {
                    throw WaitTimeout(description: "the worker read from a replica \(reads) times: it went on after READONLY")
                }
                return tried("xgroup|create") >= 3
            }
            // Each refused XGROUP costs a reconnect (with backoff); before the fix the worker went
            // on to XREADGROUP, was refused, and asked again at once, thousands of times a second.
            if RedisServer.isRedis7 {
                #expect(tried("xreadgroup") == 0, "the worker never reads from a replica")
                #expect(tried("xgroup|create") <= 4, "one XGROUP per connection, backing off: \(tried("xgroup|create"))")
            } else {
                #expect(refusals() <= 4, "one refused command per connection, backing off: \(refusals())")
            }
            #expect(process.isRunning)
            #expect(process.logTail().contains("READONLY"), "the log says why: \(process.logTail())")
        }

        @Test
        func aMasterShortOfReplicasMakesTheWorkerBackOffThenDeliverEverything() async throws {
            // `min-replicas-to-write`, which the docs recommend against a partitioned old master:
            // with fewer good replicas than it asks, every write (XREADGROUP too) is refused
            // NOREPLICAS. The worker must back off, acknowledge nothing, and finish once the
            // replicas are enough again.
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup(sentinels: 0)
            let master = group.servers[0].port
            let emulator = try await EmulatorHost { $0.latencyMilliseconds = 50 }
            let client = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: master))
            var worker: WorkerProcess? = nil
            defer {
                if let worker, worker.isRunning { worker.signal(SIGKILL); worker.process.waitUntilExit() }
                client.shutdown()
                emulator.shutdown()
                group.stop()
            }
            let count = 2_000
            let seed = UInt64.random(in: 1..<(1 << 60))
            _ = try await client.xadd(QueueKeys().jobs, count: count) { Sentinel.job($0, seed: seed) }
            let process = try WorkerProcess(arguments: ["--redis", "redis://127.0.0.1:\(master)", "--metrics-port", "0",
                                                        "--connections", "2", "--max-streams", "50"]
                                            + emulator.workerArguments, logPath: emulator.directory.path("worker.log"))
            worker = process
            try await waitFor("the worker has delivered some jobs", timeout: .seconds(60)) {
                guard process.isRunning else { throw WaitTimeout(description: "herald worker exited early:\n\(process.logTail())") }
                return try await emulator.statistics().acceptedUnique >= 300
            }
            try await client.command("CONFIG", "SET", "min-replicas-to-write", "2")  // one replica: too few
            let refused = { () -> Int in
                ["xreadgroup", "xgroup|create", "multi", "xack", "exec"].reduce(0) {
                    $0 + Sentinel.commandStat(group: group, port: master, $1, field: "rejected_calls")
                }
            }
            try await waitFor("the master refused the worker's writes twice", timeout: .seconds(30), interval: .milliseconds(100)) {
                guard process.isRunning else { throw WaitTimeout(description: "herald worker exited:\n\(process.logTail())") }
                let reads = Sentinel.commandStat(group: group, port: master, "xreadgroup", field: "rejected_calls")
                guard reads <= 20 else { throw WaitTimeout(description: "\(reads) XREADGROUP refused: the worker asks again without backing off") }
                return refused() >= 2
            }
            let pendingWhileRefused = try await client.pendingCount(QueueKeys().jobs, group: QueueKeys().group)
            try await client.command("CONFIG", "SET", "min-replicas-to-write", "1")
            let ledger: QueueLedger
            do {
                ledger = try await waitForSettledLedger(enqueued: count, redis: client, emulator: emulator, timeout: .seconds(120))
            } catch {
                Issue.record("\(error)\nworker log:\n\(process.logTail(6000))")
                throw error
            }
            #expect(ledger.acceptedUnique == count - count / 100 && ledger.deadByReason == ["bad_priority": count / 100], "\(ledger)")
            #expect(ledger.duplicates == 0, "nothing acknowledged was lost here, so nothing is sent twice: \(ledger)")
            let log = process.logTail(20_000)
            #expect(log.contains("NOREPLICAS") || log.contains("EXECABORT"), "the log says why:\n\(log)")
            print("sentinel-noreplicas | enqueued \(count) | accepted \(ledger.acceptedUnique) | pending while refused \(pendingWhileRefused) "
                  + "| refused writes \(refused())")
        }

        @Test
        func aSentinelAnnouncingFailoversInALoopCannotMakeTheWorkerReconnectInALoop() async throws {
            // The watched "sentinel" is a plain Redis on which the test publishes +switch-master
            // itself: 150 announcements in 3 s, alternating between the master and the replica.
            // The worker asks the real sentinels again (and ROLE) at most once a second and, the
            // master being where it was, keeps its connections.
            signal(SIGPIPE, SIG_IGN)
            let group = try await SentinelGroup()
            let liar = try RedisProcess.start(name: "liar", directory: group.directory) { port, dir in
                RedisProcess.dataArguments(port: port, directory: dir)
            }
            let master = group.servers[0].port, replica = group.servers[1].port
            let emulator = try await EmulatorHost { $0.latencyMilliseconds = 20 }
            let client = try RedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: master))
            var worker: WorkerProcess? = nil
            defer {
                if let worker, worker.isRunning { worker.signal(SIGKILL); worker.process.waitUntilExit() }
                client.shutdown()
                emulator.shutdown()
                liar.kill()
                group.stop()
            }
            let count = 3_000
            let seed = UInt64.random(in: 1..<(1 << 60))
            _ = try await client.xadd(QueueKeys().jobs, count: count) { Sentinel.job($0, seed: seed) }
            let process = try WorkerProcess(arguments: [
                "--sentinel", "127.0.0.1:\(liar.port),\(group.sentinelList)", "--sentinel-master", SentinelGroup.masterName,
                "--connections", "2", "--max-streams", "50", "--metrics-port", "0",
            ] + emulator.workerArguments, logPath: emulator.directory.path("worker.log"))
            worker = process
            try await waitFor("the worker delivers and listens on the liar", timeout: .seconds(60)) {
                guard process.isRunning else { throw WaitTimeout(description: "herald worker exited early:\n\(process.logTail())") }
                guard case .array(let numbers)? = group.ask(port: liar.port, ["PUBSUB", "NUMSUB", "+switch-master"]),
                      numbers.count == 2, numbers[1].integer == 1 else { return false }
                return try await emulator.statistics().acceptedUnique >= 100
            }
            let connections = { () -> Int in
                guard case .bulk(let bytes)? = group.ask(port: master, ["INFO", "stats"]) else { return 0 }
                let line = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline)
                    .first { $0.hasPrefix("total_connections_received:") }
                return line.flatMap { Int($0.split(separator: ":")[1].prefix { $0.isNumber }) } ?? 0
            }
            let before = connections()
            for index in 0..<150 {
                let (from, to) = index % 2 == 0 ? (master, replica) : (replica, master)
                _ = group.ask(port: liar.port, ["PUBLISH", "+switch-master",
                                                .text("\(SentinelGroup.masterName) 127.0.0.1 \(from) 127.0.0.1 \(to)")])
                try await Task.sleep(for: .milliseconds(20))  // pacing the announcements, not waiting for an outcome
            }
            let during = connections() - before
            let ledger = try await waitForSettledLedger(enqueued: count, redis: client, emulator: emulator, timeout: .seconds(120),
                                                        context: { process.logTail(4000) })
            #expect(process.isRunning)
            #expect(ledger.acceptedUnique == count - count / 100 && ledger.deadByReason == ["bad_priority": count / 100],
                    "\(ledger)\n\(process.logTail(30_000))")
            // Each announcement checked costs a ROLE connection, and the test's own questions one
            // each; reconnecting on all 150 would cost hundreds (226 before the check).
            #expect(during < 30, "\(during) connections to the master during 150 announcements")
            #expect(ledger.duplicates == 0, "the master never moved, so the worker never reconnected: \(ledger)")
            #expect(!process.logTail(50_000).contains("moving to the new master"), "\(process.logTail())")
            print("sentinel-liar | 150 announcements | connections to the master meanwhile \(during) | accepted \(ledger.acceptedUnique)")
        }

        /// How many times the server on `port` answered an error starting with `prefix`
        /// (`INFO errorstats`, Redis 6.2 and later).
        static func errorCount(group: SentinelGroup, port: Int, _ prefix: String) -> Int {
            guard case .bulk(let bytes)? = group.ask(port: port, ["INFO", "errorstats"]) else { return 0 }
            guard let line = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline)
                .first(where: { $0.hasPrefix("errorstat_\(prefix):count=") }) else { return 0 }
            return Int(line.split(separator: "=").last ?? "") ?? 0
        }

        /// One field of `INFO commandstats`' line for `command` (0 when absent).
        static func commandStat(group: SentinelGroup, port: Int, _ command: String, field: String) -> Int {
            guard case .bulk(let bytes)? = group.ask(port: port, ["INFO", "commandstats"]) else { return 0 }
            guard let line = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline)
                .first(where: { $0.hasPrefix("cmdstat_\(command):") }) else { return 0 }
            for part in line.split(separator: ",") {
                let pair = part.split(separator: "=")
                // `cmdstat_xgroup:calls=3`, then `rejected_calls=2`, …
                let name = pair.first.map { $0.split(separator: ":").last ?? $0 }
                if pair.count == 2, name == Substring(field) { return Int(pair[1]) ?? 0 }
            }
            return 0
        }
    }
}

/// A value confined to one loop thread (set and read only there).
final class LoopBox<Value>: @unchecked Sendable {
    var value: Value?
}

/// What one `herald` run printed and how it ended.
struct HeraldRun: CustomStringConvertible {
    let status: Int32
    let stdout: String
    let stderr: String
    var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

/// Runs the `herald` binary to the end (at most 60 s) with only `environment` of HERALD_* set.
func runHerald(_ arguments: [String], environment: [String: String] = [:], in directory: TemporaryDirectory) throws -> HeraldRun {
    let name = UUID().uuidString
    let out = directory.path("\(name).out"), err = directory.path("\(name).err")
    _ = FileManager.default.createFile(atPath: out, contents: nil)
    _ = FileManager.default.createFile(atPath: err, contents: nil)
    let process = TestProcess()
    process.executableURL = URL(fileURLWithPath: try WorkerHarness.heraldBinary())
    process.arguments = arguments
    var variables = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
    for (key, value) in environment { variables[key] = value }
    process.environment = variables
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
    process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
    try process.run()
    let deadline = Date().addingTimeInterval(60)
    while process.isRunning && Date() < deadline { usleep(5_000) }
    if process.isRunning {
        process.terminate()
        process.waitUntilExit()
        throw RedisServerError("herald \(arguments.joined(separator: " ")) did not finish within 60 s")
    }
    process.waitUntilExit()
    return HeraldRun(status: process.terminationStatus, stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
                     stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
}

extension IntegrationTests {
    /// Redis dropping the worker's connections mid-drain, again and again (as a failover or a
    /// proxy does): every outcome batch in flight at a drop is written again only where Redis
    /// did not run it, and the pending list read after it never takes finished entries as new.
    @Suite(.serialized)
    struct RedisReconnects {
        @Test
        func connectionsKilledMidDrainFiveTimesSendNothingTwiceAndWriteEveryDeadLetterOnce() async throws {
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 50 }) { bed in
                let count = 4_000
                let seed = UInt64.random(in: 1..<(1 << 60))
                try await bed.enqueue(count) { IntegrationTests.Sentinel.job($0, seed: seed) }
                let process = try bed.startProcess(["--connections", "2", "--max-streams", "50", "--metrics-port", "0"])
                var kills = 0
                var accepted = 0
                while kills < 5 {
                    try await waitFor("the worker is connected again and delivers", timeout: .seconds(60)) {
                        guard process.isRunning else { throw WaitTimeout(description: "herald worker exited:\n\(process.logTail())") }
                        guard case .bulk(let bytes) = try await bed.client.send(["INFO", "clients"]),
                              let line = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline)
                                .first(where: { $0.hasPrefix("connected_clients:") }),
                              let clients = Int(line.dropFirst("connected_clients:".count).prefix { $0.isNumber }),
                              clients >= 3 else { return false }  // the worker's two and this test's
                        return try await bed.emulator.statistics().acceptedUnique >= accepted + 200
                    }
                    accepted = try await bed.emulator.statistics().acceptedUnique
                    if accepted >= count - count / 100 - 200 { break }  // too late for another kill
                    // Every client but this one: the worker's reader and writer, mid-batch.
                    let killed = try await bed.client.integer("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                    #expect(killed >= 2, "the worker's two connections were dropped")
                    kills += 1
                }
                try #require(kills >= 3, "the drain ended before three kills (\(kills))")
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(120))
                #expect(ledger.acceptedUnique == count - count / 100, "\(ledger)")
                #expect(ledger.duplicates == 0, "nothing was sent twice: \(ledger)\n\(process.logTail())")
                #expect(ledger.deadByReason == ["bad_priority": count / 100], "every dead letter once: \(ledger)")
                print("redis-reconnects | kills \(kills) | \(ledger)")
            }
        }
    }
}
