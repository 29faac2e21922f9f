/// Unpadded base64url (RFC 4648 §5, in the form RFC 7515 uses for JWS): the encoding of each segment of
/// a provider token.
///
/// Pure Swift and allocation-light: `encode` writes straight into the result string's storage. `decode`
/// is strict, as a verifier should be: it rejects padding, whitespace, characters outside the URL-safe
/// alphabet, impossible lengths and non-zero trailing bits, so that every byte string has exactly one
/// accepted encoding.
public enum Base64URL {
    /// `A–Z a–z 0–9 - _`, indexed by 6-bit value.
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The 6-bit value of each ASCII byte, or `invalid`.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, character) in alphabet.enumerated() {
            table[Int(character)] = UInt8(value)
        }
        return table
    }()

    private static let invalid: UInt8 = 0xFF

    /// The number of characters `encode` produces for `byteCount` bytes.
    public static func encodedLength(byteCount: Int) -> Int {
        (byteCount / 3) * 4 + (byteCount % 3 == 0 ? 0 : byteCount % 3 + 1)
    }

    /// Encodes `bytes` without padding.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        if let encoded = bytes.withContiguousStorageIfAvailable({ encode(buffer: $0) }) {
            return encoded
        }
        return Array(bytes).withUnsafeBufferPointer { encode(buffer: $0) }
    }

    private static func encode(buffer input: UnsafeBufferPointer<UInt8>) -> String {
        let length = encodedLength(byteCount: input.count)
        if length == 0 { return "" }
        return alphabet.withUnsafeBufferPointer { alphabet in
            String(unsafeUninitializedCapacity: length) { output in
                var i = 0
                var o = 0
                while i + 3 <= input.count {
                    let word = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                    output[o] = alphabet[Int(word >> 18)]
                    output[o + 1] = alphabet[Int(word >> 12 & 0x3F)]
                    output[o + 2] = alphabet[Int(word >> 6 & 0x3F)]
                    output[o + 3] = alphabet[Int(word & 0x3F)]
                    i += 3
                    o += 4
                }
                switch input.count - i {
                case 1:
                    let word = UInt32(input[i]) << 16
                    output[o] = alphabet[Int(word >> 18)]
                    output[o + 1] = alphabet[Int(word >> 12 & 0x3F)]
                    o += 2
                case 2:
                    let word = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8
                    output[o] = alphabet[Int(word >> 18)]
                    output[o + 1] = alphabet[Int(word >> 12 & 0x3F)]
                    output[o + 2] = alphabet[Int(word >> 6 & 0x3F)]
                    o += 3
                default:
                    break
                }
                return o
            }
        }
    }

    /// Decodes unpadded base64url, or returns nil if `text` is not exactly that.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decode(buffer: $0) }) {
            return decoded
        }
        return Array(text.utf8).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    /// Decodes unpadded base64url bytes (ASCII), or returns nil if they are not exactly that.
    public static func decode(bytes: some Collection<UInt8>) -> [UInt8]? {
        if let decoded = bytes.withContiguousStorageIfAvailable({ decode(buffer: $0) }) {
            return decoded
        }
        return Array(bytes).withUnsafeBufferPointer { decode(buffer: $0) }
    }

    private static func decode(buffer input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let remainder = input.count % 4
        // One leftover character carries only 6 bits: not a whole byte.
        if remainder == 1 { return nil }
        let outputLength = (input.count / 4) * 3 + (remainder == 0 ? 0 : remainder - 1)
        var output = [UInt8](repeating: 0, count: outputLength)
        let succeeded = values.withUnsafeBufferPointer { values -> Bool in
            output.withUnsafeMutableBufferPointer { output -> Bool in
                var i = 0
                var o = 0
                while i + 4 <= input.count {
                    let a = values[Int(input[i])], b = values[Int(input[i + 1])]
                    let c = values[Int(input[i + 2])], d = values[Int(input[i + 3])]
                    // Valid values fit in 6 bits; `invalid` sets the top two.
                    if (a | b | c | d) & 0xC0 != 0 { return false }
                    let word = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    output[o] = UInt8(truncatingIfNeeded: word >> 16)
                    output[o + 1] = UInt8(truncatingIfNeeded: word >> 8)
                    output[o + 2] = UInt8(truncatingIfNeeded: word)
                    i += 4
                    o += 3
                }
                switch remainder {
                case 2:
                    let a = values[Int(input[i])], b = values[Int(input[i + 1])]
                    // The last character's low 4 bits are padding and must be zero (canonical form).
                    guard (a | b) & 0xC0 == 0, b & 0x0F == 0 else { return false }
                    output[o] = a << 2 | b >> 4
                case 3:
                    let a = values[Int(input[i])], b = values[Int(input[i + 1])], c = values[Int(input[i + 2])]
                    guard (a | b | c) & 0xC0 == 0, c & 0x03 == 0 else { return false }
                    output[o] = a << 2 | b >> 4
                    output[o + 1] = (b & 0x0F) << 4 | c >> 2
                default:
                    break
                }
                return true
            }
        }
        return succeeded ? output : nil
    }
}
