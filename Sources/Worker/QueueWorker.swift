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
    public let pool: ConnectionPool
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

    // Jobs held in memory, the tokens waiting for a stream slot, and what waits to be written.
    private var jobs: [JobRecord?] = []
    private var freeJobIndices: [Int] = []
    private var heldEntries = Set<StreamEntryID>()
    private var sendQueue: [UInt64] = []
    private var sendHead = 0
    private var queuedCollapse: [String: UInt64] = [:]
    private var acceptedCollapse: [String: StreamEntryID] = [:]
    private var finishing: [Finalization] = []
    private var unconfirmed: [[Finalization]] = []
    private var finalizationScheduled = false
    private var random = SystemRandomNumberGenerator()
    private var wallClock: Int64 = 0
    private var wallClockStampedAt: Int64 = -1

    private enum Phase { case starting, running, draining, stopped }
    private var phase = Phase.starting
    private var drainTimer: EventLoop.TimerID?
    /// Set when APNs refused the credentials: nothing is read or sent, jobs stay pending.
    public private(set) var stoppedSendingReason: String?

    /// One job's progress: how many tokens still wait for an outcome, and what the others got.
    final class JobRecord {
        let job: Job
        var remaining: Int
        var superseded: [Bool]
        var feedback: [(token: String, reason: String, timestamp: Int64?)] = []
        var deadLetters: [(token: String, reason: String, message: String, status: Int)] = []
        var retryTokens: [String] = []
        var retryDelay: Int64 = 0
        var attempts: Int
        var held = false
        /// Tokens put back unsent on drain (in `retryTokens`, but not retries).
        var handedBack = 0

        init(job: Job) {
            self.job = job
            remaining = job.tokens.count
            superseded = Array(repeating: false, count: job.tokens.count)
            attempts = job.attempts
        }
    }

    /// The Redis writes that end one job (or one malformed entry).
    struct Finalization {
        var entryID: StreamEntryID
        var commands: [[RedisArgument]]
    }

    public init(loop: EventLoop, configuration: WorkerConfiguration, pool: ConnectionPool, redis: RedisEndpoint, time: TimeSource = .system, logger: Logger) {
        self.loop = loop
        self.configuration = configuration
        self.pool = pool
        self.endpoint = redis
        self.time = time
        self.logger = logger
        self.logger[metadataKey: "queue"] = "\(configuration.keys.queue)"
        self.logger[metadataKey: "consumer"] = "\(configuration.consumer)"
        pool.delegate = self
    }

    // MARK: lifecycle

    /// Connects to Redis and APNs and starts reading. Loop thread only.
    public func start() {
        phase = .running
        pool.start()
        connectRedis()
        scheduleRetryPromotion()
        scheduleClaim()
    }

    /// Stops reading, lets in-flight notifications finish within the drain timeout, acknowledges
    /// what finished, hands back what was never sent, then calls `onStopped`.
    public func drain() {
        guard phase == .running || phase == .starting else { return }
        phase = .draining
        logger.info("draining", metadata: ["in_flight": "\(pool.inFlight)", "queued": "\(sendQueue.count - sendHead)"])
        if let retryTimer { loop.cancel(retryTimer) }
        if let claimTimer { loop.cancel(claimTimer) }
        if let pauseTimer { loop.cancel(pauseTimer) }
        handBackQueued()
        drainTimer = loop.schedule(afterMilliseconds: configuration.drainTimeoutMilliseconds) { [weak self] in
            guard let self, self.phase == .draining else { return }
            self.logger.warning("drain timeout: unfinished notifications stay pending for other workers",
                                metadata: ["in_flight": "\(self.pool.inFlight)"])
            self.finishStopping()
        }
        checkDrained()
    }

    private func checkDrained() {
        guard phase == .draining else { return }
        if pool.inFlight == 0 && finishing.isEmpty && unconfirmed.isEmpty {
            finishStopping()
        }
    }

    private func finishStopping() {
        guard phase != .stopped else { return }
        phase = .stopped
        if let drainTimer { loop.cancel(drainTimer) }
        if let reconnectTimer { loop.cancel(reconnectTimer) }
        pool.stop()
        reader?.delegate = nil
        writer?.delegate = nil
        reader?.close()
        writer?.close()
        logger.info("stopped", metadata: ["accepted": "\(counters.accepted)", "jobs_finished": "\(counters.jobsFinished)"])
        onStopped?()
    }

    /// Redis reachable, the group in place, reading (not starting, draining or stopped).
    public var isReady: Bool {
        phase == .running && groupReady && (writer?.isReady ?? false)
    }

    /// Reads the queue's depth, pending entries, lag and the sizes of the other keys (one pipeline).
    public func sampleQueue(_ completion: @escaping (QueueSample?) -> Void) {
        guard let writer, writer.isReady else { completion(nil); return }
        let keys = configuration.keys
        var sample = QueueSample()
        writer.send(["XLEN", keys.jobs]) { result in sample.depth = Int(result.integerValue ?? 0) }
        writer.send(["XINFO", "GROUPS", keys.jobs]) { result in
            guard case .success(.array(let groups)) = result else { return }
            for group in groups {
                guard case .array(let pairs) = group else { continue }
                var name: String? = nil
                var pending = 0
                var lag = 0
                var index = 0
                while index + 1 < pairs.count {
                    switch pairs[index].string {
                    case "name": name = pairs[index + 1].string
                    case "pending": pending = Int(pairs[index + 1].integer ?? 0)
                    case "lag": lag = Int(pairs[index + 1].integer ?? 0)
                    default: break
                    }
                    index += 2
                }
                if name == keys.group {
                    sample.pending = pending
                    sample.lag = lag
                }
            }
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
        ensureGroup()
        replayUnconfirmed()
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

    private func ensureGroup() {
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
    private var queuedTokens: Int { sendQueue.count - sendHead }

    private func readCapacity() -> Int {
        min(configuration.batch, pool.freeSlots + configuration.readAhead - queuedTokens)
    }

    private func maybeRead() {
        guard phase == .running, stoppedSendingReason == nil, groupReady, !readInFlight,
              let reader, reader.isReady else { return }
        if pool.readyConnections * 2 < pool.configuration.connections && pool.freeSlots == 0 {
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
        reader.send(arguments) { [weak self] result in
            guard let self else { return }
            self.readInFlight = false
            switch result {
            case .failure:
                return
            case .success(.error(let message)):
                self.handleRedisError(message)
            case .success(let reply):
                let entries = QueueWorker.streamEntries(reply)
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
            if self.pool.readyConnections * 2 >= self.pool.configuration.connections { self.pauseFailures = 0 }
            self.maybeRead()
        }
    }

    struct StreamEntry {
        let id: StreamEntryID
        /// nil when the entry was deleted while pending.
        let fields: [(name: String, value: [UInt8])]?
    }

    /// Entries of an XREADGROUP reply (`[[key, [[id, [f, v, …]], …]]]`) or an entry list.
    static func streamEntries(_ reply: RedisReply) -> [StreamEntry] {
        guard case .array(let streams) = reply else { return [] }
        var result: [StreamEntry] = []
        for stream in streams {
            guard case .array(let pair) = stream, pair.count == 2, case .array(let entries) = pair[1] else { continue }
            result.append(contentsOf: entryList(entries))
        }
        return result
    }

    static func entryList(_ entries: [RedisReply]) -> [StreamEntry] {
        var result: [StreamEntry] = []
        result.reserveCapacity(entries.count)
        for entry in entries {
            guard case .array(let parts) = entry, parts.count == 2, case .bulk(let idBytes) = parts[0],
                  let id = StreamEntryID(bytes: idBytes) else { continue }
            guard case .array(let flat) = parts[1] else {
                result.append(StreamEntry(id: id, fields: nil))
                continue
            }
            var fields: [(name: String, value: [UInt8])] = []
            fields.reserveCapacity(flat.count / 2)
            var index = 0
            while index + 1 < flat.count {
                if case .bulk(let name) = flat[index], case .bulk(let value) = flat[index + 1] {
                    fields.append((String(decoding: name, as: UTF8.self), value))
                }
                index += 2
            }
            result.append(StreamEntry(id: id, fields: fields))
        }
        return result
    }

    /// Takes in entries read or claimed: decodes, dead-letters the malformed, queues the rest.
    private func accept(_ entries: [StreamEntry], deliveries: [StreamEntryID: Int]?) {
        for entry in entries {
            if heldEntries.contains(entry.id) { continue }
            guard let fields = entry.fields else {
                // Deleted while pending: nothing to deliver; acknowledge it.
                finishing.append(Finalization(entryID: entry.id, commands: []))
                scheduleFinalization()
                continue
            }
            counters.jobsRead += 1
            if let deliveries, let count = deliveries[entry.id], count > configuration.maxDeliveries {
                deadLetterEntry(entry.id, fields: fields, reason: "max_deliveries",
                                message: "The entry was delivered to workers \(count) times without an outcome (more than --max-deliveries \(configuration.maxDeliveries)); a worker may be crashing on it.",
                                status: 0, attempts: 0)
                continue
            }
            switch JobDecoder.decode(entryID: entry.id, fields: fields, defaults: configuration.defaults) {
            case .failure(let error):
                deadLetterEntry(entry.id, fields: fields, reason: error.code, message: error.description, status: 0, attempts: 0)
            case .success(let job):
                counters.unknownFields += job.unknownFields
                admit(job)
            }
        }
        pump()
    }

    private func admit(_ job: Job) {
        let record = JobRecord(job: job)
        let index: Int
        if let free = freeJobIndices.popLast() {
            index = free
            jobs[index] = record
        } else {
            index = jobs.count
            jobs.append(record)
        }
        heldEntries.insert(job.entryID)
        for token in job.invalidTokens {
            record.deadLetters.append((token.token, token.error.code, token.error.description, 0))
        }
        let origin = StreamEntryID(job.origin) ?? job.entryID
        for (tokenIndex, token) in job.tokens.enumerated() {
            let context = UInt64(index) << 16 | UInt64(tokenIndex)
            if let collapseID = job.template.collapseID {
                let key = collapseID + "\u{0}" + token.lowercased()
                if let newest = acceptedCollapse[key], newest > origin {
                    // A newer update with this collapse id already reached the device.
                    supersedeAtAdmission(record)
                    continue
                }
                if let older = queuedCollapse[key], let olderRecord = jobRecord(for: older) {
                    let olderOrigin = StreamEntryID(olderRecord.job.origin) ?? olderRecord.job.entryID
                    if olderOrigin < origin {
                        markSuperseded(olderRecord, Int(older & 0xFFFF))
                    } else {
                        supersedeAtAdmission(record)
                        continue
                    }
                }
                queuedCollapse[key] = context
            }
            sendQueue.append(context)
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

    /// A queued token superseded by a newer job: counted when the queue reaches it.
    private func markSuperseded(_ record: JobRecord, _ tokenIndex: Int) {
        guard !record.superseded[tokenIndex] else { return }
        record.superseded[tokenIndex] = true
    }

    // MARK: sending

    /// Moves queued tokens into free stream slots.
    private func pump() {
        guard stoppedSendingReason == nil, phase != .stopped else { return }
        var free = pool.freeSlots
        while free > 0, sendHead < sendQueue.count {
            let context = sendQueue[sendHead]
            sendHead += 1
            let index = Int(context >> 16)
            let tokenIndex = Int(context & 0xFFFF)
            guard let record = jobs[index] else { continue }
            let token = record.job.tokens[tokenIndex]
            if let collapseID = record.job.template.collapseID {
                let key = collapseID + "\u{0}" + token.lowercased()
                if queuedCollapse[key] == context { queuedCollapse[key] = nil }
            }
            if record.superseded[tokenIndex] {
                counters.superseded += 1
                complete(index)
                continue
            }
            let request = PendingRequest(notification: record.job.notification(forToken: token), context: context, attempts: record.job.attempts)
            guard pool.send(request) else {
                sendHead -= 1
                break
            }
            counters.notificationsSent += 1
            free -= 1
        }
        if sendHead == sendQueue.count {
            sendQueue.removeAll(keepingCapacity: true)
            sendHead = 0
        } else if sendHead > 65_536 {
            sendQueue.removeFirst(sendHead)
            sendHead = 0
        }
        maybeRead()
    }

    public func poolHasFreeSlots(_ pool: ConnectionPool) {
        pump()
    }

    public func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome) {
        let index = Int(request.context >> 16)
        guard index < jobs.count, let record = jobs[index] else { return }
        let token = request.notification.deviceToken
        record.attempts = max(record.attempts, request.attempts)
        switch outcome {
        case .accepted:
            counters.accepted += 1
            counters.endToEndLatency.record(milliseconds: acceptedWallClock() - record.job.enqueuedAt)
            if let collapseID = record.job.template.collapseID {
                let key = collapseID + "\u{0}" + token.lowercased()
                let origin = StreamEntryID(record.job.origin) ?? record.job.entryID
                if acceptedCollapse.count > 200_000 { acceptedCollapse.removeAll() }
                if (acceptedCollapse[key] ?? StreamEntryID(milliseconds: 0, sequence: 0)) < origin { acceptedCollapse[key] = origin }
            }
        case .deadToken(_, let reason, let timestamp):
            counters.deadTokens += 1
            record.feedback.append((token, reason.rawValue, timestamp))
        case .permanent(let status, let reason):
            let word = reason?.rawValue ?? "Status\(status)"
            record.deadLetters.append((token, word, "APNs rejected the notification: \(status) \(word).", status))
        case .retryTokenLater(let reason):
            scheduleRetry(record, token: token, request: request, status: 429, reason: reason?.rawValue ?? "TooManyRequests",
                          delay: Backoff.tokenRetry.delayMilliseconds(afterFailures: max(1, request.attempts), using: &random))
        case .retryOnAnotherConnection(let cause):
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
            // Not the notification's fault: the job stays pending in Redis, never dead-lettered.
            record.held = true
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
        }
    }

    private func scheduleRetry(_ record: JobRecord, token: String, request: PendingRequest, status: Int, reason: String, delay: Int64) {
        let nowMs = time.nowMilliseconds()
        if request.attempts >= configuration.maxAttempts {
            record.deadLetters.append((token, "max_attempts",
                                       "Gave up after \(request.attempts) attempts (--max-attempts \(configuration.maxAttempts)); the last answer was \(status) \(reason).", status))
            return
        }
        if let expiration = record.job.template.expiration, expiration > 0, expiration * 1000 <= nowMs + delay {
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

    public func pool(_ pool: ConnectionPool, stoppedSending reason: String) {
        stoppedSendingReason = reason
        logger.critical("APNs refused this app's credentials: stopped sending; jobs stay pending in Redis", metadata: ["reason": "\(reason)"])
        // What was not sent stays pending in Redis for a worker with good credentials (or a restart).
        for context in sendQueue[sendHead...] {
            if let record = jobRecord(for: context) { record.held = true }
        }
        for request in pool.takeQueuedResends() {
            if let record = jobRecord(for: request.context) { record.held = true }
        }
        sendQueue.removeAll()
        sendHead = 0
        for index in jobs.indices {
            guard let record = jobs[index], record.held else { continue }
            heldEntries.remove(record.job.entryID)
            jobs[index] = nil
            freeJobIndices.append(index)
        }
    }

    // MARK: finishing jobs

    private func finish(_ index: Int) {
        guard let record = jobs[index] else { return }
        jobs[index] = nil
        freeJobIndices.append(index)
        heldEntries.remove(record.job.entryID)
        if record.held { return }
        counters.jobsFinished += 1
        let job = record.job
        let keys = configuration.keys
        let nowMs = time.nowMilliseconds()
        var commands: [[RedisArgument]] = []
        for entry in record.feedback {
            var command: [RedisArgument] = ["XADD", .text(keys.feedback), "MAXLEN", "~", .integer(Int64(configuration.deadLetterMaxLength)), "*",
                                            "token", .text(entry.token), "topic", .text(job.template.topic), "reason", .text(entry.reason)]
            if let timestamp = entry.timestamp { command += ["timestamp", .integer(timestamp)] }
            command += ["job", .text(job.entryID.description)]
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
            counters.deadLetteredByReason[reason, default: 0] += group.tokens.count
            commands.append(deadLetterCommand(fields: job.fields, tokens: group.tokens, reason: reason, message: group.message,
                                              status: group.status, attempts: record.attempts, now: nowMs))
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
            fields.append((JobField.enqueuedAt, Array(String(job.enqueuedAt).utf8)))
            fields.append((JobField.retryID, Array("\(job.entryID)/\(record.attempts)/\(UInt32.random(in: .min ... .max, using: &random))".utf8)))
            commands.append(["ZADD", .text(keys.retry), .integer(nowMs + record.retryDelay), .bytes(RetryEncoding.encode(fields))])
        }
        finishing.append(Finalization(entryID: job.entryID, commands: commands))
        scheduleFinalization()
    }

    private func deadLetterCommand(fields: [(name: String, value: [UInt8])], tokens: [String]?, reason: String, message: String,
                                   status: Int, attempts: Int, now: Int64) -> [RedisArgument] {
        var command: [RedisArgument] = ["XADD", .text(configuration.keys.dead), "MAXLEN", "~", .integer(Int64(configuration.deadLetterMaxLength)), "*"]
        for field in fields where !(tokens != nil && (field.name == JobField.token || field.name == JobField.tokens)) {
            command += [.text(field.name), .bytes(field.value)]
        }
        if let tokens {
            command += tokens.count == 1 ? [.text(JobField.token), .text(tokens[0])] : [.text(JobField.tokens), .text(tokens.joined(separator: ","))]
        }
        command += ["reason", .text(reason), "message", .text(message), "status", .integer(Int64(status)),
                    "attempts", .integer(Int64(attempts)), "failed_at", .integer(now)]
        return command
    }

    /// A malformed or hopeless entry: dead-letter it whole and acknowledge it.
    private func deadLetterEntry(_ id: StreamEntryID, fields: [(name: String, value: [UInt8])], reason: String, message: String, status: Int, attempts: Int) {
        counters.deadLettered += 1
        counters.deadLetteredByReason[reason, default: 0] += 1
        counters.jobsFinished += 1
        let command = deadLetterCommand(fields: fields, tokens: nil, reason: reason, message: message, status: status,
                                        attempts: attempts, now: time.nowMilliseconds())
        finishing.append(Finalization(entryID: id, commands: [command]))
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
            for finalization in batch { builder.add(finalization.entryID.description) }
        })
        writer.send(argumentCount: 2 + batch.count, { builder in
            builder.add("XDEL"); builder.add(keys.jobs)
            for finalization in batch { builder.add(finalization.entryID.description) }
        })
        writer.send(["EXEC"]) { [weak self] result in
            guard let self else { return }
            switch result {
            case .success(.array(let replies)):
                for reply in replies { if case .error(let message) = reply { self.handleRedisError(message) } }
                if let position = self.unconfirmed.firstIndex(where: { $0.first?.entryID == batch.first?.entryID }) {
                    self.unconfirmed.remove(at: position)
                }
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
        var handedBack = 0
        while sendHead < sendQueue.count {
            let context = sendQueue[sendHead]
            sendHead += 1
            let index = Int(context >> 16)
            guard let record = jobs[index] else { continue }
            let tokenIndex = Int(context & 0xFFFF)
            if record.superseded[tokenIndex] {
                counters.superseded += 1
            } else {
                record.retryTokens.append(record.job.tokens[tokenIndex])
                record.handedBack += 1
                counters.handedBack += 1
                handedBack += 1
            }
            complete(index)
        }
        sendQueue.removeAll()
        sendHead = 0
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
            let entries = QueueWorker.entryList(claimed).filter { !self.heldEntries.contains($0.id) }
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
