import COpenSSL

/// An incremental SHA-256 over byte runs (OpenSSL's EVP), for fingerprints that must not
/// collide by accident: `herald api` compares a retried request with the one an Idempotency-Key
/// was first used for by the digest of its jobs, not by keeping the jobs.
public final class SHA256Digest {
    private let context: OpaquePointer?

    public init() {
        context = EVP_MD_CTX_new()
        if let context { _ = EVP_DigestInit_ex(context, EVP_sha256(), nil) }
    }

    deinit {
        if let context { EVP_MD_CTX_free(context) }
    }

    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    public func update(_ raw: UnsafeRawBufferPointer) {
        if let context, let base = raw.baseAddress, raw.count > 0 { _ = EVP_DigestUpdate(context, base, raw.count) }
    }

    public func update(_ text: String) {
        var text = text
        text.withUTF8 { buffer in
            if let context, let base = buffer.baseAddress, buffer.count > 0 { _ = EVP_DigestUpdate(context, base, buffer.count) }
        }
    }

    /// The digest as 64 lowercase hex digits; the object is spent afterwards.
    public func finishHex() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        if let context { _ = EVP_DigestFinal_ex(context, &digest, &length) }
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for byte in digest {
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
