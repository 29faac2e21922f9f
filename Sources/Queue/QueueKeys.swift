/// The Redis keys of one queue. The braces are a Redis Cluster hash tag: every key of a queue lives
/// in one slot, so one Lua script or MULTI may touch several of them.
public struct QueueKeys: Sendable, Equatable {
    public let queue: String
    public let prefix: String
    /// Stream of jobs; consumer group `group`. In the keys of a queue's urgent lane
    /// (`urgentLane`), its urgent stream.
    public private(set) var jobs: String
    /// Sorted set of jobs waiting for a retry, scored by due time (ms).
    public let retry: String
    /// Sorted set of jobs held for their `deliver_at`, scored by it (ms). Kept apart from `retry`
    /// so `herald stats` counts each with ZCARD/ZCOUNT and an operator can look at or clear one
    /// without the other; the same hash tag puts it in the queue's slot, and the same promote
    /// script moves both (see `QueueScripts.promoteDueRetries`).
    public let scheduled: String
    /// Stream of jobs that can never be delivered, with the reason.
    public let dead: String
    /// Stream of device tokens APNs rejected (410, BadDeviceToken, DeviceTokenNotForTopic).
    public let feedback: String
    /// Stream of notification outcomes (receipts), written only when results are enabled for
    /// the queue or asked for by a job (`receipt`).
    public let results: String
    public let group: String

    public static let defaultQueue = "default"
    public static let defaultPrefix = "herald"
    public static let defaultGroup = "herald"

    public init(queue: String = QueueKeys.defaultQueue, prefix: String = QueueKeys.defaultPrefix, group: String = QueueKeys.defaultGroup) {
        self.queue = queue
        self.prefix = prefix
        self.group = group
        let base = "\(prefix):{\(queue)}"
        jobs = base + ":jobs"
        retry = base + ":retry"
        scheduled = base + ":scheduled"
        dead = base + ":dead"
        feedback = base + ":feedback"
        results = base + ":results"
    }

    /// The queue's urgent lane: a second stream (same hash tag, same consumer group) the worker
    /// reads before `jobs`, for notifications that must not wait behind a backlog (a login code,
    /// an incoming call). A plain `XADD` to `jobs` is the bulk lane.
    public var urgentJobs: String { "\(prefix):{\(queue)}:jobs:urgent" }

    /// These keys with `jobs` naming the urgent stream: what the worker's urgent reader, its
    /// claims and its acknowledgements use. The retry set, dead letters and feedback stay the
    /// queue's own (a retry remembers its lane in the member, see `JobLane`).
    public var urgentLane: QueueKeys {
        var keys = self
        keys.jobs = urgentJobs
        return keys
    }

    /// Whether `jobs` names the urgent stream.
    public var isUrgentLane: Bool { jobs == urgentJobs }
}
