import Glibc
import Transport

/// A deliberately tiny HTTP/1.1 server for /metrics, /healthz and /readyz on an `EventLoop`.
///
/// One request per connection (`Connection: close`), GET and HEAD only, request head capped at
/// 8 KiB, idle connections dropped after 10 s. It exists so the worker needs no HTTP framework;
/// anything beyond scraping and probes does not belong here.
///
/// It must never hurt the worker it reports on: at most `maxConnections` connections are open
/// (a new one closes the oldest that has not sent its request yet), and when `accept` finds no
/// descriptor left (EMFILE, ENFILE) the listener is not watched for a while (100 ms, doubling to
/// 1 s) instead of waking the loop again at once: the worker's own reconnects need descriptors
/// more than a scraper does.
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

    /// What the server did, for /metrics and tests.
    public struct Statistics: Sendable, Equatable {
        /// Calls to accept(2), successful or not.
        public var acceptCalls = 0
        /// accept(2) calls that found no descriptor left (each is followed by a pause).
        public var acceptOutOfDescriptors = 0
        /// Connections closed to stay within `maxConnections`.
        public var shedConnections = 0
        /// Connections closed because they sent no full request within the idle timeout.
        public var timedOutConnections = 0
        /// Connections open now.
        public var openConnections = 0
    }

    public static let defaultMaxConnections = 64
    public static let defaultIdleTimeoutMilliseconds: Int64 = 10_000
    static let firstAcceptPauseMilliseconds: Int64 = 100
    static let longestAcceptPauseMilliseconds: Int64 = 1_000

    public let loop: EventLoop
    public let maxConnections: Int
    public let idleTimeoutMilliseconds: Int64
    public private(set) var port = 0
    private var listenFD: Int32 = -1
    private var listenerHandler: Listener?
    private let handler: (String) -> Response
    /// Open connections, oldest first (so the first is the next to time out).
    private var clients: [Client] = []
    private var statistics = Statistics()
    /// One timer at a time, for the oldest connection's deadline.
    private var idleTimer: EventLoop.TimerID?
    private var acceptPause: Int64 = 0
    private var resumeTimer: EventLoop.TimerID?

    public init(loop: EventLoop, maxConnections: Int = MetricsHTTPServer.defaultMaxConnections,
                idleTimeoutMilliseconds: Int64 = MetricsHTTPServer.defaultIdleTimeoutMilliseconds,
                handler: @escaping (String) -> Response) {
        self.loop = loop
        self.maxConnections = max(1, maxConnections)
        self.idleTimeoutMilliseconds = max(1, idleTimeoutMilliseconds)
        self.handler = handler
    }

    /// Listens on `host:port` (0 picks a free port). Loop thread only.
    public func start(host: String, port: Int) throws {
        let (fd, boundPort) = try Socket.listen(host: host, port: port, backlog: 128)
        let listener = Listener(server: self)
        do {
            try loop.register(fd, handler: listener, interest: .read)
        } catch {
            Glibc.close(fd)
            throw error
        }
        listenFD = fd
        listenerHandler = listener
        self.port = boundPort
    }

    public func stop() {
        if listenFD >= 0 {
            loop.deregister(listenFD)
            Glibc.close(listenFD)
            listenFD = -1
        }
        listenerHandler = nil
        if let resumeTimer { loop.cancel(resumeTimer) }
        resumeTimer = nil
        if let idleTimer { loop.cancel(idleTimer) }
        idleTimer = nil
        let open = clients
        clients.removeAll()
        for client in open { client.close() }
    }

    /// What the server did so far. Loop thread only.
    public var currentStatistics: Statistics {
        var result = statistics
        result.openConnections = clients.count
        return result
    }

    /// Whether the listener is being watched (false while pausing after EMFILE). Loop thread only.
    public var isAccepting: Bool { listenFD >= 0 && resumeTimer == nil }

    // MARK: accepting

    final class Listener: IOHandler {
        weak var server: MetricsHTTPServer?
        init(server: MetricsHTTPServer) { self.server = server }
        func readable() { server?.acceptPending() }
        func writable() {}
    }

    private func acceptPending() {
        // A bounded batch per wake-up: the rest waits for the next loop turn.
        for _ in 0..<maxConnections {
            guard listenFD >= 0 else { return }
            statistics.acceptCalls += 1
            switch Socket.acceptConnection(listenFD) {
            case .accepted(let fd):
                acceptPause = 0
                adopt(fd)
            case .noneWaiting:
                return
            case .outOfDescriptors:
                statistics.acceptOutOfDescriptors += 1
                pauseAccepting()
                return
            case .failed:
                return
            }
        }
    }

    /// Stops watching the listener for a while: the connection stays in the kernel's queue, and
    /// the loop is not woken for it again until the pause ends.
    private func pauseAccepting() {
        guard listenFD >= 0, resumeTimer == nil else { return }
        acceptPause = acceptPause == 0
            ? MetricsHTTPServer.firstAcceptPauseMilliseconds
            : min(acceptPause * 2, MetricsHTTPServer.longestAcceptPauseMilliseconds)
        loop.deregister(listenFD)
        resumeTimer = loop.schedule(afterMilliseconds: acceptPause) { [weak self] in
            guard let self else { return }
            self.resumeTimer = nil
            guard self.listenFD >= 0, let listener = self.listenerHandler else { return }
            do {
                try self.loop.register(self.listenFD, handler: listener, interest: .read)
            } catch {
                // Registering needs no new descriptor; should it fail, try again after a pause.
                self.pauseAccepting()
            }
        }
    }

    private func adopt(_ fd: Int32) {
        if clients.count >= maxConnections {
            // Keep the newest: a scraper that just connected is about to ask; the oldest silent
            // connection is the likeliest to be stuck or hostile.
            if let index = clients.firstIndex(where: { !$0.isResponding }) {
                statistics.shedConnections += 1
                clients.remove(at: index).close()
            } else {
                statistics.shedConnections += 1
                Glibc.close(fd)
                return
            }
        }
        let client = Client(fd: fd, server: self, acceptedAt: loop.now)
        do {
            try loop.register(fd, handler: client, interest: .read)
        } catch {
            Glibc.close(fd)
            return
        }
        clients.append(client)
        scheduleIdleCheck()
    }

    /// One timer for the oldest connection's deadline; it closes what expired and looks again.
    private func scheduleIdleCheck() {
        guard idleTimer == nil, let oldest = clients.first else { return }
        let delay = max(0, oldest.acceptedAt + idleTimeoutMilliseconds - loop.now)
        idleTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in
            guard let self else { return }
            self.idleTimer = nil
            let cutoff = self.loop.now - self.idleTimeoutMilliseconds
            while let oldest = self.clients.first, oldest.acceptedAt <= cutoff {
                self.statistics.timedOutConnections += 1
                self.clients.removeFirst()
                oldest.close()
            }
            self.scheduleIdleCheck()
        }
    }

    fileprivate func closed(_ client: Client) {
        if let index = clients.firstIndex(where: { $0 === client }) { clients.remove(at: index) }
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
        let acceptedAt: Int64
        weak var server: MetricsHTTPServer?
        var request: [UInt8] = []
        var output: [UInt8] = []
        var offset = 0
        var isClosed = false

        init(fd: Int32, server: MetricsHTTPServer, acceptedAt: Int64) {
            self.fd = fd
            self.server = server
            self.acceptedAt = acceptedAt
        }

        /// The request arrived and the response is being written.
        var isResponding: Bool { !output.isEmpty }

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
                        // Nothing more is read: a client that keeps sending must not wake the loop.
                        server.loop.setInterest(fd, .write)
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
            guard !output.isEmpty, !isClosed else { return }
            while offset < output.count {
                let count = output.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                if count > 0 {
                    offset += count
                } else if count < 0 && errno == EINTR {
                    continue
                } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    return  // watched for .write since the request arrived
                } else {
                    break
                }
            }
            close()
        }

        func close() {
            guard !isClosed else { return }
            isClosed = true
            server?.loop.deregister(fd)
            Glibc.close(fd)
            server?.closed(self)
        }
    }
}
