import APNs
import COpenSSL
import Testing
@testable import Transport

/// Herald's RESP reader: every reply shape, split at every byte, pipelined; outsized strings and
/// arrays cut to a bounded prefix with their length and SHA-256; protocol errors thrown, never trapped.
struct RESPReaderTests {
    static func encode(_ reply: RedisReply) -> [UInt8] {
        switch reply {
        case .status(let text): return Array("+\(text)\r\n".utf8)
        case .error(let text): return Array("-\(text)\r\n".utf8)
        case .integer(let value): return Array(":\(value)\r\n".utf8)
        case .null: return Array("$-1\r\n".utf8)
        case .bulk(let bytes): return Array("$\(bytes.count)\r\n".utf8) + bytes + [13, 10]
        case .array(let elements): return Array("*\(elements.count)\r\n".utf8) + elements.flatMap(encode)
        }
    }

    /// Feeds `input` in chunks of the given sizes and collects every complete reply.
    static func read(_ input: [UInt8], chunks: [Int], limits: RESPReader.Limits = .init()) throws -> [(RedisReply, [RedisReplyTape.Truncation])] {
        let tape = RedisReplyTape()
        let reader = RESPReader(tape: tape, limits: limits)
        var replies: [(RedisReply, [RedisReplyTape.Truncation])] = []
        var position = 0
        var chunkIndex = 0
        while position < input.count {
            let size = min(max(1, chunks[chunkIndex % chunks.count]), input.count - position)
            chunkIndex += 1
            let chunk = Array(input[position..<position + size])
            position += size
            var offset = 0
            while try chunk.withUnsafeBytes({ try reader.read($0, from: &offset) }) {
                replies.append((tape.reply(), tape.truncations))
                tape.reset()
            }
            #expect(offset == chunk.count)
        }
        return replies
    }

    static let sample: [RedisReply] = [
        .status("OK"), .error("NOGROUP No such key"), .integer(-9_223_372_036_854_775_807), .integer(0), .null, .bulk([]),
        .bulk(Array("payload with \r\n inside".utf8)), .bulk([0, 255, 13, 10, 36]),
        .array([]), .array([.array([.bulk(Array("1-1".utf8)), .array([.bulk(Array("token".utf8)), .bulk(Array("ab".utf8))])]), .null]),
    ]

    @Test
    func everyShapeSplitAtEveryByte() throws {
        let input = Self.sample.flatMap(Self.encode)
        for size in [1, 2, 3, 5, 7, 64, input.count] {
            let replies = try Self.read(input, chunks: [size])
            #expect(replies.map(\.0) == Self.sample, "chunk size \(size)")
            #expect(replies.allSatisfy { $0.1.isEmpty })
        }
    }

    @Test
    func randomRepliesInRandomChunksReadBackExactly() throws {
        var random = SplitMix64(seed: 42)
        func make(_ depth: Int) -> RedisReply {
            switch random.next() % (depth > 3 ? 5 : 6) {
            case 0: return .status("S\(random.next() % 1000)")
            case 1: return .error("ERR \(random.next() % 1000)")
            case 2: return .integer(Int64(bitPattern: random.next()))
            case 3: return .null
            case 4: return .bulk((0..<Int(random.next() % 300)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            default: return .array((0..<Int(random.next() % 6)).map { _ in make(depth + 1) })
            }
        }
        for _ in 0..<200 {
            let replies = (0..<1 + Int(random.next() % 4)).map { _ in make(0) }
            let chunks = (0..<8).map { _ in 1 + Int(random.next() % 97) }
            let read = try Self.read(replies.flatMap(Self.encode), chunks: chunks)
            #expect(read.map(\.0) == replies)
        }
    }

    @Test
    func outsizedBulkKeepsAPrefixItsLengthAndItsSHA256() throws {
        let big = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let reply = RedisReply.array([.bulk(Array("payload".utf8)), .bulk(big), .bulk(Array("after".utf8))])
        let limits = RESPReader.Limits(maxBulkBytes: 64 * 1024, keptPrefixBytes: 100)
        let read = try Self.read(Self.encode(reply) + Self.encode(.status("OK")), chunks: [4096, 13, 65_536], limits: limits)
        try #require(read.count == 2)
        #expect(read[0].0 == .array([.bulk(Array("payload".utf8)), .bulk(Array(big.prefix(100))), .bulk(Array("after".utf8))]))
        #expect(read[1].0 == .status("OK") && read[1].1.isEmpty)
        let truncation = try #require(read[0].1.first)
        #expect(read[0].1.count == 1 && truncation.node == 2 && truncation.fullLength == big.count)
        #expect(truncation.sha256 == Self.sha256(big))
    }

    @Test
    func aReplyKeepsAtMostItsByteBudgetAndArraysAtMostTheirElementCap() throws {
        let limits = RESPReader.Limits(maxBulkBytes: 1000, keptPrefixBytes: 10, maxReplyBytes: 2500, maxArrayElements: 4)
        let value = [UInt8](repeating: 7, count: 900)
        let strings = RedisReply.array(Array(repeating: .bulk(value), count: 4))
        let read = try Self.read(Self.encode(strings), chunks: [333], limits: limits)
        try #require(read.count == 1)
        guard case .array(let kept) = read[0].0 else { Issue.record("not an array"); return }
        #expect(kept.count == 4)
        #expect(kept.prefix(2).allSatisfy { $0 == .bulk(value) }, "within the budget: kept whole")
        #expect(read[0].1.map(\.fullLength) == [900, 900], "past the budget: cut, and said so")

        let wide = RedisReply.array((0..<10).map { .array([.integer(Int64($0))]) })
        let readWide = try Self.read(Self.encode(wide) + Self.encode(.integer(5)), chunks: [3], limits: limits)
        try #require(readWide.count == 2)
        #expect(readWide[0].0 == .array((0..<4).map { .array([.integer(Int64($0))]) }))
        #expect(readWide[0].1.map(\.fullLength) == [10])
        #expect(readWide[1].0 == .integer(5))
    }

    /// Bulk headers at the edges of the whole-string fast path read as the general path reads
    /// them: leading zeros, a bare LF, a zero length, a length at the per-string limit and one
    /// past it, strings inside an array's dropped tail.
    @Test
    func bulkHeadersAtTheFastPathsEdgesReadLikeAnyOther() throws {
        let odd = Array("*4\r\n$03\r\nabc\r\n$2\nxy\r\n$0\r\n\r\n$0000000001\r\nz\r\n".utf8)
        for size in [1, 4, odd.count] {
            let read = try Self.read(odd, chunks: [size])
            #expect(read.map(\.0) == [.array([.bulk(Array("abc".utf8)), .bulk(Array("xy".utf8)), .bulk([]), .bulk(Array("z".utf8))])])
        }
        let limits = RESPReader.Limits(maxBulkBytes: 8, keptPrefixBytes: 3, maxArrayElements: 2)
        let atLimit = RedisReply.array([.bulk(Array("12345678".utf8)), .bulk(Array("123456789".utf8)), .bulk(Array("dropped".utf8))])
        let read = try Self.read(Self.encode(atLimit) + Self.encode(.bulk(Array("next".utf8))), chunks: [200], limits: limits)
        try #require(read.count == 2)
        #expect(read[0].0 == .array([.bulk(Array("12345678".utf8)), .bulk(Array("123".utf8))]))
        #expect(read[0].1.map(\.fullLength).sorted() == [3, 9], "the long string cut, the array's third element dropped")
        #expect(read[1].0 == .bulk(Array("next".utf8)))
    }

    @Test(arguments: ["$-5\r\n", "?x\r\n", ":12a\r\n", ":99999999999999999999\r\n", "*-2\r\n", "\r\n", "$3000000000\r\n"])
    func malformedRepliesThrow(_ text: String) {
        #expect(throws: RESPReader.ProtocolError.self) { try Self.read(Array(text.utf8), chunks: [100]) }
    }

    @Test
    func nestingPastTheDepthLimitThrowsAndWithinItReads() throws {
        let deep = String(repeating: "*1\r\n", count: RESPReader.maxDepth + 1) + ":1\r\n"
        #expect(throws: RESPReader.ProtocolError.self) { try Self.read(Array(deep.utf8), chunks: [7]) }
        var nested = RedisReply.integer(1)
        for _ in 0..<RESPReader.maxDepth { nested = .array([nested]) }
        let read = try Self.read(Self.encode(nested), chunks: [5])
        #expect(read.map(\.0) == [nested])
    }

    @Test
    func endlessHeaderLineThrows() {
        let input = [UInt8(ascii: "+")] + [UInt8](repeating: 65, count: 70_000)
        #expect(throws: RESPReader.ProtocolError.self) { try Self.read(input, chunks: [4096]) }
    }

    @Test
    func anOutsizedReplyGivesItsMemoryBack() throws {
        let tape = RedisReplyTape()
        let reader = RESPReader(tape: tape, limits: .init(maxBulkBytes: 8 << 20, maxReplyBytes: 64 << 20))
        let input = Self.encode(.array(Array(repeating: .bulk([UInt8](repeating: 1, count: 4 << 20)), count: 3)))
        var offset = 0
        let complete = try input.withUnsafeBytes { try reader.read($0, from: &offset) }
        #expect(complete && tape.byteCapacity >= 12 << 20)
        tape.reset()
        #expect(tape.byteCapacity <= RedisReplyTape.keptByteCapacity)
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var size: UInt32 = 32
        let context = EVP_MD_CTX_new()
        defer { EVP_MD_CTX_free(context) }
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
        bytes.withUnsafeBytes { _ = EVP_DigestUpdate(context, $0.baseAddress, $0.count) }
        EVP_DigestFinal_ex(context, &digest, &size)
        return digest
    }
}
