/// Finding members and reading scalar values, for the few places that need more than syntax:
/// Live Activity checks (`aps.timestamp`, `aps.event`, …) and APNs error bodies (`reason`,
/// `timestamp`). Lookups tolerate malformed text by answering `nil`; member names and string
/// values are compared after decoding their escapes, so `"\u0061ps"` is `aps`.
extension JSONScanner {
    /// Calls `body` with each member of `object` in order: the member name's range (quotes
    /// included) and its value. Throws if the object's text is malformed.
    public func forEachMember(
        of object: Value, _ body: (_ name: Range<Int>, _ value: Value) -> Void
    ) throws(SyntaxError) {
        guard isObjectStart(object) else { return }
        _ = try scanObject(at: object.range.lowerBound, depth: 1, visit: body)
    }

    /// The value of the last member called `name` in `object`, or `nil` if there is none, `object`
    /// is not an object, or its text is malformed.
    public func member(_ name: StaticString, of object: Value) -> Value? {
        guard isObjectStart(object) else { return nil }
        return member(name, inObjectAt: object.range.lowerBound)
    }

    /// Guards against a `Value` made by hand that does not point at an object in these bytes.
    private func isObjectStart(_ value: Value) -> Bool {
        value.kind == .object && value.range.lowerBound >= 0 && value.range.lowerBound < bytes.count
            && bytes[value.range.lowerBound] == UInt8(ascii: "{")
    }

    /// The value of the last member called `name` in the top-level object, or `nil` if there is
    /// none, the top-level value is not an object, or the object's text is malformed.
    public func rootMember(_ name: StaticString) -> Value? {
        rootObjectStart().flatMap { member(name, inObjectAt: $0) }
    }

    /// Where the top-level object begins, or nil when the text does not begin with one.
    private func rootObjectStart() -> Int? {
        let start = skipWhitespace(from: 0)
        return start < bytes.count && bytes[start] == UInt8(ascii: "{") ? start : nil
    }

    /// The values of the last members called `first` and `second` in the top-level object, read in
    /// one pass: each `nil` as `rootMember` would answer it (`second` is never found if it is `first`).
    public func rootMembers(_ first: StaticString, _ second: StaticString) -> (Value?, Value?) {
        guard let start = rootObjectStart() else { return (nil, nil) }
        var found: (Value?, Value?) = (nil, nil)
        do {
            _ = try scanObject(at: start, depth: 1) { memberName, value in
                if textEquals(memberName, first) {
                    found.0 = value
                } else if textEquals(memberName, second) {
                    found.1 = value
                }
            }
        } catch {
            return (nil, nil)
        }
        return found
    }

    /// The value of the last member called `name` in the top-level `aps` object, or `nil` if
    /// there is none or `aps` is absent or not an object.
    public func apsMember(_ name: StaticString) -> Value? {
        guard let aps = rootMember("aps"), aps.kind == .object else { return nil }
        return member(name, inObjectAt: aps.range.lowerBound)
    }

    func member(_ name: StaticString, inObjectAt start: Int) -> Value? {
        var found: Value?
        do {
            _ = try scanObject(at: start, depth: 1) { memberName, value in
                if textEquals(memberName, name) { found = value }
            }
        } catch {
            return nil
        }
        return found
    }

    // MARK: Reading values

    /// Whether the string whose text (quotes included) lies in `range` decodes to `literal`.
    public func textEquals(_ range: Range<Int>, _ literal: StaticString) -> Bool {
        literal.withUTF8Buffer { textEquals(range, $0) }
    }

    /// Whether `value` is a string that decodes to `literal`.
    public func stringEquals(_ value: Value, _ literal: StaticString) -> Bool {
        value.kind == .string && textEquals(value.range, literal)
    }

    /// Whether `value` is a string that decodes to `text`.
    public func stringEquals(_ value: Value, _ text: String) -> Bool {
        guard value.kind == .string else { return false }
        var text = text
        return text.withUTF8 { textEquals(value.range, $0) }
    }

    func textEquals(_ range: Range<Int>, _ expected: UnsafeBufferPointer<UInt8>) -> Bool {
        var i = range.lowerBound + 1
        let end = range.upperBound - 1
        var k = 0
        while i < end {
            let byte = bytes[i]
            if byte != UInt8(ascii: "\\") {
                guard k < expected.count, expected[k] == byte else { return false }
                i += 1
                k += 1
                continue
            }
            let (scalar, next) = decodeEscape(at: i)
            i = next
            let encoded = UTF8Bytes(scalar)
            guard k + encoded.count <= expected.count else { return false }
            for n in 0..<encoded.count where expected[k + n] != encoded[n] { return false }
            k += encoded.count
        }
        return k == expected.count
    }

    /// The decoded text of a string value, or `nil` if `value` is not a string. Allocates: meant
    /// for error bodies and diagnostics, not for payloads on the hot path.
    public func string(_ value: Value) -> String? {
        guard value.kind == .string else { return nil }
        let content = value.range.lowerBound + 1..<value.range.upperBound - 1
        let raw = UnsafeBufferPointer(rebasing: bytes[content])
        guard raw.contains(UInt8(ascii: "\\")) else { return String(decoding: raw, as: UTF8.self) }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(content.count)
        var i = content.lowerBound
        while i < content.upperBound {
            if bytes[i] != UInt8(ascii: "\\") {
                decoded.append(bytes[i])
                i += 1
                continue
            }
            let (scalar, next) = decodeEscape(at: i)
            i = next
            let encoded = UTF8Bytes(scalar)
            for n in 0..<encoded.count { decoded.append(encoded[n]) }
        }
        return String(decoding: decoded, as: UTF8.self)
    }

    /// The value of an integer number (no fraction, no exponent) that fits in `Int64`, else `nil`.
    public func int64(_ value: Value) -> Int64? {
        guard value.kind == .number else { return nil }
        var i = value.range.lowerBound
        let negative = bytes[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        // Accumulate towards the sign so that Int64.min parses.
        var result: Int64 = 0
        while i < value.range.upperBound {
            let byte = bytes[i]
            guard Self.isDigit(byte) else { return nil }
            let digit = Int64(byte &- UInt8(ascii: "0"))
            let (shifted, o1) = result.multipliedReportingOverflow(by: 10)
            let (next, o2) =
                negative ? shifted.subtractingReportingOverflow(digit) : shifted.addingReportingOverflow(digit)
            guard !o1, !o2 else { return nil }
            result = next
            i += 1
        }
        return result
    }

    /// The value of any number, or `nil` if `value` is not a number.
    public func double(_ value: Value) -> Double? {
        guard value.kind == .number else { return nil }
        return Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[value.range]), as: UTF8.self))
    }

    /// The value of `true` or `false`, or `nil` if `value` is not a boolean.
    public func bool(_ value: Value) -> Bool? {
        guard value.kind == .boolean else { return nil }
        return bytes[value.range.lowerBound] == UInt8(ascii: "t")
    }

    /// Decodes the escape whose backslash is at `start` in already-scanned text. A lone
    /// surrogate decodes to U+FFFD, as `String(decoding:as:)` would render it.
    func decodeEscape(at start: Int) -> (scalar: UInt32, next: Int) {
        switch bytes[start + 1] {
        case UInt8(ascii: "b"): return (0x08, start + 2)
        case UInt8(ascii: "f"): return (0x0C, start + 2)
        case UInt8(ascii: "n"): return (0x0A, start + 2)
        case UInt8(ascii: "r"): return (0x0D, start + 2)
        case UInt8(ascii: "t"): return (0x09, start + 2)
        case UInt8(ascii: "u"): break
        case let other: return (UInt32(other), start + 2)
        }
        let unit = hex4(at: start + 2)
        switch unit {
        case 0xD800...0xDBFF:
            let low = start + 6
            if low + 6 <= bytes.count, bytes[low] == UInt8(ascii: "\\"), bytes[low + 1] == UInt8(ascii: "u") {
                let trail = hex4(at: low + 2)
                if (0xDC00...0xDFFF).contains(trail) {
                    return (0x10000 + ((unit - 0xD800) << 10) + (trail - 0xDC00), low + 6)
                }
            }
            return (0xFFFD, start + 6)
        case 0xDC00...0xDFFF:
            return (0xFFFD, start + 6)
        default:
            return (unit, start + 6)
        }
    }

    private func hex4(at start: Int) -> UInt32 {
        var unit: UInt32 = 0
        for j in start..<start + 4 { unit = unit << 4 | (Self.hexValue(bytes[j]) ?? 0) }
        return unit
    }
}

/// The UTF-8 encoding of one scalar, held without allocating.
struct UTF8Bytes {
    let count: Int
    private let packed: UInt32

    init(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80:
            count = 1
            packed = scalar
        case 0x80..<0x800:
            count = 2
            packed = (0xC0 | scalar >> 6) | (0x80 | scalar & 0x3F) << 8
        case 0x800..<0x10000:
            count = 3
            packed = (0xE0 | scalar >> 12) | (0x80 | scalar >> 6 & 0x3F) << 8 | (0x80 | scalar & 0x3F) << 16
        default:
            count = 4
            packed =
                (0xF0 | scalar >> 18) | (0x80 | scalar >> 12 & 0x3F) << 8 | (0x80 | scalar >> 6 & 0x3F) << 16
                | (0x80 | scalar & 0x3F) << 24
        }
    }

    subscript(index: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: packed >> (8 * UInt32(index)))
    }
}

extension JSONScanner {
    /// Calls `body` with each element of `array` in order. Throws if the array's text is
    /// malformed; does nothing if `array` is not an array. (For `herald api`'s batches; the
    /// worker's payload checks never walk arrays.)
    public func forEachElement(of array: Value, _ body: (_ element: Value) -> Void) throws(SyntaxError) {
        guard array.kind == .array, array.range.lowerBound >= 0, array.range.lowerBound < bytes.count,
              bytes[array.range.lowerBound] == UInt8(ascii: "[") else { return }
        var i = skipWhitespace(from: array.range.lowerBound + 1)
        guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
        if bytes[i] == UInt8(ascii: "]") { return }
        while true {
            let value = try scanValue(at: i, depth: 1)
            body(value)
            i = skipWhitespace(from: value.range.upperBound)
            guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
            switch bytes[i] {
            case UInt8(ascii: ","):
                i = skipWhitespace(from: i + 1)
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") { throw SyntaxError(.trailingComma, at: i) }
            case UInt8(ascii: "]"):
                return
            default:
                throw SyntaxError(.expectedCommaOrArrayEnd, at: i)
            }
        }
    }
}
