import CHeraldShims
import COpenSSL
import Glibc

/// One TLS session over a non-blocking socket: an OpenSSL `SSL` bound to the descriptor.
///
/// Owned by a single connection on one event loop; it never blocks. Each operation reports
/// whether it progressed, needs the socket to become readable or writable, or ended.
final class TLSStream {
    enum Progress: Equatable {
        case done
        case wantRead
        case wantWrite
    }

    enum IOResult: Equatable {
        case bytes(Int)
        case wantRead
        case wantWrite
        case closed
    }

    let ssl: OpaquePointer
    let host: String
    private let context: TLSContext
    /// Why the last `read` or `write` answered `.closed`: OpenSSL's error queue, or the system
    /// error, or the peer's close. For messages about a connection that failed.
    private(set) var lastFailure: String?

    init(context: TLSContext, fd: Int32, host: String) throws(TLSError) {
        OpenSSLError.clearQueue()
        guard let ssl = SSL_new(context.pointer) else {
            throw .configuration(OpenSSLError(operation: "creating a TLS session"))
        }
        self.ssl = ssl
        self.host = host
        self.context = context
        if SSL_set_fd(ssl, fd) != 1 {
            throw .configuration(OpenSSLError(operation: "binding the TLS session to its socket"))
        }
        if context.isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            // OpenSSL takes an empty name as "check no name": verification would pass for any
            // certificate the CA signed. A NUL would cut the name short the same way.
            guard !host.isEmpty, !host.utf8.contains(0) else {
                throw .invalidHostName(host: host, reason: "a TLS peer needs a non-empty host name without NUL bytes")
            }
            // SNI only for names, never for IP literals (RFC 6066); host-name or IP checked either way.
            if TLSStream.isIPAddress(host) {
                if X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1 {
                    throw .configuration(OpenSSLError(operation: "setting the expected IP address \(host)"))
                }
            } else {
                // Without SNI a server with several certificates may present the wrong one, and
                // the handshake would fail later with a misleading verification error.
                if herald_SSL_set_tlsext_host_name(ssl, host) != 1 {
                    let stack = OpenSSLError(operation: "setting the TLS server name (SNI)")
                    throw .invalidHostName(host: host, reason: "OpenSSL refused it as the TLS server name (SNI): \(stack)")
                }
                if SSL_set1_host(ssl, host) != 1 {
                    throw .configuration(OpenSSLError(operation: "setting the expected host name \(host)"))
                }
            }
            // Host-name (or IP) checking rides on peer verification: make sure both are on.
            guard SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER != 0 else {
                throw .invalidHostName(host: host, reason: "peer verification is off for this TLS session")
            }
        }
    }

    /// The host name the peer's certificate must match, as OpenSSL holds it (nil for an IP
    /// address, checked as one instead).
    var checkedHostName: String? {
        X509_VERIFY_PARAM_get0_host(SSL_get0_param(ssl), 0).map { String(cString: $0) }
    }

    deinit {
        SSL_free(ssl)
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    /// Drives the handshake; after `.done` the client side has checked the certificate and ALPN.
    func handshake() throws(TLSError) -> Progress {
        OpenSSLError.clearQueue()
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            if context.requiresHTTP2 { try checkALPN() }
            return .done
        }
        let error = SSL_get_error(ssl, result)
        switch error {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        default:
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                var reason = String(cString: X509_verify_cert_error_string(verify))
                if let bundle = context.readSystemBundleAfterMiss() {
                    reason += " (checked against the system's hashed CA directory only; its CA bundle \(bundle) is read now, so the next attempt checks against both)"
                }
                throw .verificationFailed(host: host, reason: reason)
            }
            let stack = OpenSSLError(operation: "TLS handshake")
            if stack.entries.isEmpty && (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN) {
                throw .closedDuringHandshake(host: host)
            }
            throw .handshakeFailed(host: host, stack)
        }
    }

    private func checkALPN() throws(TLSError) {
        var data: UnsafePointer<UInt8>? = nil
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        if let data, length == 2, data[0] == 0x68, data[1] == 0x32 { return }
        let selected = data.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(length)), as: UTF8.self) }
        throw .alpnNotNegotiated(host: host, selected: selected)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        OpenSSLError.clearQueue()
        let n = SSL_read(ssl, buffer.baseAddress, Int32(buffer.count))
        if n > 0 { return .bytes(Int(n)) }
        return failed(n, operation: "TLS read")
    }

    func write(_ buffer: UnsafeRawBufferPointer) -> IOResult {
        if buffer.isEmpty { return .bytes(0) }
        OpenSSLError.clearQueue()
        let n = SSL_write(ssl, buffer.baseAddress, Int32(buffer.count))
        if n > 0 { return .bytes(Int(n)) }
        return failed(n, operation: "TLS write")
    }

    /// Classifies a failed `SSL_read`/`SSL_write`; on `.closed`, keeps why in `lastFailure`.
    private func failed(_ result: Int32, operation: String) -> IOResult {
        let savedErrno = errno
        let code = SSL_get_error(ssl, result)
        switch code {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            lastFailure = "the peer closed the TLS session"
        case SSL_ERROR_SYSCALL:
            let stack = OpenSSLError(operation: operation)
            if !stack.entries.isEmpty {
                lastFailure = stack.description
            } else if savedErrno != 0 {
                lastFailure = String(cString: strerror(savedErrno))
            } else {
                lastFailure = "the peer closed the connection"
            }
        default:
            lastFailure = OpenSSLError(operation: operation).description
        }
        return .closed
    }

    /// True when the peer presented a certificate that verified (the emulator's certificate auth).
    var peerCertificateVerified: Bool {
        guard let certificate = SSL_get1_peer_certificate(ssl) else { return false }
        X509_free(certificate)
        return SSL_get_verify_result(ssl) == X509_V_OK
    }

    /// Bytes OpenSSL already decrypted and holds for the next `read`.
    var pendingBytes: Int { Int(SSL_pending(ssl)) }

    func shutdown() {
        OpenSSLError.clearQueue()
        _ = SSL_shutdown(ssl)
        OpenSSLError.clearQueue()
    }
}
