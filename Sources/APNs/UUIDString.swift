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
        let (first, second) = stamped(bits)
        writeVerbatim(high: first, low: second, into: target)
    }

    /// The 128 bits `make(bits)` spells: `bits` with the version and variant set in place.
    public static func stamped(_ bits: UUIDBits) -> (high: UInt64, low: UInt64) {
        ((bits.high << 4) & 0xFFFF_FFFF_FFFF_0000 | 0x8000 | bits.high & 0x0FFF,
         bits.low & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000)
    }

    /// Writes `high` then `low` as they are, 32 lowercase hex digits in 8-4-4-4-12 groups (36
    /// bytes at `target`): the text a canonical UUID read as these two words was.
    public static func writeVerbatim(high: UInt64, low: UInt64, into target: UnsafeMutablePointer<UInt8>) {
        // Nibble k of a word (k = 0 the most significant) sits at shift 60 - 4k. Groups of
        // 8-4-4-4-12 digits: nibbles 0-7, 8-11 and 12-15 of `high`, then 0-3 and 4-15 of `low`.
        for index in 0..<8 { target[index] = hexDigit(high >> (60 - 4 * index)) }
        target[8] = UInt8(ascii: "-")
        for index in 0..<4 { target[9 + index] = hexDigit(high >> (28 - 4 * index)) }
        target[13] = UInt8(ascii: "-")
        for index in 0..<4 { target[14 + index] = hexDigit(high >> (12 - 4 * index)) }
        target[18] = UInt8(ascii: "-")
        for index in 0..<4 { target[19 + index] = hexDigit(low >> (60 - 4 * index)) }
        target[23] = UInt8(ascii: "-")
        for index in 0..<12 { target[24 + index] = hexDigit(low >> (44 - 4 * index)) }
    }

    /// `writeVerbatim` as a String.
    public static func makeVerbatim(high: UInt64, low: UInt64) -> String {
        String(unsafeUninitializedCapacity: 36) { text in
            writeVerbatim(high: high, low: low, into: text.baseAddress!)
            return 36
        }
    }

    /// The lowercase hex digit of the low four bits of `value`.
    @inline(__always)
    static func hexDigit(_ value: UInt64) -> UInt8 {
        let nibble = UInt8(truncatingIfNeeded: value & 0xF)
        return nibble < 10 ? 0x30 &+ nibble : 0x57 &+ nibble
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
