import Glibc
import Transport

/// A deliberately tiny HTTP/1.1 server for /metrics, /healthz and /readyz on an `EventLoop`.
///
/// One request per connection (`Connection: close`), GET and HEAD only, request head capped at
/// 8 KiB, idle connections dropped after 10 s. It exists so the worker needs no HTTP framework;
/// anything beyond scraping and probes does not belong here.
public final class MetricsHTTPServer {
    public struct Response {
        public var status: Int
        public var contentType: String
        public var body: [UInt8]

        public init(status: Int, contentType: String = "text/plain; charset=utf-8", body: [UInt8]) {
            self.status = status
            self.contentType = contentType
            self.body = body
        }
    }

    public let loop: EventLoop
    public private(set) var port = 0
    private var listener: HTTP2Listener?
    private let handler: (String) -> Response
    private var clients: [Int32: Client] = [:]

    public init(loop: EventLoop, handler: @escaping (String) -> Response) {
        self.loop = loop
        self.handler = handler
    }

    /// Listens on `host:port` (0 picks a free port). Loop thread only.
    public func start(host: String, port: Int) throws {
        listener = try HTTP2Listener(loop: loop, host: host, port: port) { [weak self] fd in self?.accept(fd) }
        self.port = listener!.port
    }

    public func stop() {
        listener?.close()
        listener = nil
        for client in clients.values { client.close() }
        clients.removeAll()
    }

    private func accept(_ fd: Int32) {
        let client = Client(fd: fd, server: self)
        do {
            try loop.register(fd, handler: client, interest: .read)
        } catch {
            Glibc.close(fd)
            return
        }
        clients[fd] = client
        client.timer = loop.schedule(afterMilliseconds: 10_000) { [weak client] in client?.close() }
    }

    fileprivate func closed(_ client: Client) {
        clients[client.fd] = nil
    }

    /// The whole response to a request head (request line and headers, up to the blank line):
    /// parses the request line and asks `handler` for the path's response. Pure, so the parsing
    /// can be tested and fuzzed without a socket.
    public static func respond(to head: String, handler: (String) -> Response) -> [UInt8] {
        let requestLine = head.prefix { $0 != "\r" && $0 != "\n" }
        let parts = requestLine.split(separator: " ")
        var response: Response
        var includeBody = true
        if parts.count < 3 || !parts[2].hasPrefix("HTTP/1.") {
            response = Response(status: 400, body: Array("bad request\n".utf8))
        } else if parts[0] != "GET" && parts[0] != "HEAD" {
            response = Response(status: 405, body: Array("only GET and HEAD\n".utf8))
        } else {
            includeBody = parts[0] == "GET"
            let path = String(parts[1].prefix { $0 != "?" })
            response = handler(path)
        }
        let reason: String
        switch response.status {
        case 200: reason = "OK"
        case 400: reason = "Bad Request"
        case 404: reason = "Not Found"
        case 405: reason = "Method Not Allowed"
        case 503: reason = "Service Unavailable"
        default: reason = "Status"
        }
        var bytes = Array("HTTP/1.1 \(response.status) \(reason)\r\nContent-Type: \(response.contentType)\r\nContent-Length: \(response.body.count)\r\nConnection: close\r\n\r\n".utf8)
        if includeBody { bytes.append(contentsOf: response.body) }
        return bytes
    }

    final class Client: IOHandler {
        let fd: Int32
        weak var server: MetricsHTTPServer?
        var request: [UInt8] = []
        var output: [UInt8] = []
        var offset = 0
        var timer: EventLoop.TimerID?
        var isClosed = false

        init(fd: Int32, server: MetricsHTTPServer) {
            self.fd = fd
            self.server = server
        }

        func readable() {
            guard output.isEmpty else { return }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    request.append(contentsOf: buffer[0..<count])
                    if request.count > 8192 { close(); return }
                    if let end = headEnd() {
                        guard let server else { close(); return }
                        output = MetricsHTTPServer.respond(to: String(decoding: request[0..<end], as: UTF8.self), handler: server.handler)
                        writable()
                        return
                    }
                } else if count == 0 {
                    close()
                    return
                } else if errno == EINTR {
                    continue
                } else {
                    if errno != EAGAIN && errno != EWOULDBLOCK { close() }
                    return
                }
            }
        }

        private func headEnd() -> Int? {
            guard request.count >= 4 else { return nil }
            for index in 3..<request.count where request[index] == 0x0A {
                if request[index - 1] == 0x0D && request[index - 2] == 0x0A && request[index - 3] == 0x0D { return index + 1 }
                if request[index - 1] == 0x0A { return index + 1 }
            }
            return nil
        }

        func writable() {
            guard !output.isEmpty, let server else { return }
            while offset < output.count {
                let count = output.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if count > 0 {
                    offset += count
                } else if count < 0 && errno == EINTR {
                    continue
                } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    server.loop.setInterest(fd, [.read, .write])
                    return
                } else {
                    break
                }
            }
            close()
        }

        func close() {
            guard !isClosed else { return }
            isClosed = true
            if let timer, let server { server.loop.cancel(timer) }
            server?.loop.deregister(fd)
            Glibc.close(fd)
            server?.closed(self)
        }
    }
}
