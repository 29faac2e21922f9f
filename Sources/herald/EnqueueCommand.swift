import APNs
import ArgumentParser
import Logging
import Queue
import Transport

struct EnqueueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Add jobs to a queue, validated first (one, or --count N copies for trials).",
        discussion: """
            A job is one stream entry of flat fields; any Redis client can add one (see docs/job-format.md). \
            This command checks the job first and says what is wrong instead of adding it (exit 65). \
            It takes the same notification flags as `herald send`; --field adds fields of your own \
            (user_id, campaign, …), which Herald carries into retries and dead letters. Prints the \
            entry id (one job) or a count. Exits 69 when Redis cannot be reached. \
            With --shards N each job goes to the shard QUEUE-K where K is the CRC-32 of its lowercase \
            hex device token mod N (as producers compute it, docs/job-format.md); a fan-out job (several \
            tokens) is split into one job per shard its tokens fall in. \
            Jobs go to the queue's urgent stream (herald:{QUEUE}:jobs:urgent, read first by the worker) \
            when they are alert or voip notifications at priority 10 (given or left out), else to the bulk \
            stream (herald:{QUEUE}:jobs); --lane overrides. \
            --at holds the job until a time (job field deliver_at): RFC 3339 (2026-11-24T09:00:00Z, \
            2026-11-24T10:00:00+01:00), ms since the epoch, or +DURATION from now (+90s, +10m, +2h, +1d).
            """)

    @OptionGroup(title: "Redis") var queueOptions: QueueOptions
    @OptionGroup(title: "Notification") var notification: NotificationOptions
    @Option(name: .customLong("field"), help: "A field of your own, NAME=VALUE (repeatable); not one of Herald's field names.")
    var customFields: [String] = []
    @Option(name: .customLong("at"), help: ArgumentHelp("Send no earlier than TIME (job field deliver_at): RFC 3339 (2026-11-24T09:00:00Z), ms since the epoch, or +DURATION from now (+10m, +2h, +1d12h); the worker holds the job until then (default: send at once).", valueName: "time"))
    var deliverAt: String?
    @Option(name: .customLong("distinct-tokens"), help: "With --count and one --token: vary the token's last 8 hex digits so copies go to this many distinct tokens (default: all to the one token).")
    var distinctTokens: Int?
    @Option(name: .customLong("lane"), help: "The stream to add to: urgent (herald:{QUEUE}:jobs:urgent), bulk (herald:{QUEUE}:jobs) or auto: urgent for alert and voip at priority 10, given or left out (default auto).")
    var lane: String = "auto"
    @Option(name: .customLong("wait-replicas"), help: "After adding, wait until this many replicas hold the jobs (Redis WAIT), so that a failover cannot lose them; exits 1 when fewer confirm in time, the jobs being added all the same (default 0: do not wait).") var waitReplicas: Int?
    @Option(name: .customLong("wait-timeout"), help: "Milliseconds --wait-replicas waits for the replicas, 1 to 60000 (default 1000).") var waitTimeout: Int?

    /// Names a --field may not take: the job fields the flags set, Herald's own bookkeeping, and
    /// what a dead letter adds.
    static let reservedFieldNames: Set<String> = Set([
        JobField.token, JobField.tokens, JobField.payload, JobField.topic, JobField.pushType, JobField.priority,
        JobField.expiration, JobField.collapseID, JobField.id, JobField.app, JobField.channelID, JobLane.field, JobField.deliverAt, JobField.scheduled,
    ]).union(JobField.herald).union(DeadLetter.droppedOnRequeue)

    func validate() throws {
        if let distinctTokens {
            guard distinctTokens >= 1 else { throw ValidationError("--distinct-tokens must be at least 1") }
            guard notification.tokens.count == 1 else { throw ValidationError("--distinct-tokens varies one --token; give exactly one") }
        }
        _ = try extraFields()
        guard lane == "auto" || JobLane(rawValue: lane) != nil else {
            throw ValidationError("--lane takes urgent, bulk or auto, not \(lane)")
        }
        _ = try deliverAtValue(now: 0)
    }

    /// The lane the jobs go to: --lane, or by push type and priority.
    func chosenLane() -> JobLane {
        JobLane(rawValue: lane) ?? JobLane.route(pushType: notification.pushType.rawValue, priority: notification.priority.map { String($0.rawValue) })
    }

    /// --at as the job's `deliver_at`: an absolute time as given (checked), `+DURATION` as ms from `now`.
    func deliverAtValue(now: Int64) throws -> String? {
        guard let text = deliverAt else { return nil }
        if text.hasPrefix("+") {
            guard let offset = DurationText.milliseconds(String(text.dropFirst())), offset <= JobLimits.maxTimestampMilliseconds else {
                throw ValidationError("--at \(text): after + give a duration such as +90s, +10m, +2h or +1d12h")
            }
            return String(min(JobLimits.maxTimestampMilliseconds, now + offset))
        }
        guard DeliverAt.parse(text) != nil else {
            throw ValidationError("--at \(text) is not a time: give RFC 3339 (2026-11-24T09:00:00Z or 2026-11-24T10:00:00+01:00), "
                + "ms since the epoch (1795510800000), or +DURATION from now (+10m)")
        }
        return text
    }

    /// The --field pairs, checked.
    func extraFields() throws -> [(name: String, value: String)] {
        try customFields.map { argument in
            guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
                throw ValidationError("--field takes NAME=VALUE, e.g. --field user_id=42; got \(argument)")
            }
            let name = String(argument[..<equals])
            guard !EnqueueCommand.reservedFieldNames.contains(name) else {
                throw ValidationError("--field \(name)=… is a field Herald reads or writes itself; use its own flag (see --help) or another name")
            }
            return (name, String(argument[argument.index(after: equals)...]))
        }
    }

    /// The job's fields, in the order the flags are listed.
    func fields() throws -> [(name: String, value: [UInt8])] {
        var fields: [(name: String, value: [UInt8])] = []
        func add(_ name: String, _ value: String?) { if let value { fields.append((name, Array(value.utf8))) } }
        let tokens = notification.tokens
        if let channelID = notification.channelID {
            add(JobField.channelID, channelID)
        } else if tokens.count == 1 {
            add(JobField.token, tokens[0])
        } else {
            add(JobField.tokens, tokens.joined(separator: ","))
        }
        add(JobField.payload, notification.payload)
        add(JobField.topic, notification.resolvedTopic(environmentBundleID: nil))
        if notification.pushType != .alert, notification.channelID == nil { add(JobField.pushType, notification.pushType.rawValue) }
        add(JobField.priority, notification.priority.map { String($0.rawValue) })
        add(JobField.expiration, notification.expiration.map { String($0) })
        add(JobField.collapseID, notification.collapseID)
        add(JobField.id, notification.apnsID)
        add(JobField.app, notification.app)
        add(JobField.deliverAt, try deliverAtValue(now: TimeSource.system.nowMilliseconds()))
        for (name, value) in try extraFields() { add(name, value) }
        return fields
    }

    func run() throws {
        let fields = try fields()
        // Validate as the worker will (`EnqueueCheck`, shared with `herald api`).
        if let problem = EnqueueCheck.problems(fields).first {
            throw CommandFailure.badJobData("not enqueued (\(problem.code)): \(problem.description)")
        }
        let replicas = waitReplicas ?? 0
        let waitMilliseconds = waitTimeout ?? 1000
        guard (0...100).contains(replicas) else { throw ValidationError("--wait-replicas must be 0 to 100, not \(replicas)") }
        guard (1...60_000).contains(waitMilliseconds) else { throw ValidationError("--wait-timeout must be 1 to 60000 ms, not \(waitMilliseconds)") }
        if queueOptions.queues != nil || environmentValue("QUEUES") != nil {
            throw ValidationError("herald enqueue adds to one queue (--queue) or to shards (--shards N), not to a --queues list")
        }
        let queues = try queueOptions.queueKeys()
        let sharded = try (queueOptions.shards ?? intEnvironment("SHARDS")) != nil
        let keys = queues[0]
        let count = notification.count
        let loop = try EventLoop()
        // On a Redis Cluster each queue's XADDs go straight to the master of its slot; shards on
        // one master share a connection. With Sentinel, to the master the sentinels name.
        var shardConnections: [RedisConnection] = []
        let connection: RedisConnection
        if try queueOptions.isCluster() {
            let cluster = try ClusterRedisClient(seeds: queueOptions.clusterSeeds())
            var byNode: [String: RedisConnection] = [:]
            for queue in queues {
                let endpoint = try cluster.endpoint(forQueue: queue.queue)
                let node = "\(endpoint.host):\(endpoint.port)"
                let shardConnection = byNode[node] ?? RedisConnection(loop: loop, endpoint: endpoint)
                byNode[node] = shardConnection
                shardConnections.append(shardConnection)
            }
            connection = shardConnections[0]
        } else {
            let (configured, sentinel) = try CommandFailure.configuring { try queueOptions.target() }
            var endpoint = configured
            if let sentinel {
                let resolver = RedisSentinelResolver(loop: loop, configuration: sentinel, base: configured)
                switch resolver.resolveTurningLoop() {
                case .success(let master): endpoint = master
                case .failure(let error): throw CommandFailure.unavailable(QueueToolError.masterNotFound(sentinel, error).description)
                case nil: throw ExitCode(130)
                }
            }
            connection = RedisConnection(loop: loop, endpoint: endpoint)
        }
        // A fan-out job is split by shard: each shard's worker gets the tokens that hash to it.
        let jobs = sharded ? EnqueueCommand.splitByShard(fields, shards: queues.count) : [fields]
        let enqueue: Enqueuer
        if jobs.count == 1 {
            enqueue = Enqueuer(loop: loop, connection: connection, keys: keys, fields: jobs[0], count: count,
                               baseToken: notification.tokens.first, distinctTokens: distinctTokens)
        } else {
            enqueue = Enqueuer(loop: loop, connection: connection, keys: keys, count: count * jobs.count) { index, _ in jobs[index % jobs.count] }
        }
        let jobLane = chosenLane()
        enqueue.lane = jobLane
        if sharded { enqueue.shards = queues }
        if sharded && shardConnections.count > 1 { enqueue.shardConnections = shardConnections }
        connection.delegate = enqueue
        connection.connect()
        for other in shardConnections where other !== connection {
            other.delegate = enqueue
            other.connect()
        }
        let started = EventLoop.monotonicMilliseconds()
        loop.run()
        if let failure = enqueue.failure { throw CommandFailure.redis(failure) }
        let elapsed = max(1, EventLoop.monotonicMilliseconds() - started)
        if sharded {
            let counts = zip(queues, enqueue.addedPerShard).filter { $0.1 > 0 }.map { "\($0.0.queue) \($0.1)" }
            if enqueue.added == 1, let first = enqueue.firstID {
                print("\(first) \(counts.first?.split(separator: " ").first ?? "")")
            } else {
                print("enqueued \(enqueue.added) jobs to \(queues.count) shards in \(formatSeconds(Double(elapsed) / 1000)) s: \(counts.joined(separator: ", "))")
            }
        } else if count == 1, let first = enqueue.firstID {
            print(first)
        } else {
            print("enqueued \(enqueue.added) jobs to \(jobLane.stream(keys)) in \(formatSeconds(Double(elapsed) / 1000)) s")
        }
        if replicas > 0 {
            // WAIT covers the writes of its own connection: on a cluster, one per master written to.
            var waited: [RedisConnection] = []
            for target in [connection] + shardConnections where !waited.contains(where: { $0 === target }) {
                waited.append(target)
                try EnqueueCommand.waitForReplicas(replicas, milliseconds: waitMilliseconds, connection: target, loop: loop, added: enqueue.added)
            }
        }
    }

    /// `WAIT replicas milliseconds` after the XADDs: Redis answers how many replicas acknowledged
    /// every write of this connection so far. Fewer than asked is an error after the fact (the
    /// jobs are in the master's stream): a failover before the replicas catch up could lose them.
    static func waitForReplicas(_ replicas: Int, milliseconds: Int, connection: RedisConnection, loop: EventLoop, added: Int) throws {
        var answer: Result<RedisReply, RedisError>? = nil
        connection.send(["WAIT", String(replicas), String(milliseconds)]) { result in
            answer = result
            loop.stop()
        }
        while answer == nil { loop.run() }
        switch answer {
        case .success(.integer(let confirmed)) where confirmed >= replicas:
            return
        case .success(.integer(let confirmed)):
            throw CommandFailure(status: .failure, description: "\(added) jobs were added, but only \(confirmed) of \(replicas) replicas confirmed them within "
                + "\(milliseconds) ms: until they do, a failover can lose them. Check the replicas (INFO replication on the master) "
                + "or raise --wait-timeout.")
        case .success(.error(let message)):
            throw CommandFailure(status: .failure, description: "\(added) jobs were added, but Redis refused WAIT: \(message)")
        case .success(let other):
            throw CommandFailure(status: .failure, description: "\(added) jobs were added, but WAIT answered \(other)")
        case .failure(let error):
            throw CommandFailure(status: .failure, description: "\(added) jobs were added, but the connection failed during WAIT: \(error)")
        case nil:
            throw ExitCode(130)
        }
    }

    /// A job's fields once per shard its tokens fall in: a `tokens` fan-out becomes one job per
    /// shard holding that shard's tokens (in their order); any other job stays whole.
    static func splitByShard(_ fields: [(name: String, value: [UInt8])], shards: Int) -> [[(name: String, value: [UInt8])]] {
        guard shards > 1, let position = fields.firstIndex(where: { $0.name == JobField.tokens }) else { return [fields] }
        let tokens = fields[position].value.split(separator: UInt8(ascii: ",")).map { String(decoding: $0, as: UTF8.self).filter { $0 != " " } }
        var byShard: [Int: [String]] = [:]
        var order: [Int] = []
        for token in tokens where !token.isEmpty {
            let shard = QueueShards.shard(token: token, shards: shards)
            if byShard[shard] == nil { order.append(shard) }
            byShard[shard, default: []].append(token)
        }
        return order.map { shard in
            var copy = fields
            copy[position].value = Array(byShard[shard]!.joined(separator: ",").utf8)
            return copy
        }
    }
}
