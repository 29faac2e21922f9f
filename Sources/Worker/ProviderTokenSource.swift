import APNs
import Logging
import Transport

/// Why a provider-token configuration was refused.
public struct ProviderTokenConfigurationError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// The one provider token (JWT) of a team and key, shared by every connection of a pool, and the
/// rules for when each connection may switch to a newer one.
///
/// APNs rejects a token whose `iat` is over an hour old, and answers 429
/// TooManyProviderTokenUpdates when one connection changes its token less than 20 minutes after
/// it first used the previous one. So a token is minted every `refreshInterval` (20–60 min), a
/// connection switches only 20 minutes after its first use of its current token, and a connection
/// that starts late on an old token (more than 38 minutes) gets a fresh one first, so that it can
/// always switch before its token's hour runs out. Confined to its pool's event loop.
public final class ProviderTokenSource {
    public static let minimumRefreshMinutes = 20
    public static let maximumRefreshMinutes = 60
    public static let defaultRefreshMinutes = 50
    static let perConnectionMinimumMilliseconds: Int64 = 20 * 60_000
    /// A token is never kept past this age, whatever the interval (Apple's limit is one hour).
    static let hardMaximumAgeMilliseconds: Int64 = 58 * 60_000
    /// A connection that would start on a token older than this gets a fresh token first.
    static let newConnectionMaximumAgeMilliseconds: Int64 = hardMaximumAgeMilliseconds - perConnectionMinimumMilliseconds

    public struct Token: Sendable {
        public let jwt: String
        public let issuedAt: Int64  // wall milliseconds
        public let generation: UInt64
    }

    private var signer: ProviderTokenSigner
    public let refreshIntervalMilliseconds: Int64
    public let time: TimeSource
    private let logger: Logger
    public private(set) var current: Token?
    /// Tokens minted so far (a metric and a test hook).
    public private(set) var mintCount = 0

    public init(signer: ProviderTokenSigner, refreshMinutes: Int = ProviderTokenSource.defaultRefreshMinutes, time: TimeSource, logger: Logger) throws(ProviderTokenConfigurationError) {
        guard (ProviderTokenSource.minimumRefreshMinutes...ProviderTokenSource.maximumRefreshMinutes).contains(refreshMinutes) else {
            throw ProviderTokenConfigurationError(description:
                "the provider-token refresh interval must be 20 to 60 minutes (APNs refuses tokens refreshed more often than every 20 minutes or older than an hour); got \(refreshMinutes)")
        }
        self.signer = signer
        self.refreshIntervalMilliseconds = min(Int64(refreshMinutes) * 60_000, ProviderTokenSource.hardMaximumAgeMilliseconds)
        self.time = time
        self.logger = logger
    }

    /// Signs from now on with `signer` (a key reloaded from its file); the next token minted uses it.
    public func replaceSigner(_ signer: ProviderTokenSigner) {
        self.signer = signer
    }

    public var teamID: String { signer.teamID }
    public var keyID: String { signer.keyID }

    /// Mints a new token now. Throws only if OpenSSL cannot sign.
    @discardableResult
    public func mint() throws(OpenSSLError) -> Token {
        let now = time.nowMilliseconds()
        let jwt = try signer.makeToken(issuedAt: now / 1000)
        let token = Token(jwt: jwt, issuedAt: now, generation: (current?.generation ?? 0) + 1)
        current = token
        mintCount += 1
        // The token itself is a credential: log only its generation.
        logger.info("provider token minted", metadata: ["team": "\(signer.teamID)", "key": "\(signer.keyID)", "generation": "\(token.generation)"])
        return token
    }

    /// Brings `connection`'s token up to date under the per-connection 20-minute rule.
    /// Called when a connection becomes ready and from the pool's periodic check.
    public func refreshBinding(of connection: APNsConnection) throws(OpenSSLError) {
        let now = time.nowMilliseconds()
        var token = try currentToken(now: now)
        if connection.tokenGeneration == 0 || !connection.tokenUsed {
            // Nothing was sent with a token yet: APNs has not seen one on this connection.
            if now - token.issuedAt > ProviderTokenSource.newConnectionMaximumAgeMilliseconds {
                token = try mint()
            }
            if connection.tokenGeneration != token.generation {
                connection.setAuthorization(jwt: token.jwt, generation: token.generation)
            }
        } else if connection.tokenGeneration != token.generation,
                  now - connection.tokenFirstUsedAt >= ProviderTokenSource.perConnectionMinimumMilliseconds {
            connection.setAuthorization(jwt: token.jwt, generation: token.generation)
        }
    }

    /// After 403 ExpiredProviderToken on `connection`: a fresh token if the current one is at least
    /// 20 minutes old (else another connection already refreshed it), bound to that connection.
    public func replaceExpiredToken(on connection: APNsConnection) throws(OpenSSLError) {
        let now = time.nowMilliseconds()
        var token = try currentToken(now: now)
        if token.generation == connection.tokenGeneration,
           now - token.issuedAt >= ProviderTokenSource.perConnectionMinimumMilliseconds {
            token = try mint()
        }
        if token.generation != connection.tokenGeneration {
            // The old token is dead for APNs; keeping it cannot avoid the update.
            connection.setAuthorization(jwt: token.jwt, generation: token.generation)
        }
    }

    private func currentToken(now: Int64) throws(OpenSSLError) -> Token {
        if let current, now - current.issuedAt < refreshIntervalMilliseconds { return current }
        return try mint()
    }
}
