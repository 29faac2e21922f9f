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

    private static func parse(_ bytes: UnsafeRawBufferPointer, eitherCase: Bool) -> UUIDBits? {
        guard bytes.count == 36 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        var digits = 0
        for position in 0..<36 {
            let byte = bytes[position]
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard byte == UInt8(ascii: "-") else { return nil }
                continue
            }
            let letter = eitherCase ? byte | 0x20 : byte
            let value: UInt8
            if byte &- 0x30 < 10 {
                value = byte &- 0x30
            } else if letter &- 0x61 < 6 {
                value = letter &- 0x61 &+ 10
            } else {
                return nil
            }
            if digits < 16 { high = high << 4 | UInt64(value) } else { low = low << 4 | UInt64(value) }
            digits += 1
        }
        return UUIDBits(high: high, low: low)
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
