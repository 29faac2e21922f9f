import Glibc
import Logging

/// How log lines look: `text` for people, `json` and `logfmt` for log pipelines.
public enum LogFormat: String, Sendable, CaseIterable {
    case text, json, logfmt
}

/// A swift-log handler writing one line per event to standard error as JSON or logfmt, with
/// stable keys (`ts`, `level`, `logger`, `msg`, then metadata such as `app`, `queue`,
/// `connection`). One `write(2)` per line, so lines from several loops never interleave.
/// Herald logs state changes, not notifications; device tokens are never logged whole and keys
/// and JWTs never at all.
public struct LineLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public let label: String
    public let format: LogFormat

    public init(label: String, format: LogFormat) {
        self.label = label
        self.format = format
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        if let error = event.error { merged["error"] = "\(error)" }
        let line = LineLogHandler.render(format: format, timestamp: LineLogHandler.timestamp(), level: event.level,
                                         label: label, message: "\(event.message)", metadata: merged)
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }

    /// The line for one event (without the newline); pure, so it is tested directly.
    public static func render(format: LogFormat, timestamp: String, level: Logger.Level, label: String,
                              message: String, metadata: Logger.Metadata) -> String {
        let keys = metadata.keys.sorted()
        switch format {
        case .json:
            var out = "{\"ts\":\(jsonString(timestamp)),\"level\":\(jsonString(level.rawValue)),\"logger\":\(jsonString(label)),\"msg\":\(jsonString(message))"
            for key in keys { out += ",\(jsonString(key)):\(jsonString("\(metadata[key]!)"))" }
            return out + "}"
        case .logfmt:
            var out = "ts=\(timestamp) level=\(level.rawValue) logger=\(logfmtValue(label)) msg=\(logfmtValue(message))"
            for key in keys { out += " \(logfmtKey(key))=\(logfmtValue("\(metadata[key]!)"))" }
            return out
        case .text:
            var out = "\(timestamp) \(level.rawValue) \(label): \(message)"
            for key in keys { out += " \(key)=\(metadata[key]!)" }
            return out
        }
    }

    /// `text` as a JSON string literal, quotes included (also the load generator's report).
    public static func jsonString(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    static func logfmtKey(_ key: String) -> String {
        String(key.map { $0 == " " || $0 == "=" || $0 == "\"" ? "_" : $0 })
    }

    static func logfmtValue(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0 == "\n" || $0 == "\\" }
        guard needsQuotes else { return value }
        var out = "\""
        for character in value {
            switch character {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out + "\""
    }

    /// RFC 3339 UTC with milliseconds.
    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var seconds = ts.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(ts.tv_nsec / 1_000_000), 3))Z"
    }
}
