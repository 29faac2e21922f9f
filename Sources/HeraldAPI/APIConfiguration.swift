import APNs
import Queue
import Transport

/// What `herald api` serves and where: its listening address, Redis, the token file, limits.
public struct APIConfiguration: Sendable {
    /// Address to listen on.
    public var host = "0.0.0.0"
    /// Port to listen on; 0 picks a free one (tests).
    public var port = 8080
    public var redis: RedisEndpoint
    /// With Redis Sentinel: the sentinels to ask for the master (then `redis` gives only the
    /// credentials and database); asked again on every reconnect, so the API follows failovers.
    public var sentinel: SentinelConfiguration?
    /// The queue of a POST that names none.
    public var defaultQueue = QueueKeys.defaultQueue
    /// The bearer-token file (`BearerTokens`).
    public var tokensFile: String
    /// The largest request body accepted, bytes (413 beyond).
    public var maxBodyBytes = 8 << 20
    /// The most /v1 requests served at once; more get 503 `busy` at once. With `maxBodyBytes` it
    /// bounds the memory requests can hold (about three times the body each while its jobs go
    /// to Redis).
    public var maxConcurrentRequests = 64
    /// The most notifications one POST may carry (413 beyond).
    public var maxBatch = 1000
    /// How long an Idempotency-Key is remembered, seconds.
    public var idempotencyTTLSeconds = 86_400
    /// Redis connections (each on a thread of its own).
    public var redisConnections = 4
    /// How long a request waits for Redis, ms (503 beyond).
    public var redisTimeoutMilliseconds: Int64 = 10_000
    /// A connection that sends nothing for this long (between requests, or in the middle of one:
    /// a stalled or slow-loris client) is closed, seconds.
    public var idleTimeoutSeconds: Int64 = 30
    /// How often the token file is checked for changes, ms.
    public var tokenPollMilliseconds = 1_000

    /// The most entries one listing or requeue returns.
    public static let maxPageCount = 1000
    public static let maxRequeue = 10_000

    public init(redis: RedisEndpoint, tokensFile: String) {
        self.redis = redis
        self.tokensFile = tokensFile
    }
}

/// Queue names the API accepts in paths, bodies and `?queue=`: they become part of Redis keys
/// (`herald:{NAME}:jobs`), so only characters that cannot break a key's hash tag or a glob.
public enum QueueName {
    public static let maxLength = 64

    /// Why `name` is refused, or nil.
    public static func problem(_ name: String) -> String? {
        if name.isEmpty { return "the queue name is empty" }
        if name.utf8.count > maxLength { return "the queue name is longer than \(maxLength) characters" }
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                continue
            default:
                return "the queue name \(DeadLetterText.quoted(name)) may hold only letters, digits, '-', '_' and '.'"
            }
        }
        return nil
    }
}
