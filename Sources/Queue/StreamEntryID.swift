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

    /// `<milliseconds>-<sequence>` from bytes: decimal digits only, one dash, no overflow.
    public init?(bytes: some Sequence<UInt8>) {
        // One parse for every caller: contiguous bytes (an array, a native string's UTF-8) are
        // read in place, anything else is gathered first.
        guard let parsed = bytes.withContiguousStorageIfAvailable({ StreamEntryID(bytes: UnsafeRawBufferPointer($0)) })
                ?? Array(bytes).withUnsafeBytes({ StreamEntryID(bytes: $0) }) else { return nil }
        self = parsed
    }

    /// The same parse over raw bytes (a reply tape's): every entry read pays it.
    public init?(bytes: UnsafeRawBufferPointer) {
        var index = 0
        guard let milliseconds = StreamEntryID.digits(bytes, &index), index < bytes.count, bytes[index] == 0x2D else { return nil }
        index += 1
        guard let sequence = StreamEntryID.digits(bytes, &index), index == bytes.count else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    /// The decimal number at `index`, up to the first byte that is not a digit (`index` is left
    /// on it): nil without a digit or when it overflows.
    @inline(__always)
    private static func digits(_ bytes: UnsafeRawBufferPointer, _ index: inout Int) -> UInt64? {
        var value: UInt64 = 0
        let start = index
        while index < bytes.count {
            let digit = bytes[index] &- 0x30
            guard digit < 10 else { break }
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
