/// How text a producer or a server wrote is quoted inside a dead letter's `message` (and in log
/// lines): escaped so the message stays one printable line, and cut so a huge field cannot make
/// a huge message.
///
/// `JobError`, `NotificationError` and the worker call `quoted` for every value they name.
/// Escapes: `\"` and `\\`; `\n`, `\r`, `\t`; every other control or invisible character (C0,
/// DEL, C1, the Unicode line and paragraph separators, bidirectional overrides, zero-width and
/// byte-order marks) as `\u{XX}` with its scalar value in hex. Bytes that are not UTF-8 were
/// already replaced by U+FFFD when the field was read as text and show as `�`.
public enum DeadLetterText {
    /// How many characters (Unicode scalars) of a value a message quotes by default.
    public static let defaultLimit = 40

    /// `text` in double quotes, escaped, at most `limit` scalars of it with "…" when cut.
    public static func quoted(_ text: some StringProtocol, limit: Int = defaultLimit) -> String {
        "\"" + escaped(text, limit: limit) + "\""
    }

    /// `text` escaped as described above, at most `limit` scalars of it with "…" when cut.
    public static func escaped(_ text: some StringProtocol, limit: Int = defaultLimit) -> String {
        var out = ""
        var count = 0
        for scalar in text.unicodeScalars {
            if count == max(0, limit) {
                out += "…"
                break
            }
            count += 1
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if isInvisible(scalar) {
                    out += "\\u{" + String(scalar.value, radix: 16) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// What a table of dead-letter counts (a metric label) keys `reason` by: Herald's own
    /// snake_case words, APNs' documented reasons and `Status<nnn>` stay as they are; anything
    /// else a server sent is counted as `Unknown`, so the table cannot grow without bound.
    public static func countingKey(reason: String) -> String {
        let utf8 = reason.utf8
        if let first = utf8.first, first &- UInt8(ascii: "a") < 26, utf8.count <= 64,
           utf8.allSatisfy({ $0 &- UInt8(ascii: "a") < 26 || $0 == UInt8(ascii: "_") }) {
            return reason
        }
        if reason.hasPrefix("Status"), utf8.count <= 9, utf8.count > 6,
           utf8.dropFirst(6).allSatisfy({ $0 &- UInt8(ascii: "0") < 10 }) {
            return reason
        }
        return APNsReason(rawValue: reason).countingKey
    }

    /// Control characters and the format characters that reorder, hide or break a line.
    static func isInvisible(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x2069, 0xFEFF: true
        default: false
        }
    }
}
