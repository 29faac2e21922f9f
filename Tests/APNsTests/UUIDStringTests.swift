import Testing

@testable import APNs

@Suite struct UUIDStringTests {
    @Test(arguments: [
        "123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
    ])
    func canonicalUUIDsAreAccepted(text: String) {
        #expect(UUIDString.isCanonical(text))
    }

    @Test(arguments: [
        "", "123E4567-E89B-12D3-A456-426614174000", "123e4567-e89b-12d3-a456-42661417400",
        "123e4567-e89b-12d3-a456-4266141740000",
        "123e4567e89b-12d3-a456-4266141740000", "123e4567-e89b-12d3-a456_426614174000",
        "123e4567-e89b-12d3-a4564-26614174000",
        "g23e4567-e89b-12d3-a456-426614174000", "{23e4567-e89b-12d3-a456-42661417400}",
        "123e4567-e89b-12d3-a456-42661417400é",
        "123e4567-e89b-12d3-a456-426614174000\n", "------------------------------------",
    ])
    func nonCanonicalTextIsRejected(text: String) {
        #expect(!UUIDString.isCanonical(text))
    }

    @Test func makeLaysOutTheBitsAroundVersionAndVariant() {
        #expect(UUIDString.make(high: 0, low: 0) == "00000000-0000-8000-8000-000000000000")
        #expect(
            UUIDString.make(high: 0x0123_4567_89AB_CDEF, low: 0x0123_4567_89AB_CDEF)
                == "12345678-9abc-8def-8123-456789abcdef")
        #expect(UUIDString.make(high: .max, low: .max) == "ffffffff-ffff-8fff-bfff-ffffffffffff")
    }

    @Test func makeIsDeterministic() {
        #expect(UUIDString.make(high: 1_700_000_000_123, low: 7) == UUIDString.make(high: 1_700_000_000_123, low: 7))
    }

    @Test(arguments: [
        (UInt64(0), UInt64(0)), (1_700_000_000_123, 0), (.max, 1), (0x8000_0000_0000_0000, .max), (12345, 67890),
    ])
    func madeUUIDsAreCanonicalVersion8(high: UInt64, low: UInt64) {
        let text = UUIDString.make(high: high, low: low)
        #expect(UUIDString.isCanonical(text))
        let characters = Array(text)
        #expect(characters[14] == "8")
        #expect("89ab".contains(characters[19]))
    }

    @Test func redisEntryIDsNeverShareAUUID() {
        var seen = Set<String>()
        for milliseconds in UInt64(1_700_000_000_000)..<1_700_000_000_050 {
            for sequence in UInt64(0)..<40 {
                seen.insert(UUIDString.make(high: milliseconds, low: sequence))
            }
        }
        // Neighbouring bits on either side of the version nibble, and the top kept bits.
        for bit in [UInt64(0), 11, 12, 13, 15, 16, 59] {
            seen.insert(UUIDString.make(high: 1 << bit, low: 0))
        }
        for bit in [UInt64(0), 61] {
            seen.insert(UUIDString.make(high: 0, low: 1 << bit))
        }
        #expect(seen.count == 50 * 40 + 7 + 2)
    }

    @Test func droppedTopBitsAreDocumentedCollisions() {
        #expect(UUIDString.make(high: 1 << 60, low: 0) == UUIDString.make(high: 0, low: 0))
        #expect(UUIDString.make(high: 0, low: 1 << 62) == UUIDString.make(high: 0, low: 0))
    }

    /// `writeVerbatim` spells the two words as they are: the words a canonical text is read as
    /// give that text back, and `make` is `stamped` spelled verbatim.
    @Test func verbatimWordsSpellTheTextTheyWereReadFrom() {
        func words(_ text: String) -> (UInt64, UInt64) {
            let digits = text.filter { $0 != "-" }
            return (UInt64(digits.prefix(16), radix: 16)!, UInt64(digits.suffix(16), radix: 16)!)
        }
        for text in ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
                     "ffffffff-ffff-ffff-ffff-ffffffffffff", "0123abcd-4567-89ef-0000-fedcba987654"] {
            let (high, low) = words(text)
            #expect(UUIDString.makeVerbatim(high: high, low: low) == text)
        }
        var generator = SplitMix64(seed: 42)
        for _ in 0..<1_000 {
            let bits = UUIDBits(high: generator.next(), low: generator.next())
            let stamped = UUIDString.stamped(bits)
            let text = UUIDString.makeVerbatim(high: stamped.high, low: stamped.low)
            #expect(text == UUIDString.make(bits) && UUIDString.isCanonical(text))
            #expect(words(text) == (stamped.high, stamped.low))
        }
    }

    /// `UUIDBits(uuidText:)` reads either case (an `apns-unique-id` as APNs writes it),
    /// `UUIDBits(canonicalUUIDText:)` only lowercase (an `apns-id` as APNs accepts it); both
    /// give the same bits for the same digits and refuse anything but `8-4-4-4-12` hex.
    @Test func uuidTextReadsEitherCaseAndTheCanonicalFormOnlyLowercase() {
        let lower = "8f1d3c1e-5a7b-4c2d-9e0f-123456789abc"
        let expected = UUIDBits(high: 0x8f1d_3c1e_5a7b_4c2d, low: 0x9e0f_1234_5678_9abc)
        func either(_ text: String) -> UUIDBits? { Array(text.utf8).withUnsafeBufferPointer { UUIDBits(uuidText: $0) } }
        func canonical(_ text: String) -> UUIDBits? { Array(text.utf8).withUnsafeBytes { UUIDBits(canonicalUUIDText: $0) } }
        #expect(either(lower) == expected && canonical(lower) == expected)
        #expect(either(lower.uppercased()) == expected && either("8F1d3C1e-5a7B-4c2d-9E0f-123456789AbC") == expected)
        #expect(canonical(lower.uppercased()) == nil && canonical("8f1d3c1e-5a7b-4c2d-9e0f-123456789abC") == nil)
        #expect(either(lower).map(\.uuidText) == lower)
        for bad in [String(lower.dropLast()), lower + "0", "8f1d3c1e5a7b-4c2d-9e0f-123456789abc-",
                    "8f1d3c1e-5a7b-4c2d-9e0f-123456789abg", "8f1d3c1e-5a7b-4c2d-9e0f_123456789abc", ""] {
            #expect(either(bad) == nil && canonical(bad) == nil, "\(bad)")
        }
    }

    /// Every byte value at every position of a lowercase and a mixed-case id, in both modes,
    /// against a byte-by-byte reading of the rule: the word-at-a-time parse takes exactly the
    /// texts that reading takes (and no others) and gives the same bits. Random ids round-trip.
    @Test func uuidTextParseAgreesWithAByteByByteReadingForEveryByteAtEveryPosition() {
        func reference(_ text: [UInt8], eitherCase: Bool) -> UUIDBits? {
            guard text.count == 36 else { return nil }
            var high: UInt64 = 0
            var low: UInt64 = 0
            var digits = 0
            for (position, byte) in text.enumerated() {
                if [8, 13, 18, 23].contains(position) {
                    if byte != UInt8(ascii: "-") { return nil }
                    continue
                }
                let value: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): value = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F") where eitherCase: value = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                if digits < 16 { high = high << 4 | UInt64(value) } else { low = low << 4 | UInt64(value) }
                digits += 1
            }
            return UUIDBits(high: high, low: low)
        }
        var disagreements: [String] = []
        var accepted = 0
        for base in ["0123abcd-ef45-6789-a0b1-c2d3e4f56789", "0123ABCD-eF45-6789-A0b1-C2D3E4F56789"] {
            for position in 0..<36 {
                for byte in 0...255 {
                    var text = Array(base.utf8)
                    text[position] = UInt8(byte)
                    let either = text.withUnsafeBufferPointer { UUIDBits(uuidText: $0) }
                    let canonical = text.withUnsafeBytes { UUIDBits(canonicalUUIDText: $0) }
                    if either != reference(text, eitherCase: true) || canonical != reference(text, eitherCase: false) {
                        disagreements.append("\(base) with byte \(byte) at \(position)")
                    }
                    if canonical != nil { accepted += 1 }
                }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
        // The lowercase base takes the 16 lowercase digits at each of its 32 digit positions and
        // only "-" at the 4 others; the mixed-case one is never canonical.
        #expect(accepted == 32 * 16 + 4)
        var random = SplitMix64(seed: 7)
        for _ in 0..<1_000 {
            let bits = UUIDBits(high: random.next(), low: random.next())
            let text = Array(bits.uuidText.utf8)
            #expect(text.withUnsafeBytes { UUIDBits(canonicalUUIDText: $0) } == bits)
            #expect(Array(bits.uuidText.uppercased().utf8).withUnsafeBufferPointer { UUIDBits(uuidText: $0) } == bits)
        }
    }
}
