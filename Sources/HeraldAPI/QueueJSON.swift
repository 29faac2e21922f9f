import Queue
import Transport

/// The JSON of the queue routes: the same members as `herald stats --json`,
/// `herald dead-letters list --json` and `herald feedback tail --json`, plus the cursors.
enum QueueJSON {
    /// A token as shown: whole with `show_tokens`, else its first 8 hex digits and "…".
    static func token(_ token: String, show: Bool) -> String {
        show || token.count <= 8 ? token : String(token.prefix(8)) + "…"
    }

    static func deadLetters(_ found: DeadLetterTools.Selection, keys: QueueKeys, total: Int, full: Bool, showTokens: Bool) -> JSONValue {
        .object([
            ("queue", .string(keys.queue)),
            ("stream", .string(keys.dead)),
            ("total", .int(total)),
            ("count", .int(found.letters.count)),
            ("more", .bool(found.more)),
            ("next_cursor", found.more ? .optional(found.letters.last?.id.description) : .null),
            ("dead_letters", .array(found.letters.map { letter in
                var members: [(String, JSONValue)] = [
                    ("id", .string(letter.id.description)),
                    ("reason", .string(letter.reason)),
                    ("message", .string(letter.message)),
                    ("status", .optional(letter.status)),
                    ("attempts", .optional(letter.attempts)),
                    ("failed_at_ms", .integer(letter.failedAt)),
                    ("failed_at", .string(HumanTime.iso8601(letter.failedAt))),
                    ("tokens", .array(letter.tokens.map { .string(token($0, show: showTokens)) })),
                    ("topic", .optional(letter.topic)),
                ]
                if full {
                    members.append(("fields", .array(letter.fields.map { field in
                        let value = String(decoding: field.value, as: UTF8.self)
                        let shown: String
                        switch field.name {
                        case JobField.token: shown = token(value, show: showTokens)
                        case JobField.tokens:
                            shown = value.split(separator: ",").map { token(String($0).trimmingWhitespace(), show: showTokens) }.joined(separator: ",")
                        default: shown = value
                        }
                        return .array([.string(field.name), .string(shown)])
                    })))
                }
                return .object(members)
            })),
        ])
    }

    static func feedback(_ entries: [FeedbackEntry], keys: QueueKeys, next: StreamEntryID, showTokens: Bool) -> JSONValue {
        .object([
            ("queue", .string(keys.queue)),
            ("stream", .string(keys.feedback)),
            ("count", .int(entries.count)),
            ("next_cursor", .string(next.description)),
            ("entries", .array(entries.map { entry in
                .object([
                    ("id", .string(entry.id.description)),
                    ("at", .string(HumanTime.iso8601(Int64(clamping: entry.id.milliseconds)))),
                    ("reason", .string(entry.reason)),
                    // A broadcast's unknown channel: its id in full (no secret; the backend needs it).
                    entry.channelID.map { ("channel_id", .string($0)) } ?? ("token", .string(token(entry.token, show: showTokens))),
                    ("topic", .string(entry.topic)),
                    ("timestamp_ms", .optional(entry.timestamp)),
                    ("job", .optional(entry.job)),
                ])
            })),
        ])
    }
}
