import Testing

@testable import Transport

/// Certificate-based authentication: the client context loads a PEM pair or a PKCS#12 file and
/// says clearly what is wrong with a bad one.
struct ClientCertificateTests {
    /// A client certificate and key, and the same pair as a PKCS#12 file protected by `password`.
    func clientFiles(password: String) throws -> (TemporaryDirectory, cert: String, key: String, p12: String) {
        let directory = try TemporaryDirectory()
        let pair = try SelfSignedCertificate.generate(commonName: "com.example.certapp", dnsNames: [], ipAddresses: [])
        let cert = directory.path("client.pem")
        let key = directory.path("client.key")
        try pair.write(certificateTo: cert, keyTo: key)
        let p12 = directory.path("client.p12")
        try openssl("pkcs12", "-export", "-in", cert, "-inkey", key, "-out", p12, "-passout", "pass:\(password)")
        return (directory, cert, key, p12)
    }

    @Test func pemPairLoads() throws {
        let (directory, cert, key, _) = try clientFiles(password: "x")
        _ = directory
        _ = try TLSContext(clientTrusting: nil, certificate: .pem(certificateFile: cert, keyFile: key))
    }

    @Test func pkcs12WithItsPasswordLoads() throws {
        let (directory, _, _, p12) = try clientFiles(password: "s3cret")
        _ = directory
        _ = try TLSContext(clientTrusting: nil, certificate: .pkcs12(file: p12, password: "s3cret"))
    }

    @Test func pkcs12WithAWrongPasswordSaysSo() throws {
        let (directory, _, _, p12) = try clientFiles(password: "s3cret")
        _ = directory
        do {
            _ = try TLSContext(clientTrusting: nil, certificate: .pkcs12(file: p12, password: "wrong"))
            Issue.record("a wrong PKCS#12 password was accepted")
        } catch {
            #expect("\(error)".contains("wrong password"))
            #expect(!"\(error)".contains("s3cret"))
        }
    }

    @Test func keyThatDoesNotMatchTheCertificateIsRefused() throws {
        let (directory, cert, _, _) = try clientFiles(password: "x")
        let other = try SelfSignedCertificate.generate()
        let otherKey = directory.path("other.key")
        try other.write(certificateTo: directory.path("other.pem"), keyTo: otherKey)
        #expect(throws: TLSError.self) {
            _ = try TLSContext(clientTrusting: nil, certificate: .pem(certificateFile: cert, keyFile: otherKey))
        }
    }

    @Test func missingCertificateFileNamesIt() throws {
        do {
            _ = try TLSContext(clientTrusting: nil, certificate: .pem(certificateFile: "/nonexistent/client.pem", keyFile: "/nonexistent/k"))
            Issue.record("a missing certificate file was accepted")
        } catch {
            #expect("\(error)".contains("/nonexistent/client.pem"))
        }
    }
}
