import APNs
import Logging
import Observability
import Queue
import Transport

/// Herald's Redis consumer on one event loop: it reads jobs from a Redis stream in batches,
/// feeds them to `DeliveryRules`, hands the notifications the rules pick to each app's
/// `ConnectionPool`, and writes the batches of outcomes the rules produce.
///
/// Only the I/O lives here: the Redis connection pair and its reconnects, the consumer group,
/// XREADGROUP (the pending list first), XAUTOCLAIM and XPENDING, the MULTI/EXEC of each batch,
/// and the timers (retry promotion, claims, pauses, drain). Every decision about a job (collapse,
/// expiry, resend, retry, dead letter, feedback, hand-back, what to acknowledge when) is made by
/// `DeliveryRules`, which has no sockets and is tested on its own with random event sequences.
/// The reader never asks for more entries than the pools have free stream slots plus a small
/// read-ahead, so a backlog of millions costs no memory here. Loop-confined.
public final class QueueWorker: ConnectionPoolDelegate, RedisConnectionDelegate, TickObserver {
    public let loop: EventLoop
    public let configuration: WorkerConfiguration
    /// One lane per app: its pool (own team/key or certificate, own connections) and its defaults.
    public let lanes: [AppLane]
    /// The first app's pool (the only one in a single-app worker).
    public var pool: ConnectionPool { lanes[0].pool }
    private let endpoint: RedisEndpoint
    private let time: TimeSource
    private var logger: Logger
    /// The delivery rules: every job's state and outcome.
    public let rules: DeliveryRules

    /// What this loop did: the rules' counts, and the Redis errors seen here.
    public var counters: WorkerCounters {
        var counters = rules.counters
        counters.redisErrors = redisErrors
        counters.consumersRemoved = consumersRemoved
        return counters
    }
    private var redisErrors = 0
    /// Called once when the worker has stopped (drained, or timed out draining).
    public var onStopped: (() -> Void)?

    // Redis: one connection for blocking reads, one for everything else.
    private var reader: RedisConnection?
    private var writer: RedisConnection?
    private var redisFailures = 0
    private var reconnectTimer: EventLoop.TimerID?
    private var readInFlight = false
    private var recoveringPending = true
    private var pendingCursor = "0"
    private var groupReady = false
    private var pauseTimer: EventLoop.TimerID?
    private var pauseFailures = 0
    private var retryTimer: EventLoop.TimerID?
    private var claimTimer: EventLoop.TimerID?
    private var claimCursor = "0-0"
    private var claimInFlight = false
    private var batchScheduled = false
    /// Commands Redis refused in a row (NOPERM, WRONGTYPE …): reads and group creation wait
    /// longer each time instead of asking again at once.
    private var refusals = 0
    private var refusalTimer: EventLoop.TimerID?
    /// NOPERM answers already logged at error level (one line per missing permission).
    private var permissionsLogged: Set<String> = []
    private var idleConsumerTimer: EventLoop.TimerID?
    /// Consumers removed because they were idle and owned nothing (`--idle-consumer-timeout`).
    public private(set) var consumersRemoved = 0
    private var random = SystemRandomNumberGenerator()
    /// Read once: the per-notification path tests a Bool, not the logger.
    private lazy var traceNotifications = logger.logLevel <= .trace
    private var wallClock: Int64 = 0
    private var wallClockStampedAt: Int64 = -1

    private enum Phase { case starting, running, draining, stopped }
    private var phase = Phase.starting
    private var drainTimer: EventLoop.TimerID?
    /// Set when APNs refused every app's credentials: nothing is read.
    public var stoppedSendingReason: String? {
        lanes.allSatisfy { $0.stoppedReason != nil } ? lanes[0].stoppedReason : nil
    }

    /// A single-app worker: jobs without an `app` field (or `app` = `default`) use `pool`.
    public convenience init(loop: EventLoop, configuration: WorkerConfiguration, pool: ConnectionPool, redis: RedisEndpoint,
                            time: TimeSource = .system, logger: Logger) {
        self.init(loop: loop, configuration: configuration,
                  apps: [WorkerApp(name: WorkerApp.defaultName, pool: pool, defaults: configuration.defaults)],
                  redis: redis, time: time, logger: logger)
    }

    /// A worker for several apps; a job names its app with the `app` field (default `default`).
    public init(loop: EventLoop, configuration: WorkerConfiguration, apps: [WorkerApp], redis: RedisEndpoint,
                time: TimeSource = .system, logger: Logger) {
        precondition(!apps.isEmpty, "a worker needs at least one app")
        self.loop = loop
        self.configuration = configuration
        lanes = apps.map { AppLane(app: $0, queue: configuration.keys.queue) }
        self.endpoint = redis
        self.time = time
        self.logger = logger
        self.logger[metadataKey: "queue"] = "\(configuration.keys.queue)"
        self.logger[metadataKey: "consumer"] = "\(configuration.consumer)"
        var seed = SystemRandomNumberGenerator()
        rules = DeliveryRules(policy: DeliveryPolicy(configuration),
                              apps: lanes.map { ($0.name, $0.defaults) }, seed: seed.next())
        for lane in lanes { lane.pool.delegate = self }
    }

    // MARK: lifecycle

    /// Connects to Redis and APNs and starts reading. Loop thread only.
    public func start() {
        phase = .running
        for lane in lanes { lane.pool.start() }
        connectRedis()
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
        if let pauseTimer { loop.cancel(pauseTimer) }
        if let idleConsumerTimer { loop.cancel(idleConsumerTimer) }
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

    private func checkDrained() {
        guard phase == .draining else { return }
        if inFlight == 0 && rules.writesSettled {
            finishStopping()
        }
    }

    private func finishStopping() {
        guard phase != .stopped else { return }
        phase = .stopped
        if let drainTimer { loop.cancel(drainTimer) }
        if let reconnectTimer { loop.cancel(reconnectTimer) }
        for lane in lanes { lane.pool.stop() }
        reader?.delegate = nil
        writer?.delegate = nil
        reader?.close()
        writer?.close()
        logger.info("stopped", metadata: ["accepted": "\(rules.counters.accepted)", "jobs_finished": "\(rules.counters.jobsFinished)"])
        onStopped?()
    }

    /// Redis reachable, the group in place, reading (not starting, draining or stopped, and Redis
    /// not refusing the reads: NOPERM, LOADING, WRONGTYPE).
    public var isReady: Bool {
        phase == .running && groupReady && (writer?.isReady ?? false) && haltedApps.isEmpty && refusals == 0
    }

    /// Apps whose credentials APNs refused (their pools probe again by themselves).
    public var haltedApps: [String] { lanes.filter { $0.stoppedReason != nil }.map(\.name) }

    /// Reads the queue's depth, pending entries, lag and the sizes of the other keys (one pipeline).
    public func sampleQueue(_ completion: @escaping (QueueSample?) -> Void) {
        guard let writer, writer.isReady else { completion(nil); return }
        let keys = configuration.keys
        var sample = QueueSample()
        writer.send(["XLEN", keys.jobs]) { result in sample.depth = Int(result.integerValue ?? 0) }
        writer.send(["XINFO", "GROUPS", keys.jobs]) { result in
            // Read as `herald stats` reads it (QueueInspector), minus what a gauge does not need.
            guard case .success(.array(let groups)) = result,
                  let info = groups.map(RedisReplyReader.map).first(where: { $0["name"]?.string == keys.group }) else { return }
            sample.pending = Int(info["pending"]?.integer ?? 0)
            // XLEN was answered first (replies come in order): depth is already in the sample.
            sample.lag = QueueLag.of(reported: info["lag"]?.integer, depth: sample.depth, pending: sample.pending).lag
        }
        writer.send(["ZCARD", keys.retry]) { result in sample.retrySetSize = Int(result.integerValue ?? 0) }
        writer.send(["XLEN", keys.dead]) { result in sample.deadLetters = Int(result.integerValue ?? 0) }
        writer.send(["XLEN", keys.feedback]) { result in
            sample.feedback = Int(result.integerValue ?? 0)
            completion(result.isSuccess ? sample : nil)
        }
    }

    /// Wall-clock ms for the rules, read at most once per loop iteration (the loop's monotonic
    /// time tells when it moved on), so a burst of answers costs one clock read.
    private func wallNow() -> Int64 {
        if loop.now != wallClockStampedAt {
            wallClockStampedAt = loop.now
            wallClock = time.nowMilliseconds()
        }
        return wallClock
    }

    // MARK: Redis connections

    private func connectRedis() {
        reconnectTimer = nil
        guard phase == .running || phase == .draining else { return }
        let reader = RedisConnection(loop: loop, endpoint: endpoint)
        let writer = RedisConnection(loop: loop, endpoint: endpoint)
        reader.delegate = self
        writer.delegate = self
        self.reader = reader
        self.writer = writer
        readInFlight = false
        claimInFlight = false
        groupReady = false
        reader.connect()
        writer.connect()
    }

    public func redisConnectionIsReady(_ connection: RedisConnection) {
        guard let reader, let writer, reader.isReady, writer.isReady else { return }
        if redisFailures > 0 { logger.info("Redis connection restored", metadata: ["redis": "\(endpoint)"]) }
        redisFailures = 0
        ensureGroup(replayingUnconfirmed: true)
    }

    public func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        guard connection === reader || connection === writer else { return }
        redisErrors += 1
        // Both go: the pair is replaced together.
        let other = connection === reader ? writer : reader
        reader = nil
        writer = nil
        other?.delegate = nil
        other?.close()
        readInFlight = false
        claimInFlight = false
        guard phase == .running || phase == .draining else { return }
        redisFailures += 1
        let delay = Backoff.reconnect.delayMilliseconds(afterFailures: redisFailures, using: &random)
        // One clear line when Redis goes away; the retries after it say the same, so they go to debug
        // (with a reminder every tenth) instead of filling the log every few seconds.
        if redisFailures == 1 {
            logger.warning("Redis connection down", metadata: ["error": "\(error)", "reconnect_ms": "\(delay)"])
        } else if redisFailures % 10 == 0 {
            logger.warning("Redis still unreachable", metadata: ["error": "\(error)", "failures": "\(redisFailures)", "reconnect_ms": "\(delay)"])
        } else {
            logger.debug("Redis connection attempt failed", metadata: ["error": "\(error)", "failures": "\(redisFailures)", "reconnect_ms": "\(delay)"])
        }
        reconnectTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in self?.connectRedis() }
    }

    /// Creates the group if missing; then, after a reconnect, writes again the outcomes Redis never
    /// confirmed, before the first read (their entries stay held, so re-reading our pending list
    /// cannot send them again).
    private func ensureGroup(replayingUnconfirmed: Bool = false) {
        let keys = configuration.keys
        writer?.send(["XGROUP", "CREATE", keys.jobs, keys.group, "0", "MKSTREAM"]) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(.error(let message)) where !message.hasPrefix("BUSYGROUP"):
                // Reading without the group would only answer NOGROUP and ask to create it again:
                // try again later, longer each time.
                self.logger.error("cannot create the consumer group", metadata: ["error": "\(message)"].merging(self.advice(for: message)) { a, _ in a })
                self.redisErrors += 1
                self.afterRefusal { $0.ensureGroup(replayingUnconfirmed: replayingUnconfirmed) }
                return
            case .failure:
                return
            default:
                break
            }
            self.groupReady = true
            if replayingUnconfirmed {
                for batch in self.rules.redisReconnected() { self.write(batch) }
            }
            self.recoveringPending = true
            self.pendingCursor = "0"
            self.maybeRead()
        }
    }

    private func handleRedisError(_ message: String) {
        redisErrors += 1
        if message.hasPrefix("NOGROUP") {
            // Redis lost the stream or group (restart without data): recreate it and go on.
            logger.warning("consumer group missing; recreating it", metadata: ["error": "\(message)"])
            groupReady = false
            ensureGroup()
        } else if message.hasPrefix("NOPERM") {
            // The same missing permission fails every retry: one line at error level, then debug.
            if permissionsLogged.count < 64 && permissionsLogged.insert(message).inserted {
                logger.error("Redis refused a command for lack of permission", metadata: ["error": "\(message)"].merging(advice(for: message)) { a, _ in a })
            } else {
                logger.debug("Redis refused a command for lack of permission", metadata: ["error": "\(message)"])
            }
        } else {
            logger.error("Redis error", metadata: ["error": "\(message)"])
        }
    }

    /// What to do about a refusal, for its log line.
    private func advice(for message: String) -> Logger.Metadata {
        guard message.hasPrefix("NOPERM") else { return [:] }
        return ["fix": "give the worker's Redis ACL user the permission (docs/operations.md, \"Redis ACL users\"); the worker retries with a backoff"]
    }

    /// Runs `action` after a backoff that grows with each refusal in a row (1 s up to 60 s), so a
    /// command Redis keeps refusing is not sent again in a tight loop.
    private func afterRefusal(_ action: @escaping (QueueWorker) -> Void) {
        refusals += 1
        if let refusalTimer { loop.cancel(refusalTimer) }
        let delay = Backoff.reconnect.delayMilliseconds(afterFailures: refusals, using: &random)
        refusalTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in
            guard let self else { return }
            self.refusalTimer = nil
            action(self)
        }
    }

    // MARK: reading

    /// Notifications in flight on every app's connections.
    public var inFlight: Int { lanes.reduce(0) { $0 + $1.pool.inFlight } }

    private func readCapacity() -> Int {
        var free = 0
        for lane in lanes where lane.stoppedReason == nil { free += lane.pool.freeSlots }
        // A byte budget per read: fewer entries when entries are big (the estimate follows the
        // replies; the reply reader bounds any single reply whatever this guess).
        let byBytes = max(1, QueueWorker.readByteBudget / max(1, entryBytesEstimate))
        return min(configuration.batch, byBytes, free + configuration.readAhead - rules.queuedTokens)
    }

    /// Bytes one XREADGROUP reply should hold, about.
    static let readByteBudget = 4 << 20
    private var entryBytesEstimate = 512

    /// Updates the bytes-per-entry estimate from one reply: up at once, down slowly.
    private func noteReply(bytes: Int, entries: Int) {
        guard entries > 0 else { return }
        let average = bytes / entries
        entryBytesEstimate = average > entryBytesEstimate ? average : (entryBytesEstimate * 7 + average) / 8
    }

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

    private func maybeRead() {
        guard phase == .running, stoppedSendingReason == nil, groupReady, !readInFlight, refusalTimer == nil,
              let reader, reader.isReady else { return }
        if mostConnectionsDown {
            pauseReading()
            return
        }
        let count = readCapacity()
        guard count > 0 else { return }
        readInFlight = true
        let keys = configuration.keys
        let id = recoveringPending ? pendingCursor : ">"
        var arguments: [String] = ["XREADGROUP", "GROUP", keys.group, configuration.consumer, "COUNT", String(count)]
        if !recoveringPending { arguments += ["BLOCK", String(configuration.blockMilliseconds)] }
        arguments += ["STREAMS", keys.jobs, id]
        // The batch is read straight from the connection's reply tape: no RedisReply tree per entry.
        reader.sendRaw(arguments) { [weak self] result in
            guard let self else { return }
            self.readInFlight = false
            switch result.map({ tape in
                let read = RedisReplyReader.readEntries(tape: tape)
                if case .success(let entries) = read { self.noteReply(bytes: tape.byteCount, entries: entries.count) }
                return read
            }) {
            case .failure:
                return
            case .success(.failure(let error)):
                if case .server(let message) = error {
                    self.handleRedisError(message)
                    // NOGROUP recreates the group, which reads again; anything else waits.
                    if !message.hasPrefix("NOGROUP") { self.afterRefusal { $0.maybeRead() } }
                    return
                }
            case .success(.success(let read)):
                self.refusals = 0
                let (entries, deferredAfter) = QueueWorker.deferringOverBudget(read)
                if self.recoveringPending {
                    if read.isEmpty {
                        self.recoveringPending = false
                    } else if let last = entries.last {
                        self.pendingCursor = last.id.description
                    }
                }
                if let deferredAfter {
                    // The reply outgrew its byte budget: the entries past it stay pending and are
                    // read again, fewer at a time (the estimate just grew), from the pending list.
                    self.recoveringPending = true
                    self.pendingCursor = deferredAfter.description
                }
                self.take(entries, deliveries: nil)
            }
            self.maybeRead()
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
    private func take(_ entries: [StreamRecord], deliveries: [StreamEntryID: Int]?) {
        rules.entriesArrived(entries, deliveries: deliveries, now: wallNow())
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
            guard pool.send(PendingRequest(notification: send.notification, context: send.context, attempts: send.attempts)) else {
                rules.sendRefused(send, lane: laneIndex)
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
                "context": "\(request.context)", "token": "\(request.notification.deviceToken.prefix(8))…",
                "apns_id": "\(request.notification.apnsID ?? "")", "attempts": "\(request.attempts)", "outcome": "\(outcome)",
            ])
        }
        if rules.answered(context: request.context, attempts: request.attempts, outcome: outcome, now: wallNow()),
           let laneIndex = lanes.firstIndex(where: { $0.pool === pool }) {
            pump(laneIndex)
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
        guard let batch = rules.takeBatch() else { return }
        write(batch)
    }

    /// One MULTI/EXEC per tick: the outcome writes of every entry finished in it, then XACK and XDEL.
    /// Not confirmed (connection lost): the rules keep the batch, written again after reconnecting.
    private func write(_ batch: OutcomeBatch) {
        guard let writer, writer.isReady, groupReady else { return }
        batch.send(on: writer, keys: configuration.keys, maxLength: configuration.deadLetterMaxLength) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(.array(let replies)):
                for reply in replies { if case .error(let message) = reply { self.handleRedisError(message) } }
                self.rules.confirmed(batch.sequence)
                if self.phase == .draining { self.checkDrained() }
            case .success(.error(let message)):
                self.handleRedisError(message)
            default:
                break  // connection lost: written again after reconnecting
            }
        }
    }

    // MARK: retries and reclaiming

    private func scheduleRetryPromotion() {
        retryTimer = loop.schedule(afterMilliseconds: configuration.retryPollMilliseconds) { [weak self] in
            guard let self, self.phase == .running else { return }
            if let writer = self.writer, writer.isReady {
                let keys = self.configuration.keys
                writer.send(["EVAL", QueueScripts.promoteDueRetries, "2", keys.retry, keys.jobs,
                             String(self.time.nowMilliseconds()), "1000"]) { [weak self] result in
                    if case .success(.error(let message)) = result { self?.handleRedisError(message) }
                }
            }
            self.scheduleRetryPromotion()
        }
    }

    private func scheduleClaim() {
        let interval = max(500, configuration.claimIdleMilliseconds / 4)
        claimTimer = loop.schedule(afterMilliseconds: interval) { [weak self] in
            guard let self, self.phase == .running else { return }
            self.claimIdle()
            self.scheduleClaim()
        }
    }

    /// Every quarter of `--idle-consumer-timeout` (at most every 5 minutes), removes the group's
    /// consumers that own nothing and were idle that long: workers that were scaled down or
    /// replaced, which would otherwise pile up in XINFO CONSUMERS and `herald stats` forever.
    private func scheduleIdleConsumerRemoval() {
        let timeout = configuration.idleConsumerTimeoutMilliseconds
        guard timeout > 0 else { return }
        let interval = min(300_000, max(250, timeout / 4))
        idleConsumerTimer = loop.schedule(afterMilliseconds: interval) { [weak self] in
            guard let self, self.phase == .running else { return }
            self.removeIdleConsumers()
            self.scheduleIdleConsumerRemoval()
        }
    }

    private func removeIdleConsumers() {
        guard groupReady, let writer, writer.isReady else { return }
        let keys = configuration.keys
        writer.send(["EVAL", QueueScripts.removeIdleConsumers, "1", keys.jobs, keys.group, configuration.consumer,
                     String(configuration.idleConsumerTimeoutMilliseconds)]) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(.array(let names)) where !names.isEmpty:
                self.consumersRemoved += names.count
                self.logger.info("removed idle consumers that owned no pending entries",
                                 metadata: ["consumers": "\(names.compactMap(\.string).joined(separator: ","))"])
            case .success(.error(let message)):
                self.handleRedisError(message)
            default:
                break
            }
        }
    }

    /// XAUTOCLAIM entries other workers left idle (they crashed), then read their delivery counts.
    private func claimIdle() {
        guard stoppedSendingReason == nil, groupReady, !claimInFlight, let writer, writer.isReady else { return }
        let count = readCapacity()
        guard count > 0 else { return }
        claimInFlight = true
        let keys = configuration.keys
        // Read from the tape like XREADGROUP's reply, so an outsized claimed value arrives cut and marked.
        writer.sendRaw(["XAUTOCLAIM", keys.jobs, keys.group, configuration.consumer, String(configuration.claimIdleMilliseconds),
                        claimCursor, "COUNT", String(count)]) { [weak self] result in
            guard let self else { return }
            guard case .success(let tape) = result else { self.claimInFlight = false; return }
            if tape.nodes.first?.kind == .error {
                self.claimInFlight = false
                self.handleRedisError(tape.withBytes(of: 0) { String(decoding: $0, as: UTF8.self) })
                return
            }
            guard let (cursor, claimed) = RedisReplyReader.claimedEntries(tape: tape) else { self.claimInFlight = false; return }
            self.claimCursor = cursor
            let entries = claimed.filter { !self.rules.isHeld($0.id) }
            guard let first = entries.first?.id, let last = entries.last?.id else { self.claimInFlight = false; return }
            self.logger.info("reclaimed idle entries", metadata: ["count": "\(entries.count)"])
            writer.send(["XPENDING", keys.jobs, keys.group, first.description, last.description,
                         String(entries.count * 2 + 16), self.configuration.consumer]) { [weak self] result in
                guard let self else { return }
                self.claimInFlight = false
                var deliveries: [StreamEntryID: Int] = [:]
                if case .success(.array(let rows)) = result {
                    for row in rows {
                        guard case .array(let columns) = row, columns.count >= 4, case .bulk(let idBytes) = columns[0],
                              let id = StreamEntryID(bytes: idBytes), let count = columns[3].integer else { continue }
                        deliveries[id] = Int(clamping: count)
                    }
                }
                self.take(entries, deliveries: deliveries)
            }
        }
    }
}

/// One app a worker sends for: its name (the job's `app` field), its pool and its job defaults.
public struct WorkerApp {
    public static let defaultName = "default"
    public let name: String
    public let pool: ConnectionPool
    public let defaults: JobDefaults

    public init(name: String, pool: ConnectionPool, defaults: JobDefaults) {
        self.name = name
        self.pool = pool
        self.defaults = defaults
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
