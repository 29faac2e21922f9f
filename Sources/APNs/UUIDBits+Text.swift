extension UUIDBits {
    /// The 128 bits of a UUID written `8-4-4-4-12` in hex (either case), exactly as written (no
    /// version bits set, unlike `UUIDString.make`), or nil for any other text. Reads an
    /// `apns-unique-id` response header in place, so a response without one costs nothing and
    /// one with it costs no allocation.
    public init?(uuidText bytes: UnsafeBufferPointer<UInt8>) {
        guard let bits = UUIDBits.parse(UnsafeRawBufferPointer(bytes), eitherCase: true) else { return nil }
        self = bits
    }

    /// The same for the canonical form only: lowercase `8-4-4-4-12` (`UUIDString.isCanonical`),
    /// what APNs accepts in an `apns-id`; checked and read in one pass.
    public init?(canonicalUUIDText bytes: UnsafeRawBufferPointer) {
        guard let bits = UUIDBits.parse(bytes, eitherCase: false) else { return nil }
        self = bits
    }

    /// Reads the 32 digits eight at a time (a word's worth of bytes checked and converted with
    /// word arithmetic) instead of one byte per branch: the emulator parses every request's
    /// `apns-id`, and the byte loop was 3 % of its CPU.
    private static func parse(_ bytes: UnsafeRawBufferPointer, eitherCase: Bool) -> UUIDBits? {
        guard bytes.count == 36 else { return nil }
        let dash = UInt8(ascii: "-")
        guard bytes[8] == dash, bytes[13] == dash, bytes[18] == dash, bytes[23] == dash else { return nil }
        func word(_ offset: Int) -> UInt64 { UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        func half(_ offset: Int) -> UInt64 { UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))) }
        // 0-7 | 9-12 and 14-17 | 19-22 and 24-27 | 28-35: four runs of eight digits.
        guard let first = hexDigits(word(0), eitherCase: eitherCase),
              let second = hexDigits(half(9) | half(14) << 32, eitherCase: eitherCase),
              let third = hexDigits(half(19) | half(24) << 32, eitherCase: eitherCase),
              let fourth = hexDigits(word(28), eitherCase: eitherCase) else { return nil }
        return UUIDBits(high: first << 32 | second, low: third << 32 | fourth)
    }

    /// The value of the eight hex digits in `word` (the first digit in its lowest byte, as read
    /// from memory), or nil if a byte is not one: lowercase only unless `eitherCase`.
    @inline(__always)
    private static func hexDigits(_ word: UInt64, eitherCase: Bool) -> UInt64? {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let tops: UInt64 = 0x8080_8080_8080_8080
        guard word & tops == 0 else { return nil }
        // For a byte b below 0x80, b + (0x80 - k) has its top bit set exactly when b >= k, and
        // no byte carries into the next: each range check is two additions for all eight.
        func atLeast(_ bytes: UInt64, _ k: UInt64) -> UInt64 { bytes &+ ones &* (0x80 &- k) }
        let digits = atLeast(word, 0x30) & ~atLeast(word, 0x3A) & tops
        // Setting 0x20 turns A-F into a-f and nothing else into a-f (a digit is checked unfolded).
        let folded = eitherCase ? word | 0x2020_2020_2020_2020 : word
        let letters = atLeast(folded, 0x61) & ~atLeast(folded, 0x67) & tops
        guard digits | letters == tops else { return nil }
        // A digit's value is its low four bits; a letter's is its low four bits + 9 ("a" is 0x61).
        var value = (word & 0x0F0F_0F0F_0F0F_0F0F) &+ (letters >> 7) &* 9
        // One value per byte, the first digit lowest: first digit highest, four bits each.
        value = value.byteSwapped
        value = (value >> 4 | value) & 0x00FF_00FF_00FF_00FF
        value = (value >> 8 | value) & 0x0000_FFFF_0000_FFFF
        value = (value >> 16 | value) & 0x0000_0000_FFFF_FFFF
        return value
    }

    /// The bits as lowercase `8-4-4-4-12` text: the inverse of `init?(uuidText:)`.
    public var uuidText: String {
        String(unsafeUninitializedCapacity: 36) { text in
            let digits: StaticString = "0123456789abcdef"
            var nibble = 0
            for position in 0..<36 {
                if position == 8 || position == 13 || position == 18 || position == 23 {
                    text[position] = UInt8(ascii: "-")
                    continue
                }
                let word = nibble < 16 ? high : low
                let shift = UInt64(60 - 4 * (nibble % 16))
                text[position] = digits.utf8Start[Int((word >> shift) & 0xF)]
                nibble += 1
            }
            return 36
        }
    }
}
