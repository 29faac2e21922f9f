import APNs
import Transport

/// One entry of a queue's results stream (`herald:{q}:results`), as the worker writes it when
/// receipts are on: the final outcome of one notification (one device token of one job).
public struct ResultEntry: Sendable {
    public enum Field {
        /// The entry id the backend enqueued the job as (kept across Herald's retries).
        public static let job = "job"
        public static let token = "token"
        /// The token's position among the tokens of the entry the worker read (fan-out jobs only).
        public static let index = "index"
        /// `accepted`, `dead_token`, `dead_lettered` or `superseded` (the words of `herald_notifications_total`).
        public static let status = "status"
        /// APNs' reason or Herald's dead-letter reason; absent when accepted or superseded.
        public static let reason = "reason"
        /// APNs' HTTP status, 0 when APNs never answered (Herald's own verdict, superseded).
        public static let httpStatus = "http_status"
        /// The apns-id the notification was sent (or would have been sent) with.
        public static let apnsID = "apns_id"
        /// APNs' `apns-unique-id` (its sandbox sends one), when the answer carried one.
        public static let uniqueID = "apns_unique_id"
        /// When the outcome was known, ms since the epoch.
        public static let at = "at"
        /// Attempts the notification spent.
        public static let attempts = "attempts"
    }

    /// The `status` words.
    public enum Status {
        public static let accepted = "accepted"
        public static let deadToken = "dead_token"
        public static let deadLettered = "dead_lettered"
        public static let superseded = "superseded"
    }

    public let record: StreamRecord

    public init(_ record: StreamRecord) { self.record = record }

    public var id: StreamEntryID { record.id }
    public var job: String { record.text(Field.job) ?? "" }
    public var token: String { record.text(Field.token) ?? "" }
    public var index: Int? { record.text(Field.index).flatMap { Int($0) } }
    public var status: String { record.text(Field.status) ?? "" }
    public var reason: String? { record.text(Field.reason) }
    public var httpStatus: Int { record.text(Field.httpStatus).flatMap { Int($0) } ?? 0 }
    public var apnsID: String? { record.text(Field.apnsID) }
    public var uniqueID: String? { record.text(Field.uniqueID) }
    public var at: Int64 { record.text(Field.at).flatMap { Int64($0) } ?? 0 }
    public var attempts: Int { record.text(Field.attempts).flatMap { Int($0) } ?? 0 }
}

extension ResultEntry {
    /// A result the worker is about to write; `command` spells the XADD `ResultEntry` reads.
    public struct Draft: Sendable, Equatable {
        public var job: String
        public var token: String
        public var index: Int?
        public var status: String
        public var reason: String?
        public var httpStatus: Int
        public var apnsID: String?
        public var uniqueID: UUIDBits?
        public var at: Int64
        public var attempts: Int

        public init(job: String, token: String, index: Int?, status: String, reason: String?, httpStatus: Int,
                    apnsID: String?, uniqueID: UUIDBits?, at: Int64, attempts: Int) {
            self.job = job
            self.token = token
            self.index = index
            self.status = status
            self.reason = reason
            self.httpStatus = httpStatus
            self.apnsID = apnsID
            self.uniqueID = uniqueID
            self.at = at
            self.attempts = attempts
        }

        /// `XADD <results> MAXLEN ~ <maxLength> * job … token … [index …] status … [reason …]
        /// http_status … [apns_id …] [apns_unique_id …] at … attempts …`.
        public func command(stream: String, maxLength: Int) -> [RedisArgument] {
            var command: [RedisArgument] = ["XADD", .text(stream), "MAXLEN", "~", .integer(Int64(maxLength)), "*",
                                            .text(Field.job), .text(job), .text(Field.token), .text(token)]
            if let index { command += [.text(Field.index), .integer(Int64(index))] }
            command += [.text(Field.status), .text(status)]
            if let reason { command += [.text(Field.reason), .text(reason)] }
            command += [.text(Field.httpStatus), .integer(Int64(httpStatus))]
            if let apnsID { command += [.text(Field.apnsID), .text(apnsID)] }
            if let uniqueID { command += [.text(Field.uniqueID), .text(uniqueID.uuidText)] }
            command += [.text(Field.at), .integer(at), .text(Field.attempts), .integer(Int64(attempts))]
            return command
        }
    }
}

/// Reads a queue's results stream for `herald results tail`.
public final class ResultsReader {
    public let redis: any RedisCommandExecutor
    public let keys: QueueKeys

    public init(redis: any RedisCommandExecutor, keys: QueueKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// The last `count` entries, oldest first.
    public func last(_ count: Int) throws -> [ResultEntry] {
        guard count > 0 else { return [] }
        let reply = try redis.run(["XREVRANGE", .text(keys.results), "+", "-", "COUNT", .integer(Int64(count))])
        return RedisReplyReader.entries(reply).reversed().map(ResultEntry.init)
    }

    /// Up to `count` entries after `id` (exclusive), oldest first.
    public func after(_ id: StreamEntryID, count: Int) throws -> [ResultEntry] {
        let reply = try redis.run(["XRANGE", .text(keys.results), .text("(" + id.description), "+", "COUNT", .integer(Int64(count))])
        return RedisReplyReader.entries(reply).map(ResultEntry.init)
    }

    /// The id of the newest entry, or `0-0` when the stream is empty.
    public func lastID() throws -> StreamEntryID {
        let reply = try redis.run(["XREVRANGE", .text(keys.results), "+", "-", "COUNT", "1"])
        return RedisReplyReader.entries(reply).first?.id ?? StreamEntryID(milliseconds: 0, sequence: 0)
    }

    /// Waits up to `blockMilliseconds` for entries after `id` (XREAD BLOCK); none on timeout.
    public func wait(after id: StreamEntryID, blockMilliseconds: Int, count: Int) throws -> [ResultEntry] {
        let reply = try redis.run(["XREAD", "COUNT", .integer(Int64(count)), "BLOCK", .integer(Int64(blockMilliseconds)),
                                   "STREAMS", .text(keys.results), .text(id.description)],
                                  timeoutMilliseconds: Int64(blockMilliseconds) + 10_000)
        return RedisReplyReader.readEntries(reply).map(ResultEntry.init)
    }
}
