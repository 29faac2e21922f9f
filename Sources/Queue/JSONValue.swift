/// A JSON value built in code and written with members in the order given, without Foundation:
/// the queue tools' `--json` output (which renders it as text, compact or indented) and
/// `herald api`'s response bodies (compact bytes; the 202 of a 1,000-job batch is written without a
/// Codable round trip) share it, and `QueueStats.json` builds the one stats object both print.
public indirect enum JSONValue: Sendable {
    case string(String)
    case integer(Int64)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([(String, JSONValue)])

    public static func int(_ value: Int) -> JSONValue { .integer(Int64(value)) }
    public static func optional(_ value: Int64?) -> JSONValue { value.map { .integer($0) } ?? .null }
    public static func optional(_ value: Int?) -> JSONValue { value.map { .integer(Int64($0)) } ?? .null }
    public static func optional(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }

    public var isScalar: Bool {
        switch self {
        case .array, .object: return false
        default: return true
        }
    }

    /// The text, compact, with a trailing newline (for people reading it with curl).
    public func bytes() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(to: &out)
        out.append(0x0A)
        return out
    }

    public func write(to out: inout [UInt8]) {
        switch self {
        case .string(let text): JSONValue.quote(text, into: &out)
        case .integer(let value): out.append(contentsOf: String(value).utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .null: out.append(contentsOf: "null".utf8)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.quote(member.0, into: &out)
                out.append(UInt8(ascii: ":"))
                member.1.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped.
    public static func quote(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20, 0x7F:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                        hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension QueueStats {
    /// The stats object of one queue, as `herald stats --json` prints it and `GET /v1/queues/{queue}`
    /// answers it; `sampledAtText` adds the sample time as RFC 3339 beside the milliseconds.
    public func json(sampledAtText: Bool = false) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("queue", .string(keys.queue)),
            ("keys", .object([("jobs", .string(keys.jobs)), ("retry", .string(keys.retry)),
                              ("dead", .string(keys.dead)), ("feedback", .string(keys.feedback)), ("scheduled", .string(keys.scheduled))])),
            ("sampled_at_ms", .integer(sampledAt)),
        ]
        if sampledAtText { members.append(("sampled_at", .string(HumanTime.iso8601(sampledAt)))) }
        members += [
            ("depth", .int(depth)),
            ("group", .optional(group?.name)),
            ("pending", .optional(group?.pending)),
            ("lag", .optional(group?.lag)),
            ("lag_exact", group.map { .bool($0.lagIsExact) } ?? .null),
            ("last_delivered_id", .optional(group?.lastDeliveredID)),
            ("entries_read", .optional(group?.entriesRead)),
            ("oldest_pending_id", .optional(group?.oldestPendingID)),
            ("oldest_pending_age_ms", .optional(group?.oldestPendingAge)),
            ("retry_size", .int(retrySize)),
            ("retry_due", .int(retryDue)),
            ("next_retry_at_ms", .optional(nextRetryAt)),
            ("scheduled", .int(scheduledSize)),
            ("scheduled_due", .int(scheduledDue)),
            ("scheduled_next_minute", .int(scheduledNextMinute)),
            ("scheduled_next_hour", .int(scheduledNextHour)),
            ("next_scheduled_at_ms", .optional(nextScheduledAt)),
            ("dead_letters", .int(deadLetters)),
            ("feedback", .int(feedback)),
        ]
        if let results { members.append(("results", .int(results))) }
        members += [
            ("consumers", .array((group?.consumers ?? []).map { consumer in
                .object([("name", .string(consumer.name)), ("pending", .int(consumer.pending)),
                         ("idle_ms", .integer(consumer.idle)), ("inactive_ms", .optional(consumer.inactive))])
            })),
        ]
        if let urgent { members.append(("urgent", urgent.json(keys: keys))) }
        return .object(members)
    }
}
