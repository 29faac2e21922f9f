import COpenSSL
import Glibc

/// Where the system's trusted certificate authorities are: OpenSSL's default bundle (one file of
/// every CA) and its hashed directory (one file per CA, named by the hash of its subject).
///
/// Reading the bundle up front costs about 20 ms of CPU with OpenSSL 3.0 (139 CAs on Debian
/// bookworm, each decoded in full), at every worker start and every `herald send`. The hashed
/// directory is read lazily instead: OpenSSL opens only the files of the issuers a peer's chain
/// names, when it verifies that chain. So when the directory is hashed, a client context trusts
/// it alone at first, and keeps the bundle's path: if a verification fails (a CA that is in the
/// bundle but not in the directory), the bundle is loaded then and the next attempt checks
/// against both. Trust is never wider than the system's own; at worst one handshake fails first.
struct SystemTrustStore: Sendable {
    /// The bundle file, or nil when there is none to read.
    var bundle: String?
    /// The hashed directory (OpenSSL takes a `:`-separated list), or nil.
    var directory: String?
    /// `SSL_CERT_FILE` names a bundle other than OpenSSL's default: the operator chose that file,
    /// so it is read up front, whatever the directory holds.
    var bundleChosen: Bool

    /// OpenSSL's defaults (`/usr/lib/ssl/cert.pem` and `/usr/lib/ssl/certs` on Debian), or the
    /// file and directory `SSL_CERT_FILE` and `SSL_CERT_DIR` name instead, as OpenSSL's own
    /// default loading reads them.
    static var openSSLDefault: SystemTrustStore {
        resolve(fileVariable: getenv(X509_get_default_cert_file_env()).map { String(cString: $0) },
                directoryVariable: getenv(X509_get_default_cert_dir_env()).map { String(cString: $0) },
                defaultBundle: String(cString: X509_get_default_cert_file()),
                defaultDirectory: String(cString: X509_get_default_cert_dir()))
    }

    /// The store the two variables' values (nil: unset) and OpenSSL's defaults make. A bundle
    /// named by the variable counts as chosen only when it is another file than the default
    /// (Debian's own `SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt` is the default's target).
    static func resolve(fileVariable: String?, directoryVariable: String?, defaultBundle: String,
                        defaultDirectory: String) -> SystemTrustStore {
        let bundle = fileVariable ?? defaultBundle
        return SystemTrustStore(bundle: bundle, directory: directoryVariable ?? defaultDirectory,
                                bundleChosen: realPath(bundle) != realPath(defaultBundle))
    }

    private static func realPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Whether `directory` holds at least one file named as OpenSSL's hashed lookup expects
    /// (`<8 hex digits>.<digits>`, as `openssl rehash` and Debian's `update-ca-certificates` write).
    static func isHashed(_ directories: String) -> Bool {
        directories.split(separator: ":").contains { isHashedDirectory(String($0)) }
    }

    private static func isHashedDirectory(_ directory: String) -> Bool {
        guard let stream = opendir(directory) else { return false }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) { String(cString: $0) }
            }
            if isHashedName(name) { return true }
        }
        return false
    }

    static func isHashedName(_ text: String) -> Bool {
        let name = Array(text.utf8)
        guard name.count >= 10, name[8] == UInt8(ascii: ".") else { return false }
        let isHex = { (byte: UInt8) in (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) }
        return name[0..<8].allSatisfy(isHex) && name[9...].allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    /// Makes `ctx` trust this store. Returns the bundle left unread (lazy, hashed directory), or
    /// nil when everything is loaded already.
    func trust(in ctx: OpaquePointer) throws(TLSError) -> String? {
        if !bundleChosen, let directory, SystemTrustStore.isHashed(directory), SSL_CTX_load_verify_dir(ctx, directory) == 1 {
            guard let bundle, access(bundle, R_OK) == 0 else { return nil }
            return bundle
        }
        // The bundle is the store (with the directory, if any, looked up lazily beside it). A
        // missing bundle is no error here, as with OpenSSL's own default loading: verification
        // then fails, saying the issuer is unknown.
        if let bundle, access(bundle, R_OK) == 0, SSL_CTX_load_verify_file(ctx, bundle) != 1 {
            throw .configuration(OpenSSLError(operation: "loading the system CA bundle \(bundle)"))
        }
        if let directory { _ = SSL_CTX_load_verify_dir(ctx, directory) }
        OpenSSLError.clearQueue()
        return nil
    }
}
