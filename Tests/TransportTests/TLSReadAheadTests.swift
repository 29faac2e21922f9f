import Glibc
import Testing

@testable import Transport

/// Herald's TLS sessions read ahead: one `read` takes every record the socket holds, instead of
/// two calls (header, then body) per record, and every record read ahead still reaches the
/// reader, in order, before it is told to wait for the socket.
@Suite struct TLSReadAheadTests {
    /// A client and a server session over a non-blocking socket pair, handshaken.
    static func withSessions(_ body: (_ client: TLSStream, _ server: TLSStream, _ clientFD: Int32) throws -> Void) throws {
        let directory = try TemporaryDirectory()
        let pair = try SelfSignedCertificate.generate()
        let cert = directory.path("server.pem"), key = directory.path("server.key")
        try pair.write(certificateTo: cert, keyTo: key)
        let serverContext = try TLSContext(serverCertificateFile: cert, keyFile: key)
        let clientContext = try TLSContext(clientTrusting: cert, systemStore: false)
        try TLSSocketPair.withHandshake(client: clientContext, server: serverContext) { client, server, clientFD, failure in
            try #require(failure == nil, "the handshake failed: \(failure.map { "\($0)" } ?? "")")
            try body(client, server, clientFD)
        }
    }

    /// Bytes waiting in the socket, not yet read by anyone.
    static func unread(_ fd: Int32) -> Int32 {
        var count: Int32 = 0
        _ = ioctl(fd, UInt(FIONREAD), &count)
        return count
    }

    @Test func oneReadTakesEveryRecordTheSocketHoldsAndEachReachesTheReader() throws {
        try TLSReadAheadTests.withSessions { client, server, clientFD in
            // 200 records of 9 bytes each (one SSL_write, one record), about 6 KB on the wire:
            // less than the record buffer, so one read ahead holds them all.
            let records = (0..<200).map { Array("record\(String(1000 + $0).dropFirst())".utf8) }
            for record in records {
                let written = record.withUnsafeBytes { server.write($0) }
                guard case .bytes(let count) = written, count == record.count else {
                    Issue.record("a record was not written whole: \(written)")
                    return
                }
            }
            #expect(TLSReadAheadTests.unread(clientFD) > 0)
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            var received: [UInt8] = []
            var reads = 0
            reading: while true {
                let result = buffer.withUnsafeMutableBytes { client.read(into: $0) }
                switch result {
                case .bytes(let count):
                    reads += 1
                    received += buffer[0..<count]
                    // Read ahead: the first record's read took every byte off the socket.
                    if reads == 1 { #expect(TLSReadAheadTests.unread(clientFD) == 0) }
                case .wantRead:
                    break reading
                default:
                    Issue.record("unexpected read result \(result)")
                    break reading
                }
            }
            #expect(received == Array(records.joined()))
        }
    }
}
