import Queue

/// How one worker loop reads its queue and when it gives up on a notification.
public struct WorkerConfiguration: Sendable {
    /// The queues this loop reads (`--queue`, `--queues`, `--shards`), never empty. Each has its
    /// own Redis connections, consumer group, cursors and timers' commands; their jobs share the
    /// apps' pools, and reads are shared among them fairly.
    public var queues: [QueueKeys] = [QueueKeys()]
    /// The first queue (the only one in a single-queue worker); setting it makes it the only one.
    public var keys: QueueKeys {
        get { queues[0] }
        set { queues = [newValue] }
    }
    /// Unique per process and thread (e.g. `host-pid-thread`).
    public var consumer: String
    public var defaults = JobDefaults()
    /// Entries asked for in one XREADGROUP at most (`--batch`).
    public static let defaultBatch = 256
    public var batch = WorkerConfiguration.defaultBatch
    /// Entries read beyond the pool's free stream slots, so the pool never waits for Redis.
    public var readAhead = 128
    /// XREADGROUP BLOCK time when the stream is empty.
    public var blockMilliseconds = 1_000
    /// Entries idle this long in another consumer's pending list are taken over (`--claim-idle`).
    public var claimIdleMilliseconds: Int64 = 60_000
    /// An entry delivered more often than this goes to the dead letters (`--max-deliveries`).
    public var maxDeliveries = 10
    /// Attempts per notification before it goes to the dead letters (`--max-attempts`).
    public var maxAttempts = 8
    /// Attempts that failed on the transport or with a 5xx are resent at once (on the connection
    /// with the most free slots) this many times before they go to the retry set with a backoff.
    public var immediateRetries = 2
    /// How long a SIGTERM drain may take (`--drain-timeout`).
    public var drainTimeoutMilliseconds: Int64 = 30_000
    /// How often due retries are moved back into the stream.
    public var retryPollMilliseconds: Int64 = 250
    /// Due retries and scheduled jobs are promoted into a queue's stream only while it holds
    /// fewer entries than this: jobs due at once wait in their sorted set, not in the stream.
    public var promotionBacklogLimit = 50_000
    /// Members moved per promote-script call; a full batch is followed by another call at once.
    public var promotionBatch = 1000
    /// Dead-letter and feedback streams are trimmed to about this many entries.
    public var deadLetterMaxLength = 1_000_000
    /// Consumers of the group idle this long that own no pending entry are removed
    /// (`--idle-consumer-timeout`): what scaled-down or replaced workers leave behind. 0: never.
    public var idleConsumerTimeoutMilliseconds: Int64 = 3_600_000
    /// Device tokens a loop remembers as backed off after 429 TooManyRequests
    /// (`--token-backoff-capacity`); the oldest is forgotten when it is full. 0: no token backoff.
    public static let defaultTokenBackoffCapacity = 65_536
    public var tokenBackoffCapacity = WorkerConfiguration.defaultTokenBackoffCapacity
    /// Each queue's urgent stream (`QueueKeys.urgentJobs`) is read too, before the bulk one (on in
    /// `herald worker`); off, only the bulk streams are read and due retries all go back to them.
    public var urgentLanes = true

    /// Which queues write every notification's outcome to their results stream (`--results`,
    /// `--results-queues`); jobs with `receipt` get theirs written whatever this says.
    public var results = ResultsSelection.none
    /// Results streams are trimmed to about this many entries (`--results-max-length`).
    public static let defaultResultsMaxLength = 100_000
    public var resultsMaxLength = WorkerConfiguration.defaultResultsMaxLength

    public init(consumer: String) {
        self.consumer = consumer
    }
}

/// The queues whose results streams get every outcome: none (only jobs that ask with
/// `receipt`), all the worker reads, or the named ones.
public enum ResultsSelection: Sendable, Equatable {
    case none
    case all
    case queues(Set<String>)

    public func includes(_ queue: String) -> Bool {
        switch self {
        case .none: false
        case .all: true
        case .queues(let names): names.contains(queue)
        }
    }
}
