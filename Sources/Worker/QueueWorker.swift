import APNs
import Logging
import Observability
import Queue
import Transport

/// Herald's Redis consumer on one event loop: it reads jobs from one or more Redis streams (the
/// worker's queues) in batches, feeds them to `DeliveryRules`, hands the notifications the rules
/// pick to each app's `ConnectionPool`, and writes the batches of outcomes the rules produce.
///
/// Only the I/O lives here: each queue's Redis connection pair and its reconnects, its consumer
/// group, XREADGROUP (the pending list first), XAUTOCLAIM and XPENDING, the MULTI/EXEC of each
/// batch, and the timers (retry promotion, claims, pauses, drain). Every decision about a job
/// (collapse, expiry, resend, retry, dead letter, feedback, hand-back, what to acknowledge when)
/// is made by `DeliveryRules`, which has no sockets and is tested on its own with random event
/// sequences. The reader never asks for more entries than the pools have free stream slots plus a
/// small read-ahead, so a backlog of millions costs no memory here. Loop-confined.
///
/// Several queues (`--queues`, `--shards`): every queue has its own `QueueChannel` (connections,
/// group, cursors), and no Redis command ever names keys of two queues, so each queue may live on
/// a different Redis node (`endpointForQueue` says where). Their jobs share the apps' lanes and
/// pools; reads share the free slots fairly: each queue reads at most its share of them per
/// read, and the queues are offered reads in turn, so a queue with a large backlog delays another
/// by at most one share of the read-ahead.
public final class QueueWorker: ConnectionPoolDelegate, RedisConnectionDelegate, TickObserver {
    public let loop: EventLoop
    public let configuration: WorkerConfiguration
    /// One lane per app: its pool (own team/key or certificate, own connections) and its defaults.
    public let lanes: [AppLane]
    /// The first app's pool (the only one in a single-app worker).
    public var pool: ConnectionPool { lanes[0].pool }
    /// One channel per queue, in `configuration.queues` order (a job's queue index is its position).
    let channels: [QueueChannel]
    /// Where each queue's Redis connections go, asked at every (re)connect of that queue. Every
    /// queue goes to the worker's one Redis unless replaced (before `start`), e.g. by a router that
    /// knows which Redis Cluster node owns the queue's `{queue}` hash slot.
    public var endpointForQueue: (QueueKeys) -> RedisEndpoint
    /// Set with `--sentinel`: every (re)connect of a queue asks it where the master is now (then
    /// `endpointForQueue` is not asked). One resolution at a time serves every queue waiting.
    private let sentinel: RedisSentinelResolver?
    /// Set on a Redis Cluster (before `start`): each queue's connections go to the master of its
    /// slot, asked of the router at every (re)connect; `endpointForQueue` is then unused.
    public var cluster: RedisClusterRouter?
    private var resolving = false
    private var awaitingMaster: [QueueChannel] = []
    /// `+switch-master` announcements: when the last was checked (loop time, ms), a check under
    /// way, and one postponed to a second after the last.
    private var lastSwitchCheckAt: Int64?
    private var checkingSwitch = false
    private var switchCheckTimer: EventLoop.TimerID?
    private let time: TimeSource
    private var logger: Logger
    /// The delivery rules: every job's state and outcome.
    public let rules: DeliveryRules

    /// What this loop did: the rules' counts, and the Redis errors seen here.
    public var counters: WorkerCounters {
        var counters = rules.counters
        counters.redisErrors = channels.reduce(0) { $0 + $1.redisErrors }
        counters.consumersRemoved = channels.reduce(0) { $0 + $1.consumersRemoved }
        return counters
    }

    /// What this loop did per queue, in `configuration.queues` order.
    public var queueCounters: [WorkerCounters] {
        var all = rules.queueCounters
        for index in all.indices {
            all[index].redisErrors = channels[index].redisErrors
            all[index].consumersRemoved = channels[index].consumersRemoved
        }
        // A queue's urgent lane counts as part of its queue.
        let queues = configuration.queues.count
        guard all.count > queues else { return all }
        for index in queues..<all.count { all[index - queues] = all[index - queues] + all[index] }
        return Array(all.prefix(queues))
    }

    /// What this loop did per queue and lane: `[queue][0]` the bulk stream, `[queue][1]` the
    /// urgent one (absent with `urgentLanes` off).
    public var laneCounters: [[WorkerCounters]] {
        let all = rules.queueCounters
        let queues = configuration.queues.count
        return (0..<queues).map { index in all.count > queues ? [all[index], all[index + queues]] : [all[index]] }
    }

    /// Called once when the worker has stopped (drained, or timed out draining).
    public var onStopped: (() -> Void)?

    private var retryTimer: EventLoop.TimerID?
    private var claimTimer: EventLoop.TimerID?
    private var idleConsumerTimer: EventLoop.TimerID?
    private var pauseTimer: EventLoop.TimerID?
    private var pauseFailures = 0
    private var batchScheduled = false
    /// The queue offered the next read first: turns rotate so none is always served last.
    private var nextReadQueue = 0
    /// Names this worker's leases (`StreamLease`): random per process and loop, so a restarted
    /// worker with the same consumer name tells its leases from its predecessor's.
    let leaseInstance: String
    var leaseSequence: UInt64 = 0
    private var random = SystemRandomNumberGenerator()
    /// Read once: the per-notification path tests a Bool, not the logger.
    private lazy var traceNotifications = logger.logLevel <= .trace
    private var wallClock: Int64 = 0
    private var wallClockStampedAt: Int64 = -1

    enum Phase { case starting, running, draining, stopped }
    private(set) var phase = Phase.starting
    private var drainTimer: EventLoop.TimerID?
    /// Set when APNs refused every app's credentials: nothing is read.
    public var stoppedSendingReason: String? {
        lanes.allSatisfy { $0.stoppedReason != nil } ? lanes[0].stoppedReason : nil
    }

    /// A single-app worker: jobs without an `app` field (or `app` = `default`) use `pool`.
    public convenience init(loop: EventLoop, configuration: WorkerConfiguration, pool: ConnectionPool, redis: RedisEndpoint,
                            sentinel: SentinelConfiguration? = nil, time: TimeSource = .system, logger: Logger) {
        self.init(loop: loop, configuration: configuration,
                  apps: [WorkerApp(name: WorkerApp.defaultName, pool: pool, defaults: configuration.defaults)],
                  redis: redis, sentinel: sentinel, time: time, logger: logger)
    }

    /// A worker for several apps; a job names its app with the `app` field (default `default`).
    /// With `sentinel`, `redis` gives only the credentials and database: the master's address
    /// comes from the sentinels, again after every connection loss and failover.
    public init(loop: EventLoop, configuration: WorkerConfiguration, apps: [WorkerApp], redis: RedisEndpoint,
                sentinel: SentinelConfiguration? = nil, time: TimeSource = .system, logger: Logger) {
        precondition(!apps.isEmpty, "a worker needs at least one app")
        precondition(!configuration.queues.isEmpty, "a worker needs at least one queue")
        self.loop = loop
        self.configuration = configuration
        // An app with both APNs environments gets a second lane after every app's own: its
        // sandbox pool, which no job names (see DeliveryRules+Environments). An app with a
        // broadcast host gets a lane for its broadcast pool too, which no job names either: the
        // app's broadcast jobs wait there (see DeliveryRules+Broadcast).
        var appLanes = apps.map { AppLane(app: $0, queue: configuration.keys.queue) }
        func twins(_ pool: (WorkerApp) -> ConnectionPool?, suffix: String) -> [Int: Int] {
            var twins: [Int: Int] = [:]
            for (index, app) in apps.enumerated() {
                guard let twinPool = pool(app) else { continue }
                twins[index] = appLanes.count
                appLanes.append(AppLane(app: WorkerApp(name: app.name + suffix, pool: twinPool, defaults: app.defaults),
                                        queue: configuration.keys.queue))
            }
            return twins
        }
        let sandboxTwins = twins(\.sandboxPool, suffix: WorkerApp.sandboxSuffix)
        let broadcastTwins = twins(\.broadcastPool, suffix: WorkerApp.broadcastSuffix)
        lanes = appLanes
        endpointForQueue = { _ in redis }
        self.sentinel = sentinel.map { RedisSentinelResolver(loop: loop, configuration: $0, base: redis) }
        self.time = time
        self.logger = logger
        self.logger[metadataKey: "consumer"] = "\(configuration.consumer)"
        if configuration.queues.count == 1 {
            self.logger[metadataKey: "queue"] = "\(configuration.keys.queue)"
        }
        // The bulk streams first (a job's queue index is its queue's position), then, with urgent
        // lanes, each queue's urgent stream at index `queues.count + position`.
        let streams = configuration.queues + (configuration.urgentLanes ? configuration.queues.map(\.urgentLane) : [])
        channels = streams.enumerated().map { index, keys in
            var channelLogger = logger
            channelLogger[metadataKey: "consumer"] = "\(configuration.consumer)"
            channelLogger[metadataKey: "queue"] = "\(keys.queue)"
            if keys.isUrgentLane { channelLogger[metadataKey: "lane"] = "urgent" }
            let channel = QueueChannel(index: index, keys: keys, logger: channelLogger)
            // An urgent stream takes its three quarters of the reads only once a read brought
            // urgent jobs: until then the bulk stream reads its whole share, so the first read of
            // a bulk backlog is as large as without lanes (and its collapse ids meet in one batch).
            if keys.isUrgentLane { channel.active = false }
            return channel
        }
        var seed = SystemRandomNumberGenerator()
        leaseInstance = String(seed.next() as UInt64, radix: 16)
        rules = DeliveryRules(policy: DeliveryPolicy(configuration),
                              apps: lanes.map { ($0.name, $0.defaults) }, queues: streams.map(\.queue), seed: seed.next(),
                              sandboxTwins: sandboxTwins, broadcastTwins: broadcastTwins)
        rules.urgentQueues = streams.map(\.isUrgentLane)
        rules.resultsByQueue = streams.map { configuration.results.includes($0.queue) }
        for lane in lanes {
            lane.pool.delegate = self
            lane.pool.prefetcher = rules
        }
    }

    // MARK: lifecycle

    /// Connects to Redis and APNs and starts reading. Loop thread only.
    public func start() {
        phase = .running
        for lane in lanes { lane.pool.start() }
        sentinel?.watch(logger: { [weak self] message in self?.logger.warning("\(message)") }) { [weak self] master in
            self?.masterSwitched(to: master)
        }
        for channel in channels { connectRedis(channel) }
        scheduleRetryPromotion()
        scheduleClaim()
        scheduleIdleConsumerRemoval()
    }

    /// Stops reading, lets in-flight notifications finish within the drain timeout, acknowledges
    /// what finished, hands back what was never sent, then calls `onStopped`.
    public func drain() {
        guard phase == .running || phase == .starting else { return }
        phase = .draining
        logger.info("draining", metadata: ["in_flight": "\(inFlight)", "queued": "\(rules.queuedTokens)"])
        if let retryTimer { loop.cancel(retryTimer) }
        if let claimTimer { loop.cancel(claimTimer) }
        if let idleConsumerTimer { loop.cancel(idleConsumerTimer) }
        if let pauseTimer { loop.cancel(pauseTimer) }
        let handedBack = rules.drain(now: wallNow())
        if handedBack > 0 { logger.info("handed back unsent notifications", metadata: ["count": "\(handedBack)"]) }
        scheduleBatch()
        drainTimer = loop.schedule(afterMilliseconds: configuration.drainTimeoutMilliseconds) { [weak self] in
            guard let self, self.phase == .draining else { return }
            self.logger.warning("drain timeout: unfinished notifications stay pending for other workers",
                                metadata: ["in_flight": "\(self.inFlight)"])
            self.finishStopping()
        }
        checkDrained()
    }

    func checkDrained() {
        guard phase == .draining else { return }
        if inFlight == 0 && rules.writesSettled {
            // The last trims first, so a stopped worker leaves no finished entry behind.
            trimNow { [weak self] in self?.finishStopping() }
        }
    }

    private func finishStopping() {
        guard phase != .stopped else { return }
        phase = .stopped
        if let drainTimer { loop.cancel(drainTimer) }
        if let switchCheckTimer { loop.cancel(switchCheckTimer) }
        sentinel?.stopWatching()
        for lane in lanes { lane.pool.stop() }
        for channel in channels { channel.close(loop: loop) }
        logger.info("stopped", metadata: ["accepted": "\(rules.counters.accepted)", "jobs_finished": "\(rules.counters.jobsFinished)"])
        onStopped?()
    }

    /// Redis reachable for every queue, every group in place, reading (not starting, draining or
    /// stopped, and Redis not refusing a queue's reads: NOPERM, WRONGTYPE).
    public var isReady: Bool {
        phase == .running && channels.allSatisfy(\.isReady) && haltedApps.isEmpty
    }

    /// Queues whose Redis connection or consumer group is not ready, or whose reads Redis
    /// refuses (for /readyz's reason).
    public var unreadyQueues: [String] {
        channels.filter { !$0.isReady }.map { $0.keys.isUrgentLane ? $0.keys.queue + " (urgent lane)" : $0.keys.queue }
    }

    /// The index (for `sampleQueue`) of queue `index`'s urgent stream, nil with urgent lanes off.
    public func urgentStreamIndex(ofQueue index: Int) -> Int? {
        configuration.urgentLanes ? configuration.queues.count + index : nil
    }

    /// Apps whose credentials APNs refused (their pools probe again by themselves).
    public var haltedApps: [String] { lanes.filter { $0.stoppedReason != nil }.map(\.name) }

    /// Reads the first queue's depth, pending entries, lag and the sizes of the other keys (one pipeline).
    public func sampleQueue(_ completion: @escaping (QueueSample?) -> Void) {
        sampleQueue(0, completion)
    }

    /// Reads queue `index`'s depth, pending entries, lag and the sizes of its other keys (one
    /// pipeline on that queue's connection).
    public func sampleQueue(_ index: Int, _ completion: @escaping (QueueSample?) -> Void) {
        guard let writer = channels[index].writer, writer.isReady else { completion(nil); return }
        let keys = channels[index].keys
        var sample = QueueSample()
        var reportedLag: Int64?
        // Sent when Redis reports no lag: its answer comes last, and completes the sample.
        var caughtUpCheckSent = false
        var feedbackAnswered = false
        writer.send(["XLEN", keys.jobs]) { result in sample.depth = Int(result.integerValue ?? 0) }
        writer.send(["XINFO", "GROUPS", keys.jobs]) { result in
            // Read as `herald stats` reads it (QueueInspector), minus what a gauge does not need.
            guard case .success(.array(let groups)) = result,
                  let info = groups.map(RedisReplyReader.map).first(where: { $0["name"]?.string == keys.group }) else { return }
            sample.pending = Int(info["pending"]?.integer ?? 0)
            reportedLag = info["lag"]?.integer
            guard reportedLag == nil, let lastDelivered = info["last-delivered-id"]?.string else { return }
            caughtUpCheckSent = true
            writer.send(QueueLag.caughtUpCheck(stream: keys.jobs, lastDelivered: lastDelivered)) { result in
                if case .success(let reply) = result, QueueLag.isCaughtUp(reply) { sample.lag = 0 }
                completion(feedbackAnswered ? sample : nil)
            }
        }
        writer.send(["HVALS", keys.leases]) { result in
            // Entries read under a lease and not finished are pending too (see `StreamLease`).
            if case .success(.array(let values)) = result {
                sample.pending += StreamLease.unfinished(values: values.compactMap(\.string))
            }
            // XLEN and XINFO were answered first (replies come in order): depth and pending are in.
            sample.lag = QueueLag.of(reported: reportedLag, depth: sample.depth, pending: sample.pending).lag
        }
        writer.send(["ZCARD", keys.retry]) { result in sample.retrySetSize = Int(result.integerValue ?? 0) }
        writer.send(["XLEN", keys.dead]) { result in sample.deadLetters = Int(result.integerValue ?? 0) }
        writer.send(["XLEN", keys.feedback]) { result in
            sample.feedback = Int(result.integerValue ?? 0)
            feedbackAnswered = result.isSuccess
            if !caughtUpCheckSent { completion(feedbackAnswered ? sample : nil) }
        }
    }

    /// Wall-clock ms as the rules see it (for the metrics publisher, on the loop).
    func wallClockNow() -> Int64 { wallNow() }

    /// Wall-clock ms for the rules, read at most once per loop iteration (the loop's monotonic
    /// time tells when it moved on), so a burst of answers costs one clock read.
    private func wallNow() -> Int64 {
        if loop.now != wallClockStampedAt {
            wallClockStampedAt = loop.now
            wallClock = time.nowMilliseconds()
        }
        return wallClock
    }

    // MARK: Redis connections (per queue)

    private func connectRedis(_ channel: QueueChannel) {
        channel.reconnectTimer = nil
        // The new connections create the group (and replay) themselves once ready.
        if let groupRetry = channel.groupRetry { loop.cancel(groupRetry) }
        channel.groupRetry = nil
        guard phase == .running || phase == .draining else { return }
        if let cluster {
            // On a cluster, first where the queue's slot lives (the map is read again when stale).
            cluster.endpoint(forSlot: channel.slot) { [weak self, weak channel] result in
                guard let self, let channel else { return }
                guard channel.reconnectTimer == nil, channel.reader == nil, self.phase == .running || self.phase == .draining else { return }
                switch result {
                case .success(let endpoint):
                    if endpoint != channel.endpoint {
                        channel.logger.info("queue routed to Redis Cluster node", metadata: [
                            "node": "\(endpoint.host):\(endpoint.port)", "slot": "\(channel.slot)"])
                    }
                    self.connectPair(channel, to: endpoint)
                case .failure(let error):
                    channel.redisErrors += 1
                    self.scheduleReconnect(channel, after: error)
                }
            }
            return
        }
        guard sentinel != nil else {
            connectPair(channel, to: endpointForQueue(channel.keys))
            return
        }
        // Where is the master now? Asked before every connect, so a failover is followed even
        // when the +switch-master message was missed.
        if !awaitingMaster.contains(where: { $0 === channel }) { awaitingMaster.append(channel) }
        resolveMaster()
    }

    /// One resolution for every queue waiting to connect.
    private func resolveMaster() {
        guard let sentinel, !resolving, !awaitingMaster.isEmpty else { return }
        resolving = true
        checkingSwitch = false  // this resolution replaces a check under way
        sentinel.resolve { [weak self] result in
            guard let self else { return }
            self.resolving = false
            let waiting = self.awaitingMaster
            self.awaitingMaster.removeAll()
            guard self.phase == .running || self.phase == .draining else { return }
            switch result {
            case .success(let master):
                if waiting.contains(where: { $0.endpoint != master }) {
                    self.logger.notice("Sentinel names the Redis master", metadata: ["redis": "\(master)", "sentinel": "\(sentinel.configuration.summary)"])
                }
                for channel in waiting where channel.reader == nil && channel.writer == nil { self.connectPair(channel, to: master) }
            case .failure(let error):
                for channel in waiting where channel.reader == nil && channel.writer == nil {
                    channel.redisErrors += 1
                    self.scheduleReconnect(channel, after: error)
                }
            }
        }
    }

    /// A failover the watched sentinel announced. It is only a hint: the sentinels are asked
    /// again (and the master's `ROLE`), and the queues' connections move, at once and without
    /// backoff, only when the master they name now differs from the current one. A sentinel that
    /// announces failovers in a loop (gone wrong, or hostile) costs at most one such check a
    /// second, and never a dropped connection while the master stays where it is.
    private func masterSwitched(to master: RedisEndpoint) {
        guard phase == .running || phase == .draining else { return }
        if channels.allSatisfy({ $0.endpoint == master && $0.writer?.isReady == true }) { return }  // already there
        // A connect under way asks the sentinels anyway; so does a check under way or postponed.
        if resolving || checkingSwitch || switchCheckTimer != nil { return }
        if let last = lastSwitchCheckAt, loop.now - last < 1_000 {
            switchCheckTimer = loop.schedule(afterMilliseconds: last + 1_000 - loop.now) { [weak self] in
                self?.switchCheckTimer = nil
                self?.checkAnnouncedSwitch()
            }
            return
        }
        checkAnnouncedSwitch()
    }

    private func checkAnnouncedSwitch() {
        guard phase == .running || phase == .draining, let sentinel, !resolving, !checkingSwitch else { return }
        lastSwitchCheckAt = loop.now
        checkingSwitch = true
        sentinel.resolve { [weak self] result in
            guard let self else { return }
            self.checkingSwitch = false
            guard self.phase == .running || self.phase == .draining, !self.resolving,
                  case .success(let master) = result else { return }  // the pairs stay; a dead server fails them by itself
            for channel in self.channels {
                if channel.endpoint == master, channel.reader != nil { continue }  // not moved (or already followed)
                channel.logger.warning("Sentinel announced a failover; moving to the new master",
                                       metadata: ["from": "\(channel.endpoint.map { "\($0)" } ?? "")", "to": "\(master)"])
                self.dropRedisPair(channel)
                if let reconnectTimer = channel.reconnectTimer { self.loop.cancel(reconnectTimer) }
                channel.reconnectTimer = nil
                channel.failures = 0
                self.connectPair(channel, to: master)
            }
        }
    }

    /// Closes the queue's connections without hearing of it (their pending commands fail as
    /// lost: unconfirmed outcome batches are written again after the next connect).
    private func dropRedisPair(_ channel: QueueChannel) {
        let pair = [channel.reader, channel.writer]
        channel.reader = nil
        channel.writer = nil
        for connection in pair {
            connection?.delegate = nil
            connection?.close()
        }
        channel.forgetRequestsInFlight()
        channel.groupReady = false
    }

    /// Redis answered as a server that cannot take writes (a replica after a failover, one
    /// loading its data, a master short of replicas) or refused an outcome batch: the queue
    /// reconnects (asking Sentinel again when configured) with backoff, instead of sending the
    /// same command to it again.
    private func notWritableMaster(_ channel: QueueChannel, _ message: String) {
        guard channel.reader != nil || channel.writer != nil else { return }  // already reconnecting
        channel.redisErrors += 1
        dropRedisPair(channel)
        guard phase == .running || phase == .draining else { return }
        scheduleReconnect(channel, after: .server(message))
    }

    private func connectPair(_ channel: QueueChannel, to endpoint: RedisEndpoint) {
        channel.endpoint = endpoint
        let reader = RedisConnection(loop: loop, endpoint: endpoint)
        let writer = RedisConnection(loop: loop, endpoint: endpoint)
        reader.delegate = self
        writer.delegate = self
        channel.reader = reader
        channel.writer = writer
        channel.forgetRequestsInFlight()
        channel.groupReady = false
        channel.waitsForJobs = false
        reader.connect()
        writer.connect()
    }

    /// The channel a connection belongs to (a handful of queues: a scan is cheaper than a table).
    private func channel(of connection: RedisConnection) -> QueueChannel? {
        channels.first { $0.reader === connection || $0.writer === connection }
    }

    public func redisConnectionIsReady(_ connection: RedisConnection) {
        guard let channel = channel(of: connection), let reader = channel.reader, let writer = channel.writer,
              reader.isReady, writer.isReady else { return }
        // The failure count is reset once the group is in place (`ensureGroup`): a replica accepts
        // the connection and refuses XGROUP, which must keep backing off.
        ensureGroup(channel, replayingUnconfirmed: true)
    }

    public func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        guard let channel = channel(of: connection) else { return }
        channel.redisErrors += 1
        // Both go: the pair is replaced together.
        let other = connection === channel.reader ? channel.writer : channel.reader
        channel.reader = nil
        channel.writer = nil
        other?.delegate = nil
        other?.close()
        channel.forgetRequestsInFlight()
        guard phase == .running || phase == .draining else { return }
        // A node that went away may have been failed over: read the slot map again first.
        cluster?.invalidate()
        scheduleReconnect(channel, after: error)
    }

    /// Backs off before the queue's next connect: 1 s, 2 s, 4 s … up to a minute.
    private func scheduleReconnect(_ channel: QueueChannel, after error: RedisError) {
        channel.failures += 1
        let failures = channel.failures
        let delay = Backoff.reconnect.delayMilliseconds(afterFailures: failures, using: &random)
        // One clear line when Redis goes away; the retries after it say the same, so they go to debug
        // (with a reminder every tenth) instead of filling the log every few seconds. A queue's
        // urgent lane talks to the same Redis as its bulk stream, whose lines already say it: its
        // own go to trace, so one outage is still one line.
        if channel.keys.isUrgentLane {
            channel.logger.trace("Redis connection attempt failed", metadata: ["error": "\(error)", "failures": "\(failures)", "reconnect_ms": "\(delay)"])
        } else if failures == 1 {
            channel.logger.warning("Redis connection down", metadata: ["error": "\(error)", "reconnect_ms": "\(delay)"])
        } else if failures % 10 == 0 {
            channel.logger.warning("Redis still unreachable", metadata: ["error": "\(error)", "failures": "\(failures)", "reconnect_ms": "\(delay)"])
        } else {
            channel.logger.debug("Redis connection attempt failed", metadata: ["error": "\(error)", "failures": "\(failures)", "reconnect_ms": "\(delay)"])
        }
        channel.reconnectTimer = loop.schedule(afterMilliseconds: delay) { [weak self, weak channel] in
            guard let self, let channel else { return }
            self.connectRedis(channel)
        }
    }

    /// Creates the queue's group if missing; then, after a reconnect, writes again the queue's
    /// outcomes Redis never confirmed, before the first read (their entries stay held, so
    /// re-reading our pending list cannot send them again).
    private func ensureGroup(_ channel: QueueChannel, replayingUnconfirmed: Bool = false) {
        let keys = channel.keys
        channel.writer?.send(["XGROUP", "CREATE", keys.jobs, keys.group, "0", "MKSTREAM"]) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            switch result {
            case .success(.error(let message)) where self.followClusterRedirect(message, channel: channel):
                return
            case .success(.error(let message)) where RedisSentinelResolver.meansNotWritableMaster(message):
                self.notWritableMaster(channel, message)
                return
            case .success(.error(let message)) where !message.hasPrefix("BUSYGROUP"):
                // Reading without the group would only answer NOGROUP and ask to create it again,
                // at once: try again later, longer each time (NOPERM, LOADING, a key of another type).
                channel.logger.error("cannot create the consumer group",
                                     metadata: ["error": "\(message)"].merging(QueueWorker.advice(for: message)) { a, _ in a })
                channel.redisErrors += 1
                self.retryGroup(channel, replayingUnconfirmed: replayingUnconfirmed)
                return
            case .failure:
                return
            default:
                break
            }
            channel.groupFailures = 0
            if replayingUnconfirmed {
                if (channel.failures > 0 || channel.redirectsInARow > 0) && !channel.keys.isUrgentLane {
                    channel.logger.info("Redis connection restored", metadata: ["redis": "\(channel.endpoint.map { "\($0)" } ?? "")"])
                }
                channel.failures = 0
            }
            channel.groupReady = true
            if replayingUnconfirmed { self.replayUnconfirmed(channel) }
            self.resendPendingMoves(channel)
            self.resendLeaseWrites(channel)
            // Leases an earlier process of this consumer left become its pending entries first,
            // so the pending-list read below takes them at once.
            self.releaseLeases(channel, ownConsumerOnly: true) { [weak self, weak channel] in
                guard let self, let channel, channel.groupReady else { return }
                self.readPendingList(channel, from: "0")
            }
        }
    }

    /// Creates the group again after 1 s, doubling up to a minute while Redis keeps refusing.
    private func retryGroup(_ channel: QueueChannel, replayingUnconfirmed: Bool) {
        guard channel.groupRetry == nil else { return }
        channel.groupFailures += 1
        let delay = Backoff.reconnect.delayMilliseconds(afterFailures: channel.groupFailures, using: &random)
        channel.groupRetry = loop.schedule(afterMilliseconds: delay) { [weak self, weak channel] in
            guard let self, let channel else { return }
            channel.groupRetry = nil
            guard self.phase == .running || self.phase == .draining else { return }
            self.ensureGroup(channel, replayingUnconfirmed: replayingUnconfirmed)
        }
    }

    /// What to do about a refusal, for its log line: a missing ACL right names where the users are
    /// documented.
    static func advice(for message: String) -> Logger.Metadata {
        guard message.hasPrefix("NOPERM") else { return [:] }
        return ["fix": "give the worker's Redis ACL user the permission (docs/operations.md, \"Redis ACL users\"); the worker retries with a backoff"]
    }

    /// Writes again the queue's outcome batches Redis never confirmed, minus the entries it no
    /// longer holds as pending: those were acknowledged, so their batch ran (MULTI/EXEC is all or
    /// nothing) and only its answer was lost with the connection; writing it again would add
    /// their dead letters or feedback entries twice. Entries stay held until their batch is
    /// confirmed. Only after a reconnect: one XPENDING per entry, pipelined.
    private func replayUnconfirmed(_ channel: QueueChannel) {
        let batches = rules.redisReconnected(queue: channel.index)
        guard let writer = channel.writer, !batches.isEmpty else { return }
        let keys = channel.keys
        var acknowledged = Set<StreamEntryID>()
        var remaining = batches.reduce(0) { $0 + $1.entries.count }
        var failed = false
        var replayed = false
        // No read until Redis has said which entries are finished: a read answered in between
        // (after a failover, one naming again entries of these batches) would find them still
        // held, and the check below takes an entry the new master never handed out for one
        // whose batch ran.
        channel.replaying = true
        let replay = { [weak self, weak channel] in
            guard let self, let channel, !failed, !replayed else { return }
            replayed = true
            channel.replaying = false
            defer { self.maybeRead() }
            for batch in batches {
                let entries = batch.entries.filter { !acknowledged.contains($0.entryID) }
                if entries.isEmpty {
                    self.batchConfirmed(batch.sequence, channel: channel)
                } else {
                    self.write(entries.count == batch.entries.count ? batch
                               : OutcomeBatch(sequence: batch.sequence, entries: entries, queue: batch.queue))
                }
            }
            if !acknowledged.isEmpty {
                channel.logger.info("outcome batches Redis ran before the connection was lost are not written again",
                                    metadata: ["entries": "\(acknowledged.count)"])
            }
            if self.phase == .draining { self.checkDrained() }
        }
        guard remaining > 0 else { replay(); return }
        // Entries of this worker's leases: one script call says which are finished.
        var leased: [(id: StreamEntryID, lease: LocalLease, position: Int)] = []
        for batch in batches {
            for entry in batch.entries {
                if let (lease, position) = channel.lease(containing: entry.entryID) { leased.append((entry.entryID, lease, position)) }
            }
        }
        if !leased.isEmpty {
            remaining -= leased.count
            var arguments = ["EVAL", QueueScripts.leaseFinished, "2", keys.jobs, keys.leases, keys.group]
            for entry in leased { arguments += [entry.lease.field, String(entry.position), entry.id.description] }
            remaining += 1
            writer.send(arguments) { result in
                switch result {
                case .success(.array(let flags)) where flags.count == leased.count:
                    for (index, flag) in flags.enumerated() where flag.integer == 1 {
                        let entry = leased[index]
                        acknowledged.insert(entry.id)
                        if channel.settle(entry.lease, count: 1) { self.deleteLease(channel, entry.lease) }
                    }
                case .success: break  // an error reply: written again, as before
                case .failure: failed = true
                }
                remaining -= 1
                if remaining == 0 { replay() }
            }
        }
        // Entries read without a lease whose move to the pending list Redis has not confirmed:
        // not being pending says nothing about their batch (the move may never have run), so
        // their batches are written again (at worst their writes twice, never none).
        var unmoved = StreamEntryIDSet()
        for move in channel.pendingMoves where move.cursor == nil {
            for id in move.ids { unmoved.insert(id) }
        }
        for batch in batches {
            for entry in batch.entries {
                let id = entry.entryID
                if channel.lease(containing: id) != nil { continue }
                if !unmoved.isEmpty && unmoved.contains(id) {
                    remaining -= 1
                    continue
                }
                writer.send(argumentCount: 6, { builder in
                    builder.add("XPENDING"); builder.add(keys.jobs); builder.add(keys.group)
                    builder.add(entryMilliseconds: id.milliseconds, sequence: id.sequence)
                    builder.add(entryMilliseconds: id.milliseconds, sequence: id.sequence)
                    builder.add(integer: 1)
                }) { result in
                    switch result {
                    case .success(.array(let rows)) where rows.isEmpty: acknowledged.insert(id)
                    case .success: break  // pending, or an error reply (NOGROUP): written again, as before
                    case .failure: failed = true  // the connection went: the next one replays them all
                    }
                    remaining -= 1
                    if remaining == 0 { replay() }
                }
            }
        }
        if remaining == 0 { replay() }  // nothing was asked (every entry was in an unconfirmed move)
    }

    /// Whether `message` makes the queue reconnect (`notWritableMaster`) rather than go on.
    private static func meansReconnect(_ message: String) -> Bool {
        RedisSentinelResolver.meansNotWritableMaster(message) || message.hasPrefix("EXECABORT")
    }

    func handleRedisError(_ message: String, channel: QueueChannel) {
        // On a cluster a redirect (and READONLY, EXECABORT) re-routes the queue; it is the cluster
        // working as designed (logged at notice), not an error for herald_redis_errors_total.
        if followClusterRedirect(message, channel: channel) { return }
        if QueueWorker.meansReconnect(message) {
            // EXECABORT: a command of the outcome batch was refused while queued (READONLY after a
            // failover, NOREPLICAS, OOM); the batch is written again after reconnecting.
            notWritableMaster(channel, message.hasPrefix("EXECABORT")
                ? message + " (Redis refused a write of the outcome batch: READONLY after a failover, NOREPLICAS, OOM …; its log says which)"
                : message)
            return
        }
        channel.redisErrors += 1
        if message.hasPrefix("NOGROUP") {
            // Redis lost the stream or group (restart without data): recreate it and go on.
            channel.logger.warning("consumer group missing; recreating it", metadata: ["error": "\(message)"])
            channel.groupReady = false
            ensureGroup(channel)
        } else if message == channel.lastError && channel.errorRepeats % 100 != 99 {
            // The same error again (a key of the wrong type, a missing permission): one line,
            // then one per hundred repeats, not one per retry-promotion tick.
            channel.errorRepeats += 1
            channel.logger.debug("Redis error again", metadata: ["error": "\(message)", "repeats": "\(channel.errorRepeats)"])
        } else {
            channel.errorRepeats = message == channel.lastError ? channel.errorRepeats + 1 : 0
            channel.lastError = message
            if message.hasPrefix("NOPERM") {
                channel.logger.error("Redis refused a command for lack of permission",
                                     metadata: ["error": "\(message)", "queue_keys": "\(channel.keys.jobs)"].merging(QueueWorker.advice(for: message)) { a, _ in a })
            } else {
                channel.logger.error("Redis error", metadata: ["error": "\(message)", "queue_keys": "\(channel.keys.jobs)"])
            }
        }
    }

    // MARK: Redis Cluster

    /// On a cluster, an error reply saying the queue's slot is served elsewhere (MOVED), is being
    /// migrated (ASK, TRYAGAIN) or is not served right now (CLUSTERDOWN, a READONLY replica)
    /// replaces the queue's connection pair: the same path as a lost connection, which is
    /// what makes it safe. Commands still unanswered on the old pair fail; the queue's
    /// unconfirmed outcome batches are written again on the new pair before its next read (minus
    /// those Redis already ran, `replayUnconfirmed`), and its pending list is read again from the
    /// start (entries already held are not taken twice). The other queues are not touched.
    ///
    /// MOVED updates the map at once and reconnects without waiting (with a short backoff only when
    /// MOVED keeps coming); ASK and TRYAGAIN mean the queue's slot is being migrated: the worker's
    /// batches touch several keys of the slot, which Redis cannot serve while they are split
    /// between two nodes, so it waits (100 ms, doubling to 5 s) until the slot has moved and MOVED
    /// says where. CLUSTERDOWN and READONLY mark the map stale.
    ///
    /// `EXECABORT` counts too: inside MULTI a MOVED or ASK is the reply of the command being queued
    /// (which the batch does not read), and it makes Redis discard the whole transaction, so none
    /// of the batch was applied and writing it again on the right node cannot apply it twice.
    /// Returns false for every other error, and always when not on a cluster.
    private func followClusterRedirect(_ message: String, channel: QueueChannel) -> Bool {
        guard let cluster else { return false }
        let redirect = RedisClusterRedirect(errorMessage: message)
        guard redirect != nil || message.hasPrefix("EXECABORT") else { return false }
        // Already replacing the pair (several replies of one pipeline said so).
        guard channel.reader != nil || channel.writer != nil, channel.reconnectTimer == nil else { return true }
        channel.redirectsInARow += 1
        var delay = QueueWorker.redirectDelay(channel.redirectsInARow)
        var isMove = false
        switch redirect {
        case .moved(let movedSlot, let node):
            cluster.moved(slot: movedSlot, to: node)
            isMove = true
            // The new owner is named: go at once, unless MOVED keeps coming (a map in flux).
            delay = channel.redirectsInARow <= 2 ? 0 : QueueWorker.redirectDelay(channel.redirectsInARow - 2)
        case .ask, .tryAgain:
            break
        case .clusterDown, .notMaster, nil:
            cluster.invalidate()
        }
        let metadata: Logger.Metadata = ["reply": "\(message.prefix(120))", "slot": "\(channel.slot)", "reconnect_ms": "\(delay)"]
        // MOVED is rare (a slot changed hands) and always said; repeated waits for a migration go to debug.
        if isMove || channel.redirectsInARow == 1 || channel.redirectsInARow % 10 == 0 {
            channel.logger.notice("Redis Cluster redirect: reconnecting the queue to its slot's master", metadata: metadata)
        } else {
            channel.logger.debug("Redis Cluster redirect: reconnecting the queue to its slot's master", metadata: metadata)
        }
        dropRedisPair(channel)
        channel.reconnectTimer = loop.schedule(afterMilliseconds: delay) { [weak self, weak channel] in
            guard let self, let channel else { return }
            self.connectRedis(channel)
        }
        return true
    }

    /// 100 ms after the first redirect in a row, doubling to 5 s.
    static func redirectDelay(_ inARow: Int) -> Int64 {
        min(5_000, 100 << Int64(min(6, max(0, inARow - 1))))
    }

    // MARK: reading

    /// Notifications in flight on every app's connections.
    public var inFlight: Int { lanes.reduce(0) { $0 + $1.pool.inFlight } }

    /// Entries the worker may take in now, over every queue: the sending apps' free stream slots
    /// plus the read-ahead, minus what already waits for a slot.
    private func readBudget() -> Int {
        var free = 0
        for lane in lanes where lane.stoppedReason == nil { free += lane.pool.freeSlots }
        return free + configuration.readAhead - rules.queuedTokens
    }

    /// How many entries one read (or claim) of `channel` asks for: its fair share of the budget
    /// (the budget split evenly among the queues that can read), at most `--batch`, and a byte
    /// budget per read: fewer entries when entries are big (the estimate follows the replies; the
    /// reply reader bounds any single reply whatever this guess).
    private func readCount(_ channel: QueueChannel, budget: Int, sharers: Int) -> Int {
        let share = sharers > 1 ? max(1, budget / sharers) : max(1, budget)
        let byBytes = max(1, QueueWorker.readByteBudget / max(1, channel.entryBytesEstimate))
        return min(configuration.batch, byBytes, share)
    }

    /// Bytes one XREADGROUP reply should hold, about.
    static let readByteBudget = 4 << 20

    /// Most of the sending apps' connections are down (e.g. a 503 storm).
    private var mostConnectionsDown: Bool {
        var ready = 0, configured = 0, free = 0
        for lane in lanes where lane.stoppedReason == nil {
            ready += lane.pool.readyConnections
            configured += lane.pool.configuration.connections
            free += lane.pool.freeSlots
        }
        return ready * 2 < configured && free == 0
    }

    /// Offers every queue that can read a read of its share, starting with a different queue each
    /// time. The budget is shared among the queues whose last read brought entries (an idle queue
    /// still has its blocking read out, for up to a share, so it is served as soon as jobs
    /// arrive, without thinning the busy queues' reads). With one queue this is one read of the
    /// whole budget, as before queues were several.
    func maybeRead() {
        guard phase == .running, stoppedSendingReason == nil,
              channels.contains(where: { $0.canRead && !$0.readInFlight }) else { return }
        if mostConnectionsDown {
            pauseReading()
            return
        }
        let budget = readBudget()
        let queues = configuration.queues.count
        guard channels.count > queues else {
            guard budget > 0 else { return }
            var sharers = 0
            for channel in channels where channel.canRead && channel.active { sharers += 1 }
            let first = nextReadQueue
            nextReadQueue = queues > 1 ? (first + 1) % queues : 0
            for step in 0..<queues {
                let channel = channels[(first + step) % queues]
                guard channel.canRead, !channel.readInFlight else { continue }
                read(channel, count: readCount(channel, budget: budget, sharers: sharers))
            }
            return
        }
        readWithLanes(budget: budget)
    }

    /// `maybeRead` with urgent lanes: the budget is shared among the queues (one share per
    /// queue whose bulk or urgent stream brought entries last time); within a queue's share the
    /// urgent stream asks first, for three quarters while it has work, and the bulk stream for the
    /// rest (all of it while urgent is idle). The urgent read is sent even when the budget is used
    /// up, as long as fewer than the read-ahead's worth of urgent tokens wait: its blocking read
    /// must be out whenever urgent jobs may arrive, and its tokens jump the bulk ones already read.
    private func readWithLanes(budget: Int) {
        let queues = configuration.queues.count
        var sharers = 0
        for index in 0..<queues {
            let bulk = channels[index], urgent = channels[queues + index]
            if (bulk.canRead && bulk.active) || (urgent.canRead && urgent.active) { sharers += 1 }
        }
        let queueShare = max(1, budget / max(1, sharers))
        let urgentRoom = configuration.readAhead - rules.queuedUrgentTokens
        let first = nextReadQueue
        nextReadQueue = queues > 1 ? (first + 1) % queues : 0
        for step in 0..<queues {
            let bulk = channels[(first + step) % queues], urgent = channels[queues + (first + step) % queues]
            let urgentBusy = urgent.canRead && urgent.active
            if urgent.canRead, !urgent.readInFlight, urgentRoom > 0 {
                let share = budget > 0 ? (bulk.active ? max(1, queueShare * 3 / 4) : queueShare) : urgentRoom
                read(urgent, count: readCount(urgent, budget: min(share, urgentRoom), sharers: 1))
            }
            if budget > 0, bulk.canRead, !bulk.readInFlight {
                read(bulk, count: readCount(bulk, budget: urgentBusy ? max(1, queueShare - queueShare * 3 / 4) : queueShare, sharers: 1))
            }
        }
    }

    /// One read of up to `count` entries on `channel`'s reader: its pending list while it has
    /// entries there; else a leased read of new entries (`leasedRead`); or, when the last read
    /// found none, the group's own blocking read (`XREADGROUP … BLOCK`, through the pending list
    /// as before leases): Redis hands a new entry to one waiting consumer, so an idle fleet wakes
    /// one worker per job, not all of them, and what a wait brings is acknowledged with XACK.
    private func read(_ channel: QueueChannel, count: Int) {
        guard channel.recoveringPending || channel.waitsForJobs else {
            leasedRead(channel, count: count)
            return
        }
        guard let reader = channel.reader else { return }
        channel.readInFlight = true
        let waiting = !channel.recoveringPending
        channel.pendingReadInFlight = !waiting
        let keys = channel.keys
        var arguments: [String] = ["XREADGROUP", "GROUP", keys.group, configuration.consumer, "COUNT", String(count)]
        if waiting { arguments += ["BLOCK", String(configuration.blockMilliseconds)] }
        arguments += ["STREAMS", keys.jobs, waiting ? ">" : channel.pendingCursor]
        // The batch is read straight from the connection's reply tape: no RedisReply tree per entry.
        reader.sendRaw(arguments) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            channel.readInFlight = false
            if waiting { channel.waitsForJobs = false }
            let finishedMeanwhile = channel.confirmedDuringPendingRead
            channel.pendingReadInFlight = false
            channel.confirmedDuringPendingRead.removeAll()
            switch result.map({ tape in
                let read = RedisReplyReader.readEntries(tape: tape)
                if case .success(let entries) = read { channel.noteReply(bytes: tape.byteCount, entries: entries.count) }
                return read
            }) {
            case .failure:
                return
            case .success(.failure(let error)):
                if case .server(let message) = error {
                    self.readFailed(channel, message: message)
                } else {
                    self.pauseReads(channel)
                }
            case .success(.success(let read)):
                channel.readFailures = 0
                channel.redirectsInARow = 0
                channel.active = !read.isEmpty
                if let last = read.last { channel.noteNewest(last.id) }
                let (entries, deferredAfter) = QueueWorker.deferringOverBudget(read)
                var restarted = false
                if channel.recoveringPending && !waiting {
                    if channel.pendingReadAgain {
                        // Entries joined the pending list while this read was out: from its start again.
                        channel.pendingReadAgain = false
                        channel.pendingCursor = "0"
                        restarted = true
                    } else if read.isEmpty {
                        channel.recoveringPending = false
                    } else if let last = entries.last {
                        channel.pendingCursor = last.id.description
                    }
                }
                if let deferredAfter {
                    // The reply outgrew its byte budget: the entries past it stay pending and are
                    // read again, fewer at a time (the estimate just grew), from the pending list.
                    channel.recoveringPending = true
                    // A restart from the beginning (above) covers them too, and the entries that
                    // joined below them.
                    if !restarted { channel.pendingCursor = deferredAfter.description }
                }
                self.take(finishedMeanwhile.isEmpty ? entries : entries.filter { !finishedMeanwhile.contains($0.id) },
                          queue: channel.index, deliveries: nil)
            }
            self.maybeRead()
        }
    }

    /// Reads `channel`'s pending list from `cursor`, where entries were just put: from its start
    /// when a read of it is under way already (its cursor may be past them). Entries this worker
    /// holds are not taken twice.
    func readPendingList(_ channel: QueueChannel, from cursor: String) {
        if channel.pendingReadInFlight { channel.pendingReadAgain = true }
        channel.pendingCursor = channel.recoveringPending ? "0" : cursor
        channel.recoveringPending = true
        maybeRead()
    }

    /// Redis refused a read of `channel` with `message`: the group is recreated (NOGROUP), the
    /// queue reconnects or is re-routed, or (WRONGTYPE, NOPERM, an unreadable reply) this queue
    /// waits, longer each time, instead of asking again at once; the other queues read on.
    func readFailed(_ channel: QueueChannel, message: String) {
        handleRedisError(message, channel: channel)
        if message.hasPrefix("NOGROUP") { return }  // recreated; read again at once
        if QueueWorker.meansReconnect(message) { return }  // reconnecting, with backoff
        if channel.reader == nil { return }  // a cluster redirect: the pair is being replaced
        pauseReads(channel)
    }

    /// A read of `channel` failed: its next read waits 1 s, doubling up to a minute while the
    /// failures go on.
    func pauseReads(_ channel: QueueChannel) {
        guard channel.readPause == nil else { return }
        channel.readFailures += 1
        let delay = Backoff.reconnect.delayMilliseconds(afterFailures: channel.readFailures, using: &random)
        channel.readPause = loop.schedule(afterMilliseconds: delay) { [weak self, weak channel] in
            channel?.readPause = nil
            self?.maybeRead()
        }
    }

    /// Most of the pool is down (e.g. a 503 storm): stop reading for a while, longer each time.
    private func pauseReading() {
        guard pauseTimer == nil else { return }
        pauseFailures += 1
        let delay = Backoff.reconnect.delayMilliseconds(afterFailures: pauseFailures, using: &random)
        logger.warning("most APNs connections are down; pausing reads", metadata: ["pause_ms": "\(delay)"])
        pauseTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in
            guard let self else { return }
            self.pauseTimer = nil
            if !self.mostConnectionsDown { self.pauseFailures = 0 }
            self.maybeRead()
        }
    }

    /// Splits off the entries a reply cut only because the reply as a whole outgrew its byte budget
    /// (never the first entry: one entry over the budget on its own is outsized, and the rules
    /// dead-letter it). Returns the entries to take and, when some were deferred, the id after
    /// which to read the pending list again.
    static func deferringOverBudget(_ entries: [StreamRecord]) -> ([StreamRecord], StreamEntryID?) {
        guard let cut = entries.indices.dropFirst().first(where: { !entries[$0].truncated.isEmpty && entries[$0].truncated.allSatisfy(\.byBudget) }) else {
            return (entries, nil)
        }
        return (Array(entries[..<cut]), entries[cut - 1].id)
    }

    /// Entries read or claimed go to the rules; then the pools get what they can take.
    func take(_ entries: [StreamRecord], queue: Int, deliveries: [StreamEntryID: Int]?) {
        rules.entriesArrived(entries, queue: queue, deliveries: deliveries, now: wallNow())
        scheduleBatch()
        pump()
    }

    // MARK: sending

    /// Moves queued notifications into free stream slots, app by app.
    private func pump() {
        guard phase != .stopped else { return }
        for index in lanes.indices where lanes[index].stoppedReason == nil { pump(index) }
        scheduleBatch()
        maybeRead()
    }

    private func pump(_ laneIndex: Int) {
        let pool = lanes[laneIndex].pool
        var free = pool.freeSlots
        guard free > 0 else { return }
        let now = wallNow()
        while free > 0, let send = rules.nextSend(lane: laneIndex, now: now) {
            let context = send.context
            // The request is handed over as built (consumed, not copied: see `NotificationSend`).
            guard pool.send((consume send).request) else {
                rules.sendRefused(context: context, lane: laneIndex)
                break
            }
            free -= 1
        }
    }

    public func poolHasFreeSlots(_ pool: ConnectionPool) {
        pump()
    }

    public func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome) {
        if traceNotifications {
            // One line per notification only at trace level; the token is shortened, never whole.
            logger.trace("notification answered", metadata: [
                "context": "\(request.context)", "token": "\(request.token)",
                "apns_id": "\(request.apnsID ?? "")", "attempts": "\(request.attempts)", "outcome": "\(outcome)",
            ])
        }
        if rules.answered(context: request.context, attempts: request.attempts, outcome: outcome, now: wallNow(), uniqueID: request.uniqueID),
           let laneIndex = lanes.firstIndex(where: { $0.pool === pool }) {
            pump(laneIndex)
            // A bad device token from production goes to the app's sandbox lane.
            if let sandbox = rules.sandboxLane(of: laneIndex) { pump(sandbox) }
        }
        scheduleBatch()
        if phase == .draining { checkDrained() }
    }

    public func pool(_ pool: ConnectionPool, stoppedSending reason: String) {
        guard let laneIndex = lanes.firstIndex(where: { $0.pool === pool }) else { return }
        let lane = lanes[laneIndex]
        lane.stoppedReason = reason
        logger.critical("APNs refused this app's credentials: stopped sending for it; its jobs wait in the retry set, never in the dead letters",
                        metadata: ["app": "\(lane.name)", "reason": "\(reason)"])
        // Everything of this app not yet answered goes to the retry set, with no attempt spent.
        rules.credentialsHalted(lane: laneIndex, unsent: pool.takeQueuedResends().map(\.context), now: wallNow())
        scheduleBatch()
    }

    /// A halted pool probes again (its credentials were reloaded): the app's jobs are read and sent again.
    public func poolResumedSending(_ pool: ConnectionPool) {
        guard let laneIndex = lanes.firstIndex(where: { $0.pool === pool }), lanes[laneIndex].stoppedReason != nil else { return }
        lanes[laneIndex].stoppedReason = nil
        logger.notice("probing APNs again for this app", metadata: ["app": "\(lanes[laneIndex].name)"])
        rules.credentialsResumed(lane: laneIndex)
        pump()
    }

    // MARK: writing outcomes

    private func scheduleBatch() {
        guard !batchScheduled, rules.hasOutcomesToWrite else { return }
        batchScheduled = true
        loop.callAtEndOfTick(self)
    }

    public func endOfTick() {
        batchScheduled = false
        // One batch per queue that finished entries in this tick.
        while let batch = rules.takeBatch() { write(batch) }
    }

    /// One MULTI/EXEC per queue and tick: the outcome writes of every entry of that queue finished
    /// in it, then XACK (a lone XACK when there are no writes), on that queue's connection and
    /// keys; the stream is trimmed later (`scheduleTrim`). Not confirmed (connection lost): the
    /// rules keep the batch, written again after the queue reconnects.
    private func write(_ batch: OutcomeBatch) {
        let channel = channels[batch.queue]
        guard let writer = channel.writer, writer.isReady, channel.groupReady else { return }
        // The completion keeps the sequence only, not the batch: its entry array goes back to the
        // rules for reuse when confirmed.
        let sequence = batch.sequence
        // Entries read under this worker's leases are acknowledged by their positions (one script
        // call per batch, see `StreamLease`), the others with XACK.
        let plan = leasePlan(for: batch, channel: channel)
        batch.send(on: writer, keys: channel.keys, maxLength: configuration.deadLetterMaxLength,
                   resultsMaxLength: configuration.resultsMaxLength, acknowledgement: plan?.acknowledgement) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            switch result {
            case .success(.array(let replies)):
                for reply in replies { if case .error(let message) = reply { self.handleRedisError(message, channel: channel) } }
                if let plan, !self.leasesAcknowledged(plan, reply: replies.last, channel: channel) {
                    // The lease script failed (its positions are not set): reconnect, which
                    // writes the batch again, minus what Redis finished (`replayUnconfirmed`).
                    self.notWritableMaster(channel, "the lease script of an outcome batch failed")
                    return
                }
                fallthrough
            case .success(.integer):  // a batch without writes is a lone XACK
                self.batchConfirmed(sequence, channel: channel)
                self.scheduleTrim(channel)
                if self.phase == .draining { self.checkDrained() }
            case .success(.error(let message)):
                self.handleRedisError(message, channel: channel)
            default:
                break  // connection lost: written again after reconnecting
            }
        }
    }

    /// Redis confirmed outcome batch `sequence` of `channel`: the rules release its entries. A
    /// pending-list read in flight skips them in its reply (it may have run first), and a move of
    /// entries read without a lease no longer carries them (sent after their `XACK`, it would put
    /// them back in the pending list, finished).
    private func batchConfirmed(_ sequence: UInt64, channel: QueueChannel) {
        let unleasedMoves = channel.pendingMoves.contains { $0.cursor == nil && !$0.ids.isEmpty }
        let rereads = !channel.rereadWhileHeld.isEmpty
        guard channel.pendingReadInFlight || unleasedMoves || rereads else {
            rules.confirmed(sequence)
            return
        }
        var finished = StreamEntryIDSet()
        var reread: [StreamEntryID] = []
        rules.confirmed(sequence) { id in
            if channel.pendingReadInFlight { channel.confirmedDuringPendingRead.insert(id) }
            if unleasedMoves { finished.insert(id) }
            if rereads, channel.rereadWhileHeld.remove(id) != nil { reread.append(id) }
        }
        if unleasedMoves { dropFromUnleasedMoves(finished, channel: channel) }
        // Entries a newer lease named while this batch was being planned or written: their
        // positions there are set now (the lease Redis has; `QueueChannel.noteRead`).
        if !reread.isEmpty { finishElsewhere(channel, reread) }
    }

    // MARK: retries and reclaiming

    /// Every queue's due retries and due scheduled jobs move back into its stream, each set with
    /// its own script calls (the script touches one queue's keys, which share a hash slot).
    private func scheduleRetryPromotion() {
        retryTimer = loop.schedule(afterMilliseconds: configuration.retryPollMilliseconds) { [weak self] in
            guard let self, self.phase == .running else { return }
            for channel in self.channels where !channel.keys.isUrgentLane {
                // The bulk channel promotes for both lanes (one retry set per queue): each member
                // goes back to the stream its `lane` field names.
                self.promote(channel, set: channel.keys.retry)
                self.promote(channel, set: channel.keys.scheduled)
            }
            self.scheduleRetryPromotion()
        }
    }

    /// One promote-script call for `set`; a full batch calls again as soon as Redis answers, so a
    /// million members due at once drain at the workers' speed (bounded by the stream backlog the
    /// script checks), not one batch per poll. One chain per set and queue at a time.
    private func promote(_ channel: QueueChannel, set: String) {
        guard phase == .running, let writer = channel.writer, writer.isReady, !channel.promotionsInFlight.contains(set) else { return }
        channel.promotionsInFlight.insert(set)
        let batch = configuration.promotionBatch
        let keys = channel.keys
        let streams = configuration.urgentLanes ? ["3", set, keys.jobs, keys.urgentJobs] : ["2", set, keys.jobs]
        writer.send(["EVAL", QueueScripts.promoteDueRetries] + streams + [String(time.nowMilliseconds()),
                     String(batch), String(configuration.promotionBacklogLimit)]) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            channel.promotionsInFlight.remove(set)
            switch result {
            case .success(.integer(let moved)) where moved >= Int64(batch):
                self.promote(channel, set: set)
            case .success(.error(let message)):
                self.handleRedisError(message, channel: channel)
            default:
                break
            }
        }
    }

    /// Every quarter of `--idle-consumer-timeout` (at most every 5 minutes), removes each queue's
    /// consumers that own nothing and were idle that long: workers that were scaled down or
    /// replaced, which would otherwise pile up in XINFO CONSUMERS and `herald stats` forever.
    private func scheduleIdleConsumerRemoval() {
        let timeout = configuration.idleConsumerTimeoutMilliseconds
        guard timeout > 0 else { return }
        let interval = min(300_000, max(250, timeout / 4))
        idleConsumerTimer = loop.schedule(afterMilliseconds: interval) { [weak self] in
            guard let self, self.phase == .running else { return }
            for channel in self.channels { self.removeIdleConsumers(channel) }
            self.scheduleIdleConsumerRemoval()
        }
    }

    /// One script call per queue (its keys share a hash slot): atomic, so a consumer that comes
    /// back between the check and the removal keeps its pending entries.
    private func removeIdleConsumers(_ channel: QueueChannel) {
        guard channel.groupReady, let writer = channel.writer, writer.isReady else { return }
        let keys = channel.keys
        writer.send(["EVAL", QueueScripts.removeIdleConsumers, "1", keys.jobs, keys.group, configuration.consumer,
                     String(configuration.idleConsumerTimeoutMilliseconds)]) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            switch result {
            case .success(.array(let names)) where !names.isEmpty:
                channel.consumersRemoved += names.count
                channel.logger.info("removed idle consumers that owned no pending entries",
                                    metadata: ["consumers": "\(names.compactMap(\.string).joined(separator: ","))"])
            case .success(.error(let message)):
                self.handleRedisError(message, channel: channel)
            default:
                break
            }
        }
    }

    private func scheduleClaim() {
        let interval = max(500, configuration.claimIdleMilliseconds / 4)
        claimTimer = loop.schedule(afterMilliseconds: interval) { [weak self] in
            guard let self, self.phase == .running else { return }
            let budget = self.readBudget()
            for channel in self.channels {
                self.resendPendingMoves(channel)
                // Before the release below: a lease whose positions a write of these sets is
                // released with them set, so nothing finished goes to the pending list.
                self.resendLeaseWrites(channel)
                // Leases of stopped workers become pending entries first, then XAUTOCLAIM takes
                // them with the rest (see `StreamLease`).
                guard channel.groupReady, !channel.claimInFlight else { continue }
                self.releaseLeases(channel, ownConsumerOnly: false) { [weak self, weak channel] in
                    guard let self, let channel else { return }
                    self.claimIdle(channel, budget: budget)
                }
            }
            self.scheduleClaim()
        }
    }

    /// XAUTOCLAIM entries other workers left idle in `channel`'s queue (they crashed), then read
    /// their delivery counts. Each queue claims at most its share of the budget.
    private func claimIdle(_ channel: QueueChannel, budget: Int) {
        guard budget > 0, stoppedSendingReason == nil, channel.groupReady, !channel.claimInFlight,
              let writer = channel.writer, writer.isReady else { return }
        let count = readCount(channel, budget: budget, sharers: channels.count)
        guard count > 0 else { return }
        channel.claimInFlight = true
        let keys = channel.keys
        // Read from the tape like XREADGROUP's reply, so an outsized claimed value arrives cut and marked.
        writer.sendRaw(["XAUTOCLAIM", keys.jobs, keys.group, configuration.consumer, String(configuration.claimIdleMilliseconds),
                        channel.claimCursor, "COUNT", String(count)]) { [weak self, weak channel] result in
            guard let self, let channel else { return }
            guard case .success(let tape) = result else { channel.claimInFlight = false; return }
            if tape.nodes.first?.kind == .error {
                channel.claimInFlight = false
                self.handleRedisError(tape.withBytes(of: 0) { String(decoding: $0, as: UTF8.self) }, channel: channel)
                return
            }
            guard let (cursor, claimed) = RedisReplyReader.claimedEntries(tape: tape) else { channel.claimInFlight = false; return }
            channel.claimCursor = cursor
            let entries = claimed.filter { !self.rules.isHeld($0.id, queue: channel.index) }
            guard let first = entries.first?.id, let last = entries.last?.id else { channel.claimInFlight = false; return }
            channel.noteNewest(last)
            channel.logger.info("reclaimed idle entries", metadata: ["count": "\(entries.count)"])
            writer.send(["XPENDING", keys.jobs, keys.group, first.description, last.description,
                         String(entries.count * 2 + 16), self.configuration.consumer]) { [weak self, weak channel] result in
                guard let self, let channel else { return }
                channel.claimInFlight = false
                var deliveries: [StreamEntryID: Int] = [:]
                if case .success(.array(let rows)) = result {
                    for row in rows {
                        guard case .array(let columns) = row, columns.count >= 4, case .bulk(let idBytes) = columns[0],
                              let id = StreamEntryID(bytes: idBytes), let count = columns[3].integer else { continue }
                        deliveries[id] = Int(clamping: count)
                    }
                }
                self.take(entries, queue: channel.index, deliveries: deliveries)
            }
        }
    }
}

/// One queue of a worker loop: its keys, its Redis connection pair (blocking reads on one,
/// everything else on the other), its consumer-group state and cursors. Every command for the
/// queue goes through these connections, and none names another queue's keys, so a queue can be
/// moved to another Redis (a cluster node) by connecting its channel elsewhere. Loop-confined.
final class QueueChannel {
    /// Its position in the worker's queues: the queue index the rules keep per job.
    let index: Int
    let keys: QueueKeys
    let logger: Logger
    /// Where it is connected now (asked from `QueueWorker.endpointForQueue` at each connect).
    var endpoint: RedisEndpoint?
    var reader: RedisConnection?
    var writer: RedisConnection?
    var failures = 0
    var redisErrors = 0
    var reconnectTimer: EventLoop.TimerID?
    var readInFlight = false
    /// After a reconnect, while the outcome batches Redis never confirmed are being checked and
    /// written again (`QueueWorker.replayUnconfirmed`): no read is sent meanwhile.
    var replaying = false
    /// The lease number of the leased read in flight, if one is.
    var leaseReadInFlight: UInt64?

    /// The connections went (or are replaced): nothing sent on them is in flight any more.
    func forgetRequestsInFlight() {
        readInFlight = false
        replaying = false
        leaseReadInFlight = nil
        pendingReadInFlight = false
        pendingReadAgain = false
        confirmedDuringPendingRead.removeAll()
        claimInFlight = false
    }
    /// Set while a read of the pending list (not `>`) is in flight. Entries whose outcome batch
    /// Redis confirms meanwhile go into `confirmedDuringPendingRead`: the read and the batch travel
    /// on two connections, so the read may have run first, and such entries in its reply were
    /// finished, not new work (after a reconnect, taking them again sent them twice and wrote
    /// their dead letters twice).
    var pendingReadInFlight = false
    /// Entries joined the pending list while a read of it was in flight (its cursor may be past
    /// them): the next read of it starts from the beginning (`QueueWorker.readPendingList`).
    var pendingReadAgain = false
    var confirmedDuringPendingRead: Set<StreamEntryID> = []
    /// This worker's leases on the stream, oldest first (`StreamLease`, `LocalLease`), with the
    /// first and last id of each (`addLease`, `removeLease` keep both), and where the last
    /// lookup found its entry.
    var leases: [LocalLease] = []
    var leaseBounds: [(first: StreamEntryID, last: StreamEntryID)] = []
    var lastLeaseHit = 0
    /// No lease starts at or before the end of an older one (the usual case: lookups bisect).
    var leasesInOrder = true
    /// The newest entry any read brought, and the entries a later leased read named again while
    /// the worker still held them, kept until their outcome is planned with the newer lease or
    /// confirmed (`noteRead`): empty but after a failover.
    var newestRead: StreamEntryID?
    var rereadWhileHeld: Set<StreamEntryID> = []
    /// Moves to the pending list Redis has not confirmed yet (`QueueWorker.moveToPending`), and
    /// the serial of the last one.
    var pendingMoves: [PendingMove] = []
    var moveSerial: UInt64 = 0
    /// Lease writes Redis has not confirmed yet (`QueueWorker.leaseWrite`): empty but after a
    /// failover. Not capped, and bounded all the same: each write is made from a reply of a
    /// lease script that ran (a lease found gone, or taken over by a newer read), and names only
    /// entries this worker read. While Redis refuses these writes it refuses the lease scripts
    /// too (the same keys, rights and memory), so reads pause and no new writes are made.
    var pendingLeaseWrites: [PendingLeaseWrite] = []

    func setLeaseWrite(_ serial: UInt64, sending: Bool) {
        if let index = pendingLeaseWrites.firstIndex(where: { $0.serial == serial }) { pendingLeaseWrites[index].sending = sending }
    }
    /// Set after a leased read found nothing: the next read is the group's blocking read.
    var waitsForJobs = false
    var recoveringPending = true
    var pendingCursor = "0"
    var groupReady = false
    var claimCursor = "0-0"
    var claimInFlight = false
    /// The sorted sets (retry, scheduled) with a promote-script call in flight.
    var promotionsInFlight: Set<String> = []
    /// Reads paused after a failed read (`QueueWorker.pauseReads`), and how many failed in a row.
    var readPause: EventLoop.TimerID?
    var readFailures = 0
    /// Group creation retried after Redis refused it (`QueueWorker.retryGroup`), and how often in a row.
    var groupRetry: EventLoop.TimerID?
    var groupFailures = 0
    /// Consumers removed as idle with nothing pending (`--idle-consumer-timeout`).
    var consumersRemoved = 0
    /// The last Redis error and how often it repeated since (to log a repeat once per hundred).
    var lastError: String?
    var errorRepeats = 0
    /// The queue's Redis Cluster slot (its `{queue}` hash tag).
    let slot: Int
    /// Cluster redirects followed in a row without a read succeeding.
    var redirectsInARow = 0
    /// Its last read brought entries (or it has not read yet): it shares the read budget.
    var active = true
    /// Bytes per entry of this queue's replies, about: up at once, down slowly.
    var entryBytesEstimate = 512
    /// The stream's next trim (`QueueWorker.scheduleTrim`), and how many trims are in flight.
    var trimTimer: EventLoop.TimerID?
    var trimsInFlight = 0

    init(index: Int, keys: QueueKeys, logger: Logger) {
        self.index = index
        self.keys = keys
        self.logger = logger
        slot = RedisClusterSlot.of(queue: keys.queue)
    }

    /// Connected, the group in place: it may read.
    var canRead: Bool { groupReady && !replaying && readPause == nil && (reader?.isReady ?? false) }

    /// Connected, the group in place, and Redis not refusing its reads (ready as /readyz means it).
    var isReady: Bool { groupReady && readFailures == 0 && (writer?.isReady ?? false) }

    /// Updates the bytes-per-entry estimate from one reply.
    func noteReply(bytes: Int, entries: Int) {
        guard entries > 0 else { return }
        let average = bytes / entries
        entryBytesEstimate = average > entryBytesEstimate ? average : (entryBytesEstimate * 7 + average) / 8
    }

    func close(loop: EventLoop) {
        if let reconnectTimer { loop.cancel(reconnectTimer) }
        if let readPause { loop.cancel(readPause) }
        if let groupRetry { loop.cancel(groupRetry) }
        if let trimTimer { loop.cancel(trimTimer) }
        trimTimer = nil
        reader?.delegate = nil
        writer?.delegate = nil
        reader?.close()
        writer?.close()
    }
}

/// One app a worker sends for: its name (the job's `app` field), its pool and its job defaults.
public struct WorkerApp {
    public static let defaultName = "default"
    /// Appended to an app's name for its sandbox lane (metrics label its pool `APP/sandbox`).
    public static let sandboxSuffix = "/sandbox"
    /// Appended to an app's name for its broadcast lane (metrics label its pool `APP/broadcast`).
    public static let broadcastSuffix = "/broadcast"
    public let name: String
    public let pool: ConnectionPool
    public let defaults: JobDefaults
    /// With both APNs environments (`environment: both`): the sandbox pool, which gets what
    /// `pool` (production) answers 400 BadDeviceToken, once.
    public let sandboxPool: ConnectionPool?
    /// With a broadcast host: the pool the app's broadcast jobs (`channel_id`) go to.
    public let broadcastPool: ConnectionPool?

    public init(name: String, pool: ConnectionPool, defaults: JobDefaults, sandboxPool: ConnectionPool? = nil,
                broadcastPool: ConnectionPool? = nil) {
        self.name = name
        self.pool = pool
        self.defaults = defaults
        self.sandboxPool = sandboxPool
        self.broadcastPool = broadcastPool
    }
}

/// An app's pool, its job defaults, and whether APNs refused its credentials. Loop-confined.
public final class AppLane {
    public let name: String
    public let pool: ConnectionPool
    public let defaults: JobDefaults
    /// Set when APNs refused this app's credentials.
    public internal(set) var stoppedReason: String?

    init(app: WorkerApp, queue: String) {
        name = app.name
        pool = app.pool
        var defaults = app.defaults
        defaults.apnsIDNamespace = queue
        self.defaults = defaults
    }
}
