import APNs
import Queue
import Testing

/// Field names read from Redis round-trip to the same bytes, whatever the producer wrote.
struct FieldNameTests {
    @Test(arguments: [[], Array("token".utf8), Array("naïve".utf8), [0xFF], [0xEF, 0x9C, 0x80], [0xEF, 0x9F, 0xBF, 0x41],
                      [0xC3], [0x00, 0x0A, 0x1B], Array("\u{F700}".utf8)] as [[UInt8]])
    func roundTrips(_ bytes: [UInt8]) {
        #expect(FieldName.bytes(FieldName.decode(bytes)) == bytes)
    }

    @Test
    func randomBytesRoundTrip() {
        var random = SplitMix64(seed: 7)
        for _ in 0..<20_000 {
            let count = Int(random.next() % 12)
            // Bias towards the bytes that matter: 0xEF lead bytes, continuation bytes, ASCII.
            let pool: [UInt8] = [0xEF, 0x9C, 0x9F, 0x80, 0xBF, 0xC3, 0xA9, 0xFF, 0x00, 0x41, 0x7A]
            let bytes = (0..<count).map { _ in random.next() % 3 == 0 ? UInt8(truncatingIfNeeded: random.next()) : pool[Int(random.next() % UInt64(pool.count))] }
            #expect(FieldName.bytes(FieldName.decode(bytes)) == bytes, "\(bytes)")
        }
    }

    /// A name that did not come from `decode` may hold escape scalars among other text (a
    /// producer's or a tool's name): it is written as its UTF-8, never taken apart (that trapped
    /// on an arithmetic overflow before; found by FuzzJobDecoder).
    @Test(arguments: ["a\u{F741}", "\u{F741}a", "\u{F700}\u{F7FF}é", "x\u{F700}y\u{F7FF}"])
    func mixedNamesAreWrittenAsTheirText(_ name: String) {
        #expect(FieldName.bytes(name) == Array(name.utf8))
        guard case .text(let text) = FieldName.argument(name) else { Issue.record("\(name) was not written as text"); return }
        #expect(text == name)
        // Packed and unpacked, the entry keeps the same bytes.
        #expect(StreamFields([(name, [1])]).pairs.map { FieldName.bytes($0.name) } == [Array(name.utf8)])
    }

    @Test
    func validNamesStayPlainText() {
        #expect(FieldName.decode(Array("payload".utf8)) == "payload")
        #expect(FieldName.decode(Array("clé".utf8)) == "clé")
        #expect(FieldName.decode([0xFF, 0x41]) != "\u{FFFD}A", "never replaced lossily")
    }

    @Test
    func retryEntriesCarryBinaryNamesExactly() {
        let name = FieldName.decode([0xFF, 0x22, 0x41])
        let encoded = RetryEncoding.encode([(name, [0x42])])
        #expect(encoded == Array(#"[""#.utf8) + [0xFF, 0x5C, 0x22, 0x41] + Array(#"","B"]"#.utf8))
    }
}
