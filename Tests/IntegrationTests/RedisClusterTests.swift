import APNs
import Foundation
import Glibc
import HeraldTestSupport
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// Herald on a real Redis Cluster (`RedisClusterFixture`: 3 masters, 3 replicas, started by
    /// the test on free ports): the slot function against Redis' own answers, the tools' routing
    /// with MOVED and ASK forced by a real slot migration, and workers that follow a master's
    /// failover while every job is counted.
    @Suite
    struct RedisClusterTests {
        /// Six shards whose `{alerts-N}` hash tags fall two on each of the three equal slot ranges
        /// `redis-cli --cluster create` hands out (0–5460, 5461–10922, 10923–16383). The tests
        /// check the spread against the live map rather than trusting this comment.
        static let shards = (0..<6).map { "alerts-\($0)" }

        @Test
        func slotFunctionAgreesWithRedis() throws {
            let cluster = try RedisClusterFixture()
            defer { cluster.stop() }
            let node = try BlockingRESP(port: cluster.nodes[0].port)
            defer { node.close() }
            var keys = ["123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "{", "}", "", "é{ü}"]
            for queue in Self.shards + ["default", "orders"] {
                keys += ["herald:{\(queue)}:jobs", "herald:{\(queue)}:retry", "herald:{\(queue)}:dead", "herald:{\(queue)}:feedback"]
            }
            for index in 0..<200 { keys.append("key-\(index * 7919)") }
            for key in keys {
                let answer = try node.command(["CLUSTER", "KEYSLOT", key])
                #expect(answer.integer.map(Int.init) == RedisClusterSlot.of(key: key), "CLUSTER KEYSLOT \(key)")
            }
            for queue in Self.shards {
                #expect(try node.command(["CLUSTER", "KEYSLOT", "herald:{\(queue)}:jobs"]).integer.map(Int.init) == RedisClusterSlot.of(queue: queue))
            }
        }

        @Test
        func toolsRouteByKeyAndFollowAskAndMoved() throws {
            let cluster = try RedisClusterFixture()
            defer { cluster.stop() }
            let client = try ClusterRedisClient(seeds: cluster.seeds)
            let live = try cluster.map()

            // The six shards land on all three masters, two on each.
            let owners = try Self.shards.map { try client.owner(ofSlot: RedisClusterSlot.of(queue: $0)) }
            #expect(Set(owners).count == 3, "shards spread over \(owners)")
            for (shard, owner) in zip(Self.shards, owners) {
                #expect(live.owner(ofSlot: RedisClusterSlot.of(queue: shard)) == owner, "CLUSTER SHARDS and CLUSTER SLOTS agree on \(shard)")
            }

            // Each queue's commands reach its own master: the entry is there and nowhere else.
            for shard in Self.shards {
                let keys = QueueKeys(queue: shard)
                let replies = try client.pipeline([["XADD", .text(keys.jobs), "*", "token", "aa", "payload", "{}"], ["XLEN", .text(keys.jobs)]])
                #expect(replies[1].integer == 1, "\(shard): \(replies)")
            }
            for (shard, owner) in zip(Self.shards, owners) {
                for node in Set(owners) {
                    let direct = try BlockingRESP(port: node.port)
                    defer { direct.close() }
                    let length = try direct.command(["XLEN", QueueKeys(queue: shard).jobs])
                    if node == owner {
                        #expect(length.integer == 1)
                    } else {
                        #expect(length.string == nil && length.isError, "\(node) must redirect \(shard), answered \(length)")
                    }
                }
            }

            // A real migration of alerts-0's slot from its master to another: once the jobs stream
            // moved, its master answers ASK for it, and the client follows without changing its map.
            let keys = QueueKeys(queue: Self.shards[0])
            let slot = RedisClusterSlot.of(queue: keys.queue)
            let source = owners[0]
            let target = try #require(Set(owners).first { $0 != source })
            let sourceNode = try BlockingRESP(port: source.port)
            let targetNode = try BlockingRESP(port: target.port)
            defer { sourceNode.close(); targetNode.close() }
            let sourceID = try #require(try sourceNode.command(["CLUSTER", "MYID"]).string)
            let targetID = try #require(try targetNode.command(["CLUSTER", "MYID"]).string)
            #expect(try targetNode.command(["CLUSTER", "SETSLOT", String(slot), "IMPORTING", sourceID]).string == "OK")
            #expect(try sourceNode.command(["CLUSTER", "SETSLOT", String(slot), "MIGRATING", targetID]).string == "OK")
            let migrated = try sourceNode.command(["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS", keys.jobs])
            #expect(migrated.string == "OK", "MIGRATE: \(migrated)")
            let asked = try BlockingRESP(port: source.port)
            defer { asked.close() }
            let redirect = try asked.command(["XLEN", keys.jobs])
            guard case .error(let message) = redirect, case .ask(slot, target)? = RedisClusterRedirect(errorMessage: message) else {
                Issue.record("the source should answer ASK for a migrated key, answered \(redirect)")
                return
            }
            #expect(try client.run(["XLEN", .text(keys.jobs)]).integer == 1, "followed ASK to the importing node")
            // A new key of the migrating slot goes to the target too (ASK), and lands there.
            try client.run(["XADD", .text(keys.dead), "*", "reason", "test"])
            #expect(try client.owner(ofSlot: slot) == source, "ASK must not change the map")
            #expect(try targetNode.command(["ASKING"]).string == "OK")
            #expect(try targetNode.command(["XLEN", keys.dead]).integer == 1)

            // The migration ends: every master learns the new owner; the client's stale map gets
            // MOVED from the source and follows it.
            for node in Set(owners) {
                let connection = try BlockingRESP(port: node.port)
                defer { connection.close() }
                #expect(try connection.command(["CLUSTER", "SETSLOT", String(slot), "NODE", targetID]).string == "OK")
            }
            #expect(try client.run(["XLEN", .text(keys.jobs)]).integer == 1)
            #expect(try client.owner(ofSlot: slot) == target, "MOVED updated the map")

            // The command line tools on the cluster: enqueue routes to the queue's master, stats
            // finds every queue on every master.
            let enqueue = try runHerald(["enqueue", "--lane", "bulk", "--redis", cluster.url, "--queue", Self.shards[3],
                                         "--token", WorkerHarness.deviceToken(1), "--payload", #"{"aps":{"alert":"hi"}}"#])
            #expect(enqueue.status == 0, "\(enqueue.stderr)")
            let stats = try runHerald(["stats", "--redis", cluster.firstNodeURL, "--redis-cluster", "--all-queues"])
            #expect(stats.status == 0, "\(stats.stderr)")
            for shard in Self.shards { #expect(stats.stdout.contains(shard), "stats lists \(shard): \(stats.stdout)") }
            let one = try runHerald(["stats", "--queue", Self.shards[3], "--json"], environment: ["HERALD_REDIS": cluster.url])
            #expect(one.status == 0, "\(one.stderr)")
            let document = try JSONSerialization.jsonObject(with: Data(one.stdout.utf8)) as? [String: Any]
            let queues = document?["queues"] as? [[String: Any]]
            #expect(queues?.first?["depth"] as? Int == 2, "\(one.stdout)")
            // dead-letters and feedback find the queue on its (new) master.
            let letters = try runHerald(["dead-letters", "list", "--redis", cluster.url, "--queue", Self.shards[0], "--json"])
            #expect(letters.status == 0, "\(letters.stderr)")
            #expect(letters.stdout.contains("\"total\":1") || letters.stdout.contains("\"total\": 1"), "\(letters.stdout)")
            let feedback = try runHerald(["feedback", "tail", "--redis", cluster.url, "--queue", Self.shards[4]])
            #expect(feedback.status == 0, "\(feedback.stderr)")
            // enqueue --shards on a cluster: each job to its shard's master (CRC-32 of the token),
            // and --wait-replicas waits on every master it wrote to.
            var before = 0
            for shard in Self.shards { before += Int(try client.run(["XLEN", .text(QueueKeys(queue: shard).jobs)]).integer ?? 0) }
            let sharded = try runHerald(["enqueue", "--lane", "bulk", "--redis", cluster.url, "--queue", "alerts", "--shards", "6", "--count", "60",
                                         "--distinct-tokens", "60", "--token", WorkerHarness.deviceToken(7), "--payload", "{}",
                                         "--wait-replicas", "1", "--wait-timeout", "5000"])
            #expect(sharded.status == 0, "\(sharded.stderr)")
            var after = 0
            var used = 0
            for shard in Self.shards {
                let length = Int(try client.run(["XLEN", .text(QueueKeys(queue: shard).jobs)]).integer ?? 0)
                after += length
                if length > 1 { used += 1 }
            }
            #expect(after - before == 60, "\(sharded.stdout)")
            #expect(used >= 3, "60 tokens spread over the shards: \(sharded.stdout)")
            // A plain redis:// URL without --redis-cluster at a cluster node fails clearly on a
            // queue another master serves (the node's MOVED is the message), never silently.
            let wrongNode = try #require(cluster.nodes.first { node in
                node.port != target.port && owners.contains { $0.port == node.port }
            })
            let plain = try runHerald(["enqueue", "--lane", "bulk", "--redis", "redis://127.0.0.1:\(wrongNode.port)", "--queue", Self.shards[0],
                                       "--token", WorkerHarness.deviceToken(2), "--payload", "{}"])
            #expect(plain.status != 0 && plain.stderr.contains("MOVED"), "\(plain.stderr)")
        }

        /// The worker's multi-key writes on a real cluster: the outcome batch (`MULTI`, XADD to
        /// :dead and :feedback, ZADD to :retry, XACK, XDEL, `EXEC`) and the retry-promotion Lua
        /// script run on the queue's master without CROSSSLOT; sent to another master, the
        /// batch is refused as a whole (MOVED for each command, EXECABORT for EXEC) and nothing
        /// of it is applied anywhere, so writing it again on the right master cannot apply it twice.
        @Test
        func outcomeBatchesTheRetryScriptAndTheTrimStayInTheQueueSlot() throws {
            let cluster = try RedisClusterFixture()
            defer { cluster.stop() }
            let keys = QueueKeys(queue: Self.shards[2])
            let client = try ClusterRedisClient(seeds: cluster.seeds)
            let owner = try client.owner(ofSlot: RedisClusterSlot.of(queue: keys.queue))
            let other = try #require(try client.masters().first { $0 != owner })
            // Two entries in the group's pending list, as a worker holds them.
            try client.run(["XGROUP", "CREATE", .text(keys.jobs), .text(keys.group), "0", "MKSTREAM"])
            for index in 0..<2 {
                try client.run(["XADD", .text(keys.jobs), "*", "token", .text(WorkerHarness.deviceToken(index)), "payload", "{}"])
            }
            let read = try client.run(["XREADGROUP", "GROUP", .text(keys.group), "c", "COUNT", "2", "STREAMS", .text(keys.jobs), ">"])
            let ids = (read.array?.first?.array?[1].array ?? []).compactMap { $0.array?.first?.string }.compactMap(StreamEntryID.init)
            #expect(ids.count == 2)
            let batch = OutcomeBatch(sequence: 1, entries: [
                EntryOutcome(entryID: ids[0], writes: [.deadLetter(DeadLetter.Draft(
                    fields: [("token", Array(WorkerHarness.deviceToken(0).utf8))], tokens: nil, reason: "bad_priority",
                    message: "test", status: 0, attempts: 0, failedAt: 1))]),
                EntryOutcome(entryID: ids[1], writes: [.feedback(FeedbackEntry.Draft(
                    token: WorkerHarness.deviceToken(1), topic: "com.example", reason: "Unregistered", timestamp: 1, job: ids[1].description))]),
            ])

            /// Sends the batch as the worker does (one pipeline on Herald's RedisConnection); EXEC's reply.
            func exec(on node: RedisClusterMap.Node) throws -> RedisReply {
                let loop = try EventLoop()
                let connection = RedisConnection(loop: loop, endpoint: RedisEndpoint(host: node.host, port: node.port))
                connection.connect()
                var result: RedisReply? = nil
                var timedOut = false
                batch.send(on: connection, keys: keys, maxLength: 1000) { answer in
                    if case .success(let reply) = answer { result = reply } else { result = .error("connection lost") }
                    loop.stop()
                }
                let timer = loop.schedule(afterMilliseconds: 5_000) { timedOut = true; loop.stop() }
                while result == nil && !timedOut { loop.run() }
                loop.cancel(timer)
                connection.close()
                return result ?? .error("no answer within 5 s")
            }

            // The wrong master: the whole transaction is discarded.
            let refused = try exec(on: other)
            guard case .error(let message) = refused else {
                Issue.record("EXEC on a master that does not own the slot answered \(refused)")
                return
            }
            #expect(message.hasPrefix("EXECABORT") || RedisClusterRedirect(errorMessage: message) != nil, "\(message)")
            #expect(try client.run(["XLEN", .text(keys.dead)]).integer == 0)
            #expect(try client.run(["XLEN", .text(keys.feedback)]).integer == 0)
            #expect(try client.run(["XLEN", .text(keys.jobs)]).integer == 2, "nothing acknowledged or deleted")

            // The right master: every command of the batch applied, no CROSSSLOT.
            let applied = try exec(on: owner)
            let replies = try #require(applied.array, "EXEC answered \(applied)")
            #expect(replies.count == 3 && !replies.contains { $0.isError }, "\(replies)")
            #expect(try client.run(["XLEN", .text(keys.dead)]).integer == 1)
            #expect(try client.run(["XLEN", .text(keys.feedback)]).integer == 1)
            #expect(try client.run(["XLEN", .text(keys.jobs)]).integer == 2, "acknowledged, not yet trimmed")

            // The trim script: one key of the slot, on its master; both entries were finished.
            let trimmed = try client.run(StreamTrim.command(stream: keys.jobs).map { .text($0) })
            #expect(trimmed.integer == 2, "\(trimmed)")
            #expect(try client.run(["XLEN", .text(keys.jobs)]).integer == 0)

            // The retry promotion script: two keys of the slot, on its master.
            try client.run(["ZADD", .text(keys.retry), "1", .text(#"["token","\#(WorkerHarness.deviceToken(5))","payload","{}"]"#)])
            let promoted = try client.run(["EVAL", .text(QueueScripts.promoteDueRetries), "2", .text(keys.retry), .text(keys.jobs),
                                           .text(String(Int64(Date().timeIntervalSince1970 * 1000))), "1000"])
            #expect(!promoted.isError, "\(promoted)")
            #expect(try client.run(["ZCARD", .text(keys.retry)]).integer == 0)
            #expect(try client.run(["XLEN", .text(keys.jobs)]).integer == 1)
        }

        @Test
        func workersFollowAMasterFailoverAndEveryJobIsCounted() async throws {
            signal(SIGPIPE, SIG_IGN)
            let cluster = try RedisClusterFixture()
            defer { cluster.stop() }
            // 20 ms answers and 20 streams per worker: about 2,000 notifications/s for all six shards,
            // so the kill lands while every queue still has a backlog. Tokens starting dd are dead.
            let emulator = try await EmulatorHost {
                $0.latencyMilliseconds = 20
                $0.unregisteredPrefix = "dd"
            }
            defer { emulator.shutdown() }
            // A blocking client's loop belongs to the thread that first turned it, and an async test
            // may resume on another thread after each await: a fresh client for each use.
            let seeds = cluster.seeds
            let owners = try Self.shards.map { try ClusterRedisClient(seeds: seeds).owner(ofSlot: RedisClusterSlot.of(queue: $0)) }
            #expect(Set(owners).count == 3, "shards spread over \(owners)")

            // Jobs carry their own apns-id, so the emulator can say how often each one arrived. One
            // job in 50 is malformed (priority 7: dead-lettered) and one in 50 has a dead token
            // (feedback): the outcome batches' MULTI writes :dead and :feedback with the XACK, all
            // in the queue's slot.
            var apnsIDs: [String] = []
            var malformed = 0
            var deadTokens = 0
            var enqueued: [String: Int] = [:]
            func enqueue(round: Int, perShard: Int) async throws {
                for shard in Self.shards {
                    var commands: [[RedisArgument]] = []
                    for index in 0..<perShard {
                        let number = apnsIDs.count + malformed + deadTokens
                        let id = String(format: "00000000-0000-4000-8000-%012x", number)
                        var fields: [RedisArgument] = ["XADD", .text(QueueKeys(queue: shard).jobs), "*",
                                                       "payload", .text(WorkerHarness.payload(index)), "id", .text(id)]
                        switch number % 50 {
                        case 0:
                            malformed += 1
                            fields += ["token", .text(WorkerHarness.deviceToken(number)), "priority", "7"]
                        case 1:
                            deadTokens += 1
                            fields += ["token", .text(WorkerHarness.deviceToken(number, prefix: "dd"))]
                        default:
                            apnsIDs.append(id)
                            fields += ["token", .text(WorkerHarness.deviceToken(number))]
                        }
                        commands.append(fields)
                    }
                    // WAIT 1 on the master's own connection: acknowledged writes are on its replica
                    // before the test counts them as enqueued. A master that just died is retried
                    // until the cluster has promoted its replica.
                    commands.append(["WAIT", "1", "5000"])
                    try await waitFor("\(shard) round \(round) enqueued and replicated", timeout: .seconds(60), interval: .milliseconds(200)) {
                        do {
                            let node = try BlockingRedisClient(endpoint: try ClusterRedisClient(seeds: seeds).endpoint(forQueue: shard))
                            let replies = try node.pipeline(commands)
                            return replies.dropLast().allSatisfy { !$0.isError } && (replies.last?.integer ?? 0) >= 1
                        } catch {
                            return false
                        }
                    }
                    enqueued[shard, default: 0] += perShard
                }
            }
            try await enqueue(round: 1, perShard: 1000)

            // Two worker processes, each reading all six shards, each shard's connections on the
            // master of its slot: one told by flags (`--redis redis+cluster://… --queue alerts
            // --shards 6`), one by a config file naming one node with `redis_cluster: true`.
            var workers: [WorkerProcess] = []
            defer { for worker in workers where worker.isRunning { worker.signal(SIGKILL) } }
            let common = ["--no-metrics", "--connections", "1", "--max-streams", "20", "--log-level", "info"] + emulator.workerArguments
            workers.append(try WorkerProcess(
                arguments: ["--redis", cluster.url, "--queue", "alerts", "--shards", "6", "--consumer", "cluster-0"] + common,
                logPath: emulator.directory.path("worker-0.log")))
            let configPath = emulator.directory.path("herald.yaml")
            try "redis: \(cluster.firstNodeURL)\nredis_cluster: true\nqueue: alerts\nshards: 6\n"
                .write(toFile: configPath, atomically: true, encoding: .utf8)
            workers.append(try WorkerProcess(
                arguments: ["--config", configPath, "--consumer", "cluster-1"] + common,
                logPath: emulator.directory.path("worker-1.log")))
            try await waitFor("the workers deliver", timeout: .seconds(60)) {
                try await emulator.statistics().acceptedUnique >= 600
            }

            // kill -9 the master of alerts-0 mid-run (its queue still has a backlog); its replica takes over.
            let victim = owners[0]
            let backlog = try BlockingRESP(port: victim.port)
            let waiting = try backlog.command(["XLEN", QueueKeys(queue: Self.shards[0]).jobs]).integer ?? 0
            backlog.close()
            #expect(waiting > 0, "the kill must land mid-run: \(Self.shards[0]) had \(waiting) entries left")
            cluster.kill(port: victim.port)
            try await waitFor("a replica is promoted and the cluster is ok", timeout: .seconds(60), interval: .milliseconds(200)) {
                cluster.healthProblem() == nil
            }
            let promoted = try cluster.masterPort(ofSlot: RedisClusterSlot.of(queue: Self.shards[0]))
            #expect(promoted != victim.port)
            // The operator brings the dead node back: it rejoins as the new master's replica, so
            // WAIT 1 can be met again for the failed-over shard.
            try cluster.restart(port: victim.port)
            try await waitFor("the old master rejoins as a replica", timeout: .seconds(60), interval: .milliseconds(200)) {
                cluster.healthProblem() == nil
            }

            // More jobs after the failover, to every shard (the failed-over one on its new master).
            try await enqueue(round: 2, perShard: 200)

            let total = apnsIDs.count
            var ledger = ""
            var dead = 0
            var feedback = 0
            let settled = try await waitFor("every job is delivered and every queue is empty", timeout: .seconds(120),
                                            interval: .milliseconds(250), failOnTimeout: false) {
                var lines: [String] = []
                var empty = true
                dead = 0
                feedback = 0
                for shard in Self.shards {
                    let keys = QueueKeys(queue: shard)
                    do {
                        let replies = try ClusterRedisClient(seeds: seeds).pipeline([["XLEN", .text(keys.jobs)], ["XPENDING", .text(keys.jobs), .text(keys.group)],
                                                           ["ZCARD", .text(keys.retry)], ["XLEN", .text(keys.dead)], ["XLEN", .text(keys.feedback)]])
                        let pending = replies[1].array?.first?.integer ?? -1
                        lines.append("\(shard): stream \(replies[0].integer ?? -1), pending \(pending), retry \(replies[2].integer ?? -1), "
                                     + "dead \(replies[3].integer ?? -1), feedback \(replies[4].integer ?? -1)")
                        if replies[0].integer != 0 || pending != 0 || replies[2].integer != 0 { empty = false }
                        dead += Int(replies[3].integer ?? 0)
                        feedback += Int(replies[4].integer ?? 0)
                    } catch {
                        lines.append("\(shard): \(error)")
                        empty = false
                    }
                }
                let statistics = try await emulator.statistics()
                ledger = "accepted unique \(statistics.acceptedUnique) of \(total), duplicates \(statistics.duplicates); " + lines.joined(separator: "; ")
                return empty && statistics.acceptedUnique >= total && dead >= malformed && feedback >= deadTokens
            }
            #expect(settled, "\(ledger)\n\(workers.map { "worker log:\n\($0.logTail(1500))" }.joined(separator: "\n"))\n\(cluster.logs())")

            // Every job exactly accounted for: each apns-id accepted at least once, none lost, no
            // dead letters or dead tokens (the emulator accepts every token); duplicates are only
            // what at-least-once allows around the failover (acknowledgements the dead master
            // had not yet replicated), and are reported.
            let counts = try await emulator.acceptedCounts(apnsIDs)
            let missing = counts.enumerated().filter { $0.element == 0 }.map { apnsIDs[$0.offset] }
            #expect(missing.isEmpty, "never delivered: \(missing.prefix(20)) (\(missing.count)); \(ledger)")
            let duplicates = counts.reduce(0) { $0 + max(0, $1 - 1) }
            let statistics = try await emulator.statistics()
            #expect(statistics.acceptedUnique == total)
            // Dead letters and dead tokens: each exactly once. A batch whose reply was lost with the
            // killed master is written again on the new one only for entries still pending there.
            #expect(dead == malformed, "dead letters \(dead) for \(malformed) malformed jobs")
            #expect(feedback == deadTokens, "feedback \(feedback) for \(deadTokens) dead tokens")
            print("cluster failover: \(total) good jobs (+\(malformed) malformed, \(deadTokens) dead tokens) on \(Self.shards.count) shards, killed master \(victim) (promoted \(promoted)); "
                  + "delivered \(statistics.acceptedUnique) unique, \(duplicates) duplicates (at least once), \(dead) dead letters, \(feedback) feedback entries")
            #expect(duplicates <= total, "duplicates must stay bounded by what was in flight: \(duplicates)")
            for worker in workers { #expect(worker.isRunning, "no worker crashed: \(worker.logTail(1500))") }
            // Both workers' alerts-0 connections went to the promoted replica (each new route is logged).
            for worker in workers {
                let log = worker.logTail(400_000)
                #expect(log.contains("queue routed to Redis Cluster node node=127.0.0.1:\(promoted)")
                            || log.contains("node=127.0.0.1:\(promoted) queue=alerts-0"),
                        "the worker followed the failover of alerts-0 to \(promoted): \(worker.logTail(3000))")
            }
        }

        @Test
        func workerFollowsItsQueueThroughASlotMigration() async throws {
            signal(SIGPIPE, SIG_IGN)
            let cluster = try RedisClusterFixture()
            defer { cluster.stop() }
            let emulator = try await EmulatorHost { $0.latencyMilliseconds = 20 }
            defer { emulator.shutdown() }
            let seeds = cluster.seeds
            let keys = QueueKeys(queue: Self.shards[1])
            let slot = RedisClusterSlot.of(queue: keys.queue)
            let source = try ClusterRedisClient(seeds: seeds).owner(ofSlot: slot)
            let target = try #require(try ClusterRedisClient(seeds: seeds).masters().first { $0 != source })
            let total = 2000
            var apnsIDs: [String] = []
            var commands: [[RedisArgument]] = []
            for number in 0..<total {
                let id = String(format: "00000000-0000-4000-9000-%012x", number)
                apnsIDs.append(id)
                commands.append(["XADD", .text(keys.jobs), "*", "token", .text(WorkerHarness.deviceToken(number)),
                                 "payload", .text(WorkerHarness.payload(number)), "id", .text(id)])
            }
            let added = try ClusterRedisClient(seeds: seeds).pipeline(commands)
            #expect(added.allSatisfy { !$0.isError })

            let worker = try WorkerProcess(
                arguments: ["--redis", cluster.firstNodeURL, "--redis-cluster", "--queue", keys.queue, "--no-metrics", "--connections", "1",
                            "--max-streams", "10", "--consumer", "migrating", "--log-level", "info"] + emulator.workerArguments,
                logPath: emulator.directory.path("worker.log"))
            defer { if worker.isRunning { worker.signal(SIGKILL) } }
            try await waitFor("the worker delivers", timeout: .seconds(60)) { try await emulator.statistics().acceptedUnique >= 200 }

            // Migrate the queue's slot as redis-cli --cluster reshard does: IMPORTING, MIGRATING,
            // MIGRATE the keys (the stream keeps its group and pending list; its leases go along), then NODE everywhere.
            let sourceNode = try BlockingRESP(port: source.port)
            let targetNode = try BlockingRESP(port: target.port)
            let sourceID = try #require(try sourceNode.command(["CLUSTER", "MYID"]).string)
            let targetID = try #require(try targetNode.command(["CLUSTER", "MYID"]).string)
            #expect(try targetNode.command(["CLUSTER", "SETSLOT", String(slot), "IMPORTING", sourceID]).string == "OK")
            #expect(try sourceNode.command(["CLUSTER", "SETSLOT", String(slot), "MIGRATING", targetID]).string == "OK")
            let present = try [keys.jobs, keys.urgentJobs, keys.leases, keys.urgentLane.leases, keys.retry, keys.dead, keys.feedback].filter {
                try sourceNode.command(["EXISTS", $0]).integer == 1
            }
            let migrated = try sourceNode.command(["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS"] + present)
            #expect(migrated.string == "OK", "MIGRATE: \(migrated)")
            sourceNode.close()
            targetNode.close()
            // Mid-migration the source answers ASK (or TRYAGAIN): the worker waits for the move to end.
            try await waitFor("the worker meets the migration", timeout: .seconds(30)) {
                worker.logTail(200_000).contains("Redis Cluster redirect")
            }
            for node in try ClusterRedisClient(seeds: seeds).masters() {
                let connection = try BlockingRESP(port: node.port)
                defer { connection.close() }
                #expect(try connection.command(["CLUSTER", "SETSLOT", String(slot), "NODE", targetID]).string == "OK")
            }

            var last = ""
            let settled = try await waitFor("every job is delivered from the slot's new master", timeout: .seconds(120),
                                            interval: .milliseconds(250), failOnTimeout: false) {
                let node = try BlockingRESP(port: target.port)
                defer { node.close() }
                let length = try node.command(["XLEN", keys.jobs]).integer ?? -1
                let pending = try node.command(["XPENDING", keys.jobs, keys.group]).array?.first?.integer ?? -1
                let retry = try node.command(["ZCARD", keys.retry]).integer ?? -1
                let statistics = try await emulator.statistics()
                last = "stream \(length), pending \(pending), retry \(retry), accepted unique \(statistics.acceptedUnique) of \(total)"
                return length == 0 && pending == 0 && retry == 0 && statistics.acceptedUnique >= total
            }
            #expect(settled, "\(last)\n\(worker.logTail(4000))")
            let counts = try await emulator.acceptedCounts(apnsIDs)
            #expect(counts.allSatisfy { $0 >= 1 }, "never delivered: \(counts.filter { $0 == 0 }.count)")
            let duplicates = counts.reduce(0) { $0 + max(0, $1 - 1) }
            let log = worker.logTail(400_000)
            // Mid-migration the worker met ASK (a read), or EXECABORT (a batch whose MULTI held an
            // ASK), or TRYAGAIN; it then reached the new master either by MOVED or by the map it
            // re-read (both happen, depending on when the slot's final owner was set).
            #expect(["reply=ASK \(slot)", "reply=EXECABORT", "reply=TRYAGAIN"].contains { log.contains($0) },
                    "the worker met the migration: \(worker.logTail(3000))")
            #expect(log.contains("queue routed to Redis Cluster node consumer=migrating-0 node=127.0.0.1:\(target.port)"),
                    "the worker went to the new master: \(worker.logTail(3000))")
            #expect(worker.isRunning)
            print("slot migration: \(total) jobs delivered, \(duplicates) duplicates")
        }

        @Test
        func loadgenDrivesShardsOnAnAttachedCluster() throws {
            let cluster = try RedisClusterFixture()
            defer { cluster.stop() }
            let runner = LoadGenRunTests()
            let (report, _, output) = try runner.loadgen(["--redis", cluster.url, "--queue", "alerts", "--shards", "6",
                                                          "--notifications", "6000", "--tokens", "600", "--workers", "2"])
            let outcomes = report["outcomes"] as? [String: Any]
            #expect(runner.int(outcomes, "accepted") == 6000, "\(output)")
            #expect(runner.int(outcomes, "lost") == 0 && runner.int(outcomes, "duplicated") == 0, "\(output)")
            let queues = try #require(report["queues"] as? [[String: Any]], "a row per shard: \(output)")
            #expect(queues.compactMap { runner.int($0, "notifications") }.reduce(0, +) == 6000, "\(queues)")
            // The shards really sit on three masters, and each master got its shards' jobs.
            let client = try ClusterRedisClient(seeds: cluster.seeds)
            let owners = try Self.shards.map { try client.owner(ofSlot: RedisClusterSlot.of(queue: $0)) }
            #expect(Set(owners).count == 3)
            #expect(output.contains("attached Redis Cluster"), "\(output)")
        }

        /// `--redis-cluster` against a Redis that is not a cluster node: the tools stop with a
        /// message that says what to do; the worker says so, keeps retrying with backoff (no
        /// spin, no crash) and is not ready.
        @Test
        func aPlainRedisGivenAsAClusterIsRefusedClearly() async throws {
            let server = try RedisServer()
            defer { server.stop() }
            let stats = try runHerald(["stats", "--redis", server.url, "--redis-cluster"])
            #expect(stats.status != 0)
            #expect(stats.stderr.contains("not a Redis Cluster node") && stats.stderr.contains("without --redis-cluster"), "\(stats.stderr)")
            let emulator = try await EmulatorHost()
            defer { emulator.shutdown() }
            let worker = try WorkerProcess(arguments: ["--redis", server.url, "--redis-cluster", "--metrics-port", "0", "--log-level", "debug"]
                                                + emulator.workerArguments,
                                           logPath: emulator.directory.path("worker.log"))
            defer { if worker.isRunning { worker.signal(SIGKILL) } }
            try await waitFor("the worker says the Redis is no cluster", timeout: .seconds(30)) {
                worker.logTail().contains("cluster support disabled")
            }
            let port = try #require(worker.logTail().split(separator: "\n").first { $0.hasPrefix("metrics on ") }.flatMap { Int($0.dropFirst("metrics on ".count)) })
            #expect(try OperationsHTTP(port: port).status("/readyz") == 503)
            #expect(worker.isRunning)
            // Backoff, not a spin: by the time three attempts failed (1 s and 2 s apart, with
            // jitter), a spinning worker would have logged hundreds.
            func attempts() -> Int { worker.logTail(400_000).components(separatedBy: "cluster support disabled").count - 1 }
            try await waitFor("three attempts", timeout: .seconds(30)) { attempts() >= 3 }
            #expect(attempts() < 10, "\(attempts()) attempts: \(worker.logTail(2000))")
            #expect(worker.isRunning)
        }

        /// Runs the herald binary to its end; no HERALD_* settings from the developer's shell.
        func runHerald(_ arguments: [String], environment extra: [String: String] = [:]) throws -> (status: Int32, stdout: String, stderr: String) {
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: try WorkerHarness.heraldBinary())
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
            for (name, value) in extra { environment[name] = value }
            process.environment = environment
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
    }
}
