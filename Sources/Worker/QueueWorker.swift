import APNs
import Logging
import Observability
import Queue
import Transport

/// Herald's main job on one event loop: read jobs from a Redis stream in batches, send their
/// notifications through a `ConnectionPool`, and give every job a final outcome in Redis.
///
/// At least once: an entry is acknowledged (XACK + XDEL, with the dead-letter, feedback and retry
/// writes of the same jobs in one MULTI/EXEC) only after every token of it has an outcome:
/// accepted, dead-lettered, reported as a dead token, superseded, or written to the retry set.
/// The reader never asks for more entries than the pool has free stream slots plus a small
/// read-ahead, so a backlog of millions costs no memory here. Loop-confined.
public final class QueueWorker: ConnectionPoolDelegate, RedisConnectionDelegate, TickObserver {
    public let loop: EventLoop
    public let configuration: WorkerConfiguration
    /// One lane per app: its pool (own team/key or certificate, own connections) and its queue of
    /// tokens waiting for a stream slot.
    public let lanes: [AppLane]
    private let laneByName: [String: Int]
    /// The first app's pool (the only one in a single-app worker).
    public var pool: ConnectionPool { lanes[0].pool }
    private let endpoint: RedisEndpoint
    private let time: TimeSource
    private var logger: Logger

    public private(set) var counters = WorkerCounters()
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

    // Jobs held in memory and what waits to be written.
    private var jobs: [JobRecord?] = []
    private var freeJobIndices: [Int] = []
    private var heldEntries = Set<StreamEntryID>()
    private var queuedCollapse: [String: UInt64] = [:]
    private var acceptedCollapse: [String: StreamEntryID] = [:]
    private var finishing: [Finalization] = []
    private var unconfirmed: [[Finalization]] = []
    private var finalizationScheduled = false
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

    /// One job's progress: how many tokens still wait for an outcome, and what the others got.
    final class JobRecord {
        let job: Job
        let lane: Int
        var remaining: Int
        /// Per token, set when a newer job with its collapse id arrived; empty until one does.
        private(set) var superseded: [Bool] = []

        func isSuperseded(_ tokenIndex: Int) -> Bool {
            !superseded.isEmpty && superseded[tokenIndex]
        }

        /// A queued token superseded by a newer job: counted when the queue reaches it.
        func markSuperseded(_ tokenIndex: Int) {
            if superseded.isEmpty { superseded = Array(repeating: false, count: job.tokens.count) }
            superseded[tokenIndex] = true
        }
        var feedback: [(token: String, reason: String, timestamp: Int64?)] = []
        var deadLetters: [(token: String, reason: String, message: String, status: Int)] = []
        var retryTokens: [String] = []
        var retryDelay: Int64 = 0
        var attempts: Int
        /// Tokens put back unsent on drain (in `retryTokens`, but not retries).
        var handedBack = 0

        init(job: Job, lane: Int) {
            self.job = job
            self.lane = lane
            remaining = job.tokens.count
            attempts = job.attempts
        }
    }

    /// The Redis writes that end one job (or one malformed entry).
    struct Finalization {
        var entryID: StreamEntryID
        var commands: [[RedisArgument]]
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
        var names: [String: Int] = [:]
        for (index, app) in apps.enumerated() { names[app.name] = index }
        laneByName = names
        self.endpoint = redis
        self.time = time
        self.logger = logger
        self.logger[metadataKey: "queue"] = "\(configuration.keys.queue)"
        self.logger[metadataKey: "consumer"] = "\(configuration.consumer)"
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
    }

    /// Stops reading, lets in-flight notifications finish within the drain timeout, acknowledges
    /// what finished, hands back what was never sent, then calls `onStopped`.
    public func drain() {
        guard phase == .running || phase == .starting else { return }
        phase = .draining
        logger.info("draining", metadata: ["in_flight": "\(inFlight)", "queued": "\(queuedTokens)"])
        if let retryTimer { loop.cancel(retryTimer) }
        if let claimTimer { loop.cancel(claimTimer) }
        if let pauseTimer { loop.cancel(pauseTimer) }
        handBackQueued()
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
        if inFlight == 0 && finishing.isEmpty && unconfirmed.isEmpty {
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
        logger.info("stopped", metadata: ["accepted": "\(counters.accepted)", "jobs_finished": "\(counters.jobsFinished)"])
        onStopped?()
    }

    /// Redis reachable, the group in place, reading (not starting, draining or stopped).
    public var isReady: Bool {
        phase == .running && groupReady && (writer?.isReady ?? false) && haltedApps.isEmpty
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
            sample.lag = Int(info["lag"]?.integer ?? 0)
        }
        writer.send(["ZCARD", keys.retry]) { result in sample.retrySetSize = Int(result.integerValue ?? 0) }
        writer.send(["XLEN", keys.dead]) { result in sample.deadLetters = Int(result.integerValue ?? 0) }
        writer.send(["XLEN", keys.feedback]) { result in
            sample.feedback = Int(result.integerValue ?? 0)
            completion(result.isSuccess ? sample : nil)
        }
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
        counters.redisErrors += 1
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
        logger.warning("Redis connection down", metadata: ["error": "\(error)", "reconnect_ms": "\(delay)"])
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
                self.logger.error("cannot create the consumer group", metadata: ["error": "\(message)"])
                self.counters.redisErrors += 1
            case .failure:
                return
            default:
                break
            }
            self.groupReady = true
            if replayingUnconfirmed { self.replayUnconfirmed() }
            self.recoveringPending = true
            self.pendingCursor = "0"
            self.maybeRead()
        }
    }

    private func handleRedisError(_ message: String) {
        counters.redisErrors += 1
        if message.hasPrefix("NOGROUP") {
            // Redis lost the stream or group (restart without data): recreate it and go on.
            logger.warning("consumer group missing; recreating it", metadata: ["error": "\(message)"])
            groupReady = false
            ensureGroup()
        } else {
            logger.error("Redis error", metadata: ["error": "\(message)"])
        }
    }

    // MARK: reading

    /// Tokens waiting locally for a stream slot.
    private var queuedTokens: Int { lanes.reduce(0) { $0 + $1.queued } }

    /// Notifications in flight on every app's connections.
    public var inFlight: Int { lanes.reduce(0) { $0 + $1.pool.inFlight } }

    private func readCapacity() -> Int {
        var free = 0
        for lane in lanes where lane.stoppedReason == nil { free += lane.pool.freeSlots }
        return min(configuration.batch, free + configuration.readAhead - queuedTokens)
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
        guard phase == .running, stoppedSendingReason == nil, groupReady, !readInFlight,
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
            switch result.map({ RedisReplyReader.readEntries(tape: $0) }) {
            case .failure:
                return
            case .success(.failure(let error)):
                if case .server(let message) = error { self.handleRedisError(message) }
            case .success(.success(let entries)):
                if self.recoveringPending {
                    if entries.isEmpty {
                        self.recoveringPending = false
                    } else if let last = entries.last {
                        self.pendingCursor = last.id.description
                    }
                }
                self.accept(entries, deliveries: nil)
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

    /// Takes in entries read or claimed: decodes, dead-letters the malformed, queues the rest.
    private func accept(_ entries: [StreamRecord], deliveries: [StreamEntryID: Int]?) {
        for entry in entries {
            // Held from here on: every path below ends in admit() or finalize(), and the entry
            // leaves `heldEntries` only when EXEC confirms its acknowledgement.
            guard heldEntries.insert(entry.id).inserted else { continue }
            let fields = entry.fields
            guard !fields.isEmpty else {
                // Deleted while pending: nothing to deliver; acknowledge it.
                finalize(Finalization(entryID: entry.id, commands: []))
                continue
            }
            counters.jobsRead += 1
            if let deliveries, let count = deliveries[entry.id], count > configuration.maxDeliveries {
                deadLetterEntry(entry.id, fields: fields, reason: "max_deliveries",
                                message: "The entry was delivered to workers \(count) times without an outcome (more than --max-deliveries \(configuration.maxDeliveries)); a worker may be crashing on it.",
                                status: 0, attempts: 0)
                continue
            }
            let appName = fields.first { $0.name == JobField.app }.map { String(decoding: $0.value, as: UTF8.self) }
            guard let laneIndex = laneByName[appName.flatMap { $0.isEmpty ? nil : $0 } ?? WorkerApp.defaultName] else {
                deadLetterEntry(entry.id, fields: fields, reason: "unknown_app",
                                message: "The job names app \(DeadLetterText.quoted(appName ?? "")), which this worker is not configured for (apps: \(lanes.map(\.name).joined(separator: ", "))).",
                                status: 0, attempts: 0)
                continue
            }
            switch JobDecoder.decode(entryID: entry.id, fields: fields, defaults: lanes[laneIndex].defaults) {
            case .failure(let error):
                deadLetterEntry(entry.id, fields: fields, reason: error.code, message: error.description, status: 0, attempts: 0)
            case .success(let job):
                counters.unknownFields += job.unknownFields
                admit(job, lane: laneIndex)
            }
        }
        pump()
    }

    private func admit(_ job: Job, lane laneIndex: Int) {
        let record = JobRecord(job: job, lane: laneIndex)
        let lane = lanes[laneIndex]
        let index: Int
        if let free = freeJobIndices.popLast() {
            index = free
            jobs[index] = record
        } else {
            index = jobs.count
            jobs.append(record)
        }
        for token in job.invalidTokens {
            record.deadLetters.append((token.token, token.error.code, token.error.description, 0))
        }
        let origin = job.originID
        for (tokenIndex, token) in job.tokens.enumerated() {
            let context = UInt64(index) << 16 | UInt64(tokenIndex)
            if let collapseID = job.template.collapseID {
                let key = QueueWorker.collapseKey(collapseID, token)
                if let newest = acceptedCollapse[key], newest > origin {
                    // A newer update with this collapse id already reached the device.
                    supersedeAtAdmission(record)
                    continue
                }
                if let older = queuedCollapse[key], let olderRecord = jobRecord(for: older) {
                    let olderOrigin = olderRecord.job.originID
                    if olderOrigin < origin {
                        olderRecord.markSuperseded(Int(older & 0xFFFF))
                    } else {
                        supersedeAtAdmission(record)
                        continue
                    }
                }
                queuedCollapse[key] = context
            }
            if lane.stoppedReason != nil {
                // APNs refused this app's credentials: park the job in the retry set, never the dead letters.
                record.retryTokens.append(token)
                record.handedBack += 1
                record.retryDelay = max(record.retryDelay, QueueWorker.credentialsRetryMilliseconds)
                record.remaining -= 1
                continue
            }
            lane.enqueue(context)
        }
        if record.remaining == 0 { finish(index) }
    }

    private func jobRecord(for context: UInt64) -> JobRecord? {
        let index = Int(context >> 16)
        return index < jobs.count ? jobs[index] : nil
    }

    /// A token superseded before it was queued: its outcome is final at once.
    private func supersedeAtAdmission(_ record: JobRecord) {
        counters.superseded += 1
        record.remaining -= 1
    }

    /// The key of a collapsible notification: its collapse id and its device token (tokens are
    /// lowercase from `JobDecoder` on, so no folding here).
    static func collapseKey(_ collapseID: String, _ token: String) -> String {
        collapseID + "\u{0}" + token
    }

    // MARK: sending

    /// Moves queued tokens into free stream slots, app by app.
    private func pump() {
        guard phase != .stopped else { return }
        for lane in lanes where lane.stoppedReason == nil { pump(lane) }
        maybeRead()
    }

    private func pump(_ lane: AppLane) {
        let pool = lane.pool
        var free = pool.freeSlots
        while free > 0, let context = lane.next() {
            let index = Int(context >> 16)
            let tokenIndex = Int(context & 0xFFFF)
            guard let record = jobs[index] else { continue }
            let token = record.job.tokens[tokenIndex]
            if let collapseID = record.job.template.collapseID {
                let key = QueueWorker.collapseKey(collapseID, token)
                if queuedCollapse[key] == context { queuedCollapse[key] = nil }
            }
            if record.isSuperseded(tokenIndex) {
                counters.superseded += 1
                complete(index)
                continue
            }
            guard pool.send(PendingRequest(notification: record.job.notification(forToken: token), context: context, attempts: record.job.attempts)) else {
                lane.putBack()
                break
            }
            counters.notificationsSent += 1
            free -= 1
        }
        lane.compact()
    }

    public func poolHasFreeSlots(_ pool: ConnectionPool) {
        pump()
    }

    public func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome) {
        let index = Int(request.context >> 16)
        guard index < jobs.count, let record = jobs[index] else { return }
        let token = request.notification.deviceToken
        record.attempts = max(record.attempts, request.attempts)
        if traceNotifications {
            // One line per notification only at trace level; the token is shortened, never whole.
            logger.trace("notification answered", metadata: [
                "app": "\(lanes[record.lane].name)", "job": "\(record.job.entryID)", "token": "\(token.prefix(8))…",
                "apns_id": "\(request.notification.apnsID ?? "")", "attempts": "\(request.attempts)", "outcome": "\(outcome)",
            ])
        }
        switch outcome {
        case .accepted:
            counters.accepted += 1
            counters.endToEndLatency.record(milliseconds: acceptedWallClock() - record.job.enqueuedAt)
            if let collapseID = record.job.template.collapseID {
                let key = QueueWorker.collapseKey(collapseID, token)
                let origin = record.job.originID
                if acceptedCollapse.count > 200_000 { acceptedCollapse.removeAll() }
                if (acceptedCollapse[key] ?? StreamEntryID(milliseconds: 0, sequence: 0)) < origin { acceptedCollapse[key] = origin }
            }
        case .deadToken(_, let reason, let timestamp):
            counters.deadTokens += 1
            record.feedback.append((token, reason.rawValue, timestamp))
        case .permanent(let status, let reason):
            let word = reason?.rawValue ?? "Status\(status)"
            if status == 0 {
                // Herald's own verdict, before APNs saw it (e.g. headers larger than the header area).
                record.deadLetters.append((token, word, "Herald did not send the notification: its request headers do not fit in the 16 KiB header area of a request.", 0))
            } else {
                record.deadLetters.append((token, word, "APNs rejected the notification: \(status) \(word).", status))
            }
        case .retryTokenLater(let reason):
            scheduleRetry(record, token: token, request: request, status: 429, reason: reason?.rawValue ?? "TooManyRequests",
                          delay: Backoff.tokenRetry.delayMilliseconds(afterFailures: max(1, request.attempts), using: &random))
        case .retryOnAnotherConnection(let cause):
            if request.attempts <= configuration.immediateRetries, phase == .running, lanes[record.lane].stoppedReason == nil,
               pool.freeSlots > 0, pool.send(request) {
                // Resent at once on the connection with the most free slots; the job stays open.
                counters.notificationsSent += 1
                return
            }
            let (status, word) = QueueWorker.describe(cause)
            scheduleRetry(record, token: token, request: request, status: status, reason: word,
                          delay: Backoff.reconnect.delayMilliseconds(afterFailures: max(1, request.attempts), using: &random))
        case .refreshProviderToken:
            scheduleRetry(record, token: token, request: request, status: 403, reason: "ExpiredProviderToken",
                          delay: Backoff.reconnect.delayMilliseconds(afterFailures: max(1, request.attempts), using: &random))
        case .providerTokenUpdatesThrottled:
            scheduleRetry(record, token: token, request: request, status: 429, reason: "TooManyProviderTokenUpdates",
                          delay: 60_000)
        case .credentialsRejected:
            // Not the notification's fault: parked in the retry set, never dead-lettered, no attempt counted.
            record.retryTokens.append(token)
            record.handedBack += 1
            record.retryDelay = max(record.retryDelay, QueueWorker.credentialsRetryMilliseconds)
        }
        complete(index)
    }

    /// Wall-clock ms for latency, read at most once per loop iteration (the loop's monotonic
    /// time tells when it moved on), so a burst of answers costs one clock read.
    private func acceptedWallClock() -> Int64 {
        if loop.now != wallClockStampedAt {
            wallClockStampedAt = loop.now
            wallClock = time.nowMilliseconds()
        }
        return wallClock
    }

    static func describe(_ cause: RetryCause) -> (Int, String) {
        switch cause {
        case .status(let status, let reason): return (status, reason?.rawValue ?? "Status\(status)")
        case .goAway: return (0, "GoAway")
        case .streamReset(let code): return (0, "StreamReset\(code)")
        case .connectionLost: return (0, "ConnectionLost")
        case .refusedStream: return (0, "RefusedStream")
        case .responseTimeout: return (0, "ResponseTimeout")
        }
    }

    private func scheduleRetry(_ record: JobRecord, token: String, request: PendingRequest, status: Int, reason: String, delay: Int64) {
        let nowMs = time.nowMilliseconds()
        if request.attempts >= configuration.maxAttempts {
            record.deadLetters.append((token, "max_attempts",
                                       "Gave up after \(request.attempts) attempts (--max-attempts \(configuration.maxAttempts)); the last answer was \(status) \(reason).", status))
            return
        }
        if record.job.template.expiration == 0 {
            record.deadLetters.append((token, "expired",
                                       "The notification has apns-expiration 0 (deliver now or never) and APNs did not take it; the answer was \(status) \(reason).", status))
            return
        }
        if let expiration = record.job.template.expiration, expiration > 0, expiration.multipliedSaturating(by: 1000) <= nowMs.addingSaturating(delay) {
            record.deadLetters.append((token, "expired",
                                       "The notification's apns-expiration (\(expiration)) passes before it could be retried; the last answer was \(status) \(reason).", status))
            return
        }
        record.retryTokens.append(token)
        record.retryDelay = max(record.retryDelay, delay)
    }

    private func complete(_ index: Int) {
        guard let record = jobs[index] else { return }
        record.remaining -= 1
        if record.remaining <= 0 { finish(index) }
        if phase == .draining { checkDrained() }
    }

    /// How long jobs of an app whose credentials APNs refused wait in the retry set before the next look.
    static let credentialsRetryMilliseconds: Int64 = 60_000

    public func poolResumedSending(_ pool: ConnectionPool) {
        guard let lane = lanes.first(where: { $0.pool === pool }), lane.stoppedReason != nil else { return }
        lane.stoppedReason = nil
        logger.notice("probing APNs again for this app", metadata: ["app": "\(lane.name)"])
        pump()
    }

    public func pool(_ pool: ConnectionPool, stoppedSending reason: String) {
        guard let lane = lanes.first(where: { $0.pool === pool }) else { return }
        lane.stoppedReason = reason
        logger.critical("APNs refused this app's credentials: stopped sending for it; its jobs wait in the retry set, never in the dead letters",
                        metadata: ["app": "\(lane.name)", "reason": "\(reason)"])
        // Everything of this app not yet answered goes to the retry set, with no attempt counted.
        var parked: [UInt64] = []
        while let context = lane.next() { parked.append(context) }
        lane.compact()
        parked.append(contentsOf: pool.takeQueuedResends().map(\.context))
        _ = handBack(parked, delay: QueueWorker.credentialsRetryMilliseconds)
    }

    /// Puts unsent tokens in their jobs' retry entries (no attempt counted), each due after
    /// `delay`, and completes them; returns how many were handed back (superseded ones are not).
    private func handBack(_ contexts: [UInt64], delay: Int64) -> Int {
        var handedBack = 0
        for context in contexts {
            let index = Int(context >> 16)
            guard index < jobs.count, let record = jobs[index] else { continue }
            let tokenIndex = Int(context & 0xFFFF)
            if record.isSuperseded(tokenIndex) {
                counters.superseded += 1
            } else {
                record.retryTokens.append(record.job.tokens[tokenIndex])
                record.handedBack += 1
                record.retryDelay = max(record.retryDelay, delay)
                handedBack += 1
            }
            complete(index)
        }
        return handedBack
    }

    // MARK: finishing jobs

    private func finish(_ index: Int) {
        guard let record = jobs[index] else { return }
        jobs[index] = nil
        freeJobIndices.append(index)
        // The entry stays in `heldEntries` until its acknowledgement is confirmed (see `finalize`).
        counters.jobsFinished += 1
        let job = record.job
        if record.feedback.isEmpty && record.deadLetters.isEmpty && record.retryTokens.isEmpty {
            // Every token accepted or superseded (the usual job): only the acknowledgement.
            finalize(Finalization(entryID: job.entryID, commands: []))
            return
        }
        let keys = configuration.keys
        let nowMs = time.nowMilliseconds()
        var commands: [[RedisArgument]] = []
        for entry in record.feedback {
            var command: [RedisArgument] = ["XADD", .text(keys.feedback), "MAXLEN", "~", .integer(Int64(configuration.deadLetterMaxLength)), "*",
                                            "token", .text(entry.token), "topic", .text(job.template.topic), "reason", .text(entry.reason)]
            if let timestamp = entry.timestamp { command += ["timestamp", .integer(timestamp)] }
            // The entry the backend enqueued (a retried token's entry is one Herald wrote).
            command += ["job", .text(job.origin)]
            commands.append(command)
        }
        // One dead-letter entry per reason, holding the tokens that got it.
        var groups: [String: (message: String, status: Int, tokens: [String])] = [:]
        var order: [String] = []
        for entry in record.deadLetters {
            if groups[entry.reason] == nil { order.append(entry.reason); groups[entry.reason] = (entry.message, entry.status, []) }
            groups[entry.reason]!.tokens.append(entry.token)
        }
        for reason in order {
            let group = groups[reason]!
            counters.deadLettered += group.tokens.count
            counters.deadLetteredByReason[DeadLetterText.countingKey(reason: reason), default: 0] += group.tokens.count
            // Some of a fan-out job's tokens: like a retry, the letter carries the id its apns-ids
            // derive from as id_base, so a requeued letter of one token does not send the raw id.
            let idBase = job.explicitAPNsID == nil && job.apnsIDBase != job.origin ? job.apnsIDBase : nil
            commands.append(deadLetterCommand(fields: job.fields, tokens: group.tokens, reason: reason, message: group.message,
                                              status: group.status, attempts: record.attempts, now: nowMs, origin: job.origin,
                                              idBase: idBase))
        }
        if !record.retryTokens.isEmpty {
            counters.retried += record.retryTokens.count - record.handedBack
            var fields = job.fields.filter { $0.name != JobField.token && $0.name != JobField.tokens && !JobField.herald.contains($0.name) }
            if record.retryTokens.count == 1 {
                fields.append((JobField.token, Array(record.retryTokens[0].utf8)))
            } else {
                fields.append((JobField.tokens, Array(record.retryTokens.joined(separator: ",").utf8)))
            }
            fields.append((JobField.attempts, Array(String(record.attempts).utf8)))
            fields.append((JobField.origin, Array(job.origin.utf8)))
            if job.explicitAPNsID == nil, job.apnsIDBase != job.origin {
                // A fan-out job's id: its retries derive the same apns-ids, whatever tokens remain.
                fields.removeAll { $0.name == JobField.id }
                fields.append((JobField.idBase, Array(job.apnsIDBase.utf8)))
            }
            fields.append((JobField.enqueuedAt, Array(String(job.enqueuedAt).utf8)))
            fields.append((JobField.retryID, Array("\(job.entryID)/\(record.attempts)/\(UInt32.random(in: .min ... .max, using: &random))".utf8)))
            commands.append(["ZADD", .text(keys.retry), .integer(nowMs + record.retryDelay), .bytes(RetryEncoding.encode(fields))])
        }
        finalize(Finalization(entryID: job.entryID, commands: commands))
    }

    private func deadLetterCommand(fields: [(name: String, value: [UInt8])], tokens: [String]?, reason: String, message: String,
                                   status: Int, attempts: Int, now: Int64, origin: String? = nil,
                                   idBase: String? = nil) -> [RedisArgument] {
        var command: [RedisArgument] = ["XADD", .text(configuration.keys.dead), "MAXLEN", "~", .integer(Int64(configuration.deadLetterMaxLength)), "*"]
        // The job's own fields, without Herald's bookkeeping (the entry states attempts itself).
        for field in fields where !(tokens != nil && (field.name == JobField.token || field.name == JobField.tokens))
            && field.name != JobField.attempts && field.name != JobField.retryID
            && !(idBase != nil && (field.name == JobField.id || field.name == JobField.idBase)) {
            command += [.text(field.name), .bytes(field.value)]
        }
        if let idBase { command += [.text(JobField.idBase), .text(idBase)] }
        if let tokens {
            command += tokens.count == 1 ? [.text(JobField.token), .text(tokens[0])] : [.text(JobField.tokens), .text(tokens.joined(separator: ","))]
        }
        if let origin, !fields.contains(where: { $0.name == JobField.origin }) {
            // A requeued dead letter then derives the apns-ids its first attempt was sent with.
            command += [.text(JobField.origin), .text(origin)]
        }
        command += ["reason", .text(reason), "message", .text(message), "status", .integer(Int64(status)),
                    "attempts", .integer(Int64(attempts)), "failed_at", .integer(now)]
        return command
    }

    /// A malformed or hopeless entry: dead-letter it whole and acknowledge it.
    private func deadLetterEntry(_ id: StreamEntryID, fields: [(name: String, value: [UInt8])], reason: String, message: String, status: Int, attempts: Int) {
        counters.deadLettered += 1
        counters.deadLetteredByReason[DeadLetterText.countingKey(reason: reason), default: 0] += 1
        counters.jobsFinished += 1
        let command = deadLetterCommand(fields: fields, tokens: nil, reason: reason, message: message, status: status,
                                        attempts: attempts, now: time.nowMilliseconds())
        finalize(Finalization(entryID: id, commands: [command]))
    }

    /// Queues an entry's outcome writes for this tick's MULTI/EXEC. The entry counts as held until
    /// EXEC confirms them: re-reading our pending list after a Redis reconnect (or a claim) must
    /// not take in, and send again, an entry whose outcome is only waiting to be written.
    private func finalize(_ finalization: Finalization) {
        // The entry is already in `heldEntries` (accept() put it there).
        finishing.append(finalization)
        scheduleFinalization()
    }

    private func scheduleFinalization() {
        if finalizationScheduled { return }
        finalizationScheduled = true
        loop.callAtEndOfTick(self)
    }

    public func endOfTick() {
        finalizationScheduled = false
        guard !finishing.isEmpty else { return }
        let batch = finishing
        finishing.removeAll(keepingCapacity: true)
        unconfirmed.append(batch)
        write(batch)
    }

    /// One MULTI/EXEC per tick: the outcome writes of every job finished in it, then XACK and XDEL.
    private func write(_ batch: [Finalization]) {
        guard let writer, writer.isReady, groupReady else { return }  // replayed on reconnect
        let keys = configuration.keys
        writer.send(["MULTI"])
        for finalization in batch {
            for command in finalization.commands { writer.send(command) }
        }
        writer.send(argumentCount: 3 + batch.count, { builder in
            builder.add("XACK"); builder.add(keys.jobs); builder.add(keys.group)
            for finalization in batch { builder.add(entryMilliseconds: finalization.entryID.milliseconds, sequence: finalization.entryID.sequence) }
        })
        writer.send(argumentCount: 2 + batch.count, { builder in
            builder.add("XDEL"); builder.add(keys.jobs)
            for finalization in batch { builder.add(entryMilliseconds: finalization.entryID.milliseconds, sequence: finalization.entryID.sequence) }
        })
        writer.send(["EXEC"]) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(.array(let replies)):
                for reply in replies { if case .error(let message) = reply { self.handleRedisError(message) } }
                if let position = self.unconfirmed.firstIndex(where: { $0.first?.entryID == batch.first?.entryID }) {
                    self.unconfirmed.remove(at: position)
                }
                for finalization in batch { self.heldEntries.remove(finalization.entryID) }
                if self.phase == .draining { self.checkDrained() }
            case .success(.error(let message)):
                self.handleRedisError(message)
            default:
                break  // connection lost: replayed after reconnecting
            }
        }
    }

    private func replayUnconfirmed() {
        for batch in unconfirmed { write(batch) }
    }

    // MARK: draining

    /// Tokens never sent go back to the queue (retry set, due now) so other workers take them at once.
    private func handBackQueued() {
        var contexts: [UInt64] = []
        for lane in lanes {
            while let context = lane.next() { contexts.append(context) }
            lane.compact()
        }
        let handedBack = handBack(contexts, delay: 0)
        counters.handedBack += handedBack
        if handedBack > 0 { logger.info("handed back unsent notifications", metadata: ["count": "\(handedBack)"]) }
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

    /// XAUTOCLAIM entries other workers left idle (they crashed), then check their delivery counts.
    private func claimIdle() {
        guard stoppedSendingReason == nil, groupReady, !claimInFlight, let writer, writer.isReady else { return }
        let count = readCapacity()
        guard count > 0 else { return }
        claimInFlight = true
        let keys = configuration.keys
        writer.send(["XAUTOCLAIM", keys.jobs, keys.group, configuration.consumer, String(configuration.claimIdleMilliseconds),
                     claimCursor, "COUNT", String(count)]) { [weak self] result in
            guard let self else { return }
            guard case .success(let reply) = result else { self.claimInFlight = false; return }
            if case .error(let message) = reply {
                self.claimInFlight = false
                self.handleRedisError(message)
                return
            }
            guard case .array(let parts) = reply, parts.count >= 2, let cursor = parts[0].string,
                  case .array(let claimed) = parts[1] else { self.claimInFlight = false; return }
            self.claimCursor = cursor
            let entries = RedisReplyReader.entries(.array(claimed)).filter { !self.heldEntries.contains($0.id) }
            guard let first = entries.first?.id, let last = entries.last?.id else { self.claimInFlight = false; return }
            self.counters.jobsReclaimed += entries.count
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
                        deliveries[id] = Int(count)
                    }
                }
                self.accept(entries, deliveries: deliveries)
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

/// An app's pool and the tokens waiting for one of its stream slots. Loop-confined.
public final class AppLane {
    public let name: String
    public let pool: ConnectionPool
    public let defaults: JobDefaults
    /// Set when APNs refused this app's credentials.
    public internal(set) var stoppedReason: String?
    private var queue: [UInt64] = []
    private var head = 0

    init(app: WorkerApp, queue: String) {
        name = app.name
        pool = app.pool
        var defaults = app.defaults
        defaults.apnsIDNamespace = queue
        self.defaults = defaults
    }

    var queued: Int { queue.count - head }

    func enqueue(_ context: UInt64) { queue.append(context) }

    func next() -> UInt64? {
        guard head < queue.count else { return nil }
        head += 1
        return queue[head - 1]
    }

    func putBack() { head -= 1 }

    func compact() {
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 65_536 {
            queue.removeFirst(head)
            head = 0
        }
    }
}
