import Glibc
import Testing

@testable import Transport

/// A server that is done with a connection while its client is still writing must not lose the
/// bytes it already wrote: a plain `close()` with unread input sends RST and discards them.
@Suite(.serialized) struct LingeringCloseTests {
    /// A loopback pair: `server` non-blocking (accepted), `client` blocking with a small receive
    /// buffer so that most of what the server writes waits in the server's send queue.
    static func pair() throws -> (server: Int32, client: Int32) {
        let listener = try Socket.listen(host: "127.0.0.1", port: 0)
        defer { close(listener.fd) }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var small: Int32 = 4096
        _ = setsockopt(client, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        // A regression must fail the test, not hang the run: reads give up after 10 s.
        var limit = timeval(tv_sec: 10, tv_usec: 0)
        _ = setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(listener.port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        var server: Int32? = nil
        for _ in 0..<1000 where server == nil {
            if case .accepted(let fd) = Socket.acceptConnection(listener.fd) { server = fd }
            if server == nil { usleep(1000) }
        }
        return (try #require(server), client)
    }

    /// The client writes a request the server never reads; the server fills its send queue.
    static func stage(_ pair: (server: Int32, client: Int32)) -> Int {
        let request = [UInt8](repeating: 0x52, count: 100)
        _ = request.withUnsafeBytes { write(pair.client, $0.baseAddress, $0.count) }
        // Wait until the request sits unread at the server.
        var ready = pollfd(fd: pair.server, events: Int16(POLLIN), revents: 0)
        _ = poll(&ready, 1, 5_000)
        let chunk = [UInt8](repeating: 0x41, count: 16 * 1024)
        var written = 0
        while true {
            let count = chunk.withUnsafeBytes { write(pair.server, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            written += count
        }
        return written
    }

    /// Reads until EOF or an error; returns the bytes received.
    static func drain(_ fd: Int32) -> Int {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var total = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { return total }
            total += count
        }
    }

    @Test func plainCloseWithUnreadInputLosesQueuedBytes() throws {
        // The premise: what the fix is for really happens on this kernel.
        let pair = try Self.pair()
        defer { close(pair.client) }
        let written = Self.stage(pair)
        try #require(written > 64 * 1024, "the server's send queue holds a backlog")
        close(pair.server)
        #expect(Self.drain(pair.client) < written)
    }

    @Test func lingeringCloseDeliversEveryByteThenCloses() throws {
        let thread = try EventLoopThread()
        defer { thread.shutdown() }
        let pair = try Self.pair()
        defer { close(pair.client) }
        let written = Self.stage(pair)
        try #require(written > 64 * 1024)
        let server = pair.server
        let loop = thread.loop
        nonisolated(unsafe) var lingering: LingeringClose? = nil
        thread.submitAndWait { lingering = LingeringClose.start(loop: loop, fd: server) }
        #expect(Self.drain(pair.client) == written, "every byte arrives, then EOF")
        // The client closes its side; the lingering side reads EOF and closes well before its
        // 2-second timeout.
        let started = ContinuousClock.now
        shutdown(pair.client, Int32(SHUT_WR))
        var finished = false
        while !finished && ContinuousClock.now - started < .milliseconds(1_800) {
            usleep(5_000)
            finished = thread.submitAndWait { lingering?.finished ?? false }
        }
        #expect(finished, "closed once the peer closed, not at the timeout")
    }
}
