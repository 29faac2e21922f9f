import Transport

/// One entry of a queue's dead-letter stream, as the worker writes it (`DeadLetter.Draft.command`):
/// the job's own fields (with `token`/`tokens` narrowed to the tokens that failed), then
/// `reason`, `message`, `status`, `attempts` and `failed_at`.
public struct DeadLetter: Sendable {
    /// The fields Herald appends when it dead-letters a job.
    public enum Field {
        public static let reason = "reason"
        public static let message = "message"
        public static let status = "status"
        public static let attempts = "attempts"
        public static let failedAt = "failed_at"
        public static let all: Set<String> = [reason, message, status, attempts, failedAt]
    }

    /// Fields dropped when a dead letter goes back to the jobs stream: the dead-letter fields and
    /// Herald's retry bookkeeping (`attempts`, `retry_id`). `origin` and `enqueued_at` stay, so
    /// the requeued job keeps the apns-ids (and latency origin) of the first enqueue.
    public static let droppedOnRequeue: Set<String> = Field.all.union([JobField.attempts, JobField.retryID])

    public let record: StreamRecord

    public init(_ record: StreamRecord) {
        self.record = record
    }

    public var id: StreamEntryID { record.id }
    public var fields: [(name: String, value: [UInt8])] { record.fields }
    public var reason: String { record.text(Field.reason) ?? "" }
    public var message: String { record.text(Field.message) ?? "" }
    public var status: Int? { record.text(Field.status).flatMap { Int($0) } }
    /// The dead letter's own attempts (the last `attempts` field; a retried job carries another before it).
    public var attempts: Int? { record.text(Field.attempts).flatMap { Int($0) } }
    /// When the worker dead-lettered it, ms since the epoch (the entry id's time when absent).
    public var failedAt: Int64 { record.text(Field.failedAt).flatMap { Int64($0) } ?? Int64(clamping: id.milliseconds) }
    public var topic: String? { record.text(JobField.topic) }
    /// The device tokens of the entry (`token`, then each of `tokens`).
    public var tokens: [String] {
        var result: [String] = []
        for field in record.fields {
            if field.name == JobField.token, !field.value.isEmpty {
                result.append(String(decoding: field.value, as: UTF8.self))
            } else if field.name == JobField.tokens {
                for part in field.value.split(separator: 0x2C) {
                    let text = DeadLetter.trimmed(String(decoding: part, as: UTF8.self))
                    if !text.isEmpty { result.append(text) }
                }
            }
        }
        return result
    }

    static func trimmed(_ text: String) -> String {
        var rest = Substring(text)
        while rest.first == " " { rest = rest.dropFirst() }
        while rest.last == " " { rest = rest.dropLast() }
        return String(rest)
    }

    /// The job as it goes back to the jobs stream: every field in order except `droppedOnRequeue`.
    public var jobFields: [(name: String, value: [UInt8])] {
        record.fields.filter { !DeadLetter.droppedOnRequeue.contains($0.name) }
    }
}

extension DeadLetter {
    /// A dead-letter entry the worker is about to write: the job's (or malformed entry's) own
    /// fields, the tokens that failed (nil: the whole entry), and why. `DeliveryRules` makes one
    /// per job and reason; `command` spells it as the XADD that `DeadLetter` reads back.
    public struct Draft: Sendable {
        public var fields: [(name: String, value: [UInt8])]
        /// The tokens this letter holds; nil when the whole entry is dead-lettered as read.
        public var tokens: [String]?
        public var reason: String
        public var message: String
        public var status: Int
        public var attempts: Int
        public var failedAt: Int64
        /// The entry id the job was first enqueued as, added when the fields do not carry it.
        public var origin: String?
        /// A fan-out job's apns-id base, replacing its `id`/`id_base` fields.
        public var idBase: String?

        public init(fields: [(name: String, value: [UInt8])], tokens: [String]?, reason: String, message: String,
                    status: Int, attempts: Int, failedAt: Int64, origin: String? = nil, idBase: String? = nil) {
            self.fields = fields
            self.tokens = tokens
            self.reason = reason
            self.message = message
            self.status = status
            self.attempts = attempts
            self.failedAt = failedAt
            self.origin = origin
            self.idBase = idBase
        }

        /// `XADD <dead> MAXLEN ~ <maxLength> * <fields…> reason … failed_at …`.
        public func command(stream: String, maxLength: Int) -> [RedisArgument] {
            var command: [RedisArgument] = ["XADD", .text(stream), "MAXLEN", "~", .integer(Int64(maxLength)), "*"]
            // The job's own fields, without Herald's bookkeeping (the entry states attempts itself).
            for field in fields where !(tokens != nil && (field.name == JobField.token || field.name == JobField.tokens))
                && field.name != JobField.attempts && field.name != JobField.retryID
                && !(idBase != nil && (field.name == JobField.id || field.name == JobField.idBase)) {
                command += [FieldName.argument(field.name), .bytes(field.value)]
            }
            if let idBase { command += [.text(JobField.idBase), .text(idBase)] }
            // A broadcast's one "token" is its channel, which its `channel_id` field still names.
            if let tokens, let first = tokens.first, !fields.contains(where: { $0.name == JobField.channelID }) {
                command += tokens.count == 1 ? [.text(JobField.token), .text(first)] : [.text(JobField.tokens), .text(tokens.joined(separator: ","))]
            }
            if let origin, !fields.contains(where: { $0.name == JobField.origin }) {
                // A requeued dead letter then derives the apns-ids its first attempt was sent with.
                command += [.text(JobField.origin), .text(origin)]
            }
            command += [.text(Field.reason), .text(reason), .text(Field.message), .text(message),
                        .text(Field.status), .integer(Int64(status)), .text(Field.attempts), .integer(Int64(attempts)),
                        .text(Field.failedAt), .integer(failedAt)]
            return command
        }
    }
}
