import COpenSSL
import Glibc
import Testing

@testable import Transport

/// The system's CAs are trusted through the hashed directory, read lazily, when it is hashed;
/// the bundle is read up front only when it is not, and after a verification the directory
/// alone failed. Each test builds its own "system" directory and bundle around a CA it made.
@Suite struct SystemTrustStoreTests {
    /// A server certificate (its own CA) in `directory`, and the name OpenSSL's hashed lookup
    /// gives it (`<subject hash>.0`).
    struct Server {
        let directory: TemporaryDirectory
        let certificate: String
        let key: String
        let hashedName: String
        let pem: String

        init(commonName: String = "localhost") throws {
            directory = try TemporaryDirectory()
            let pair = try SelfSignedCertificate.generate(commonName: commonName)
            certificate = directory.path("server.pem")
            key = directory.path("server.key")
            try pair.write(certificateTo: certificate, keyTo: key)
            pem = pair.certificatePEM
            let bio = try #require(BIO_new_file(certificate, "r"))
            defer { BIO_free(bio) }
            let x509 = try #require(PEM_read_bio_X509(bio, nil, nil, nil))
            defer { X509_free(x509) }
            let hash = String(X509_subject_name_hash(x509), radix: 16)
            hashedName = String(repeating: "0", count: 8 - hash.count) + hash + ".0"
        }
    }

    static func write(_ text: String, to path: String) throws {
        let file = try #require(fopen(path, "w"))
        defer { fclose(file) }
        #expect(fputs(text, file) >= 0)
    }

    /// Handshakes a client with `trust` against `server`: nil when it verified, else the error.
    static func handshake(_ trust: SystemTrustStore, _ server: Server) throws -> TLSError? {
        let clientContext = try TLSContext(clientTrusting: nil, certificate: nil, http2: true, systemTrust: trust)
        return try handshake(clientContext, server)
    }

    static func handshake(_ clientContext: TLSContext, _ server: Server) throws -> TLSError? {
        let serverContext = try TLSContext(serverCertificateFile: server.certificate, keyFile: server.key)
        var verdict: TLSError?
        try TLSSocketPair.withHandshake(client: clientContext, server: serverContext) { _, _, _, failure in verdict = failure }
        return verdict
    }

    /// Calls `body` with a client context whose "system" directory is hashed for `directoryHolds`
    /// and whose bundle (the path given) holds `bundleHolds`; both files exist during the call.
    static func withContext(directoryHolds: Server, bundleHolds: Server, bundleChosen: Bool = false,
                            _ body: (TLSContext, String) throws -> Void) throws {
        let system = try TemporaryDirectory()
        try write(directoryHolds.pem, to: system.path(directoryHolds.hashedName))
        let bundle = system.path("bundle.pem")
        try write(bundleHolds.pem, to: bundle)
        let trust = SystemTrustStore(bundle: bundle, directory: system.path, bundleChosen: bundleChosen)
        try body(try TLSContext(clientTrusting: nil, certificate: nil, http2: true, systemTrust: trust), bundle)
        withExtendedLifetime(system) {}
    }

    /// The number of certificates the context's store holds now (read in, not looked up later).
    static func loadedCertificates(_ context: TLSContext) -> Int32 {
        guard let store = SSL_CTX_get_cert_store(context.pointer), let objects = X509_STORE_get0_objects(store) else { return 0 }
        return OPENSSL_sk_num(objects)
    }

    @Test func aHashedDirectoryIsTrustedWithoutReadingAnyCertificateUpFront() throws {
        let server = try Server()
        try SystemTrustStoreTests.withContext(directoryHolds: server, bundleHolds: server) { context, _ in
            #expect(SystemTrustStoreTests.loadedCertificates(context) == 0)
            #expect(context.systemBundlePending)
            let failure = try SystemTrustStoreTests.handshake(context, server)
            #expect(failure == nil)
            // Looked up by its hash during the verification: read then, and the bundle still not.
            #expect(context.systemBundlePending)
        }
    }

    @Test func aDirectoryWithoutHashedNamesLeavesTheBundleToBeReadUpFront() throws {
        let server = try Server()
        let system = try TemporaryDirectory()
        // Named as a person would, not by hash: the lazy lookup could never find it.
        try SystemTrustStoreTests.write(server.pem, to: system.path("my-ca.pem"))
        let bundle = system.path("bundle.pem")
        try SystemTrustStoreTests.write(server.pem, to: bundle)
        let trust = SystemTrustStore(bundle: bundle, directory: system.path, bundleChosen: false)
        let context = try TLSContext(clientTrusting: nil, certificate: nil, http2: true, systemTrust: trust)
        #expect(SystemTrustStoreTests.loadedCertificates(context) == 1)
        #expect(!context.systemBundlePending)
        #expect(try SystemTrustStoreTests.handshake(context, server) == nil)
    }

    @Test func aCAOnlyTheBundleHoldsFailsOnceSayingSoThenVerifies() throws {
        let server = try Server()
        // The directory is hashed, but only for another CA; the bundle has the server's.
        try SystemTrustStoreTests.withContext(directoryHolds: try Server(commonName: "other.example"), bundleHolds: server) { context, bundle in
            let first = try #require(try SystemTrustStoreTests.handshake(context, server))
            guard case .verificationFailed = first else {
                Issue.record("expected a verification failure, got \(first)")
                return
            }
            #expect(first.description.contains("its CA bundle \(bundle) is read now"))
            #expect(!context.systemBundlePending)
            #expect(try SystemTrustStoreTests.handshake(context, server) == nil)
        }
    }

    @Test func aCANoStoreHoldsStillFailsAndTheBundleIsReadOnce() throws {
        let server = try Server()
        let other = try Server(commonName: "other.example")
        try SystemTrustStoreTests.withContext(directoryHolds: other, bundleHolds: other) { context, _ in
            let first = try #require(try SystemTrustStoreTests.handshake(context, server))
            #expect(first.description.contains("is read now"))
            // Never trusted by reading more: the second attempt fails plainly.
            let second = try #require(try SystemTrustStoreTests.handshake(context, server))
            guard case .verificationFailed = second else {
                Issue.record("expected a verification failure, got \(second)")
                return
            }
            #expect(!second.description.contains("is read now"))
        }
    }

    @Test func aBundleTheOperatorChoseIsReadUpFrontEvenBesideAHashedDirectory() throws {
        let server = try Server()
        try SystemTrustStoreTests.withContext(directoryHolds: try Server(commonName: "other.example"), bundleHolds: server,
                                              bundleChosen: true) { context, _ in
            #expect(SystemTrustStoreTests.loadedCertificates(context) == 1)
            #expect(!context.systemBundlePending)
            // Verified at the first attempt: no failure first.
            let failure = try SystemTrustStoreTests.handshake(context, server)
            #expect(failure == nil)
        }
    }

    @Test func aDirectoryListIsHashedWhenAnyOfItsDirectoriesIs() throws {
        let server = try Server()
        let plain = try TemporaryDirectory()
        let hashed = try TemporaryDirectory()
        try SystemTrustStoreTests.write(server.pem, to: hashed.path(server.hashedName))
        #expect(SystemTrustStore.isHashed("\(plain.path):\(hashed.path)"))
        #expect(!SystemTrustStore.isHashed("\(plain.path):/nonexistent/herald-trust"))
        let trust = SystemTrustStore(bundle: nil, directory: "\(plain.path):\(hashed.path)", bundleChosen: false)
        #expect(try SystemTrustStoreTests.handshake(trust, server) == nil)
    }

    @Test func theEnvironmentsBundleIsChosenOnlyWhenItIsAnotherFile() throws {
        let system = try TemporaryDirectory()
        let target = system.path("ca-certificates.crt")
        try SystemTrustStoreTests.write("", to: target)
        let link = system.path("cert.pem")
        #expect(symlink(target, link) == 0)
        // Unset: OpenSSL's defaults, nothing chosen.
        let unset = SystemTrustStore.resolve(fileVariable: nil, directoryVariable: nil, defaultBundle: link, defaultDirectory: system.path)
        #expect(unset.bundle == link && unset.directory == system.path && !unset.bundleChosen)
        // Set to the file the default links to (as Debian's environment does): still the default.
        let same = SystemTrustStore.resolve(fileVariable: target, directoryVariable: nil, defaultBundle: link, defaultDirectory: system.path)
        #expect(same.bundle == target && !same.bundleChosen)
        // Another file: the operator's choice, read up front.
        let other = system.path("corporate.pem")
        try SystemTrustStoreTests.write("", to: other)
        let chosen = SystemTrustStore.resolve(fileVariable: other, directoryVariable: "/opt/ca", defaultBundle: link, defaultDirectory: system.path)
        #expect(chosen.bundle == other && chosen.directory == "/opt/ca" && chosen.bundleChosen)
    }

    @Test func onlyHashedNamesCount() {
        func check(_ name: String) -> Bool { SystemTrustStore.isHashedName(name) }
        #expect(check("002c0b4f.0"))
        #expect(check("002c0b4f.12"))
        #expect(!check("002C0B4F.0"))
        #expect(!check("002c0b4f."))
        #expect(!check("002c0b4f.r0"))
        #expect(!check("ca-certificates.crt"))
        #expect(!check("02c0b4f.0"))
        #expect(!check("002c0b4fa.0"))
    }

    @Test func anUnreadableOrMissingDirectoryIsNotHashed() throws {
        #expect(!SystemTrustStore.isHashed("/nonexistent/herald-trust"))
        let empty = try TemporaryDirectory()
        #expect(!SystemTrustStore.isHashed(empty.path))
    }
}
