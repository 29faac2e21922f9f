import Foundation
import Glibc

/// An HTTP/1.1 response as the tests read it.
struct HTTPTestResponse: Sendable, CustomStringConvertible {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]

    var text: String { String(decoding: body, as: UTF8.self) }
    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    /// The body parsed with Foundation (tests only; the server writes its JSON itself).
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:] }
    var description: String { "HTTP \(status): \(text.prefix(2000))" }
}

/// A plain-socket HTTP/1.1 connection to 127.0.0.1: what a backend's HTTP client does, with no
/// library between the test and the bytes, so a test can also send half a request and stop.
final class HTTPTestConnection: @unchecked Sendable {
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw WaitTimeout(description: "socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw WaitTimeout(description: "connect to 127.0.0.1:\(port): errno \(errno)")
        }
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw WaitTimeout(description: "send: errno \(errno)") }
            offset += n
        }
    }

    /// The request head (with Content-Length for `bodyLength` and `Connection: close`).
    static func head(_ method: String, _ path: String, headers: [(String, String)], bodyLength: Int) -> [UInt8] {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: \(bodyLength)\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        return Array((text + "\r\n").utf8)
    }

    /// Reads until the server closes, then parses the response.
    func readResponse() throws -> HTTPTestResponse {
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n == 0 { break }
            if n < 0 {
                if errno == EINTR { continue }
                if data.isEmpty { throw WaitTimeout(description: "recv: errno \(errno)") }
                break
            }
            data.append(contentsOf: chunk[0..<n])
        }
        return try HTTPTestConnection.parse(data)
    }

    static func parse(_ data: [UInt8]) throws -> HTTPTestResponse {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let split = (0..<max(0, data.count - 3)).first(where: { Array(data[$0..<$0 + 4]) == separator }) else {
            throw WaitTimeout(description: "no HTTP response head in \(data.count) bytes: \(String(decoding: data.prefix(200), as: UTF8.self))")
        }
        let lines = String(decoding: data[..<split], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw WaitTimeout(description: "bad status line \(lines[0])") }
        var headers: [(String, String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var body = Array(data[(split + 4)...])
        if headers.contains(where: { $0.0.lowercased() == "transfer-encoding" && $0.1.lowercased().contains("chunked") }) {
            var decoded: [UInt8] = []
            var index = 0
            while index < body.count {
                guard let end = (index..<body.count - 1).first(where: { body[$0] == 13 && body[$0 + 1] == 10 }),
                      let size = Int(String(decoding: body[index..<end], as: UTF8.self), radix: 16) else { break }
                if size == 0 { break }
                decoded.append(contentsOf: body[(end + 2)..<min(body.count, end + 2 + size)])
                index = end + 2 + size + 2
            }
            body = decoded
        }
        return HTTPTestResponse(status: status, headers: headers, body: body)
    }
}

/// One request on a fresh connection, run off the cooperative pool (the socket blocks).
func httpRequest(port: Int, _ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = []) async throws -> HTTPTestResponse {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            do {
                let connection = try HTTPTestConnection(port: port)
                // A server may answer (413) and close before reading all of a large body: read its answer anyway.
                try? connection.send(HTTPTestConnection.head(method, path, headers: headers, bodyLength: body.count) + body)
                continuation.resume(returning: try connection.readResponse())
            } catch {
                continuation.resume(throwing: error)
            }
        }
    }
}

func httpRequest(port: Int, _ method: String, _ path: String, headers: [(String, String)] = [], json: String) async throws -> HTTPTestResponse {
    try await httpRequest(port: port, method, path, headers: headers + [("Content-Type", "application/json")], body: Array(json.utf8))
}
