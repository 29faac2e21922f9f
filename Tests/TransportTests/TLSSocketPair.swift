import Glibc
import Testing

@testable import Transport

/// A client and a server session over a non-blocking socket pair, for tests of what a handshake
/// verifies and of what the sessions do afterwards.
enum TLSSocketPair {
    /// Handshakes a session of `client` (checking the name `localhost`) with one of `server`, and
    /// calls `body` with both, the client's socket, and the client's handshake error (nil: both
    /// sides finished). The sockets stay open during the call.
    static func withHandshake(client clientContext: TLSContext, server serverContext: TLSContext,
                              _ body: (_ client: TLSStream, _ server: TLSStream, _ clientFD: Int32, _ failure: TLSError?) throws -> Void) throws {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let client = try TLSStream(context: clientContext, fd: fds[0], host: "localhost")
        let server = try TLSStream(context: serverContext, fd: fds[1], host: "localhost")
        var clientDone = false, serverDone = false
        for _ in 0..<50 where !(clientDone && serverDone) {
            do {
                if !clientDone, case .done = try client.handshake() { clientDone = true }
            } catch {
                return try body(client, server, fds[0], error)
            }
            // The server fails too once the client gave up; only the client's verdict is asked for.
            if !serverDone, case .done? = try? server.handshake() { serverDone = true }
        }
        try #require(clientDone && serverDone, "the handshake did not finish")
        try body(client, server, fds[0], nil)
    }
}
