import Testing

@testable import APNs

struct Base64URLTests {
    /// RFC 4648 §10 vectors, with the padding RFC 7515 leaves off.
    @Test(arguments: [
        ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
        ("foobar", "Zm9vYmFy"),
    ])
    func encodesRFC4648VectorsWithoutPadding(plain: String, encoded: String) {
        #expect(Base64URL.encode(plain.utf8) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
    }

    @Test func encodesRFC7515HeaderExample() {
        let header = "{\"typ\":\"JWT\",\r\n \"alg\":\"HS256\"}"
        #expect(Base64URL.encode(header.utf8) == "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9")
    }

    @Test func usesTheURLSafeAlphabet() {
        // Standard base64 would be "+/8=" and "//7/".
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        #expect(Base64URL.encode([0xFF, 0xFE, 0xFF]) == "__7_")
        #expect(Base64URL.decode("-_8") == [0xFB, 0xFF])
    }

    @Test func roundTripsEveryLengthAndByteValue() {
        // Seeded, so a failure reproduces.
        var generator = SplitMix64(seed: 42)
        for length in 0...300 {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            let encoded = Base64URL.encode(bytes)
            #expect(encoded.count == Base64URL.encodedLength(byteCount: length))
            #expect(!encoded.contains("="))
            #expect(Base64URL.decode(encoded) == bytes, "length \(length)")
        }
        let allBytes = (0...255).map { UInt8($0) }
        #expect(Base64URL.decode(Base64URL.encode(allBytes)) == allBytes)
    }

    @Test func encodesNonContiguousCollectionsLikeArrays() {
        let bytes = (0..<100).lazy.map { UInt8($0 * 7 & 0xFF) }
        #expect(Base64URL.encode(bytes) == Base64URL.encode(Array(bytes)))
    }

    @Test func decodesSubstringsAndByteSlices() {
        let token = "xxZm9vYmFyxx"
        let middle = token.dropFirst(2).dropLast(2)
        #expect(Base64URL.decode(middle) == Array("foobar".utf8))
        #expect(Base64URL.decode(bytes: Array(token.utf8)[2..<10]) == Array("foobar".utf8))
    }

    @Test(arguments: [
        "Zg==",  // padding
        "Zm9vYg=",  // padding
        "Zm9v+mFy",  // standard alphabet
        "Zm9v/mFy",  // standard alphabet
        "Zm9 v",  // whitespace
        "Zm9v\n",  // newline
        "Z",  // a single leftover character is not a byte
        "Zm9vY",  // same after full groups
        "Zh",  // non-zero trailing bits ("Zg" is canonical)
        "Zm9",  // non-zero trailing bits ("Zm8" is canonical)
        "Zé",  // non-ASCII
        "Zm9v\u{0}",  // NUL
    ])
    func rejectsTextThatIsNotCanonicalUnpaddedBase64URL(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }
}
