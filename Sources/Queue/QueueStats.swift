import Transport

/// Entries not yet delivered to any consumer of a Herald queue.
///
/// Redis reports a group's `lag` (7.0+) only while it can count it: after an entry was deleted
/// out of order, or on a stream trimmed past the group, XINFO GROUPS says `lag` is null. Herald
/// trims only what every group finished (`StreamTrim`), so its jobs stream holds the pending and
/// the undelivered entries plus finished ones not yet trimmed, and `depth - pending` is then an
/// estimate that errs high, never low. Redis 6.2 reports no lag at all. Either way, when
/// `caughtUpCheck` (`XRANGE <jobs> (<last-delivered-id> + COUNT 1`) finds no entry, the group was
/// given every entry there is: the lag is exactly 0, whatever finished entries still wait to be
/// trimmed (the usual state of a queue that keeps up, which the estimate would count as lag).
/// `herald stats` and the worker's `herald_consumer_lag` gauge both read it from here.
public enum QueueLag {
    public static func of(reported: Int64?, depth: Int, pending: Int) -> (lag: Int, exact: Bool) {
        if let reported { return (Int(clamping: reported), true) }
        return (max(0, depth - pending), false)
    }

    /// The command that tells whether any entry of `stream` lies after the group's
    /// `lastDelivered` id (one entry at most; Redis 6.2's exclusive range).
    public static func caughtUpCheck(stream: String, lastDelivered: String) -> [String] {
        ["XRANGE", stream, "(" + lastDelivered, "+", "COUNT", "1"]
    }

    /// Whether `caughtUpCheck`'s reply says the group was given every entry (an empty range).
    public static func isCaughtUp(_ reply: RedisReply) -> Bool {
        if case .array(let entries) = reply { return entries.isEmpty }
        return false
    }
}

/// One queue's numbers at one moment, as `herald stats` shows them.
public struct QueueStats: Sendable {
    public var keys: QueueKeys
    /// Redis' clock when sampled, ms since the epoch (ages and "due now" are measured against it).
    public var sampledAt: Int64
    /// Entries in the jobs stream: waiting plus in flight plus finished ones not yet trimmed
    /// (Herald trims finished entries about every 100 ms, `StreamTrim`).
    public var depth: Int
    /// The consumer group, or nil when no worker has created it yet.
    public var group: Group?
    /// Members of the retry set, and how many of them are due now.
    public var retrySize: Int
    public var retryDue: Int
    /// Due time of the earliest retry, ms since the epoch.
    public var nextRetryAt: Int64?
    /// Jobs held for their `deliver_at` (the scheduled set): all of them, those due now (waiting
    /// for a worker to promote them), those due within the next minute and the next hour (after
    /// now), and the earliest due time (ms since the epoch). Zero and nil when none is scheduled.
    public var scheduledSize = 0
    public var scheduledDue = 0
    public var scheduledNextMinute = 0
    public var scheduledNextHour = 0
    public var nextScheduledAt: Int64?
    /// Entries of the dead-letter and feedback streams.
    public var deadLetters: Int
    public var feedback: Int
    /// Entries of the results stream; nil when it has none (results are off for the queue).
    public var results: Int? = nil
    /// The queue's urgent stream (`QueueKeys.urgentJobs`): its depth and the group's numbers on it.
    /// Nil when the inspector did not read it.
    public var urgent: UrgentLane?

    /// The urgent stream's numbers: depth, and the consumer group on it (nil before a worker
    /// created it there). The retry set, dead letters and feedback are the queue's, shared.
    public struct UrgentLane: Sendable {
        public var depth: Int
        public var group: Group?

        public init(depth: Int, group: Group?) {
            self.depth = depth
            self.group = group
        }
    }

    public struct Group: Sendable {
        public var name: String
        /// Entries delivered to a consumer and not yet acknowledged (XPENDING).
        public var pending: Int
        /// Entries not yet delivered to any consumer: Redis' `lag`, or `depth - pending` when
        /// Redis cannot tell (`lagIsExact` false), which errs high by the finished entries not
        /// yet trimmed.
        public var lag: Int
        public var lagIsExact: Bool
        public var lastDeliveredID: String?
        public var entriesRead: Int64?
        /// The oldest pending entry's id (its enqueue time) and age in ms.
        public var oldestPendingID: String?
        public var oldestPendingAge: Int64?
        public var consumers: [Consumer]
    }

    public struct Consumer: Sendable {
        public var name: String
        public var pending: Int
        /// Since the consumer's last attempted interaction (XINFO CONSUMERS `idle`), ms.
        public var idle: Int64
        /// Since its last successful read or claim (Redis 7.2+ `inactive`), ms; nil before 7.2.
        public var inactive: Int64?
    }

    public init(keys: QueueKeys, sampledAt: Int64, depth: Int, group: Group?, retrySize: Int, retryDue: Int,
                nextRetryAt: Int64?, deadLetters: Int, feedback: Int) {
        self.keys = keys
        self.sampledAt = sampledAt
        self.depth = depth
        self.group = group
        self.retrySize = retrySize
        self.retryDue = retryDue
        self.nextRetryAt = nextRetryAt
        self.deadLetters = deadLetters
        self.feedback = feedback
    }
}
