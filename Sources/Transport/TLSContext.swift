import CHeraldShims
import COpenSSL
import Synchronization

/// Why a TLS connection could not be set up, in words an operator can act on.
public enum TLSError: Error, CustomStringConvertible, Sendable {
    /// The server's certificate chain or name did not verify.
    case verificationFailed(host: String, reason: String)
    /// The server did not select HTTP/2 through ALPN; APNs always does.
    case alpnNotNegotiated(host: String, selected: String?)
    /// The handshake failed for another reason OpenSSL reported.
    case handshakeFailed(host: String, OpenSSLError)
    /// Setting up the context failed (bad CA file, certificate, key …).
    case configuration(OpenSSLError)
    /// The peer closed the connection during the handshake.
    case closedDuringHandshake(host: String)
    /// The host name cannot be sent as the server name (SNI) or checked against the certificate.
    case invalidHostName(host: String, reason: String)

    public var description: String {
        switch self {
        case .verificationFailed(let host, let reason):
            return "TLS certificate verification for \(host) failed: \(reason)"
        case .alpnNotNegotiated(let host, let selected):
            return "\(host) did not negotiate HTTP/2 (ALPN h2); it selected \(selected.map { "'\($0)'" } ?? "nothing")"
        case .handshakeFailed(let host, let error):
            return "TLS handshake with \(host) failed: \(error)"
        case .configuration(let error):
            return "TLS configuration error: \(error)"
        case .closedDuringHandshake(let host):
            return "\(host) closed the connection during the TLS handshake"
        case .invalidHostName(let host, let reason):
            let shown = host.count > 64 ? String(host.prefix(64)) + "…" : host
            return "cannot use '\(shown)' as the TLS host name: \(reason)"
        }
    }
}

/// A client certificate for APNs' certificate-based authentication.
public enum ClientCertificate: Sendable, Equatable {
    /// PEM certificate (chain) and PEM private key files.
    case pem(certificateFile: String, keyFile: String)
    /// A PKCS#12 (`.p12`) file and its password.
    case pkcs12(file: String, password: String)
}

/// An OpenSSL `SSL_CTX`: the trust store and settings shared by every connection of one side.
///
/// Client contexts verify the peer against the system's CAs (`SystemTrustStore`: its hashed
/// directory read lazily when it is hashed) plus `caFile` when given, and
/// require ALPN `h2`; there is no way to turn verification off. Server contexts (the emulator)
/// present a certificate and select `h2`.
public final class TLSContext: @unchecked Sendable {
    let pointer: OpaquePointer
    public let isServer: Bool
    /// Whether a client handshake must end with ALPN `h2` (APNs); Redis speaks no ALPN.
    let requiresHTTP2: Bool

    private static let h2Protocols: [UInt8] = [2, 0x68, 0x32]  // "\x02h2"

    /// The system CA bundle not read yet (see `SystemTrustStore`): read after the first failed
    /// verification, for the next attempt.
    private let unreadSystemBundle: Mutex<String?>

    /// A client context: TLS 1.2+, peer verification against the system store and `caFile`,
    /// presenting `certificate` when APNs authenticates the app by certificate.
    ///
    /// `http2` asks for (and requires) ALPN `h2`, as APNs needs. With `systemStore` false only
    /// `caFile` is trusted: a Redis behind a private CA should not also accept any certificate a
    /// public CA issued for its name.
    public convenience init(clientTrusting caFile: String? = nil, certificate: ClientCertificate? = nil,
                            http2: Bool = true, systemStore: Bool = true) throws(TLSError) {
        try self.init(clientTrusting: caFile, certificate: certificate, http2: http2,
                      systemTrust: systemStore || caFile == nil ? .openSSLDefault : nil)
    }

    /// The same, with the system's store given (tests point it at their own directories); nil:
    /// only `caFile` is trusted.
    init(clientTrusting caFile: String?, certificate: ClientCertificate?, http2: Bool,
         systemTrust: SystemTrustStore?) throws(TLSError) {
        OpenSSLError.clearQueue()
        guard let ctx = SSL_CTX_new(TLS_client_method()) else {
            throw .configuration(OpenSSLError(operation: "creating the TLS client context"))
        }
        pointer = ctx
        isServer = false
        requiresHTTP2 = http2
        _ = herald_SSL_CTX_set_min_proto_version(ctx, herald_TLS1_2_VERSION())
        // No SSL_MODE_RELEASE_BUFFERS here: a worker has a handful of busy connections, and
        // releasing would free and re-allocate (zeroed) the ~17 KB record buffers on every write.
        _ = herald_SSL_CTX_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        TLSContext.readAhead(ctx)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        unreadSystemBundle = Mutex(try systemTrust?.trust(in: ctx))
        if let caFile {
            if SSL_CTX_load_verify_locations(ctx, caFile, nil) != 1 {
                throw .configuration(OpenSSLError(operation: "loading the CA file \(caFile)"))
            }
        }
        if http2 {
            let protocols = TLSContext.h2Protocols
            if protocols.withUnsafeBufferPointer({ SSL_CTX_set_alpn_protos(ctx, $0.baseAddress, UInt32($0.count)) }) != 0 {
                throw .configuration(OpenSSLError(operation: "setting ALPN h2"))
            }
        }
        switch certificate {
        case .none:
            break
        case .pem(let certificateFile, let keyFile):
            if SSL_CTX_use_certificate_chain_file(ctx, certificateFile) != 1 {
                throw .configuration(OpenSSLError(operation: "loading the client certificate \(certificateFile)"))
            }
            if SSL_CTX_use_PrivateKey_file(ctx, keyFile, SSL_FILETYPE_PEM) != 1 {
                throw .configuration(OpenSSLError(operation: "loading the client certificate's key \(keyFile)"))
            }
            if SSL_CTX_check_private_key(ctx) != 1 {
                throw .configuration(OpenSSLError(operation: "matching the client certificate \(certificateFile) with its key"))
            }
        case .pkcs12(let file, let password):
            try TLSContext.usePKCS12(ctx, file: file, password: password)
        }
    }

    /// Whether the system's bundle was left unread (its hashed directory is trusted lazily).
    var systemBundlePending: Bool { unreadSystemBundle.withLock { $0 != nil } }

    /// A verification failed: reads the system's bundle into the store if it was left unread,
    /// and returns its path then (nil when there was nothing left to read). Later handshakes
    /// check against it too.
    func readSystemBundleAfterMiss() -> String? {
        unreadSystemBundle.withLock { unread -> String? in
            guard let bundle = unread else { return nil }
            unread = nil
            guard let store = SSL_CTX_get_cert_store(pointer), X509_STORE_load_file(store, bundle) == 1 else {
                OpenSSLError.clearQueue()
                return nil
            }
            return bundle
        }
    }

    private static func usePKCS12(_ ctx: OpaquePointer, file: String, password: String) throws(TLSError) {
        guard let bio = BIO_new_file(file, "rb") else {
            throw .configuration(OpenSSLError(operation: "opening the PKCS#12 file \(file)"))
        }
        defer { BIO_free(bio) }
        guard let p12 = d2i_PKCS12_bio(bio, nil) else {
            throw .configuration(OpenSSLError(operation: "reading the PKCS#12 file \(file)"))
        }
        defer { PKCS12_free(p12) }
        var key: OpaquePointer? = nil
        var certificate: OpaquePointer? = nil
        var chain: OpaquePointer? = nil
        if PKCS12_parse(p12, password, &key, &certificate, &chain) != 1 {
            throw .configuration(OpenSSLError(operation: "opening the PKCS#12 file \(file) (wrong password?)"))
        }
        defer {
            EVP_PKEY_free(key)
            X509_free(certificate)
            if let chain { OPENSSL_sk_pop_free(chain, { X509_free(OpaquePointer($0)) }) }
        }
        guard let certificate, let key else {
            throw .configuration(OpenSSLError(operation: "the PKCS#12 file \(file) holds no certificate and key", entries: []))
        }
        if SSL_CTX_use_certificate(ctx, certificate) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1 {
            throw .configuration(OpenSSLError(operation: "using the certificate and key of \(file)"))
        }
        if let chain {
            for index in 0..<OPENSSL_sk_num(chain) {
                // add0 takes ownership of the extra reference up_ref gives it.
                let extra = OpaquePointer(OPENSSL_sk_value(chain, index))
                X509_up_ref(extra)
                if SSL_CTX_ctrl(ctx, SSL_CTRL_EXTRA_CHAIN_CERT, 0, UnsafeMutableRawPointer(extra)) != 1 { X509_free(extra) }
            }
        }
    }

    /// A server context presenting the PEM certificate (chain) and key in the given files; with
    /// `clientCAFile`, clients may present a certificate, verified against that file.
    public init(serverCertificateFile certificateFile: String, keyFile: String, clientCAFile: String? = nil) throws(TLSError) {
        OpenSSLError.clearQueue()
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw .configuration(OpenSSLError(operation: "creating the TLS server context"))
        }
        pointer = ctx
        isServer = true
        requiresHTTP2 = true
        unreadSystemBundle = Mutex(nil)
        _ = herald_SSL_CTX_set_min_proto_version(ctx, herald_TLS1_2_VERSION())
        _ = herald_SSL_CTX_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS))
        TLSContext.readAhead(ctx)
        if SSL_CTX_use_certificate_chain_file(ctx, certificateFile) != 1 {
            throw .configuration(OpenSSLError(operation: "loading the certificate \(certificateFile)"))
        }
        if SSL_CTX_use_PrivateKey_file(ctx, keyFile, SSL_FILETYPE_PEM) != 1 {
            throw .configuration(OpenSSLError(operation: "loading the private key \(keyFile)"))
        }
        if SSL_CTX_check_private_key(ctx) != 1 {
            throw .configuration(OpenSSLError(operation: "matching the certificate \(certificateFile) with its key"))
        }
        if let clientCAFile {
            if SSL_CTX_load_verify_locations(ctx, clientCAFile, nil) != 1 {
                throw .configuration(OpenSSLError(operation: "loading the client CA file \(clientCAFile)"))
            }
            SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(clientCAFile))
            // Ask for a certificate but let token-authenticated clients in without one.
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        }
        SSL_CTX_set_alpn_select_cb(ctx, { _, out, outlen, input, inlen, _ in
            // Select "h2" from the client's list, or refuse ALPN (the client then fails clearly).
            guard let input, let out, let outlen else { return herald_SSL_TLSEXT_ERR_NOACK() }
            var index = 0
            let count = Int(inlen)
            while index < count {
                let length = Int(input[index])
                if length == 2, index + 2 < count + 1, input[index + 1] == 0x68, input[index + 2] == 0x32 {
                    out.pointee = UnsafePointer(input + index + 1)
                    outlen.pointee = 2
                    return herald_SSL_TLSEXT_ERR_OK()
                }
                index += 1 + length
            }
            return herald_SSL_TLSEXT_ERR_NOACK()
        }, nil)
    }

    /// Lets OpenSSL read as many bytes as the socket has into its record buffer, instead of a
    /// record's 5-byte header and then its body: two `read` calls per TLS record become one per
    /// readiness event. Safe because every reader of a `TLSStream` reads until OpenSSL wants more
    /// from the socket (records read ahead raise no further readiness event).
    private static func readAhead(_ ctx: OpaquePointer) {
        _ = SSL_CTX_ctrl(ctx, SSL_CTRL_SET_READ_AHEAD, 1, nil)
    }

    deinit {
        SSL_CTX_free(pointer)
    }
}
