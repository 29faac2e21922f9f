import Glibc
import Transport

/// One blocking HTTP/1.1 GET to a local plain-HTTP server: the workers' /metrics and /readyz and
/// the emulator's stats port. Used by `LoadRun` between samples; never on a hot path.
public enum LocalHTTPClient {
    public struct Response: Sendable {
        public var status: Int
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// The most a response may hold: an emulator's timeline at its largest is about 2 MB.
    public static let defaultMaxResponseBytes = 64 << 20

    /// GETs `path` from `host:port`; nil when the server cannot be reached, answers nothing in
    /// time, or sends more than `maxResponseBytes` (a server that never stops talking).
    public static func get(host: String, port: Int, path: String, timeoutMilliseconds: Int32 = 2_000,
                           maxResponseBytes: Int = LocalHTTPClient.defaultMaxResponseBytes) -> Response? {
        guard let fd = try? Socket.startConnect(host: host, port: port) else { return nil }
        defer { close(fd) }
        guard wait(fd, events: Int16(POLLOUT), timeoutMilliseconds), Socket.pendingError(fd) == 0 else { return nil }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n\r\n".utf8)
        var offset = 0
        while offset < request.count {
            let written = request.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written > 0 { offset += written; continue }
            if written < 0 && (errno == EINTR) { continue }
            if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), wait(fd, events: Int16(POLLOUT), timeoutMilliseconds) { continue }
            return nil
        }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                guard response.count + count <= maxResponseBytes else { return nil }
                response.append(contentsOf: buffer[0..<count])
                continue
            }
            if count == 0 { break }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK, wait(fd, events: Int16(POLLIN), timeoutMilliseconds) { continue }
            return nil
        }
        return parse(response)
    }

    /// Splits a `Connection: close` response into status and body.
    static func parse(_ bytes: [UInt8]) -> Response? {
        guard let end = headEnd(bytes) else { return nil }
        let head = String(decoding: bytes[0..<end], as: UTF8.self)
        let statusLine = head.prefix { $0 != "\r" && $0 != "\n" }.split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        return Response(status: status, body: Array(bytes[end...]))
    }

    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 3..<bytes.count where bytes[index] == 0x0A && bytes[index - 1] == 0x0D && bytes[index - 2] == 0x0A {
            return index + 1
        }
        return nil
    }

    private static func wait(_ fd: Int32, events: Int16, _ timeout: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: events, revents: 0)
        while true {
            let ready = poll(&entry, 1, timeout)
            if ready < 0 && errno == EINTR { continue }
            return ready > 0
        }
    }

    /// `host:port` split; the host defaults to 127.0.0.1 (`:9464` or `9464`).
    public static func address(_ text: String) -> (host: String, port: Int)? {
        var rest = Substring(text)
        if rest.hasPrefix("http://") { rest = rest.dropFirst(7) }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        guard let colon = rest.lastIndex(of: ":") else { return Int(rest).map { ("127.0.0.1", $0) } }
        guard let port = Int(rest[rest.index(after: colon)...]) else { return nil }
        let host = rest[..<colon]
        return (host.isEmpty ? "127.0.0.1" : String(host), port)
    }
}
