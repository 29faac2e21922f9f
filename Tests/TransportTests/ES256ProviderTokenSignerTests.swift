import APNs
import Testing

@testable import Transport

struct ProviderTokenSignerTests {
    let key = try! ES256PrivateKey.generate()

    func verifier(key: ES256PrivateKey? = nil, teamID: String = "DEF123GHIJ", keyID: String = "ABC123DEFG")
        -> ProviderTokenVerifier
    {
        ProviderTokenVerifier(publicKey: (key ?? self.key).publicKey, teamID: teamID, keyID: keyID)
    }

    @Test func signedTokenVerifiesAndCarriesTheClaims() throws {
        let signer = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: key)
        let token = try signer.makeToken(issuedAt: 1_700_000_000)
        let parsed = try verifier().verify(token).get()
        #expect(parsed.alg == "ES256" && parsed.kid == "ABC123DEFG" && parsed.iss == "DEF123GHIJ")
        #expect(parsed.iat == 1_700_000_000)

        let parts = token.split(separator: ".")
        #expect(parts.count == 3)
        #expect(Base64URL.decode(parts[0]) == Array(#"{"alg":"ES256","kid":"ABC123DEFG"}"#.utf8))
        #expect(Base64URL.decode(parts[1]) == Array(#"{"iss":"DEF123GHIJ","iat":1700000000}"#.utf8))
        #expect(Base64URL.decode(parts[2])?.count == 64)
    }

    @Test func tokensForDifferentTimesDiffer() throws {
        let signer = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: key)
        let first = try signer.makeToken(issuedAt: 1_700_000_000)
        let second = try signer.makeToken(issuedAt: 1_700_001_200)
        #expect(first != second)
        #expect(try verifier().verify(second).get().iat == 1_700_001_200)
    }

    @Test func signerRejectsMalformedIDs() throws {
        #expect(throws: ProviderTokenError.invalidTeamID("TEAM")) {
            try ProviderTokenSigner(teamID: "TEAM", keyID: "ABC123DEFG", key: key)
        }
        #expect(throws: ProviderTokenError.invalidKeyID("ABC123DEFG.")) {
            try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG.", key: key)
        }
    }

    @Test func verifierReportsAWrongKeyID() throws {
        let token = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ZZZ999ZZZZ", key: key).makeToken(issuedAt: 1)
        #expect(verifier().verify(token) == .failure(.wrongKeyID(expected: "ABC123DEFG", found: "ZZZ999ZZZZ")))
    }

    @Test func verifierReportsAWrongTeamID() throws {
        let token = try ProviderTokenSigner(teamID: "OTHERTEAM1", keyID: "ABC123DEFG", key: key).makeToken(issuedAt: 1)
        #expect(verifier().verify(token) == .failure(.wrongTeamID(expected: "DEF123GHIJ", found: "OTHERTEAM1")))
    }

    @Test func verifierReportsASignatureByAnotherKey() throws {
        let other = try ES256PrivateKey.generate()
        let token = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: other).makeToken(issuedAt: 1)
        #expect(verifier().verify(token) == .failure(.badSignature))
    }

    @Test func verifierReportsAlteredClaims() throws {
        let token = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: key)
            .makeToken(issuedAt: 1_700_000_000)
        let parts = token.split(separator: ".")
        let later = Base64URL.encode(#"{"iss":"DEF123GHIJ","iat":1700003600}"#.utf8)
        #expect(verifier().verify("\(parts[0]).\(later).\(parts[2])") == .failure(.badSignature))
    }

    @Test func verifierReportsMalformedTokens() {
        #expect(verifier().verify("not.a.jwt.at.all") == .failure(.malformed(.wrongSegmentCount(5))))
        #expect(verifier().verify("") == .failure(.malformed(.empty)))
    }

    @Test func verifierToleratesSurroundingWhitespace() throws {
        let token = try ProviderTokenSigner(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", key: key).makeToken(issuedAt: 5)
        #expect(try verifier().verify(" \(token)\r\n").get().iat == 5)
    }

    @Test func failureDescriptionsAreDistinct() {
        let failures: [ProviderTokenVerificationFailure] = [
            .malformed(.empty), .wrongKeyID(expected: "A", found: "B"), .wrongTeamID(expected: "A", found: "B"),
            .badSignature,
        ]
        #expect(Set(failures.map(\.description)).count == failures.count)
    }
}
