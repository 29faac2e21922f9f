#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import COpenSSL

/// Why a self-signed certificate could not be made.
public enum SelfSignedCertificateError: Error, CustomStringConvertible, Sendable {
    /// A DNS name with characters outside letters, digits, '-', '.' and a leading '*.'.
    case invalidDNSName(String)
    /// An IP address that is neither IPv4 nor IPv6 text.
    case invalidIPAddress(String)
    /// A common name that is empty or longer than X.509's 64 characters.
    case invalidCommonName(String)
    /// A validity of less than one day.
    case invalidValidity(days: Int)
    /// OpenSSL failed while building, signing or encoding the certificate.
    case openSSL(OpenSSLError)

    public var description: String {
        switch self {
        case .invalidDNSName(let name):
            return "\"\(name)\" is not a DNS name for a certificate (letters, digits, '-', '.', optionally '*.' first)"
        case .invalidIPAddress(let address):
            return "\"\(address)\" is not an IPv4 or IPv6 address"
        case .invalidCommonName(let name):
            return "common name \"\(name)\" must be 1 to 64 characters"
        case .invalidValidity(let days):
            return "a certificate must be valid for at least one day, not \(days)"
        case .openSSL(let error):
            return "creating the self-signed certificate: \(error)"
        }
    }
}

/// A self-signed TLS certificate and its P-256 private key, both as PEM: what Herald's APNs emulator
/// serves so that a client can trust it with `--ca-file <certificate>`.
///
/// The certificate is its own trust anchor: basicConstraints `CA:TRUE`, keyUsage
/// `digitalSignature, keyCertSign`, extendedKeyUsage `serverAuth, clientAuth` (so tests can use one as a client certificate), the given names in subjectAltName,
/// a random 128-bit serial, signed with ECDSA SHA-256.
public struct SelfSignedCertificate: Sendable {
    public let certificatePEM: String
    /// PKCS#8 PEM of the certificate's private key.
    public let privateKeyPEM: String

    public init(certificatePEM: String, privateKeyPEM: String) {
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
    }

    /// Creates a new key and a certificate for it, valid from five minutes ago (for clocks slightly
    /// behind) for `validDays` days.
    public static func generate(
        commonName: String = "localhost",
        dnsNames: [String] = ["localhost"],
        ipAddresses: [String] = ["127.0.0.1", "::1"],
        validDays: Int = 30
    ) throws(SelfSignedCertificateError) -> SelfSignedCertificate {
        guard !commonName.isEmpty, commonName.count <= 64 else { throw .invalidCommonName(commonName) }
        guard validDays >= 1 else { throw .invalidValidity(days: validDays) }
        for name in dnsNames where !isCertificateDNSName(name) { throw .invalidDNSName(name) }
        for address in ipAddresses where !isIPAddress(address) { throw .invalidIPAddress(address) }
        // The names are validated above, so none can smuggle a ',' into OpenSSL's extension syntax.
        let subjectAltNames = (dnsNames.map { "DNS:\($0)" } + ipAddresses.map { "IP:\($0)" }).joined(separator: ",")

        do {
            let key = try ES256KeyLoading.generateP256()
            defer { EVP_PKEY_free(key) }
            let certificate = try makeCertificate(
                key: key, commonName: commonName, subjectAltNames: subjectAltNames, validDays: validDays)
            defer { X509_free(certificate) }
            let certificatePEM = try MemoryBIO.string(operation: "writing the certificate as PEM") { bio in
                PEM_write_bio_X509(bio, certificate)
            }
            let privateKeyPEM = try MemoryBIO.string(operation: "writing the certificate's key as PEM") { bio in
                PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil)
            }
            return SelfSignedCertificate(certificatePEM: certificatePEM, privateKeyPEM: privateKeyPEM)
        } catch {
            throw .openSSL(error)
        }
    }

    /// Writes the certificate (mode 0644) and the key (mode 0600). With no key path, the key follows the
    /// certificate in one file, which is then written with mode 0600.
    public func write(certificateTo certificatePath: String, keyTo keyPath: String? = nil) throws(PEMFileError) {
        if let keyPath {
            try PEMFile.write(privateKeyPEM, to: keyPath, mode: 0o600)
            try PEMFile.write(certificatePEM, to: certificatePath, mode: 0o644)
        } else {
            try PEMFile.write(certificatePEM + privateKeyPEM, to: certificatePath, mode: 0o600)
        }
    }

    /// Builds and signs the certificate; the caller owns the result.
    private static func makeCertificate(
        key: OpaquePointer, commonName: String, subjectAltNames: String, validDays: Int
    ) throws(OpenSSLError) -> OpaquePointer {
        OpenSSLError.clearQueue()
        guard let certificate = X509_new() else { throw OpenSSLError(operation: "allocating a certificate") }
        do {
            try build(
                certificate, key: key, commonName: commonName, subjectAltNames: subjectAltNames,
                validDays: validDays)
        } catch {
            X509_free(certificate)
            throw error
        }
        return certificate
    }

    private static func build(
        _ certificate: OpaquePointer, key: OpaquePointer, commonName: String, subjectAltNames: String,
        validDays: Int
    ) throws(OpenSSLError) {
        // Version field value 2 means X.509 v3 (needed for extensions).
        guard X509_set_version(certificate, 2) == 1 else { throw OpenSSLError(operation: "setting the version") }
        try setRandomSerial(certificate)

        guard X509_gmtime_adj(X509_getm_notBefore(certificate), -5 * 60) != nil,
            X509_time_adj_ex(X509_getm_notAfter(certificate), Int32(clamping: validDays), 0, nil) != nil
        else { throw OpenSSLError(operation: "setting the validity period") }

        guard X509_set_pubkey(certificate, key) == 1 else { throw OpenSSLError(operation: "setting the public key") }

        // Self-signed: the subject is also the issuer.
        guard let name = X509_get_subject_name(certificate),
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, commonName, -1, -1, 0) == 1,
            X509_set_issuer_name(certificate, name) == 1
        else { throw OpenSSLError(operation: "setting the subject name") }

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, certificate, certificate, nil, nil, 0)
        let extensions: [(Int32, String)] = [
            (NID_basic_constraints, "critical,CA:TRUE"),
            (NID_key_usage, "critical,digitalSignature,keyCertSign"),
            (NID_ext_key_usage, "serverAuth,clientAuth"),
            (NID_subject_key_identifier, "hash"),
            (NID_subject_alt_name, subjectAltNames),
        ]
        for (nid, value) in extensions where !value.isEmpty {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                throw OpenSSLError(operation: "building the \(String(cString: OBJ_nid2sn(nid))) extension")
            }
            defer { X509_EXTENSION_free(ext) }
            // add_ext copies the extension.
            guard X509_add_ext(certificate, ext, -1) == 1 else {
                throw OpenSSLError(operation: "adding the \(String(cString: OBJ_nid2sn(nid))) extension")
            }
        }

        guard X509_sign(certificate, key, EVP_sha256()) > 0 else { throw OpenSSLError(operation: "signing the certificate") }
    }

    /// A positive 128-bit serial from the CSPRNG (RFC 5280 allows up to 20 octets).
    private static func setRandomSerial(_ certificate: OpaquePointer) throws(OpenSSLError) {
        var bytes = [UInt8](repeating: 0, count: 16)
        guard RAND_bytes(&bytes, Int32(bytes.count)) == 1 else { throw OpenSSLError(operation: "drawing a serial number") }
        bytes[0] &= 0x7F  // positive
        bytes[0] |= 0x40  // and full length, so it never starts with a zero byte
        guard let serial = BN_bin2bn(bytes, Int32(bytes.count), nil) else {
            throw OpenSSLError(operation: "drawing a serial number")
        }
        defer { BN_free(serial) }
        guard BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(certificate)) != nil else {
            throw OpenSSLError(operation: "setting the serial number")
        }
    }

    private static func isCertificateDNSName(_ name: String) -> Bool {
        var labels = name.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        if labels.count > 1, labels[0].elementsEqual("*".utf8) { labels.removeFirst() }
        guard !labels.isEmpty, name.utf8.count <= 253 else { return false }
        return labels.allSatisfy { label in
            !label.isEmpty && label.count <= 63
                && label.allSatisfy { byte in
                    switch byte {
                    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                        return true
                    default:
                        return false
                    }
                }
        }
    }

    private static func isIPAddress(_ text: String) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
    }
}
