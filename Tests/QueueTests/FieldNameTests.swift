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
