/// Checking and making the canonical UUID text APNs uses for `apns-id`.
///
/// Validation calls `isCanonical` on every notification that names an apns-id; the job
/// pipeline calls `make` to derive a stable apns-id from a Redis entry id, so that a resend of
/// the same job carries the same id.
public enum UUIDString {
    /// Whether `text` is a lowercase 8-4-4-4-12 hex UUID, e.g. `123e4567-e89b-12d3-a456-426614174000`.
    public static func isCanonical(_ text: String) -> Bool {
        var position = 0
        for byte in text.utf8 {
            switch position {
            case 8, 13, 18, 23:
                guard byte == UInt8(ascii: "-") else { return false }
            default:
                guard byte &- UInt8(ascii: "0") < 10 || byte &- UInt8(ascii: "a") < 6 else { return false }
            }
            position += 1
            if position > 36 { return false }
        }
        return position == 36
    }

    /// A canonical lowercase version-8 (custom, RFC 9562) UUID made deterministically from 128
    /// input bits: the same input always gives the same text.
    ///
    /// Six bits are taken by the version and variant, so the top 4 bits of `high` and the top 2
    /// bits of `low` are dropped; the rest appear in order. Inputs with `high < 2^60` and
    /// `low < 2^62` (a Redis entry id's milliseconds and sequence, for example) therefore never
    /// share a UUID.
    public static func make(high: UInt64, low: UInt64) -> String {
        make(UUIDBits(high: high, low: low))
    }

    public static func make(_ bits: UUIDBits) -> String {
        String(unsafeUninitializedCapacity: 36) { text in
            write(bits, into: text.baseAddress!)
            return 36
        }
    }

    /// Writes the 36 bytes of `make(bits)` at `target`.
    public static func write(_ bits: UUIDBits, into target: UnsafeMutablePointer<UInt8>) {
        let first = (bits.high << 4) & 0xFFFF_FFFF_FFFF_0000 | 0x8000 | bits.high & 0x0FFF
        let second = bits.low & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        let digits: StaticString = "0123456789abcdef"
        var nibble = 0
        for position in 0..<36 {
            if position == 8 || position == 13 || position == 18 || position == 23 {
                target[position] = UInt8(ascii: "-")
                continue
            }
            let word = nibble < 16 ? first : second
            let shift = UInt64(60 - 4 * (nibble % 16))
            target[position] = digits.utf8Start[Int(truncatingIfNeeded: word >> shift & 0xF)]
            nibble += 1
        }
    }
}

/// The 128 input bits of a derived apns-id (see `UUIDString.make`): kept as numbers until the
/// id is written into a request, so deriving one allocates nothing.
public struct UUIDBits: Hashable, Sendable {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }
}
