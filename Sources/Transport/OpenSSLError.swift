import COpenSSL

/// An error raised by OpenSSL, with the library's error queue drained into readable entries.
///
/// Every call site that can fail clears the queue first (`OpenSSLError.clearQueue()`) and, on
/// failure, throws `OpenSSLError(operation:)`, which takes the entries OpenSSL queued for this
/// thread so that messages never leak into the next, unrelated call.
public struct OpenSSLError: Error, CustomStringConvertible, Sendable {
    /// One entry of OpenSSL's per-thread error queue.
    public struct Entry: Sendable, CustomStringConvertible {
        public let code: UInt
        public let message: String
        public let file: String
        public let line: Int32

        public var description: String { "\(message) (\(file):\(line))" }
    }

    /// What Herald was doing, in its own words ("loading the provider key").
    public let operation: String
    public let entries: [Entry]

    /// Takes the entries OpenSSL queued on this thread (and leaves the queue empty).
    public init(operation: String) {
        self.operation = operation
        self.entries = OpenSSLError.drainQueue()
    }

    public init(operation: String, entries: [Entry]) {
        self.operation = operation
        self.entries = entries
    }

    public var description: String {
        if entries.isEmpty { return "\(operation) failed" }
        return "\(operation) failed: " + entries.map(\.description).joined(separator: "; ")
    }

    /// Empties OpenSSL's error queue for this thread; call before an operation whose failure is inspected.
    public static func clearQueue() {
        ERR_clear_error()
    }

    static func drainQueue() -> [Entry] {
        var entries: [Entry] = []
        while true {
            var file: UnsafePointer<CChar>? = nil
            var line: Int32 = 0
            let code = ERR_get_error_all(&file, &line, nil, nil, nil)
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            let message = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            entries.append(Entry(code: code, message: message, file: file.map { String(cString: $0) } ?? "?", line: line))
        }
        return entries
    }
}
