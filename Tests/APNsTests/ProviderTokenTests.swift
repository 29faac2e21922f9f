import Testing

@testable import APNs

/// Builds a token from literal JSON, for parser tests.
private func jwt(header: String, claims: String, signature: [UInt8] = Array(repeating: 7, count: 64)) -> String {
    Base64URL.encode(header.utf8) + "." + Base64URL.encode(claims.utf8) + "." + Base64URL.encode(signature)
}

private let validHeader = #"{"alg":"ES256","kid":"ABC123DEFG"}"#
private let validClaims = #"{"iss":"DEF123GHIJ","iat":1700000000}"#

private func segment(_ token: some StringProtocol, _ index: Int) -> String {
    let parts = token.split(separator: ".", omittingEmptySubsequences: false)
    return String(decoding: Base64URL.decode(parts[index])!, as: UTF8.self)
}

struct ProviderTokenClaimsTests {
    let claims = try! ProviderTokenClaims(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", issuedAt: 1_700_000_000)

    @Test func headerIsExactlyAlgAndKid() {
        let input = String(decoding: claims.signingInput(), as: UTF8.self)
        #expect(segment(input, 0) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
    }

    @Test func claimsCarryIssuedAtAsAJSONNumber() {
        let input = String(decoding: claims.signingInput(), as: UTF8.self)
        #expect(segment(input, 1) == #"{"iss":"DEF123GHIJ","iat":1700000000}"#)
        #expect(segment(input, 1).contains(#""iat":1700000000"#))
        #expect(!segment(input, 1).contains(#""iat":""#))
    }

    @Test func signingInputIsTwoBase64URLSegments() {
        let input = String(decoding: claims.signingInput(), as: UTF8.self)
        #expect(input == "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.eyJpc3MiOiJERUYxMjNHSElKIiwiaWF0IjoxNzAwMDAwMDAwfQ")
    }

    @Test func tokenAppendsTheRawSignature() {
        let signature = (0..<64).map { UInt8($0) }
        let token = claims.token(signature: signature)
        let parts = token.split(separator: ".")
        #expect(parts.count == 3)
        #expect(Base64URL.decode(parts[2]) == signature)
        #expect(token.hasPrefix(String(decoding: claims.signingInput(), as: UTF8.self) + "."))
    }

    @Test func issuedAtCanBeReplacedKeepingTheIDs() {
        let later = claims.issued(at: 1_700_003_600)
        #expect(later.teamID == claims.teamID && later.keyID == claims.keyID && later.issuedAt == 1_700_003_600)
        #expect(segment(String(decoding: later.signingInput(), as: UTF8.self), 1).contains(#""iat":1700003600"#))
    }

    @Test(arguments: ["", "DEF123GHI", "DEF123GHIJK", "DEF123GHI!", "DEF-23GHIJ", "DEF 23GHIJ", "DEF123GHIÉ", "ÉEF123GHI"])
    func rejectsTeamIDsThatAreNotTenAlphanumerics(teamID: String) {
        #expect(throws: ProviderTokenError.invalidTeamID(teamID)) {
            try ProviderTokenClaims(teamID: teamID, keyID: "ABC123DEFG", issuedAt: 0)
        }
    }

    @Test(arguments: ["", "ABC123DEF", "ABC123DEFGH", "ABC123DEF\"", "ABC123DEF\\"])
    func rejectsKeyIDsThatAreNotTenAlphanumerics(keyID: String) {
        #expect(throws: ProviderTokenError.invalidKeyID(keyID)) {
            try ProviderTokenClaims(teamID: "DEF123GHIJ", keyID: keyID, issuedAt: 0)
        }
    }

    @Test func idErrorsSayWhatIsExpected() {
        #expect(ProviderTokenError.invalidTeamID("x").description.contains("exactly 10 ASCII letters or digits"))
        #expect(ProviderTokenError.invalidKeyID("x").description.contains("Key ID"))
    }

    @Test func acceptsLowercaseAndDigitIDs() throws {
        _ = try ProviderTokenClaims(teamID: "abc1234567", keyID: "0123456789", issuedAt: 0)
    }
}

struct ProviderTokenParsingTests {
    @Test func parsesWhatClaimsProduce() throws {
        let claims = try ProviderTokenClaims(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", issuedAt: 1_700_000_000)
        let signature = (0..<64).map { UInt8(255 - $0) }
        let parsed = try ParsedProviderToken.parse(claims.token(signature: signature))
        #expect(parsed.alg == "ES256")
        #expect(parsed.kid == "ABC123DEFG")
        #expect(parsed.iss == "DEF123GHIJ")
        #expect(parsed.iat == 1_700_000_000)
        #expect(parsed.signingInput == claims.signingInput())
        #expect(parsed.signature == signature)
    }

    @Test func toleratesWhitespaceAroundTheTokenAndInsideTheJSON() throws {
        let token = jwt(
            header: " {\n \"alg\" : \"ES256\" ,\t\"kid\":\"ABC123DEFG\" } ",
            claims: "{\r\n\"iss\": \"DEF123GHIJ\",\n\"iat\" :  1700000000\n}\n")
        let parsed = try ParsedProviderToken.parse("  \t" + token + "\r\n")
        #expect(parsed.kid == "ABC123DEFG" && parsed.iss == "DEF123GHIJ" && parsed.iat == 1_700_000_000)
        #expect(parsed.signingInput == Array(token.split(separator: ".").prefix(2).joined(separator: ".").utf8))
    }

    @Test func allowsExtraFieldsOfAnyScalarType() throws {
        let parsed = try ParsedProviderToken.parse(
            jwt(
                header: #"{"typ":"JWT","alg":"ES256","kid":"ABC123DEFG","x":null}"#,
                claims: #"{"iss":"DEF123GHIJ","iat":1700000000,"exp":1.7e9,"debug":true}"#))
        #expect(parsed.iat == 1_700_000_000)
    }

    @Test func decodesEscapesInStrings() throws {
        let parsed = try ParsedProviderToken.parse(
            jwt(header: #"{"alg":"ES\u0032\u00356","kid":"ABC\/23\u00e9\ud83d\ude00"}"#, claims: validClaims))
        #expect(parsed.alg == "ES256")
        #expect(parsed.kid == "ABC/23é😀")
    }

    @Test func rejectsIssuedAtAsAString() {
        let token = jwt(header: validHeader, claims: #"{"iss":"DEF123GHIJ","iat":"1700000000"}"#)
        #expect {
            try ParsedProviderToken.parse(token)
        } throws: { error in
            guard case .wrongFieldType(.claims, name: "iat", _, _) = error as? ProviderTokenError else { return false }
            let text = "\(error)"
            return text.contains("\"iat\"") && text.contains("a string") && text.contains("integer JSON number")
        }
    }

    @Test(arguments: [#"1.7e9"#, #"1700000000.5"#, #"99999999999999999999"#, #"true"#, #"null"#])
    func rejectsIssuedAtThatIsNotAnInt64(value: String) {
        let token = jwt(header: validHeader, claims: #"{"iss":"DEF123GHIJ","iat":"# + value + "}")
        #expect {
            try ParsedProviderToken.parse(token)
        } throws: { error in
            guard case .wrongFieldType(.claims, name: "iat", _, _) = error as? ProviderTokenError else { return false }
            return true
        }
    }

    @Test func acceptsNegativeAndZeroIssuedAt() throws {
        #expect(try ParsedProviderToken.parse(jwt(header: validHeader, claims: #"{"iss":"DEF123GHIJ","iat":0}"#)).iat == 0)
        #expect(try ParsedProviderToken.parse(jwt(header: validHeader, claims: #"{"iss":"DEF123GHIJ","iat":-5}"#)).iat == -5)
    }

    @Test(arguments: [
        (#"{"kid":"ABC123DEFG"}"#, validClaims, ProviderTokenError.missingField(.header, name: "alg")),
        (#"{"alg":"ES256"}"#, validClaims, .missingField(.header, name: "kid")),
        (validHeader, #"{"iat":1700000000}"#, .missingField(.claims, name: "iss")),
        (validHeader, #"{"iss":"DEF123GHIJ"}"#, .missingField(.claims, name: "iat")),
        (validHeader, #"{}"#, .missingField(.claims, name: "iss")),
    ])
    func rejectsMissingFields(header: String, claims: String, expected: ProviderTokenError) {
        #expect(throws: expected) { try ParsedProviderToken.parse(jwt(header: header, claims: claims)) }
    }

    @Test(arguments: ["HS256", "none", "RS256", "es256", "ES384"])
    func rejectsAlgorithmsOtherThanES256(alg: String) {
        let token = jwt(header: #"{"alg":""# + alg + #"","kid":"ABC123DEFG"}"#, claims: validClaims)
        #expect(throws: ProviderTokenError.unsupportedAlgorithm(alg)) { try ParsedProviderToken.parse(token) }
    }

    @Test func rejectsAlgAsANumber() {
        #expect {
            try ParsedProviderToken.parse(jwt(header: #"{"alg":256,"kid":"ABC123DEFG"}"#, claims: validClaims))
        } throws: { error in
            guard case .wrongFieldType(.header, name: "alg", _, _) = error as? ProviderTokenError else { return false }
            return true
        }
    }

    @Test(arguments: [("a.b", 2), ("a.b.c.d", 4), ("abc", 1), (".", 2), ("a.b.c.d.e", 5)])
    func rejectsWrongSegmentCounts(token: String, count: Int) {
        #expect(throws: ProviderTokenError.wrongSegmentCount(count)) { try ParsedProviderToken.parse(token) }
    }

    @Test func rejectsAnEmptyToken() {
        #expect(throws: ProviderTokenError.empty) { try ParsedProviderToken.parse("") }
        #expect(throws: ProviderTokenError.empty) { try ParsedProviderToken.parse(" \n ") }
    }

    @Test func rejectsInvalidBase64URLInEachSegment() {
        let parts = jwt(header: validHeader, claims: validClaims).split(separator: ".").map(String.init)
        #expect(throws: ProviderTokenError.invalidBase64URL(.header)) {
            try ParsedProviderToken.parse(parts[0] + "=." + parts[1] + "." + parts[2])
        }
        #expect(throws: ProviderTokenError.invalidBase64URL(.claims)) {
            try ParsedProviderToken.parse(parts[0] + "." + parts[1] + "+." + parts[2])
        }
        #expect(throws: ProviderTokenError.invalidBase64URL(.signature)) {
            try ParsedProviderToken.parse(parts[0] + "." + parts[1] + "." + parts[2] + "==")
        }
        #expect(throws: ProviderTokenError.invalidBase64URL(.claims)) {
            try ParsedProviderToken.parse(parts[0] + ". " + parts[1] + "." + parts[2])
        }
    }

    @Test func rejectsADERSignatureWithAHint() {
        let token = jwt(header: validHeader, claims: validClaims, signature: Array(repeating: 1, count: 71))
        #expect(throws: ProviderTokenError.wrongSignatureLength(71)) { try ParsedProviderToken.parse(token) }
        #expect(ProviderTokenError.wrongSignatureLength(71).description.contains("DER"))
    }

    @Test func rejectsDuplicateFields() {
        let token = jwt(header: validHeader, claims: #"{"iss":"DEF123GHIJ","iat":1,"iat":1700000000}"#)
        #expect(throws: ProviderTokenError.duplicateField(.claims, name: "iat")) { try ParsedProviderToken.parse(token) }
    }

    @Test(arguments: [
        #"["ES256"]"#, #"{"alg":"ES256","kid":"ABC123DEFG""#, #"{"alg":"ES256","kid":"ABC123DEFG"}x"#,
        #"{"alg":"ES256" "kid":"ABC123DEFG"}"#, #"{"alg":"ES256","kid":{"a":1}}"#, #"{"alg":"ES256","kid":"A\qB"}"#,
        #"{"alg":"ES256","kid":"A"#, "{\"alg\":\"ES256\",\"kid\":\"A\nB\"}", #"{alg:"ES256"}"#, #"{"alg":"ES256",}"#,
        #"{"alg":"ES256","kid":"\ud83d"}"#, #"{"alg":"ES256","n":01}"#, #"{"alg":"ES256","n":-}"#, #"{"alg":tru}"#, "",
    ])
    func rejectsHeadersThatAreNotFlatJSONObjects(header: String) {
        #expect {
            try ParsedProviderToken.parse(jwt(header: header, claims: validClaims))
        } throws: { error in
            guard case .invalidJSON(.header, _) = error as? ProviderTokenError else { return false }
            return true
        }
    }

    @Test func rejectsInvalidUTF8InStrings() {
        let header = Array(#"{"alg":"ES256","kid":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        let token = Base64URL.encode(header) + "." + Base64URL.encode(validClaims.utf8) + "."
            + Base64URL.encode(Array(repeating: 0, count: 64))
        #expect {
            try ParsedProviderToken.parse(token)
        } throws: { error in
            guard case .invalidJSON(.header, let reason) = error as? ProviderTokenError else { return false }
            return reason.contains("UTF-8")
        }
    }

    @Test func errorDescriptionsAreDistinctAndNameTheProblem() {
        let errors: [ProviderTokenError] = [
            .invalidTeamID("x"), .invalidKeyID("x"), .empty, .wrongSegmentCount(2), .invalidBase64URL(.claims),
            .invalidJSON(.header, reason: "r"), .missingField(.claims, name: "iat"),
            .duplicateField(.claims, name: "iat"),
            .wrongFieldType(.claims, name: "iat", expected: "a number", found: "a string"),
            .unsupportedAlgorithm("HS256"), .wrongSignatureLength(71),
        ]
        let descriptions = Set(errors.map(\.description))
        #expect(descriptions.count == errors.count)
        #expect(ProviderTokenError.wrongSegmentCount(2).description.contains("3 dot-separated segments"))
        #expect(ProviderTokenError.unsupportedAlgorithm("HS256").description.contains("ES256"))
    }

    @Test func quotesLongGarbageShortly() {
        let garbage = String(repeating: "A", count: 10_000)
        #expect(ProviderTokenError.invalidTeamID(garbage).description.count < 200)
    }
}
