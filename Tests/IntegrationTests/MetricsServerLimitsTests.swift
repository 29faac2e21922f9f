import Foundation
import Glibc
import Observability
import Testing
import Transport

/// The metrics server under a crowd of idle connections: it keeps at most its cap open, sheds
/// the oldest silent ones, times idle ones out, and still answers a fresh scrape.
@Suite struct MetricsServerLimitsTests {
    /// The server on a loop thread of its own; loop-confined state is touched through `thread`.
    final class Host: @unchecked Sendable {
        let thread: EventLoopThread
        private var server: MetricsHTTPServer!  // loop only
        private(set) var port = 0

        init(maxConnections: Int, idleTimeoutMilliseconds: Int64) async throws {
            thread = try EventLoopThread()
            port = try await thread.submit { [self] in
                let server = MetricsHTTPServer(loop: thread.loop, maxConnections: maxConnections,
                                               idleTimeoutMilliseconds: idleTimeoutMilliseconds) { path in
                    MetricsHTTPServer.Response(status: path == "/metrics" ? 200 : 404, body: Array("herald_up 1\n".utf8))
                }
                try server.start(host: "127.0.0.1", port: 0)
                self.server = server
                return server.port
            }
        }

        func statistics() async throws -> MetricsHTTPServer.Statistics {
            try await thread.submit { [self] in server.currentStatistics }
        }

        func shutdown() {
            thread.submitAndWait { [self] in server?.stop() }
            thread.shutdown()
        }
    }

    /// A blocking TCP connection to 127.0.0.1:`port` (reads give up after 5 s).
    static func connectTo(_ port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var limit = timeval(tv_sec: 5, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if connected != 0 { close(fd) }
        try #require(connected == 0)
        return fd
    }

    /// GET `path` on a new connection: the whole response text ("" when the server closed at once).
    static func get(_ path: String, port: Int) throws -> String {
        let fd = try connectTo(port)
        defer { close(fd) }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            response.append(contentsOf: buffer[0..<count])
        }
        return String(decoding: response, as: UTF8.self)
    }

    /// True when the peer has closed `fd` (a read returns 0 or an error at once).
    static func peerClosed(_ fd: Int32) -> Bool {
        var pollEntry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pollEntry, 1, 0) == 1 else { return false }
        var byte: UInt8 = 0
        return read(fd, &byte, 1) <= 0
    }

    @Test func idleConnectionsBeyondTheCapAreShedAndAScrapeStillAnswers() async throws {
        let host = try await Host(maxConnections: 64, idleTimeoutMilliseconds: 60_000)
        defer { host.shutdown() }
        var idle: [Int32] = []
        defer { for fd in idle { close(fd) } }
        for _ in 0..<100 { idle.append(try MetricsServerLimitsTests.connectTo(host.port)) }
        try await waitFor("the server has accepted all 100 connections", timeout: .seconds(10)) {
            try await host.statistics().acceptCalls >= 100
        }
        let statistics = try await host.statistics()
        #expect(statistics.openConnections <= 64, "\(statistics)")
        #expect(statistics.shedConnections >= 36, "\(statistics)")
        // The oldest silent ones went first.
        #expect(MetricsServerLimitsTests.peerClosed(idle[0]))
        #expect(!MetricsServerLimitsTests.peerClosed(idle[99]))
        let response = try MetricsServerLimitsTests.get("/metrics", port: host.port)
        #expect(response.hasPrefix("HTTP/1.1 200"), "\(response)")
        #expect(response.contains("herald_up 1"))
        #expect(try await host.statistics().openConnections <= 64)
    }

    @Test func idleConnectionsTimeOut() async throws {
        let host = try await Host(maxConnections: 64, idleTimeoutMilliseconds: 200)
        defer { host.shutdown() }
        var idle: [Int32] = []
        defer { for fd in idle { close(fd) } }
        for _ in 0..<10 { idle.append(try MetricsServerLimitsTests.connectTo(host.port)) }
        // 200 ms is the deadline; the wait is long only for a CI machine running every suite at
        // once (a 10 s wait failed once there, with no statistics to say why: they are kept now).
        var last: MetricsHTTPServer.Statistics? = nil
        let timedOut = try await waitFor("every idle connection timed out", timeout: .seconds(60), failOnTimeout: false) {
            let statistics = try await host.statistics()
            last = statistics
            return statistics.timedOutConnections == 10 && statistics.openConnections == 0
        }
        try #require(timedOut, "idle connections still open after 60 s: \(last.map { "\($0)" } ?? "no statistics")")
        #expect(idle.allSatisfy(MetricsServerLimitsTests.peerClosed))
        #expect(try MetricsServerLimitsTests.get("/metrics", port: host.port).hasPrefix("HTTP/1.1 200"))
    }
}
