/// A borrowed, allocation-free view over JSON text (RFC 8259) that checks its syntax and finds
/// members without building a tree.
///
/// Notification validation uses it on every payload (syntax, then the `aps` members a Live
/// Activity needs); `APNsErrorBody` uses it on APNs' error responses; the emulator may use it on
/// the payloads it receives. The scanner only borrows `bytes`: use it inside the
/// `withUnsafeBufferPointer` call that produced them and never let it escape.
///
/// Validation is complete: objects, arrays, strings (escapes including `\uXXXX`, no raw control
/// characters, well-formed UTF-8), numbers (no leading zeros, no bare `.` or `e`), `true`,
/// `false`, `null`, insignificant whitespace, nothing after the top-level value, and nesting no
/// deeper than `maximumDepth`. Escaped lone surrogates (`"\ud800"`) are accepted, as most
/// parsers do. Duplicate member names are accepted; lookups return the last one, as JavaScript
/// and most JSON libraries do.
public struct JSONScanner {
    /// The deepest nesting of objects and arrays accepted; the top-level container is depth 1.
    public static let maximumDepth = 64

    /// One value found in the text: what it is and where its text lies.
    public struct Value: Equatable, Sendable {
        /// The JSON type of a value.
        public enum Kind: String, Equatable, Sendable {
            case object, array, string, number, boolean, null
        }

        public let kind: Kind
        /// Byte offsets of the value's text in the scanned buffer; a string's range includes its quotes.
        public let range: Range<Int>

        public init(kind: Kind, range: Range<Int>) {
            self.kind = kind
            self.range = range
        }
    }

    /// Why the text is not JSON, and the byte offset where that became clear.
    public struct SyntaxError: Error, Equatable, Sendable, CustomStringConvertible {
        /// What went wrong, in words a backend developer reads in a dead-letter entry.
        public enum Problem: String, Equatable, Sendable {
            case unexpectedEnd = "the text ends in the middle of a value"
            case expectedValue = "expected a value"
            case expectedMemberName = "expected a member name in double quotes"
            case expectedColon = "expected ':' after a member name"
            case expectedCommaOrObjectEnd = "expected ',' or '}'"
            case expectedCommaOrArrayEnd = "expected ',' or ']'"
            case trailingComma = "a ',' is followed by a closing bracket"
            case unterminatedString = "a string is not closed"
            case controlCharacterInString = "a string contains a raw control character"
            case badEscape = "a string contains an unknown escape"
            case badUnicodeEscape = "a \\u escape needs four hex digits"
            case invalidUTF8 = "a string is not valid UTF-8"
            case badNumber = "a number is malformed"
            case badLiteral = "expected true, false or null"
            case tooDeep = "objects and arrays are nested too deeply"
            case trailingCharacters = "there is text after the JSON value"
        }

        public let problem: Problem
        public let offset: Int

        public init(_ problem: Problem, at offset: Int) {
            self.problem = problem
            self.offset = offset
        }

        public var description: String { "\(problem.rawValue) (byte \(offset))" }
    }

    /// The text being scanned.
    public let bytes: UnsafeBufferPointer<UInt8>

    public init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    public init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes.assumingMemoryBound(to: UInt8.self)
    }

    // MARK: Validation

    /// Checks that the whole text is one JSON value, and returns that value.
    public func validate() throws(SyntaxError) -> Value {
        let value = try scanValue(at: skipWhitespace(from: 0), depth: 0)
        let end = skipWhitespace(from: value.range.upperBound)
        guard end == bytes.count else { throw SyntaxError(.trailingCharacters, at: end) }
        return value
    }

    @inline(__always)
    func skipWhitespace(from start: Int) -> Int {
        var i = start
        while i < bytes.count {
            switch bytes[i] {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): i += 1
            default: return i
            }
        }
        return i
    }

    /// Scans the value starting at `start`; `depth` counts the containers around it.
    func scanValue(at start: Int, depth: Int) throws(SyntaxError) -> Value {
        guard start < bytes.count else { throw SyntaxError(.unexpectedEnd, at: start) }
        switch bytes[start] {
        case UInt8(ascii: "{"):
            let end = try scanObject(at: start, depth: depth + 1) { _, _ in }
            return Value(kind: .object, range: start..<end)
        case UInt8(ascii: "["):
            return Value(kind: .array, range: start..<(try scanArray(at: start, depth: depth + 1)))
        case UInt8(ascii: "\""):
            return Value(kind: .string, range: start..<(try scanString(at: start)))
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return Value(kind: .number, range: start..<(try scanNumber(at: start)))
        case UInt8(ascii: "t"):
            return Value(kind: .boolean, range: start..<(try scanLiteral("true", at: start)))
        case UInt8(ascii: "f"):
            return Value(kind: .boolean, range: start..<(try scanLiteral("false", at: start)))
        case UInt8(ascii: "n"):
            return Value(kind: .null, range: start..<(try scanLiteral("null", at: start)))
        default:
            throw SyntaxError(.expectedValue, at: start)
        }
    }

    /// Scans the object whose `{` is at `start`, calling `visit` with each member's name range
    /// (quotes included) and value; returns the offset after its `}`.
    func scanObject(
        at start: Int, depth: Int, visit: (_ name: Range<Int>, _ value: Value) -> Void
    ) throws(SyntaxError) -> Int {
        guard depth <= Self.maximumDepth else { throw SyntaxError(.tooDeep, at: start) }
        var i = skipWhitespace(from: start + 1)
        guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
        if bytes[i] == UInt8(ascii: "}") { return i + 1 }
        while true {
            guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
            guard bytes[i] == UInt8(ascii: "\"") else { throw SyntaxError(.expectedMemberName, at: i) }
            let nameEnd = try scanString(at: i)
            let name = i..<nameEnd
            i = skipWhitespace(from: nameEnd)
            guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
            guard bytes[i] == UInt8(ascii: ":") else { throw SyntaxError(.expectedColon, at: i) }
            let value = try scanValue(at: skipWhitespace(from: i + 1), depth: depth)
            visit(name, value)
            i = skipWhitespace(from: value.range.upperBound)
            guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
            switch bytes[i] {
            case UInt8(ascii: ","):
                i = skipWhitespace(from: i + 1)
                if i < bytes.count, bytes[i] == UInt8(ascii: "}") { throw SyntaxError(.trailingComma, at: i) }
            case UInt8(ascii: "}"):
                return i + 1
            default:
                throw SyntaxError(.expectedCommaOrObjectEnd, at: i)
            }
        }
    }

    func scanArray(at start: Int, depth: Int) throws(SyntaxError) -> Int {
        guard depth <= Self.maximumDepth else { throw SyntaxError(.tooDeep, at: start) }
        var i = skipWhitespace(from: start + 1)
        guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
        if bytes[i] == UInt8(ascii: "]") { return i + 1 }
        while true {
            let value = try scanValue(at: i, depth: depth)
            i = skipWhitespace(from: value.range.upperBound)
            guard i < bytes.count else { throw SyntaxError(.unexpectedEnd, at: i) }
            switch bytes[i] {
            case UInt8(ascii: ","):
                i = skipWhitespace(from: i + 1)
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") { throw SyntaxError(.trailingComma, at: i) }
            case UInt8(ascii: "]"):
                return i + 1
            default:
                throw SyntaxError(.expectedCommaOrArrayEnd, at: i)
            }
        }
    }

    /// Scans the string whose opening quote is at `start`; returns the offset after its closing quote.
    func scanString(at start: Int) throws(SyntaxError) -> Int {
        var i = start + 1
        while i < bytes.count {
            // Plain ASCII runs (most of a payload) are skipped eight bytes at a time; the byte
            // loop below sees only the quote, escapes, control and non-ASCII bytes.
            i = Self.skipPlainASCII(bytes, from: i)
            guard i < bytes.count else { break }
            let byte = bytes[i]
            if byte == UInt8(ascii: "\"") { return i + 1 }
            if byte == UInt8(ascii: "\\") {
                guard i + 1 < bytes.count else { throw SyntaxError(.unterminatedString, at: start) }
                switch bytes[i + 1] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                    UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    i += 2
                case UInt8(ascii: "u"):
                    for j in i + 2..<min(i + 6, bytes.count) where Self.hexValue(bytes[j]) == nil {
                        throw SyntaxError(.badUnicodeEscape, at: i)
                    }
                    guard i + 6 <= bytes.count else { throw SyntaxError(.unterminatedString, at: start) }
                    i += 6
                default:
                    throw SyntaxError(.badEscape, at: i)
                }
            } else if byte < 0x20 {
                throw SyntaxError(.controlCharacterInString, at: i)
            } else if byte < 0x80 {
                i += 1
            } else {
                i = try scanUTF8Sequence(at: i)
            }
        }
        throw SyntaxError(.unterminatedString, at: start)
    }

    /// The first offset at or after `start` that may hold a `"`, a `\\`, a byte below 0x20 or one
    /// above 0x7F (SWAR zero-byte tests). In a word that has one, the lowest flagged byte is exact
    /// (a borrow only runs upward from a byte that matched), so the skip lands on it: the byte loop
    /// no longer steps through the plain bytes before each string's closing quote one at a time.
    @inline(__always)
    static func skipPlainASCII(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        guard let base = bytes.baseAddress else { return start }
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        var i = start
        while i + 8 <= bytes.count {
            let word = UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)
            let quote = word ^ (ones &* 0x22)
            let backslash = word ^ (ones &* 0x5C)
            let special = ((quote &- ones) & ~quote)
                | ((backslash &- ones) & ~backslash)
                | ((word &- ones &* 0x20) & ~word)
                | word
            if special & highs != 0 {
                #if _endian(little)
                return i + (special & highs).trailingZeroBitCount >> 3
                #else
                break
                #endif
            }
            i += 8
        }
        return i
    }

    /// Checks one multi-byte UTF-8 sequence (Unicode Table 3-7: no overlong forms, no
    /// surrogates, nothing above U+10FFFF); returns the offset after it.
    func scanUTF8Sequence(at start: Int) throws(SyntaxError) -> Int {
        let lead = bytes[start]
        let length: Int
        var secondRange: ClosedRange<UInt8> = 0x80...0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; secondRange = 0xA0...0xBF
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; secondRange = 0x80...0x9F
        case 0xF0: length = 4; secondRange = 0x90...0xBF
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; secondRange = 0x80...0x8F
        default: throw SyntaxError(.invalidUTF8, at: start)
        }
        guard start + length <= bytes.count, secondRange.contains(bytes[start + 1]) else {
            throw SyntaxError(.invalidUTF8, at: start)
        }
        for j in start + 2..<start + length where bytes[j] & 0xC0 != 0x80 {
            throw SyntaxError(.invalidUTF8, at: start)
        }
        return start + length
    }

    func scanNumber(at start: Int) throws(SyntaxError) -> Int {
        var i = start
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count else { throw SyntaxError(.badNumber, at: start) }
        if bytes[i] == UInt8(ascii: "0") {
            i += 1
            if i < bytes.count, Self.isDigit(bytes[i]) { throw SyntaxError(.badNumber, at: start) }
        } else if Self.isDigit(bytes[i]) {
            i = skipDigits(from: i)
        } else {
            throw SyntaxError(.badNumber, at: start)
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            let digits = i + 1
            i = skipDigits(from: digits)
            guard i > digits else { throw SyntaxError(.badNumber, at: start) }
        }
        if i < bytes.count, bytes[i] | 0x20 == UInt8(ascii: "e") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            let digits = i
            i = skipDigits(from: digits)
            guard i > digits else { throw SyntaxError(.badNumber, at: start) }
        }
        return i
    }

    @inline(__always)
    func skipDigits(from start: Int) -> Int {
        var i = start
        while i < bytes.count, Self.isDigit(bytes[i]) { i += 1 }
        return i
    }

    func scanLiteral(_ literal: StaticString, at start: Int) throws(SyntaxError) -> Int {
        let count = literal.utf8CodeUnitCount
        guard start + count <= bytes.count else { throw SyntaxError(.badLiteral, at: start) }
        let text = literal.utf8Start
        for k in 0..<count where bytes[start + k] != text[k] {
            throw SyntaxError(.badLiteral, at: start)
        }
        return start + count
    }

    @inline(__always)
    static func isDigit(_ byte: UInt8) -> Bool {
        byte &- UInt8(ascii: "0") < 10
    }

    @inline(__always)
    static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte &- UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte &- UInt8(ascii: "a") &+ 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte &- UInt8(ascii: "A") &+ 10)
        default: nil
        }
    }
}
