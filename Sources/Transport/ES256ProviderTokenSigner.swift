import APNs

/// Mints APNs provider tokens (ES256 JWTs) for one team and key.
///
/// Holds the validated claims and the shared private key; `makeToken` is cheap enough to call at each
/// refresh (every 20–60 minutes) and safe to call from any thread. The worker's token cache decides
/// when to call it; this type only signs.
public struct ProviderTokenSigner: Sendable {
    public let key: ES256PrivateKey
    private let claims: ProviderTokenClaims

    public var teamID: String { claims.teamID }
    public var keyID: String { claims.keyID }

    /// Validates the ids (10 ASCII letters or digits each).
    public init(teamID: String, keyID: String, key: ES256PrivateKey) throws(ProviderTokenError) {
        self.claims = try ProviderTokenClaims(teamID: teamID, keyID: keyID, issuedAt: 0)
        self.key = key
    }

    /// A signed token whose `iat` is `issuedAt` (seconds since 1970).
    public func makeToken(issuedAt: Int64) throws(OpenSSLError) -> String {
        let claims = claims.issued(at: issuedAt)
        return claims.token(signature: try key.sign(claims.signingInput()))
    }
}
