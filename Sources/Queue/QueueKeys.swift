/// The Redis keys of one queue. The braces are a Redis Cluster hash tag: every key of a queue lives
/// in one slot, so one Lua script or MULTI may touch several of them.
public struct QueueKeys: Sendable, Equatable {
    public let queue: String
    public let prefix: String
    /// Stream of jobs; consumer group `group`.
    public let jobs: String
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
    }
}
