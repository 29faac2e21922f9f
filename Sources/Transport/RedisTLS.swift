/// How a `rediss://` endpoint speaks TLS: whom to trust and which client certificate to present.
///
/// Verification is always on: the server's chain must lead to `caFile` (or, without one, to the
/// system's CA store) and its certificate must name the host Herald connects to (a DNS name is
/// also sent as SNI; an IP address is checked as an address). There is deliberately no setting
/// that turns this off. A connection builds its OpenSSL context from these paths each time it
/// connects, so a renewed certificate or CA file is picked up at the next reconnect without a
/// restart; `makeContext()` called once at start-up turns a missing or unreadable file into an
/// error before anything runs.
public struct RedisTLS: Sendable, Equatable {
    /// PEM file of the CA (or CAs) that signed Redis' certificate; nil: the system store.
    public var caFile: String?
    /// PEM client certificate (chain) for Redis' `tls-auth-clients`; needs `keyFile`.
    public var certificateFile: String?
    /// PEM private key of `certificateFile`.
    public var keyFile: String?

    public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
        self.caFile = caFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }

    /// The OpenSSL client context: TLS 1.2+, peer verification, no ALPN (Redis has none). With a
    /// CA file only that file is trusted, not the system store as well.
    public func makeContext() throws(TLSError) -> TLSContext {
        var certificate: ClientCertificate? = nil
        switch (certificateFile, keyFile) {
        case (let certificateFile?, let keyFile?):
            certificate = .pem(certificateFile: certificateFile, keyFile: keyFile)
        case (.some, nil):
            throw .configuration(OpenSSLError(operation: "a Redis client certificate needs its key (--redis-key)", entries: []))
        case (nil, .some):
            throw .configuration(OpenSSLError(operation: "a Redis client key needs its certificate (--redis-cert)", entries: []))
        case (nil, nil):
            break
        }
        return try TLSContext(clientTrusting: caFile, certificate: certificate, http2: false, systemStore: caFile == nil)
    }
}

/// Turns what OpenSSL and the socket said about a failed `rediss://` (or `redis://`) connection
/// into what the operator should do about it.
enum RedisTLSAdvice {
    static let notTLS = "the server did not answer TLS; is this a TLS port? use redis:// for plain"

    /// The message for a handshake that failed.
    static func handshakeFailed(_ error: TLSError, tls: RedisTLS) -> String {
        switch error {
        case .verificationFailed(let host, let reason):
            if reason.contains("mismatch") {
                return "Redis' TLS certificate is not valid for \(host) (\(reason)): connect with a name or address "
                    + "its certificate lists (subjectAltName), or have the certificate reissued for \(host)"
            }
            let trusted = tls.caFile.map { "the CA file \($0)" } ?? "the system CA store"
            return "Redis' TLS certificate is not trusted (\(reason)): it does not chain to \(trusted); "
                + "give the CA that signed it with --redis-ca-file (HERALD_REDIS_CA_FILE, redis_ca_file)"
        case .handshakeFailed(_, let stack):
            return failure(stack.description, tls: tls) ?? "TLS handshake with Redis failed: \(stack)"
        case .closedDuringHandshake:
            if tls.certificateFile == nil {
                return "Redis closed the connection during the TLS handshake: if it requires client certificates "
                    + "(tls-auth-clients yes), give one with --redis-cert and --redis-key; if this is not a TLS port, use redis://"
            }
            return "Redis closed the connection during the TLS handshake: it may have rejected Herald's client certificate"
        default:
            return error.description
        }
    }

    /// Advice for a TLS failure text (from a handshake or from the first read after it: in TLS
    /// 1.3 a server refuses the client's certificate only after the client finished), or nil.
    static func failure(_ text: String, tls: RedisTLS) -> String? {
        if text.contains("wrong version number") || text.contains("packet length too long")
            || text.contains("record layer failure") || text.contains("unknown protocol") {
            return notTLS + " (\(text))"
        }
        if text.contains("certificate required") || (tls.certificateFile == nil && text.contains("handshake failure")) {
            return "Redis requires a client certificate (tls-auth-clients) and Herald presented none: "
                + "give one with --redis-cert and --redis-key (HERALD_REDIS_CERT, HERALD_REDIS_KEY) (\(text))"
        }
        if tls.certificateFile != nil,
           ["unknown ca", "bad certificate", "certificate unknown", "unsupported certificate", "certificate expired",
            "certificate revoked", "handshake failure", "access denied", "decrypt error"].contains(where: text.contains) {
            return "Redis rejected Herald's client certificate \(tls.certificateFile!) (\(text)): "
                + "it must be signed by a CA in Redis' tls-ca-cert-file and be valid for client authentication"
        }
        return nil
    }

    /// A TLS connection Redis closed after the handshake, before the first answer: what Redis
    /// does when it requires a client certificate and got none, or one it does not trust (in
    /// TLS 1.3 its alert often drowns in the reset of a socket the client already wrote to).
    static func closedAfterHandshake(_ text: String, tls: RedisTLS) -> String {
        if let certificate = tls.certificateFile {
            return "Redis closed the TLS connection before answering (\(text)): it most likely rejected Herald's client "
                + "certificate \(certificate); it must be signed by a CA in Redis' tls-ca-cert-file and be valid for client authentication"
        }
        return "Redis closed the TLS connection before answering (\(text)): it most likely requires a client certificate "
            + "(tls-auth-clients yes); give one with --redis-cert and --redis-key (HERALD_REDIS_CERT, HERALD_REDIS_KEY)"
    }

    /// A plain `redis://` client whose first command the server answered by closing: what a TLS
    /// port does with bytes that are not a TLS handshake.
    static let plainToTLS = "Redis closed the connection before answering the first command: if the server "
        + "speaks TLS on this port (tls-port), use a rediss:// URL"
}
