import APNs
import Queue

/// Everything one load run needs: what to start or attach to, what to enqueue, how fast, and which
/// APNs faults the emulator injects. Built by `herald loadgen` (and `herald demo`), read by `LoadRun`.
public struct LoadGenConfiguration: Sendable {
    /// The herald executable that runs `mock-apns` and `worker` (default: this very binary).
    public var executable = "/proc/self/exe"

    // What to attach to instead of starting it.
    /// `redis://…` of a running Redis; nil starts a private redis-server.
    public var redisURL: String? = nil
    /// The password of `redisURL`'s Redis when it is not in the URL; workers get it in their
    /// environment (HERALD_REDIS_PASSWORD), never on their command line.
    public var redisPassword: String? = nil
    public var queue = "default"
    /// Shards `queue`-0 … `queue`-(N-1) (`--shards`): jobs go to the shard of their token, the
    /// workers read them all, and the report has a row per queue. nil: the one queue `queue`.
    public var shards: Int? = nil
    /// A running APNs (or emulator); nil starts the emulator.
    public var apnsHost: String? = nil
    public var apnsPort: Int? = nil
    public var caFile: String? = nil
    /// `host:port` of an attached emulator's plain-HTTP stats (`mock-apns --stats-port`).
    public var apnsStats: String? = nil
    /// Measure workers already running (only enqueue and watch).
    public var attachWorkers = false
    /// `host:port` of attached workers' /metrics, for the superseded count.
    public var workerMetrics: [String] = []

    // Workers started here.
    public var workers = 1
    public var connections = 4
    public var maxStreams = 1000
    /// XREADGROUP batch; nil keeps the worker's default.
    public var batch: Int? = nil
    /// Start the workers with `--results` (receipts for every notification).
    public var results = false
    public var threads = 1

    // The load.
    public var notifications = 100_000
    public var tokens = 10_000
    public var payloadBytes = 256
    /// Tokens per job (fan-out); 1 = one `token` field.
    public var fanout = 1
    /// Share of jobs that reuse the token and collapse id of an earlier job.
    public var collapseRatio = 0.0
    public var pushTypes: PushTypeMix = PushTypeMix(shares: [(.alert, 1)])
    /// Jobs per second (steady mode); nil enqueues everything first (drain mode).
    public var rate: Double? = nil
    /// Priority-lane runs (`--backlog`): this many bulk jobs, unstamped (the emulator measures no
    /// latency for them), are enqueued before the workers start; the measured jobs (`notifications`,
    /// stamped, paced at `rate`) then arrive while the backlog drains.
    public var backlog = 0
    /// The stream the measured jobs go to (`--lane`): the urgent one, or bulk (behind the backlog).
    public var lane: JobLane = .bulk
    public var bundleID = "com.example.loadgen"
    public var seed: UInt64 = 1

    // The emulator's faults and latency.
    public var latencyMilliseconds = 0
    public var errors: [String] = []
    public var goAwayAfter: Int? = nil
    public var unregisteredPrefix: String? = nil
    /// Share of the tokens that start with `unregisteredPrefix` (when one is given).
    public var unregisteredShare = 0.05

    /// Seconds to wait for every outcome.
    public var timeoutSeconds = 600
    /// Show one updating progress line (on a terminal).
    public var progress = false
    /// Keep the temporary directory (logs, keys) after the run.
    public var keepFiles = false
    /// The latency timeline (`/_herald/timeline`): its windows' width and the latency above which
    /// an answer counts as over (the emulator loadgen starts gets both); fetched in steady mode,
    /// and in a drain when `timelineWanted` (`--timeline FILE`).
    public var timelineWindowMilliseconds: Int64 = 10
    public var timelineOverMilliseconds: Int64 = 5
    public var timelineWanted = false

    /// Versions to state in the conditions (the command line knows them).
    public var heraldVersion = "unknown"
    /// The commit the executable says it was built from (`HeraldVersion.commit`): the report's
    /// commit when the executable does not sit in a git work tree (a copy, an installed binary).
    public var builtFromCommit = "unknown"
    public var swiftVersion = "unknown"

    public init() {}

    public var jobs: Int { notifications / fanout }
    /// The queues of the run: `queue`, or its shards.
    public var queueKeys: [QueueKeys] {
        guard let shards else { return [QueueKeys(queue: queue)] }
        return QueueShards.names(base: queue, shards: shards).map { QueueKeys(queue: $0) }
    }
    public var isSteady: Bool { rate != nil }

    /// Checks the combination; the message names the flag.
    public func validate() throws(LoadGenError) {
        guard notifications >= 1 else { throw LoadGenError("--notifications must be at least 1") }
        guard (1...3_600_000).contains(timelineWindowMilliseconds) else { throw LoadGenError("--timeline-window-ms must be 1 to 3600000") }
        guard (0...3_600_000).contains(timelineOverMilliseconds) else { throw LoadGenError("--timeline-over-ms must be 0 to 3600000") }
        guard tokens >= 1 else { throw LoadGenError("--tokens must be at least 1") }
        guard (1...10_000).contains(fanout) else { throw LoadGenError("--fanout must be 1 to 10000") }
        guard fanout <= tokens else { throw LoadGenError("--fanout \(fanout) needs at least as many --tokens") }
        guard notifications % fanout == 0 else {
            throw LoadGenError("--notifications (\(notifications)) must be a multiple of --fanout (\(fanout))")
        }
        guard (0...1).contains(collapseRatio) else { throw LoadGenError("--collapse-ratio must be from 0 to 1") }
        guard (0...1).contains(unregisteredShare) else { throw LoadGenError("--unregistered-share must be from 0 to 1") }
        guard attachWorkers || (1...64).contains(workers) else { throw LoadGenError("--workers must be 1 to 64") }
        guard (1...64).contains(connections) else { throw LoadGenError("--connections must be 1 to 64") }
        guard (1...10_000).contains(maxStreams) else { throw LoadGenError("--max-streams must be 1 to 10000") }
        if let rate { guard rate > 0 else { throw LoadGenError("--rate must be positive") } }
        guard backlog >= 0 else { throw LoadGenError("--backlog must be 0 or more") }
        if backlog > 0 {
            guard rate != nil else { throw LoadGenError("--backlog needs --rate: the measured jobs arrive paced while the backlog drains") }
            guard shards == nil, !attachWorkers, fanout == 1 else { throw LoadGenError("--backlog runs one queue, fan-out 1, with the workers loadgen starts") }
        }
        guard latencyMilliseconds >= 0 else { throw LoadGenError("--latency-ms must be 0 or more") }
        guard timeoutSeconds >= 1 else { throw LoadGenError("--timeout must be at least 1 second") }
        if let shards { guard (1...QueueShards.maxQueues).contains(shards) else { throw LoadGenError("--shards must be 1 to \(QueueShards.maxQueues)") } }
        if let prefix = unregisteredPrefix {
            guard !prefix.isEmpty, prefix.count <= 16, prefix.utf8.allSatisfy(PayloadFactory.isHexDigit) else {
                throw LoadGenError("--unregistered-prefix must be 1 to 16 hex digits")
            }
        }
        for (type, _) in pushTypes.shares {
            let minimum = PayloadFactory.minimumBytes(for: type)
            guard payloadBytes >= minimum, payloadBytes <= type.maxPayloadBytes else {
                throw LoadGenError("--payload-bytes must be \(minimum) to \(type.maxPayloadBytes) for \(type.rawValue) notifications")
            }
        }
        if apnsHost != nil, apnsStats == nil {
            throw LoadGenError("with --apns-host, give --apns-stats HOST:PORT (the emulator's --stats-port): accepted and duplicated counts come from it")
        }
        if apnsHost != nil, apnsPort == nil { throw LoadGenError("--apns-host needs --apns-port") }
    }

    /// One line naming the faults, for the conditions.
    public var faultsDescription: String {
        var parts = errors.map { "error \($0)" }
        if let goAwayAfter { parts.append("GOAWAY after \(goAwayAfter) streams") }
        if let unregisteredPrefix { parts.append("unregistered prefix \(unregisteredPrefix) (\(unregisteredShare * 100)% of tokens)") }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }
}

/// Which push types the jobs have, by share: `alert=0.9,background=0.1`.
public struct PushTypeMix: Sendable, CustomStringConvertible {
    public let shares: [(type: PushType, share: Double)]

    public init(shares: [(type: PushType, share: Double)]) {
        let total = shares.reduce(0) { $0 + $1.share }
        self.shares = shares.map { ($0.type, $0.share / total) }
    }

    /// Parses `TYPE=SHARE,…`; shares are normalised to sum to 1.
    public init(parsing text: String) throws(LoadGenError) {
        var shares: [(PushType, Double)] = []
        for part in text.split(separator: ",") {
            let pieces = part.split(separator: "=")
            guard pieces.count <= 2, let type = PushType(rawValue: String(pieces[0]).trimmingSpaces) else {
                throw LoadGenError("--push-types takes TYPE=SHARE,… with APNs push types (alert, background, voip, …); got \(part)")
            }
            let share = pieces.count == 2 ? Double(String(pieces[1]).trimmingSpaces) : 1
            guard let share, share >= 0 else { throw LoadGenError("--push-types: \(part) needs a share of 0 or more") }
            shares.append((type, share))
        }
        guard shares.reduce(0, { $0 + $1.1 }) > 0 else { throw LoadGenError("--push-types needs at least one share above 0") }
        self.init(shares: shares.filter { $0.1 > 0 })
    }

    /// The push type for a draw `u` in 0..<1.
    public func type(forDraw u: Double) -> PushType {
        PushTypeMix.type(forDraw: u, shares: shares)
    }

    /// The same, for the shares alone (the job factory keeps them apart from the configuration).
    static func type(forDraw u: Double, shares: [(type: PushType, share: Double)]) -> PushType {
        var threshold = 0.0
        for (type, share) in shares {
            threshold += share
            if u < threshold { return type }
        }
        return shares[shares.count - 1].type
    }

    public var description: String {
        shares.map { "\($0.type.rawValue)=\(PercentText.trimmed($0.share, digits: 3))" }.joined(separator: ",")
    }
}

extension String {
    var trimmingSpaces: String {
        var text = Substring(self)
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        return String(text)
    }
}
