import CHeraldShims
import COpenSSL

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
        }
    }
}

/// An OpenSSL `SSL_CTX`: the trust store and settings shared by every connection of one side.
///
/// Client contexts verify the peer against the system CA bundle (plus `caFile` when given) and
/// require ALPN `h2`; there is no way to turn verification off. Server contexts (the emulator)
/// present a certificate and select `h2`.
public final class TLSContext: @unchecked Sendable {
    let pointer: OpaquePointer
    public let isServer: Bool

    private static let h2Protocols: [UInt8] = [2, 0x68, 0x32]  // "\x02h2"

    /// A client context: TLS 1.2+, peer verification against the system store and `caFile`.
    public init(clientTrusting caFile: String? = nil) throws(TLSError) {
        OpenSSLError.clearQueue()
        guard let ctx = SSL_CTX_new(TLS_client_method()) else {
            throw .configuration(OpenSSLError(operation: "creating the TLS client context"))
        }
        pointer = ctx
        isServer = false
        _ = herald_SSL_CTX_set_min_proto_version(ctx, herald_TLS1_2_VERSION())
        _ = herald_SSL_CTX_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS))
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        if SSL_CTX_set_default_verify_paths(ctx) != 1 {
            throw .configuration(OpenSSLError(operation: "loading the system CA bundle"))
        }
        if let caFile {
            if SSL_CTX_load_verify_locations(ctx, caFile, nil) != 1 {
                throw .configuration(OpenSSLError(operation: "loading the CA file \(caFile)"))
            }
        }
        let protocols = TLSContext.h2Protocols
        if protocols.withUnsafeBufferPointer({ SSL_CTX_set_alpn_protos(ctx, $0.baseAddress, UInt32($0.count)) }) != 0 {
            throw .configuration(OpenSSLError(operation: "setting ALPN h2"))
        }
    }

    /// A server context presenting the PEM certificate (chain) and key in the given files.
    public init(serverCertificateFile certificateFile: String, keyFile: String) throws(TLSError) {
        OpenSSLError.clearQueue()
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw .configuration(OpenSSLError(operation: "creating the TLS server context"))
        }
        pointer = ctx
        isServer = true
        _ = herald_SSL_CTX_set_min_proto_version(ctx, herald_TLS1_2_VERSION())
        _ = herald_SSL_CTX_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS))
        if SSL_CTX_use_certificate_chain_file(ctx, certificateFile) != 1 {
            throw .configuration(OpenSSLError(operation: "loading the certificate \(certificateFile)"))
        }
        if SSL_CTX_use_PrivateKey_file(ctx, keyFile, SSL_FILETYPE_PEM) != 1 {
            throw .configuration(OpenSSLError(operation: "loading the private key \(keyFile)"))
        }
        if SSL_CTX_check_private_key(ctx) != 1 {
            throw .configuration(OpenSSLError(operation: "matching the certificate \(certificateFile) with its key"))
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

    deinit {
        SSL_CTX_free(pointer)
    }
}
