import APNs
import Foundation
import Testing

@testable import Transport

/// `python3` with the `cryptography` package, or an error saying how to get it (CI installs both).
func pythonWithCryptography() throws -> String {
    guard let python = Subprocess.which("python3") else {
        throw SubprocessError(
            description: "python3 is required for this interoperability test; install python3 and python3-cryptography")
    }
    let probe = try Subprocess.run(python, ["-c", "import cryptography.hazmat.primitives.asymmetric.ec"])
    guard probe.succeeded else {
        throw SubprocessError(
            description:
                "the Python 'cryptography' package is required for this interoperability test; install python3-cryptography (\(probe.standardError))"
        )
    }
    return python
}

/// Verifies a JWT read from stdin with the public key in argv[1], independently of Herald, and prints the
/// decoded header and claims as canonical JSON.
private let pythonVerifyJWT = #"""
    import base64, json, sys
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    def b64url(text):
        assert "=" not in text, "padding in a JWT segment"
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    token = sys.stdin.read().strip()
    header_b64, claims_b64, signature_b64 = token.split(".")
    header, claims = json.loads(b64url(header_b64)), json.loads(b64url(claims_b64))
    signature = b64url(signature_b64)
    assert len(signature) == 64, "signature is %d bytes" % len(signature)
    assert type(claims["iat"]) is int, "iat is not a JSON integer"
    public_key = serialization.load_pem_public_key(open(sys.argv[1], "rb").read())
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    public_key.verify(der, (header_b64 + "." + claims_b64).encode(), ec.ECDSA(hashes.SHA256()))
    print(json.dumps({"header": header, "claims": claims}, sort_keys=True))
    """#

/// Signs a JWT with the private key in argv[1] for kid argv[2], iss argv[3], iat argv[4].
private let pythonSignJWT = #"""
    import base64, json, sys
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    def b64url(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    key = serialization.load_pem_private_key(open(sys.argv[1], "rb").read(), password=None)
    header = b64url(json.dumps({"alg": "ES256", "kid": sys.argv[2]}).encode())
    claims = b64url(json.dumps({"iss": sys.argv[3], "iat": int(sys.argv[4])}).encode())
    r, s = decode_dss_signature(key.sign((header + "." + claims).encode(), ec.ECDSA(hashes.SHA256())))
    print(header + "." + claims + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big")))
    """#

/// Herald's ES256 against implementations that share no code with it: the `openssl` command and
/// Python's `cryptography`.
struct ES256InteropTests {
    @Test func opensslCommandVerifiesOurSignatures() throws {
        let directory = try TemporaryDirectory()
        let key = try ES256PrivateKey.generate()
        let publicKeyPath = try directory.write(key.publicKey.pem(), to: "public.pem")
        // Several messages, so that r or s with leading zero bytes turn up in the DER encoding sometimes.
        for round in 0..<8 {
            let message = Array("eyJhbGciOiJFUzI1NiJ9.round\(round)".utf8)
            let signature = try key.sign(message)
            let messagePath = try directory.write(message, to: "message")
            let signaturePath = try directory.write(ECDSASignatureDER.encode(raw: signature), to: "signature.der")
            let result = try Subprocess.run(
                "openssl", ["dgst", "-sha256", "-verify", publicKeyPath, "-signature", signaturePath, messagePath])
            #expect(result.succeeded && result.standardOutput.contains("Verified OK"), "\(result)")

            var tampered = message
            tampered[0] ^= 1
            try directory.write(tampered, to: "message")
            let rejected = try Subprocess.run(
                "openssl", ["dgst", "-sha256", "-verify", publicKeyPath, "-signature", signaturePath, messagePath])
            #expect(!rejected.succeeded && rejected.output.contains("Verification failure"), "\(rejected)")
        }
    }

    @Test func weVerifySignaturesMadeByTheOpenSSLCommand() throws {
        let directory = try TemporaryDirectory()
        let keyPath = directory.path("key.pem")
        try openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyPath)
        let publicKey = try ES256PublicKey(pemFile: keyPath)
        for round in 0..<8 {
            let message = Array("signed by openssl \(round)".utf8)
            let messagePath = try directory.write(message, to: "message")
            let signaturePath = directory.path("signature.der")
            try openssl("dgst", "-sha256", "-sign", keyPath, "-out", signaturePath, messagePath)
            let raw = try #require(ECDSASignatureDER.decode(der: try directory.read("signature.der")))
            #expect(publicKey.verify(signature: raw, message: message))
            #expect(!publicKey.verify(signature: raw, message: message + [0]))
        }
    }

    @Test func pythonCryptographyVerifiesOurProviderToken() throws {
        let python = try pythonWithCryptography()
        let directory = try TemporaryDirectory()
        let key = try ES256PrivateKey.generate()
        let publicKeyPath = try directory.write(key.publicKey.pem(), to: "public.pem")
        let signer = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: key)
        let token = try signer.makeToken(issuedAt: 1_700_000_000)

        let result = try Subprocess.runChecked(
            python, ["-c", pythonVerifyJWT, publicKeyPath], standardInput: Array(token.utf8))
        #expect(
            result.standardOutput
                == #"{"claims": {"iat": 1700000000, "iss": "DEF123GHIJ"}, "header": {"alg": "ES256", "kid": "ABC123DEFG"}}"#
                + "\n")
    }

    @Test func pythonCryptographyRejectsATamperedToken() throws {
        let python = try pythonWithCryptography()
        let directory = try TemporaryDirectory()
        let key = try ES256PrivateKey.generate()
        let publicKeyPath = try directory.write(key.publicKey.pem(), to: "public.pem")
        let token = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: key)
            .makeToken(issuedAt: 1_700_000_000)
        let parts = token.split(separator: ".")
        let forgedClaims = Base64URL.encode(#"{"iss":"DEF123GHIJ","iat":1700009999}"#.utf8)
        let forged = "\(parts[0]).\(forgedClaims).\(parts[2])"
        let result = try Subprocess.run(python, ["-c", pythonVerifyJWT, publicKeyPath], standardInput: Array(forged.utf8))
        #expect(!result.succeeded && result.standardError.contains("InvalidSignature"), "\(result)")
    }

    @Test func ourVerifierAcceptsATokenSignedByPythonCryptography() throws {
        let python = try pythonWithCryptography()
        let directory = try TemporaryDirectory()
        let pem = try ES256PrivateKey.generateP8()
        let keyPath = try directory.write(pem, to: "AuthKey_ABC123DEFG.p8")
        // json.dumps puts a space after ':' and ',': the parser must take any valid JSON spacing.
        let token = try Subprocess.runChecked(python, ["-c", pythonSignJWT, keyPath, "ABC123DEFG", "DEF123GHIJ", "1700000123"])
            .standardOutput
        let verifier = ProviderTokenVerifier(
            publicKey: try ES256PublicKey(pem: pem), teamID: "DEF123GHIJ", keyID: "ABC123DEFG")
        let parsed = try verifier.verify(token).get()
        #expect(parsed.iat == 1_700_000_123 && parsed.kid == "ABC123DEFG" && parsed.iss == "DEF123GHIJ")
    }
}
