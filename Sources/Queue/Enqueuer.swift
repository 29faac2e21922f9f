import Glibc
import Transport

/// Adds jobs to a queue's stream with pipelined XADDs: `herald enqueue --count`, the demo and the
/// load generator.
///
/// As fast as Redis answers (a window of `window` unanswered XADDs), or paced at `ratePerSecond`
/// by a 1 ms timer. Each job's fields come from `job(index, scheduledMicros)`, where
/// `scheduledMicros` is when the job was due (paced) or is being sent (unpaced), in µs since the
/// epoch: paced, the load generator stamps it into the payload as `"s"` beside the send time
/// `"t"`, so a producer that falls behind its schedule shows up in the latency from the schedule
/// instead of hiding. Loop-confined; the loop stops when every job was added or Redis refused one.
public final class Enqueuer: RedisConnectionDelegate {
    public typealias Fields = [(name: String, value: [UInt8])]

    public let loop: EventLoop
    public let connection: RedisConnection
    public let keys: QueueKeys
    public let count: Int
    public let ratePerSecond: Double?
    public let window: Int
    private let job: (_ index: Int, _ scheduledMicros: Int64) -> Fields
    private let clock: () -> Int64
    public private(set) var sent = 0
    public private(set) var added = 0
    public private(set) var firstID: String?
    /// Shard queues (`herald enqueue --shards N`): when not empty, each job goes to
    /// `shards[QueueShards.shard(token:shards:)]` of its `token` field (or the first of its
    /// `tokens`: the caller splits fan-out jobs by shard first) instead of `keys`.
    public var shards: [QueueKeys] = []
    /// On a Redis Cluster, shard `i`'s XADDs go to `shardConnections[i]` (the connection to the
    /// master of that shard's slot; shards on one master share it) instead of `connection`.
    /// Each is connected by the caller with this enqueuer as its delegate; the run starts when
    /// `connection` is ready, and commands sent to the others before they are wait behind their
    /// handshake.
    public var shardConnections: [RedisConnection] = []
    /// The stream of the queue (or shard) each job goes to: bulk (`jobs`, the default) or urgent.
    public var lane: JobLane = .bulk
    /// Jobs added per shard (when `shards` is set), in `shards` order.
    public private(set) var addedPerShard: [Int] = []
    public private(set) var error: String?
    /// The same failure as `error`, typed: a command tells a refused password (configuration)
    /// from a refused connection (Redis unavailable) by it.
    public private(set) var failure: RedisError?
    /// When paced: the furthest the producer fell behind its schedule, µs.
    public private(set) var maxBehindMicros: Int64 = 0
    private var startMicros: Int64 = 0
    private var startMonotonicMicros: Int64 = 0
    /// Every unsharded XADD's completion (the shard's index is its only per-job state).
    private lazy var unshardedCompletion: RedisConnection.RawCompletion = { [weak self] in self?.answered($0, shard: -1) }
    /// Called on the loop once the last job was added (or the run failed).
    public var onFinished: (() -> Void)?
    /// Stop the loop when finished (a command's private loop); false on a shared loop thread.
    public var stopsLoopWhenFinished = true
    public private(set) var isFinished = false

    /// - Parameters:
    ///   - clock: µs since the epoch (tests pass a fake one).
    public init(loop: EventLoop, connection: RedisConnection, keys: QueueKeys, count: Int, ratePerSecond: Double? = nil,
                window: Int = 4096, clock: @escaping () -> Int64 = Enqueuer.wallClockMicros,
                job: @escaping (_ index: Int, _ scheduledMicros: Int64) -> Fields) {
        self.loop = loop
        self.connection = connection
        self.keys = keys
        self.count = count
        self.ratePerSecond = ratePerSecond
        self.window = window
        self.clock = clock
        self.job = job
    }

    /// The same fields `count` times; with `distinctTokens`, the `token` field's last 8 hex digits
    /// become the job's index modulo `distinctTokens`.
    public convenience init(loop: EventLoop, connection: RedisConnection, keys: QueueKeys, fields: Fields, count: Int,
                            baseToken: String?, distinctTokens: Int?) {
        self.init(loop: loop, connection: connection, keys: keys, count: count) { index, _ in
            guard let baseToken, let distinctTokens, distinctTokens > 1 else { return fields }
            return fields.map { field in
                field.name == JobField.token ? (field.name, Array(Enqueuer.varied(baseToken, index % distinctTokens).utf8)) : field
            }
        }
    }

    public func redisConnectionIsReady(_ connection: RedisConnection) {
        guard connection === self.connection else { return }
        startMicros = clock()
        startMonotonicMicros = Enqueuer.monotonicMicros()
        if ratePerSecond == nil { fill() } else { pace() }
    }

    public func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        if added < count, self.error == nil {
            self.error = error.description
            failure = error
        }
        finish()
    }

    private func finish() {
        guard !isFinished else { return }
        isFinished = true
        onFinished?()
        if stopsLoopWhenFinished { loop.stop() }
    }

    /// Unpaced: keep `window` XADDs in flight.
    private func fill() {
        while !isFinished && sent < count && sent - added < window {
            add(index: sent, scheduledMicros: clock())
        }
    }

    /// Paced: send every job due by now, then look again in a millisecond. Paced by the monotonic
    /// clock, so a step of the wall clock during a run (an NTP correction) neither stalls the
    /// producer nor makes it send a burst; a job's schedule stamp is the wall time at the start
    /// plus its offset in the schedule.
    private func pace() {
        guard !isFinished, let rate = ratePerSecond else { return }
        let elapsed = Enqueuer.monotonicMicros() - startMonotonicMicros
        let due = min(count, Int(Double(elapsed) * rate / 1_000_000) + 1)
        while sent < due {
            let offset = Int64(Double(sent) * 1_000_000 / rate)
            maxBehindMicros = max(maxBehindMicros, elapsed - offset)
            add(index: sent, scheduledMicros: startMicros + offset)
        }
        if sent < count { loop.schedule(afterMilliseconds: 1) { [weak self] in self?.pace() } }
    }

    /// The shard of a job's fields: the CRC-32 of its token (or first token) mod the shard count.
    public static func shard(of fields: Fields, shards: Int) -> Int {
        guard shards > 1 else { return 0 }
        for field in fields where field.name == JobField.token {
            return QueueShards.shard(token: String(decoding: field.value, as: UTF8.self), shards: shards)
        }
        for field in fields where field.name == JobField.tokens {
            let first = field.value.split(separator: UInt8(ascii: ","), maxSplits: 1).first ?? []
            return QueueShards.shard(token: String(decoding: first, as: UTF8.self).filter { $0 != " " }, shards: shards)
        }
        return 0
    }

    private func add(index: Int, scheduledMicros: Int64) {
        sent += 1
        let fields = job(index, scheduledMicros)
        var stream = lane.stream(keys)
        var shard = -1
        if !shards.isEmpty {
            if addedPerShard.isEmpty { addedPerShard = Array(repeating: 0, count: shards.count) }
            shard = Enqueuer.shard(of: fields, shards: shards.count)
            stream = lane.stream(shards[shard])
        }
        let connection = shardConnections.isEmpty ? self.connection : shardConnections[max(0, shard)]
        // The reply (the new entry's id) is read from the tape, not made into a value, and an
        // unsharded job shares one completion: a paced run makes tens of thousands of jobs a
        // second on the cores of the worker it measures.
        let completion: RedisConnection.RawCompletion = shard < 0 ? unshardedCompletion : { [weak self] in self?.answered($0, shard: shard) }
        connection.sendRaw(argumentCount: 3 + fields.count * 2, { builder in
            builder.add("XADD"); builder.add(stream); builder.add("*")
            for field in fields {
                builder.add(field.name)
                builder.add(field.value)
            }
        }, completion)
    }

    /// One XADD answered: the entry's id (kept for the first), or Redis' refusal.
    private func answered(_ result: Result<RedisReplyTape, RedisError>, shard: Int) {
        switch result {
        case .success(let tape):
            if tape.nodes.first?.kind == .error, case .error(let message) = tape.reply() {
                error = "Redis refused the job: \(message)"
                failure = .server("refused the job: \(message)")
                finish()
                return
            }
            if firstID == nil { firstID = tape.reply().string }
            added += 1
            if shard >= 0 { addedPerShard[shard] += 1 }
            if added == count { finish() } else if ratePerSecond == nil { fill() }
        case .failure(let failure):
            if error == nil {
                error = failure.description
                self.failure = failure
            }
            finish()
        }
    }

    /// `token` with its last 8 hex digits replaced by `index`.
    public static func varied(_ token: String, _ index: Int) -> String {
        let hex = String(index, radix: 16)
        let suffix = String(repeating: "0", count: max(0, 8 - hex.count)) + hex
        return String(token.dropLast(min(8, token.count))) + suffix.suffix(8)
    }

    /// µs on the monotonic clock (pacing).
    static func monotonicMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }

    /// µs since the epoch.
    public static func wallClockMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }
}
