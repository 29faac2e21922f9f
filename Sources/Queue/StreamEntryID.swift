/// A Redis stream entry id, `<milliseconds>-<sequence>`: also the job's enqueue time.
public struct StreamEntryID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let milliseconds: UInt64
    public let sequence: UInt64

    public init(milliseconds: UInt64, sequence: UInt64) {
        self.milliseconds = milliseconds
        self.sequence = sequence
    }

    public init?(_ text: some StringProtocol) {
        guard let dash = text.firstIndex(of: "-"),
              let milliseconds = UInt64(text[text.startIndex..<dash]),
              let sequence = UInt64(text[text.index(after: dash)...]) else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    public init?(bytes: some Sequence<UInt8>) {
        var milliseconds: UInt64 = 0
        var sequence: UInt64 = 0
        var seenDash = false
        var digits = 0
        for byte in bytes {
            if byte == 0x2D {
                if seenDash || digits == 0 { return nil }
                seenDash = true
                digits = 0
                continue
            }
            guard byte >= 0x30 && byte <= 0x39 else { return nil }
            let (shifted, overflow) = (seenDash ? sequence : milliseconds).multipliedReportingOverflow(by: 10)
            let (next, carry) = shifted.addingReportingOverflow(UInt64(byte - 0x30))
            if overflow || carry { return nil }
            if seenDash { sequence = next } else { milliseconds = next }
            digits += 1
        }
        guard seenDash, digits > 0 else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    /// The same parse over raw bytes (a reply tape's), without the generic sequence's iterator:
    /// every entry read pays it.
    public init?(bytes: UnsafeRawBufferPointer) {
        let count = bytes.count
        var index = 0
        guard let milliseconds = StreamEntryID.number(bytes, &index, until: 0x2D), index < count else { return nil }
        index += 1
        guard let sequence = StreamEntryID.number(bytes, &index, until: nil), index == count else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    /// The decimal number at `index` (at least one digit, no overflow), read up to `end` (the
    /// index is left on it) or to the end of `bytes`.
    @inline(__always)
    private static func number(_ bytes: UnsafeRawBufferPointer, _ index: inout Int, until end: UInt8?) -> UInt64? {
        var value: UInt64 = 0
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == end { break }
            let digit = byte &- 0x30
            guard digit < 10 else { return nil }
            let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
            let (next, carry) = shifted.addingReportingOverflow(UInt64(digit))
            if overflow || carry { return nil }
            value = next
            index += 1
        }
        return index > start ? value : nil
    }

    public static func < (a: StreamEntryID, b: StreamEntryID) -> Bool {
        (a.milliseconds, a.sequence) < (b.milliseconds, b.sequence)
    }

    public var description: String { "\(milliseconds)-\(sequence)" }
}
