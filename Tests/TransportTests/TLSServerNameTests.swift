import Glibc
import Testing

@testable import Transport

/// The server name a client session sends (SNI) and checks the certificate against: a name
/// OpenSSL refuses must fail the connection, never go out unchecked.
@Suite struct TLSServerNameTests {
    static func withSocketPair(_ body: (Int32) throws -> Void) throws {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        try body(fds[0])
    }

    @Test func aNameTooLongForSNIFailsTheSession() throws {
        let context = try TLSContext(clientTrusting: nil)
        // 300 bytes: a valid-looking DNS name in labels of 60, longer than SNI's 255.
        let host = Array(repeating: String(repeating: "a", count: 59), count: 5).joined(separator: ".")
        try TLSServerNameTests.withSocketPair { fd in
            #expect {
                _ = try TLSStream(context: context, fd: fd, host: host)
            } throws: { error in
                guard let error = error as? TLSError, case .invalidHostName = error else { return false }
                return error.description.contains("SNI")
            }
        }
    }

    @Test func anEmptyHostIsRefusedRatherThanCheckedAgainstNothing() throws {
        let context = try TLSContext(clientTrusting: nil)
        try TLSServerNameTests.withSocketPair { fd in
            #expect {
                _ = try TLSStream(context: context, fd: fd, host: "")
            } throws: { error in
                guard let error = error as? TLSError, case .invalidHostName = error else { return false }
                return true
            }
        }
    }

    @Test func aHostNameIsSentAndChecked() throws {
        let context = try TLSContext(clientTrusting: nil)
        try TLSServerNameTests.withSocketPair { fd in
            let stream = try TLSStream(context: context, fd: fd, host: "api.push.apple.com")
            #expect(stream.checkedHostName == "api.push.apple.com")
        }
    }
}
