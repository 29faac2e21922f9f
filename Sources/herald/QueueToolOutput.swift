import Glibc
import Observability
import Queue
import Transport

/// How the queue tools (`stats`, `dead-letters`, `feedback`) print: aligned tables for people,
/// JSON for machines, tokens redacted unless asked otherwise.
enum QueueToolOutput {
    /// Rows under a header, columns two spaces apart; the last column is not padded.
    static func table(_ headers: [String], _ rows: [[String]], indent: String = "") -> String {
        var widths = headers.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count { widths[index] = max(widths[index], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            var text = indent
            for (index, cell) in cells.enumerated() {
                if index == cells.count - 1 { text += cell; break }
                text += cell + String(repeating: " ", count: widths[index] - cell.count + 2)
            }
            while text.hasSuffix(" ") { text.removeLast() }
            return text
        }
        return ([line(headers)] + rows.map(line)).joined(separator: "\n")
    }

    /// A token as printed: in full with `--show-tokens`, else its first 8 hex digits and "…".
    static func token(_ token: String, show: Bool) -> String {
        show ? token : redacted(token)
    }

    /// The tokens of a `tokens` field, each redacted.
    static func tokenList(_ value: String, show: Bool) -> String {
        show ? value : value.split(separator: ",", omittingEmptySubsequences: false)
            .map { redacted(trimmed(String($0))) }.joined(separator: ",")
    }

    static func trimmed(_ text: String) -> String {
        var rest = Substring(text)
        while rest.first == " " { rest = rest.dropFirst() }
        while rest.last == " " { rest = rest.dropLast() }
        return String(rest)
    }

    /// "2025-06-10 06:13:20 UTC (3h 2m ago)".
    static func time(_ milliseconds: Int64, now: Int64) -> String {
        let delta = now - milliseconds
        let relative = delta >= 0 ? "\(HumanTime.duration(delta)) ago" : "in \(HumanTime.duration(-delta))"
        return "\(HumanTime.utc(milliseconds)) (\(relative))"
    }

    /// A field value for a terminal: control characters escaped, long values cut.
    static func printable(_ bytes: [UInt8], limit: Int? = nil) -> String {
        var text = ""
        for scalar in String(decoding: bytes, as: UTF8.self).unicodeScalars {
            switch scalar {
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F { text += "\\u{\(String(scalar.value, radix: 16))}" } else { text.unicodeScalars.append(scalar) }
            }
        }
        if let limit, text.count > limit { return String(text.prefix(limit)) + "…" }
        return text
    }

    /// The value of a job field as shown: tokens redacted unless `showTokens`.
    static func fieldValue(name: String, value: [UInt8], showTokens: Bool, limit: Int? = nil) -> String {
        let text = String(decoding: value, as: UTF8.self)
        switch name {
        case JobField.token: return token(text, show: showTokens)
        case JobField.tokens: return tokenList(text, show: showTokens)
        default: return printable(value, limit: limit)
        }
    }

    /// Writes `text` and a newline to standard output at once (follow mode is read live).
    static func emit(_ text: String) {
        print(text)
        fflush(nil)
    }

    /// Writes a warning or note to standard error.
    static func note(_ text: String) {
        fflush(nil)
        var line = text + "\n"
        line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }
}

/// `--json` output: `JSONValue` (Queue, shared with `herald api`) rendered as text with keys in
/// the order given, compact or indented.
extension JSONValue {
    /// Compact (one line) or indented by two spaces.
    func rendered(pretty: Bool = true) -> String {
        var out = ""
        write(to: &out, pretty: pretty, depth: 0)
        return out
    }

    private func write(to out: inout String, pretty: Bool, depth: Int) {
        let newline = pretty ? "\n" + String(repeating: "  ", count: depth + 1) : ""
        let close = pretty ? "\n" + String(repeating: "  ", count: depth) : ""
        switch self {
        case .string(let text): out += LineLogHandler.jsonString(text)
        case .integer(let value): out += String(value)
        case .bool(let value): out += value ? "true" : "false"
        case .null: out += "null"
        case .array(let items):
            if items.isEmpty { out += "[]"; return }
            if pretty, items.count <= 4, items.allSatisfy(\.isScalar) {
                // Short lists of scalars (a field's name and value) stay on one line.
                out += "[" + items.map { $0.rendered(pretty: false) }.joined(separator: ", ") + "]"
                return
            }
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += "," }
                out += newline
                item.write(to: &out, pretty: pretty, depth: depth + 1)
            }
            out += close + "]"
        case .object(let members):
            if members.isEmpty { out += "{}"; return }
            out += "{"
            for (index, member) in members.enumerated() {
                if index > 0 { out += "," }
                out += newline
                out += LineLogHandler.jsonString(member.0)
                out += pretty ? ": " : ":"
                member.1.write(to: &out, pretty: pretty, depth: depth + 1)
            }
            out += close + "}"
        }
    }
}


extension QueueOptions {
    /// A blocking client for the queue tools; the first command reports an unreachable Redis
    /// with its URL (password hidden) and how to point --redis elsewhere. On a Redis Cluster
    /// (`--redis-cluster`, a `redis+cluster://` URL) each command goes to its key's master; with
    /// Sentinel, to the master the sentinels name.
    func blockingClient() throws -> any QueueToolRedis {
        if try isCluster() { return try ClusterRedisClient(seeds: clusterSeeds()) }
        let (endpoint, sentinel) = try target()
        return try BlockingRedisClient(endpoint: endpoint, sentinel: sentinel)
    }
}
