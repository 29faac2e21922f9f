import Foundation
import Testing

@testable import Transport

/// Runs `openssl` with `arguments`, failing the test with its output if it does not succeed.
@discardableResult
func openssl(_ arguments: String...) throws -> SubprocessResult {
    try Subprocess.runChecked("openssl", arguments)
}

struct ES256Tests {
    @Test func signatureIsSixtyFourRawBytesThatVerify() throws {
        let key = try ES256PrivateKey.generate()
        let message = Array("header.claims".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verify(signature: signature, message: message))
    }

    @Test func tamperedMessageOrSignatureFailsVerification() throws {
        let key = try ES256PrivateKey.generate()
        let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJpYXQiOjF9".utf8)
        let signature = try key.sign(message)
        var tamperedMessage = message
        tamperedMessage[5] ^= 0x01
        #expect(!key.publicKey.verify(signature: signature, message: tamperedMessage))
        #expect(!key.publicKey.verify(signature: signature, message: message.dropLast()))
        for index in [0, 31, 32, 63] {
            var tamperedSignature = signature
            tamperedSignature[index] ^= 0x80
            #expect(!key.publicKey.verify(signature: tamperedSignature, message: message))
        }
        #expect(!key.publicKey.verify(signature: Array(signature.prefix(63)), message: message))
        #expect(!key.publicKey.verify(signature: [UInt8](repeating: 0, count: 64), message: message))
        #expect(!key.publicKey.verify(signature: [UInt8](repeating: 0xFF, count: 64), message: message))
    }

    @Test func anotherKeysSignatureFailsVerification() throws {
        let key = try ES256PrivateKey.generate()
        let other = try ES256PrivateKey.generate()
        let message = Array("message".utf8)
        #expect(!other.publicKey.verify(signature: try key.sign(message), message: message))
    }

    @Test func signsEmptyAndLargeMessages() throws {
        let key = try ES256PrivateKey.generate()
        for message in [[], [UInt8](repeating: 0xAB, count: 1 << 20)] {
            #expect(key.publicKey.verify(signature: try key.sign(message), message: message))
        }
    }

    @Test func verifiesMessagesGivenAsSlices() throws {
        let key = try ES256PrivateKey.generate()
        let buffer = Array("xxmessagexx".utf8)
        let signature = try key.sign(Array(buffer[2..<9]))
        #expect(key.publicKey.verify(signature: signature, message: buffer[2..<9]))
        #expect(key.publicKey.verify(signature: signature, message: "message".utf8))
    }

    @Test func generatedKeyIsPKCS8PEMLikeApplesP8() throws {
        let pem = try ES256PrivateKey.generateP8()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        #expect(pem.hasSuffix("-----END PRIVATE KEY-----\n"))
        let directory = try TemporaryDirectory()
        let path = try directory.write(pem, to: "AuthKey_ABC123DEFG.p8")
        let text = try openssl("pkey", "-in", path, "-noout", "-text").output
        #expect(text.contains("ASN1 OID: prime256v1"))
        #expect(text.contains("NIST CURVE: P-256"))
    }

    @Test func publicKeyPEMRoundTripsAndMatchesOpenSSLs() throws {
        let directory = try TemporaryDirectory()
        let keyPath = try directory.write(try ES256PrivateKey.generateP8(), to: "key.p8")
        let key = try ES256PrivateKey(pemFile: keyPath)
        let expected = try openssl("pkey", "-in", keyPath, "-pubout").standardOutput
        #expect(key.publicKey.pem() == expected)

        let reloaded = try ES256PublicKey(pem: key.publicKey.pem())
        let message = Array("round trip".utf8)
        #expect(reloaded.verify(signature: try key.sign(message), message: message))

        let publicPath = try directory.write(expected, to: "public.pem")
        #expect(try ES256PublicKey(pemFile: publicPath).verify(signature: try key.sign(message), message: message))
    }

    @Test func publicKeyCanBeDerivedFromAPrivateKeyPEM() throws {
        let pem = try ES256PrivateKey.generateP8()
        let key = try ES256PrivateKey(pem: pem)
        let derived = try ES256PublicKey(pem: pem)
        #expect(derived.pem() == key.publicKey.pem())
        #expect(!derived.pem().contains("PRIVATE"))
    }

    @Test func loadsAP256KeyGeneratedByTheOpenSSLCommand() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("genpkey.pem")
        try openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
        let key = try ES256PrivateKey(pemFile: path)
        let message = Array("from openssl genpkey".utf8)
        #expect(key.publicKey.verify(signature: try key.sign(message), message: message))
    }

    @Test func loadsASEC1ECPrivateKeyWithParametersBlock() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("ecparam.pem")
        // `ecparam -genkey` writes an "EC PARAMETERS" block before "BEGIN EC PRIVATE KEY".
        try openssl("ecparam", "-name", "prime256v1", "-genkey", "-out", path)
        let pem = String(decoding: try directory.read("ecparam.pem"), as: UTF8.self)
        #expect(pem.contains("-----BEGIN EC PRIVATE KEY-----"))
        let key = try ES256PrivateKey(pem: pem)
        let message = Array("sec1".utf8)
        #expect(key.publicKey.verify(signature: try key.sign(message), message: message))
    }

    @Test(arguments: [
        (["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], "RSA"),
        (["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"], "secp384r1"),
        (["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:secp256k1"], "secp256k1"),
        (["-algorithm", "ED25519"], "ED25519"),
    ])
    func rejectsKeysThatAreNotP256WithAClearError(genpkeyArguments: [String], found: String) throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("AuthKey_WRONG.p8")
        try Subprocess.runChecked("openssl", ["genpkey"] + genpkeyArguments + ["-out", path])
        let pem = String(decoding: try directory.read("AuthKey_WRONG.p8"), as: UTF8.self)
        let pemBody = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }

        #expect {
            try ES256PrivateKey(pemFile: path)
        } throws: { error in
            guard case .notP256 = error as? ES256KeyError else { return false }
            let text = "\(error)"
            return text.contains("the key in \(path) is not a P-256 (prime256v1) EC key; APNs .p8 keys are")
                && text.contains(found) && !pemBody.contains(where: { text.contains($0) })
        }
        #expect {
            try ES256PublicKey(pem: pem)
        } throws: { error in
            guard case .notP256 = error as? ES256KeyError else { return false }
            return true
        }
        let publicPEM = try openssl("pkey", "-in", path, "-pubout").standardOutput
        #expect {
            try ES256PublicKey(pem: publicPEM)
        } throws: { error in
            guard case .notP256 = error as? ES256KeyError else { return false }
            return true
        }
    }

    @Test func rejectsAnEncryptedKeyWithoutPrompting() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path("encrypted.pem")
        try openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-aes-256-cbc", "-pass",
            "pass:secret", "-out", path)
        #expect {
            try ES256PrivateKey(pemFile: path)
        } throws: { error in
            guard case .encrypted = error as? ES256KeyError else { return false }
            return "\(error)".contains("encrypted")
        }
    }

    @Test(arguments: [
        "",
        "not a key at all",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    ])
    func rejectsTextWithoutAPrivateKey(pem: String) {
        #expect {
            try ES256PrivateKey(pem: pem)
        } throws: { error in
            guard case .noPEMKey = error as? ES256KeyError else { return false }
            return true
        }
    }

    @Test(arguments: [
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\nnot base64 !!\n-----END PRIVATE KEY-----\n",
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n",
    ])
    func rejectsGarbagePEM(pem: String) {
        #expect {
            try ES256PrivateKey(pem: pem)
        } throws: { error in
            guard case .malformed = error as? ES256KeyError else { return false }
            return "\(error)".contains("could not be decoded")
        }
        #expect(throws: ES256KeyError.self) { try ES256PublicKey(pem: pem) }
    }

    @Test func reportsAMissingFileByPath() {
        #expect {
            try ES256PrivateKey(pemFile: "/nonexistent/AuthKey_ABC123DEFG.p8")
        } throws: { error in
            guard case .unreadableFile = error as? ES256KeyError else { return false }
            let text = "\(error)"
            return text.contains("/nonexistent/AuthKey_ABC123DEFG.p8") && text.contains("No such file")
        }
    }

    @Test func descriptionsNeverShowKeyMaterial() throws {
        let pem = try ES256PrivateKey.generateP8()
        let key = try ES256PrivateKey(pem: pem)
        let directory = try TemporaryDirectory()
        let path = try directory.write(pem, to: "key.p8")
        // The private scalar as OpenSSL prints it ("priv:" then hex lines), without separators.
        let text = try openssl("pkey", "-in", path, "-noout", "-text").standardOutput
        let privateHex = text.components(separatedBy: "pub:")[0].components(separatedBy: "priv:")[1]
            .filter(\.isHexDigit).lowercased()
        #expect(privateHex.count >= 64)
        let pemBody = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)

        var dumped = ""
        dump(key, to: &dumped)
        for shown in [String(describing: key), String(reflecting: key), "\(key)", dumped, "\([key])"] {
            #expect(!pemBody.contains(where: { shown.contains($0) }))
            let compact = shown.filter(\.isHexDigit).lowercased()
            #expect(!compact.contains(privateHex.suffix(32)))
        }
        #expect(String(describing: key) == "ES256PrivateKey(P-256)")
        #expect(String(reflecting: key) == "ES256PrivateKey(P-256)")
    }

    @Test func oneKeySignsConcurrentlyFromManyTasks() async throws {
        let key = try ES256PrivateKey.generate()
        let verified = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var count = 0
                    for round in 0..<50 {
                        let message = Array("task \(task) round \(round)".utf8)
                        if let signature = try? key.sign(message), key.publicKey.verify(signature: signature, message: message) {
                            count += 1
                        }
                    }
                    return count
                }
            }
            return await group.reduce(0, +)
        }
        #expect(verified == 400)
    }
}
