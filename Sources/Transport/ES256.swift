import COpenSSL

/// Why an ES256 key could not be loaded. Descriptions name the file and what was wrong; they never
/// contain key material.
public enum ES256KeyError: Error, CustomStringConvertible, Sendable {
    /// The key file could not be read.
    case unreadableFile(PEMFileError)
    /// No PEM block of the expected kind was found.
    case noPEMKey(source: String, expected: String)
    /// The key is encrypted; Apple's `.p8` files are not.
    case encrypted(source: String)
    /// OpenSSL could not decode the PEM block.
    case malformed(source: String, OpenSSLError)
    /// The key is not an EC key on P-256 (for example RSA, or EC on P-384).
    case notP256(source: String, found: String)

    public var description: String {
        switch self {
        case .unreadableFile(let error):
            return "cannot read the ES256 key: \(error)"
        case .noPEMKey(let source, let expected):
            return "\(source) contains no PEM \(expected)"
        case .encrypted(let source):
            return "the key in \(source) is encrypted; use the unencrypted .p8 file Apple provides"
        case .malformed(let source, let error):
            return "the key in \(source) could not be decoded: \(error)"
        case .notP256(let source, let found):
            return "the key in \(source) is not a P-256 (prime256v1) EC key; APNs .p8 keys are (found \(found))"
        }
    }
}

/// The P-256 private key that signs APNs provider tokens (ES256), usually Apple's `.p8` file.
///
/// Owns one `EVP_PKEY`, freed in `deinit`, never mutated after `init`: each `sign` uses its own
/// `EVP_MD_CTX`, and OpenSSL allows concurrent operations on a shared, unmodified `EVP_PKEY`, so one
/// instance may sign on any number of threads. Created by the worker from its configuration and by
/// tests and the emulator's local trial through `generateP8()`. Its descriptions never show key material.
public final class ES256PrivateKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// Owned: freed in `deinit`.
    private let pkey: OpaquePointer
    /// The matching public key (a separate `EVP_PKEY` holding only the public point).
    public let publicKey: ES256PublicKey

    /// Loads a PEM file: PKCS#8 (`BEGIN PRIVATE KEY`, Apple's `.p8`) or SEC 1 (`BEGIN EC PRIVATE KEY`).
    public convenience init(pemFile path: String) throws(ES256KeyError) {
        let text: String
        do {
            text = try PEMFile.read(path: path)
        } catch {
            throw .unreadableFile(error)
        }
        try self.init(pem: text, source: path)
    }

    /// Loads PEM text: PKCS#8 (`BEGIN PRIVATE KEY`, Apple's `.p8`) or SEC 1 (`BEGIN EC PRIVATE KEY`).
    public convenience init(pem: String) throws(ES256KeyError) {
        try self.init(pem: pem, source: "the given PEM text")
    }

    private convenience init(pem: String, source: String) throws(ES256KeyError) {
        try self.init(takingOwnershipOf: try ES256KeyLoading.privateKey(pem: pem, source: source), source: source)
    }

    /// Takes ownership of `pkey` (freeing it if it is not a P-256 key).
    init(takingOwnershipOf pkey: OpaquePointer, source: String) throws(ES256KeyError) {
        let publicKey: ES256PublicKey
        do {
            try ES256KeyLoading.requireP256(pkey, source: source)
            publicKey = try ES256PublicKey(publicPartOf: pkey, source: source)
        } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
        self.publicKey = publicKey
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// Signs `message` with ECDSA over SHA-256 and returns the JOSE form: 64 bytes of raw `r||s`.
    public func sign(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        OpenSSLError.clearQueue()
        guard let context = EVP_MD_CTX_new() else { throw OpenSSLError(operation: "signing with ES256") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw OpenSSLError(operation: "signing with ES256")
        }
        // A DER ECDSA-Sig-Value on P-256 is at most 72 bytes.
        var der = [UInt8](repeating: 0, count: 80)
        var derLength = der.count
        let status = message.withUnsafeBufferPointer { message in
            der.withUnsafeMutableBufferPointer { der in
                EVP_DigestSign(context, der.baseAddress, &derLength, message.baseAddress, message.count)
            }
        }
        guard status == 1 else { throw OpenSSLError(operation: "signing with ES256") }
        return try ECDSASignature.raw(fromDER: der[..<derLength])
    }

    /// Generates a new P-256 key and returns it as PKCS#8 PEM (`BEGIN PRIVATE KEY`), the format of
    /// Apple's `.p8` files.
    public static func generateP8() throws(OpenSSLError) -> String {
        let pkey = try ES256KeyLoading.generateP256()
        defer { EVP_PKEY_free(pkey) }
        return try MemoryBIO.string(operation: "writing a P-256 key as PKCS#8 PEM") { bio in
            PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil)
        }
    }

    /// Generates a new P-256 key.
    public static func generate() throws -> ES256PrivateKey {
        try ES256PrivateKey(pem: try generateP8())
    }

    public var description: String { "ES256PrivateKey(P-256)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// A P-256 public key that verifies ES256 signatures: the APNs emulator's view of a provider's key.
///
/// Owns one `EVP_PKEY` holding only the public point, freed in `deinit` and never mutated, so one
/// instance may verify on any number of threads.
public final class ES256PublicKey: @unchecked Sendable, CustomStringConvertible {
    /// Owned: freed in `deinit`.
    private let pkey: OpaquePointer

    /// Loads `BEGIN PUBLIC KEY` PEM, or the public part of a private key PEM (`BEGIN PRIVATE KEY`,
    /// `BEGIN EC PRIVATE KEY`).
    public convenience init(pem: String) throws(ES256KeyError) {
        try self.init(pem: pem, source: "the given PEM text")
    }

    /// Loads a file holding `BEGIN PUBLIC KEY` PEM, or a private key whose public part is taken.
    public convenience init(pemFile path: String) throws(ES256KeyError) {
        let text: String
        do {
            text = try PEMFile.read(path: path)
        } catch {
            throw .unreadableFile(error)
        }
        try self.init(pem: text, source: path)
    }

    private convenience init(pem: String, source: String) throws(ES256KeyError) {
        if pem.contains("-----BEGIN PUBLIC KEY-----") {
            let pkey = try MemoryBIO.withReading(pem) { (bio) throws(ES256KeyError) -> OpaquePointer in
                OpenSSLError.clearQueue()
                guard let pkey = PEM_read_bio_PUBKEY(bio, nil, nil, nil) else {
                    throw .malformed(source: source, OpenSSLError(operation: "reading the public key"))
                }
                return pkey
            }
            try self.init(takingOwnershipOf: pkey, source: source)
        } else if pem.contains("PRIVATE KEY-----") {
            let privateKey = try ES256KeyLoading.privateKey(pem: pem, source: source)
            defer { EVP_PKEY_free(privateKey) }
            try ES256KeyLoading.requireP256(privateKey, source: source)
            try self.init(publicPartOf: privateKey, source: source)
        } else {
            throw .noPEMKey(source: source, expected: "public key (-----BEGIN PUBLIC KEY-----) or private key")
        }
    }

    /// Copies the public part of `key` (which stays owned by the caller) into a key of its own.
    convenience init(publicPartOf key: OpaquePointer, source: String) throws(ES256KeyError) {
        OpenSSLError.clearQueue()
        let length = i2d_PUBKEY(key, nil)
        guard length > 0 else {
            throw .malformed(source: source, OpenSSLError(operation: "encoding the public key"))
        }
        var der = [UInt8](repeating: 0, count: Int(length))
        let publicKey = der.withUnsafeMutableBufferPointer { buffer -> OpaquePointer? in
            var writeCursor = buffer.baseAddress
            guard i2d_PUBKEY(key, &writeCursor) == length else { return nil }
            var readCursor = UnsafePointer(buffer.baseAddress)
            return d2i_PUBKEY(nil, &readCursor, Int(length))
        }
        guard let publicKey else {
            throw .malformed(source: source, OpenSSLError(operation: "copying the public key"))
        }
        try self.init(takingOwnershipOf: publicKey, source: source)
    }

    /// Takes ownership of `pkey` (freeing it if it is not a P-256 key).
    init(takingOwnershipOf pkey: OpaquePointer, source: String) throws(ES256KeyError) {
        do {
            try ES256KeyLoading.requireP256(pkey, source: source)
        } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// True if `signature` (64 bytes of raw `r||s`) is a valid ES256 signature of `message` by this key.
    public func verify(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard let der = ECDSASignature.der(fromRaw: signature) else { return false }
        if let verified = message.withContiguousStorageIfAvailable({ verify(der: der, message: $0) }) {
            return verified
        }
        return Array(message).withUnsafeBufferPointer { verify(der: der, message: $0) }
    }

    private func verify(der: [UInt8], message: UnsafeBufferPointer<UInt8>) -> Bool {
        OpenSSLError.clearQueue()
        // A rejected signature queues errors that are not failures of Herald's; leave nothing behind.
        defer { OpenSSLError.clearQueue() }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pkey) == 1 else { return false }
        return der.withUnsafeBufferPointer { der in
            EVP_DigestVerify(context, der.baseAddress, der.count, message.baseAddress, message.count) == 1
        }
    }

    /// The key as `BEGIN PUBLIC KEY` PEM (SubjectPublicKeyInfo).
    public func pem() -> String {
        do {
            return try MemoryBIO.string(operation: "writing the public key as PEM") { bio in
                PEM_write_bio_PUBKEY(bio, pkey)
            }
        } catch {
            // Writing a valid key to memory fails only when allocation does.
            fatalError("\(error)")
        }
    }

    public var description: String { "ES256PublicKey(P-256)" }
}

/// Loading and checking P-256 keys, shared by the key classes and the certificate generator.
enum ES256KeyLoading {
    /// Reads a PEM private key (PKCS#8 or SEC 1); the caller owns the result.
    static func privateKey(pem: String, source: String) throws(ES256KeyError) -> OpaquePointer {
        guard pem.contains("PRIVATE KEY-----") else {
            throw .noPEMKey(source: source, expected: "private key (-----BEGIN PRIVATE KEY-----)")
        }
        if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || pem.contains("Proc-Type: 4,ENCRYPTED") {
            throw .encrypted(source: source)
        }
        return try MemoryBIO.withReading(pem) { (bio) throws(ES256KeyError) -> OpaquePointer in
            OpenSSLError.clearQueue()
            // The passphrase callback refuses: without it OpenSSL would prompt on the terminal.
            guard let pkey = PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil) else {
                throw .malformed(source: source, OpenSSLError(operation: "reading the private key"))
            }
            return pkey
        }
    }

    /// Throws `notP256` unless `pkey` is an EC key on prime256v1.
    static func requireP256(_ pkey: OpaquePointer, source: String) throws(ES256KeyError) {
        guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC, let group = groupName(pkey),
            OBJ_sn2nid(group) == NID_X9_62_prime256v1
        else {
            throw .notP256(source: source, found: kind(of: pkey))
        }
    }

    /// Generates a P-256 key; the caller owns the result.
    static func generateP256() throws(OpenSSLError) -> OpaquePointer {
        OpenSSLError.clearQueue()
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw OpenSSLError(operation: "generating a P-256 key")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var pkey: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            EVP_PKEY_generate(context, &pkey) == 1, let pkey
        else {
            throw OpenSSLError(operation: "generating a P-256 key")
        }
        return pkey
    }

    /// The curve's short name ("prime256v1"), or nil for non-EC keys and explicit curve parameters.
    private static func groupName(_ pkey: OpaquePointer) -> String? {
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        defer { OpenSSLError.clearQueue() }
        guard EVP_PKEY_get_utf8_string_param(pkey, "group", &name, name.count, &length) == 1 else { return nil }
        return String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// "key type RSA, 2048 bits", "an EC key on secp384r1": for error messages.
    private static func kind(of pkey: OpaquePointer) -> String {
        let type = EVP_PKEY_get0_type_name(pkey).map { String(cString: $0) } ?? "unknown"
        if EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC {
            return "an EC key on \(groupName(pkey) ?? "explicit curve parameters")"
        }
        return "key type \(type), \(EVP_PKEY_get_bits(pkey)) bits"
    }
}

/// Conversions between the two encodings of an ECDSA P-256 signature: DER `ECDSA-Sig-Value`, which
/// OpenSSL produces and consumes, and JOSE's raw `r||s`, each half left-padded to 32 bytes.
enum ECDSASignature {
    static let componentLength = 32

    static func raw(fromDER der: ArraySlice<UInt8>) throws(OpenSSLError) -> [UInt8] {
        OpenSSLError.clearQueue()
        let signature = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw OpenSSLError(operation: "decoding an ECDSA signature") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer? = nil
        var s: OpaquePointer? = nil
        ECDSA_SIG_get0(signature, &r, &s)
        var raw = [UInt8](repeating: 0, count: 2 * componentLength)
        let converted = raw.withUnsafeMutableBufferPointer { raw in
            BN_bn2binpad(r, raw.baseAddress, Int32(componentLength)) == Int32(componentLength)
                && BN_bn2binpad(s, raw.baseAddress! + componentLength, Int32(componentLength))
                    == Int32(componentLength)
        }
        guard converted else { throw OpenSSLError(operation: "converting an ECDSA signature to r||s") }
        return raw
    }

    /// The DER form of a raw `r||s` signature, or nil if it is not 64 bytes.
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 2 * componentLength else { return nil }
        guard let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let (r, s) = raw.withUnsafeBufferPointer { raw in
            (
                BN_bin2bn(raw.baseAddress, Int32(componentLength), nil),
                BN_bin2bn(raw.baseAddress! + componentLength, Int32(componentLength), nil)
            )
        }
        guard let r, let s else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        // set0: on success the signature owns r and s and frees them with itself.
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}
