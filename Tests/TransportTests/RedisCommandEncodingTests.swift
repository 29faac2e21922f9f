import Testing

@_spi(Benchmarks) @testable import Transport

/// The RESP a connection writes for a command built argument by argument: entry ids are written
/// without a String (once per id of every XACK and XDEL), so their bytes are checked here against
/// the plain text, at the edges of the digit counts.
@Suite struct RedisCommandEncodingTests {
    static func written(_ build: (inout RedisCommandBuilder) -> Void, count: Int) throws -> String {
        let loop = try EventLoop()
        let connection = RedisConnection(loop: loop, endpoint: RedisEndpoint(host: "127.0.0.1", port: 1))
        connection.send(argumentCount: count, build)
        var text = ""
        connection.takeOutputInMemory { text = String(decoding: $0, as: UTF8.self) }
        return text
    }

    static func bulk(_ text: String) -> String { "$\(text.utf8.count)\r\n\(text)\r\n" }

    @Test(arguments: [(UInt64(0), UInt64(0)), (1_700_000_000_123, 4), (9, 9_999_999_999), (10, 10),
                      (.max, .max), (.max, 0), (0, .max), (123_456_789, 1)])
    func entryIDsAreWrittenAsTheirText(milliseconds: UInt64, sequence: UInt64) throws {
        let text = try Self.written({ builder in
            builder.add("XACK")
            builder.add(entryMilliseconds: milliseconds, sequence: sequence)
        }, count: 2)
        #expect(text == "*2\r\n" + Self.bulk("XACK") + Self.bulk("\(milliseconds)-\(sequence)"))
    }

    @Test func manyIDsInOneCommandFollowEachOther() throws {
        let ids = (0..<300).map { (UInt64($0) * 1_000_003, UInt64($0 % 7)) }
        let text = try Self.written({ builder in
            builder.add("XDEL")
            builder.add("k")
            for id in ids { builder.add(entryMilliseconds: id.0, sequence: id.1) }
        }, count: 2 + ids.count)
        let expected = "*\(2 + ids.count)\r\n" + Self.bulk("XDEL") + Self.bulk("k")
            + ids.map { Self.bulk("\($0.0)-\($0.1)") }.joined()
        #expect(text == expected)
    }
}
