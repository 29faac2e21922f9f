import Foundation
import HeraldTestSupport

/// A private certificate authority for one test, made with the `openssl` command line: a CA, a
/// server certificate it signed for `localhost` and `127.0.0.1` (what a `redis-server
/// --tls-port` presents), a client certificate it signed (for `--tls-auth-clients yes`), and a
/// second, unrelated CA with its own server and client certificates (the ones nobody trusts).
struct TestCertificates: Sendable {
    let directory: String
    var caFile: String { "\(directory)/ca.pem" }
    var serverCertificate: String { "\(directory)/server.pem" }
    var serverKey: String { "\(directory)/server.key" }
    var clientCertificate: String { "\(directory)/client.pem" }
    var clientKey: String { "\(directory)/client.key" }
    /// Another CA, not the one Redis trusts or that signed Redis' certificate.
    var otherCAFile: String { "\(directory)/other-ca.pem" }
    /// A client certificate the other CA signed: Redis rejects it.
    var strangerCertificate: String { "\(directory)/stranger.pem" }
    var strangerKey: String { "\(directory)/stranger.key" }
    /// A server certificate our CA signed for `redis.example.net` only (a name mismatch at 127.0.0.1).
    var wrongNameCertificate: String { "\(directory)/wrong-name.pem" }
    var wrongNameKey: String { "\(directory)/wrong-name.key" }

    /// Writes every file into `directory` (which exists).
    init(directory: String) throws {
        self.directory = directory
        try makeCA("ca", subject: "/CN=Herald Test CA")
        try makeCA("other-ca", subject: "/CN=Some Other CA")
        try makeSigned("server", by: "ca", subject: "/CN=localhost",
                       extensions: "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth")
        try makeSigned("wrong-name", by: "ca", subject: "/CN=redis.example.net",
                       extensions: "subjectAltName=DNS:redis.example.net\nextendedKeyUsage=serverAuth")
        try makeSigned("client", by: "ca", subject: "/CN=herald-worker", extensions: "extendedKeyUsage=clientAuth")
        try makeSigned("stranger", by: "other-ca", subject: "/CN=stranger", extensions: "extendedKeyUsage=clientAuth")
        for name in ["ca", "other-ca", "server", "wrong-name", "client", "stranger"] {
            chmod("\(directory)/\(name).key", 0o600)
        }
    }

    private func makeCA(_ name: String, subject: String) throws {
        try TestCertificates.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).pem", "-days", "2", "-subj", subject,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
    }

    private func makeSigned(_ name: String, by ca: String, subject: String, extensions: String) throws {
        let extensionsFile = "\(directory)/\(name).ext"
        try extensions.write(toFile: extensionsFile, atomically: true, encoding: .utf8)
        try TestCertificates.openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).csr", "-subj", subject,
        ])
        try TestCertificates.openssl([
            "x509", "-req", "-in", "\(directory)/\(name).csr", "-CA", "\(directory)/\(ca).pem", "-CAkey", "\(directory)/\(ca).key",
            "-CAcreateserial", "-out", "\(directory)/\(name).pem", "-days", "2", "-extfile", extensionsFile,
        ])
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        process.standardError = errors
        do {
            try process.run()
        } catch {
            throw RedisServerError("cannot run /usr/bin/openssl (run `make deps`): \(error)")
        }
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw RedisServerError("openssl \(arguments.prefix(2).joined(separator: " ")) failed: \(String(decoding: output, as: UTF8.self))")
        }
    }
}
