import Transport

/// Stream field names as Swift strings, losslessly: a producer may write any bytes as a field
/// name, and a dead letter or retry entry must carry them back byte for byte.
///
/// A name that is valid UTF-8 (the usual case, and every name Herald knows) becomes that string.
/// Any other name, or one that holds a code point of U+F700…U+F7FF, is escaped whole: each byte
/// `b` becomes the private-use scalar U+F700 + b. `bytes(_:)` reverses both, so decoding and
/// encoding are exact inverses on every byte string; an escaped name never equals a name Herald
/// looks for, so it stays an unknown field.
public enum FieldName {
    static let escapeBase: UInt32 = 0xF700

    /// The name for raw bytes read from Redis.
    public static func decode(_ bytes: UnsafeRawBufferPointer) -> String {
        // U+F700…U+F7FF is EF 9C 80 … EF 9F BF in UTF-8: no 0xEF byte, no such scalar.
        if !bytes.contains(0xEF), let text = String(validating: bytes, as: UTF8.self) { return text }
        if let text = String(validating: bytes, as: UTF8.self), !text.unicodeScalars.contains(where: isEscape) { return text }
        var scalars = String.UnicodeScalarView()
        for byte in bytes { scalars.append(Unicode.Scalar(escapeBase + UInt32(byte))!) }
        return String(scalars)
    }

    public static func decode(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { decode($0) }
    }

    /// The bytes to write for `name`.
    public static func bytes(_ name: String) -> [UInt8] {
        var name = name
        guard isEscaped(name) else { return name.withUTF8 { Array($0) } }
        return name.unicodeScalars.map { UInt8(truncatingIfNeeded: $0.value - escapeBase) }
    }

    /// The Redis argument for `name`: its text, unless it was escaped.
    public static func argument(_ name: String) -> RedisArgument {
        isEscaped(name) ? .bytes(bytes(name)) : .text(name)
    }

    /// Whether `name` is an escaped name as `decode` makes them: every scalar an escape. A name
    /// from anywhere else that holds an escape scalar among others (a producer's or a tool's
    /// text) is written as its UTF-8, not taken apart as escapes.
    static func isEscaped(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.contains(0xEF) && name.unicodeScalars.allSatisfy(isEscape)
    }

    static func isEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value >= escapeBase && scalar.value <= escapeBase + 0xFF
    }
}
