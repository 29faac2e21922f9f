/// An independent DER codec for ECDSA signatures (`SEQUENCE { INTEGER r, INTEGER s }`), written from
/// X.690 without OpenSSL, so that tests can hand Herald's raw `r||s` signatures to other verifiers
/// (`openssl dgst -verify`) and take theirs back.
enum ECDSASignatureDER {
    /// DER for a raw P-256 signature: 64 bytes, `r` then `s`, each big-endian and 32 bytes long.
    static func encode(raw: [UInt8]) -> [UInt8] {
        precondition(raw.count == 64, "a raw P-256 signature is 64 bytes")
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30] + length(body.count) + body
    }

    /// The raw 64-byte `r||s` form of a DER P-256 signature, or nil if it is not one.
    static func decode(der: [UInt8]) -> [UInt8]? {
        var index = 0
        func readLength() -> Int? {
            guard index < der.count else { return nil }
            let first = der[index]
            index += 1
            if first < 0x80 { return Int(first) }
            guard first == 0x81, index < der.count else { return nil }
            defer { index += 1 }
            return Int(der[index])
        }
        func readInteger() -> [UInt8]? {
            guard index < der.count, der[index] == 0x02 else { return nil }
            index += 1
            guard let count = readLength(), count > 0, index + count <= der.count else { return nil }
            var value = Array(der[index..<index + count])
            index += count
            while value.count > 1, value[0] == 0 { value.removeFirst() }
            guard value.count <= 32 else { return nil }
            return [UInt8](repeating: 0, count: 32 - value.count) + value
        }
        guard der.first == 0x30 else { return nil }
        index = 1
        guard let total = readLength(), index + total == der.count,
            let r = readInteger(), let s = readInteger(), index == der.count
        else { return nil }
        return r + s
    }

    /// A minimal positive INTEGER: leading zeros stripped, one zero added if the top bit is set.
    private static func integer(_ bigEndian: ArraySlice<UInt8>) -> [UInt8] {
        var value = Array(bigEndian.drop(while: { $0 == 0 }))
        if value.isEmpty { value = [0] }
        if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
        return [0x02] + length(value.count) + value
    }

    private static func length(_ count: Int) -> [UInt8] {
        precondition(count < 256)
        return count < 0x80 ? [UInt8(count)] : [0x81, UInt8(count)]
    }
}
