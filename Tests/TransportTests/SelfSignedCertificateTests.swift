import Foundation
import Testing

@testable import Transport

struct SelfSignedCertificateTests {
    /// Writes a default certificate and key into a new directory.
    func written(_ certificate: SelfSignedCertificate) throws -> (TemporaryDirectory, cert: String, key: String) {
        let directory = try TemporaryDirectory()
        let certPath = directory.path("cert.pem")
        let keyPath = directory.path("key.pem")
        try certificate.write(certificateTo: certPath, keyTo: keyPath)
        return (directory, certPath, keyPath)
    }

    @Test func defaultCertificateNamesLocalhostAndLoopbackAddresses() throws {
        let (directory, cert, _) = try written(try SelfSignedCertificate.generate())
        _ = directory
        let text = try openssl("x509", "-in", cert, "-noout", "-text").standardOutput
        #expect(text.contains("DNS:localhost"))
        #expect(text.contains("IP Address:127.0.0.1"))
        #expect(text.contains("IP Address:0:0:0:0:0:0:0:1"))
        #expect(text.contains("Subject: CN = localhost"))
        #expect(text.contains("Issuer: CN = localhost"))
        #expect(text.contains("Version: 3 (0x2)"))
        #expect(text.contains("CA:TRUE"))
        #expect(text.contains("Digital Signature, Certificate Sign"))
        #expect(text.contains("TLS Web Server Authentication"))
        #expect(text.contains("Signature Algorithm: ecdsa-with-SHA256"))
        #expect(text.contains("NIST CURVE: P-256"))
    }

    @Test func certificateVerifiesAgainstItselfAsTrustAnchor() throws {
        let (directory, cert, _) = try written(try SelfSignedCertificate.generate())
        _ = directory
        let result = try openssl("verify", "-CAfile", cert, cert)
        #expect(result.standardOutput.contains("\(cert): OK"))
        // As a TLS server certificate for the names it carries.
        try openssl("verify", "-CAfile", cert, "-purpose", "sslserver", "-verify_hostname", "localhost", cert)
        try openssl("verify", "-CAfile", cert, "-purpose", "sslserver", "-verify_ip", "::1", cert)
        let wrongName = try Subprocess.run(
            "openssl", ["verify", "-CAfile", cert, "-verify_hostname", "api.push.apple.com", cert])
        #expect(!wrongName.succeeded)
    }

    @Test func keyMatchesTheCertificateAndIsPrivateToTheOwner() throws {
        let generated = try SelfSignedCertificate.generate()
        let (directory, cert, key) = try written(generated)
        #expect(try directory.permissions(of: "key.pem") == 0o600)
        #expect(try directory.permissions(of: "cert.pem") == 0o644)
        let certificatePublicKey = try openssl("x509", "-in", cert, "-noout", "-pubkey").standardOutput
        #expect(try ES256PrivateKey(pemFile: key).publicKey.pem() == certificatePublicKey)
        #expect(generated.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test func writingOverAnExistingKeyFileNarrowsItsMode() throws {
        let directory = try TemporaryDirectory()
        let keyPath = try directory.write("old", to: "key.pem")
        chmod(keyPath, 0o644)
        try SelfSignedCertificate.generate().write(certificateTo: directory.path("cert.pem"), keyTo: keyPath)
        #expect(try directory.permissions(of: "key.pem") == 0o600)
    }

    @Test func withoutAKeyPathBothGoIntoOneOwnerOnlyFile() throws {
        let directory = try TemporaryDirectory()
        let generated = try SelfSignedCertificate.generate()
        try generated.write(certificateTo: directory.path("combined.pem"))
        #expect(try directory.permissions(of: "combined.pem") == 0o600)
        let combined = String(decoding: try directory.read("combined.pem"), as: UTF8.self)
        #expect(combined == generated.certificatePEM + generated.privateKeyPEM)
        _ = try ES256PrivateKey(pem: combined)
    }

    @Test func customNamesAndValidityAreHonoured() throws {
        let generated = try SelfSignedCertificate.generate(
            commonName: "Herald APNs emulator", dnsNames: ["apns.test", "*.herald.local"],
            ipAddresses: ["10.1.2.3", "fd00::5"], validDays: 3)
        let (directory, cert, _) = try written(generated)
        _ = directory
        let text = try openssl("x509", "-in", cert, "-noout", "-text").standardOutput
        #expect(text.contains("DNS:apns.test, DNS:*.herald.local, IP Address:10.1.2.3, IP Address:FD00:0:0:0:0:0:0:5"))
        #expect(text.contains("Subject: CN = Herald APNs emulator"))
        // Valid for more than 2 days and less than 4.
        try openssl("x509", "-in", cert, "-noout", "-checkend", String(2 * 86_400))
        let expiring = try Subprocess.run("openssl", ["x509", "-in", cert, "-noout", "-checkend", String(4 * 86_400)])
        #expect(!expiring.succeeded && expiring.standardOutput.contains("will expire"))
    }

    @Test func serialsAreRandom() throws {
        let serials = try (0..<3).map { _ in
            let (directory, cert, _) = try written(try SelfSignedCertificate.generate())
            _ = directory
            return try openssl("x509", "-in", cert, "-noout", "-serial").standardOutput
        }
        #expect(Set(serials).count == 3)
        #expect(serials.allSatisfy { $0.count == "serial=".count + 32 + 1 })
    }

    @Test(arguments: ["", "localhost,IP:1.2.3.4", "a b", "-.", "host..name", "*", "é.test"])
    func rejectsInvalidDNSNames(name: String) {
        #expect(throws: SelfSignedCertificateError.self) { try SelfSignedCertificate.generate(dnsNames: [name]) }
    }

    @Test(arguments: ["", "localhost", "1.2.3", "::1,DNS:evil", "256.0.0.1"])
    func rejectsInvalidIPAddresses(address: String) {
        #expect(throws: SelfSignedCertificateError.self) { try SelfSignedCertificate.generate(ipAddresses: [address]) }
    }

    @Test func rejectsAValidityUnderOneDay() {
        #expect(throws: SelfSignedCertificateError.self) { try SelfSignedCertificate.generate(validDays: 0) }
    }
}
