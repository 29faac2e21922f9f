import APNs

/// Why a provider token was refused, in the distinctions the APNs emulator maps to APNs reasons
/// (`InvalidProviderToken` for most, `UnrelatedKeyIdInToken`-style answers where the emulator wants them).
public enum ProviderTokenVerificationFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not a well-formed ES256 JWT with the APNs header and claims.
    case malformed(ProviderTokenError)
    /// Signed (or claimed to be) by another key.
    case wrongKeyID(expected: String, found: String)
    /// Issued for another team.
    case wrongTeamID(expected: String, found: String)
    /// The signature does not verify with the team's public key.
    case badSignature

    public var description: String {
        switch self {
        case .malformed(let error):
            return "malformed provider token: \(error)"
        case .wrongKeyID(let expected, let found):
            return "provider token names key id \"\(found)\", expected \"\(expected)\""
        case .wrongTeamID(let expected, let found):
            return "provider token names team id \"\(found)\", expected \"\(expected)\""
        case .badSignature:
            return "provider token signature does not verify with the key's public key"
        }
    }
}

/// Checks provider tokens against one team's public key: shape, key id, team id, then signature.
///
/// Used by the APNs emulator for each `authorization: bearer …` it has not yet accepted. Checking
/// the token's age is left to the caller, which owns the clock.
public struct ProviderTokenVerifier: Sendable {
    public let publicKey: ES256PublicKey
    public let teamID: String
    public let keyID: String

    public init(publicKey: ES256PublicKey, teamID: String, keyID: String) {
        self.publicKey = publicKey
        self.teamID = teamID
        self.keyID = keyID
    }

    /// The parsed token if it is well formed, names this key and team, and is signed by this key.
    public func verify(_ jwt: String) -> Result<ParsedProviderToken, ProviderTokenVerificationFailure> {
        let token: ParsedProviderToken
        do {
            token = try ParsedProviderToken.parse(jwt)
        } catch {
            return .failure(.malformed(error))
        }
        guard token.kid == keyID else { return .failure(.wrongKeyID(expected: keyID, found: token.kid)) }
        guard token.iss == teamID else { return .failure(.wrongTeamID(expected: teamID, found: token.iss)) }
        guard publicKey.verify(signature: token.signature, message: token.signingInput) else {
            return .failure(.badSignature)
        }
        return .success(token)
    }
}
