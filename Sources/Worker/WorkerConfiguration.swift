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

    public init(consumer: String) {
        self.consumer = consumer
    }
}
