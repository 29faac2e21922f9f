import Transport

/// One entry of a queue's feedback stream, as the worker writes it: a device token APNs
/// rejected (410 Unregistered, BadDeviceToken, DeviceTokenNotForTopic), for the backend to delete.
public struct FeedbackEntry: Sendable {
    public enum Field {
        public static let token = "token"
        /// Instead of `token`, for a broadcast whose channel APNs does not know (deleted or never
        /// created: ChannelNotRegistered, BadChannelId).
        public static let channelID = "channel_id"
        public static let topic = "topic"
        public static let reason = "reason"
        /// APNs' timestamp (ms) of when the token stopped being valid, on 410 only.
        public static let timestamp = "timestamp"
        /// The job entry id the notification came from.
        public static let job = "job"
        /// With reason `wrong_environment`: the APNs environment that accepted the token.
        public static let environment = "environment"
    }

    public let record: StreamRecord

    public init(_ record: StreamRecord) { self.record = record }

    public var id: StreamEntryID { record.id }
    public var token: String { record.text(Field.token) ?? "" }
    /// The channel of a broadcast entry, nil for a device token's.
    public var channelID: String? { record.text(Field.channelID) }
    public var topic: String { record.text(Field.topic) ?? "" }
    public var reason: String { record.text(Field.reason) ?? "" }
    public var timestamp: Int64? { record.text(Field.timestamp).flatMap { Int64($0) } }
    public var job: String? { record.text(Field.job) }
    public var environment: String? { record.text(Field.environment) }
}

extension FeedbackEntry {
    /// A feedback entry the worker is about to write; `command` spells the XADD `FeedbackEntry` reads.
    public struct Draft: Sendable, Equatable {
        public var token: String
        public var topic: String
        public var reason: String
        public var timestamp: Int64?
        /// The entry the backend enqueued (a retried token's entry is one Herald wrote).
        public var job: String
        /// `token` holds a broadcast channel id: written as `channel_id`.
        public var isChannel = false
        /// With reason `wrong_environment`: the environment that accepted the notification.
        public var environment: String? = nil

        public init(token: String, topic: String, reason: String, timestamp: Int64?, job: String) {
            self.token = token
            self.topic = topic
            self.reason = reason
            self.timestamp = timestamp
            self.job = job
        }

        /// `XADD <feedback> MAXLEN ~ <maxLength> * token … topic … reason … [timestamp …] job …`.
        public func command(stream: String, maxLength: Int) -> [RedisArgument] {
            var command: [RedisArgument] = ["XADD", .text(stream), "MAXLEN", "~", .integer(Int64(maxLength)), "*",
                                            .text(isChannel ? Field.channelID : Field.token), .text(token), .text(Field.topic), .text(topic),
                                            .text(Field.reason), .text(reason)]
            if let timestamp { command += [.text(Field.timestamp), .integer(timestamp)] }
            command += [.text(Field.job), .text(job)]
            if let environment { command += [.text(Field.environment), .text(environment)] }
            return command
        }
    }
}

/// Reads a queue's feedback stream for `herald feedback tail`.
public final class FeedbackReader {
    public let redis: any RedisCommandExecutor
    public let keys: QueueKeys

    public init(redis: any RedisCommandExecutor, keys: QueueKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// The last `count` entries, oldest first.
    public func last(_ count: Int) throws -> [FeedbackEntry] {
        guard count > 0 else { return [] }
        let reply = try redis.run(["XREVRANGE", .text(keys.feedback), "+", "-", "COUNT", .integer(Int64(count))])
        return RedisReplyReader.entries(reply).reversed().map(FeedbackEntry.init)
    }

    /// Up to `count` entries after `id` (exclusive), oldest first.
    public func after(_ id: StreamEntryID, count: Int) throws -> [FeedbackEntry] {
        let reply = try redis.run(["XRANGE", .text(keys.feedback), .text("(" + id.description), "+", "COUNT", .integer(Int64(count))])
        return RedisReplyReader.entries(reply).map(FeedbackEntry.init)
    }

    /// The id of the newest entry, or `0-0` when the stream is empty: where `--from $` starts.
    public func lastID() throws -> StreamEntryID {
        let reply = try redis.run(["XREVRANGE", .text(keys.feedback), "+", "-", "COUNT", "1"])
        return RedisReplyReader.entries(reply).first?.id ?? StreamEntryID(milliseconds: 0, sequence: 0)
    }

    /// Waits up to `blockMilliseconds` for entries after `id` (XREAD BLOCK); none on timeout.
    public func wait(after id: StreamEntryID, blockMilliseconds: Int, count: Int) throws -> [FeedbackEntry] {
        let reply = try redis.run(["XREAD", "COUNT", .integer(Int64(count)), "BLOCK", .integer(Int64(blockMilliseconds)),
                                   "STREAMS", .text(keys.feedback), .text(id.description)],
                                  timeoutMilliseconds: Int64(blockMilliseconds) + 10_000)
        return RedisReplyReader.readEntries(reply).map(FeedbackEntry.init)
    }
}
