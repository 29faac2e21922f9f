/// The `reason` word in an APNs error response or GOAWAY body.
///
/// `APNsErrorBody` produces it, `ResponseClassifier` decides what it means for the job, and the
/// APNs emulator sends it. A struct rather than an enum so that a reason APNs invents later
/// survives the round trip: `isKnown` says whether it is one of the reasons below.
public struct APNsReason: Hashable, Sendable, RawRepresentable, CustomStringConvertible {
    /// The reason exactly as APNs spells it, e.g. `BadDeviceToken`.
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// Whether this is a reason Apple documents (any of `all`).
    public var isKnown: Bool { Self.known.contains(self) }

    /// What counters and metric labels key this reason by: itself when Apple documents it, else
    /// `Unknown`, so a server that invents reasons cannot grow a table of counts.
    public var countingKey: String { isKnown ? rawValue : Self.unknown.rawValue }

    /// The key of one response in a table of counts: `"<status> <reason>"` with the reason's
    /// `countingKey` (empty when the answer had none) and a status outside 100…599 as `other`,
    /// so the table has a bounded number of keys whatever a server sends.
    public static func countingKey(status: Int, reason: String) -> String {
        let statusText = (100...599).contains(status) ? String(status) : "other"
        if reason.isEmpty { return statusText + " " }
        return statusText + " " + APNsReason(rawValue: reason).countingKey
    }

    /// Stands for a reason that is not a plausible APNs word (too long, not letters and digits);
    /// also the one counting key of every undocumented reason.
    public static let unknown = APNsReason(rawValue: "Unknown")

    /// The longest undocumented reason kept as sent, in bytes. Apple's longest is 26.
    public static let maxUndocumentedLength = 64

    /// Whether `bytes` look like an APNs reason word: 1…64 ASCII letters and digits starting with
    /// an uppercase letter, as all of Apple's do (Herald's own reasons start lowercase, so the
    /// two never mix). Any other reason is kept as `unknown`, so a dead letter or a log line
    /// never carries what a broken server sent in its place.
    public static func isPlausibleWord(_ bytes: some Collection<UInt8>) -> Bool {
        guard let first = bytes.first, bytes.count <= maxUndocumentedLength,
              first &- UInt8(ascii: "A") < 26 else { return false }
        return bytes.allSatisfy { ($0 | 0x20) &- UInt8(ascii: "a") < 26 || $0 &- UInt8(ascii: "0") < 10 }
    }

    /// 400: the collapse id is too long.
    public static let badCollapseId = APNsReason(rawValue: "BadCollapseId")
    /// 400: the device token is invalid, or belongs to the other environment.
    public static let badDeviceToken = APNsReason(rawValue: "BadDeviceToken")
    /// 400: the apns-expiration value is invalid.
    public static let badExpirationDate = APNsReason(rawValue: "BadExpirationDate")
    /// 400: the apns-id value is invalid.
    public static let badMessageId = APNsReason(rawValue: "BadMessageId")
    /// 400: the apns-priority value is invalid, or not allowed for the push type.
    public static let badPriority = APNsReason(rawValue: "BadPriority")
    /// 400: the apns-topic is invalid.
    public static let badTopic = APNsReason(rawValue: "BadTopic")
    /// 400: the device token does not belong to the topic.
    public static let deviceTokenNotForTopic = APNsReason(rawValue: "DeviceTokenNotForTopic")
    /// 400: a header was repeated.
    public static let duplicateHeaders = APNsReason(rawValue: "DuplicateHeaders")
    /// 400: the connection idled out; resend on a fresh connection.
    public static let idleTimeout = APNsReason(rawValue: "IdleTimeout")
    /// 400: the apns-push-type value is invalid or does not match the payload.
    public static let invalidPushType = APNsReason(rawValue: "InvalidPushType")
    /// 400: the path has no device token.
    public static let missingDeviceToken = APNsReason(rawValue: "MissingDeviceToken")
    /// 400: apns-topic is missing and required.
    public static let missingTopic = APNsReason(rawValue: "MissingTopic")
    /// 400: the payload is empty.
    public static let payloadEmpty = APNsReason(rawValue: "PayloadEmpty")
    /// 400: pushing to this topic is not allowed.
    public static let topicDisallowed = APNsReason(rawValue: "TopicDisallowed")
    /// 403: the certificate is invalid.
    public static let badCertificate = APNsReason(rawValue: "BadCertificate")
    /// 403: the certificate is for the other environment.
    public static let badCertificateEnvironment = APNsReason(rawValue: "BadCertificateEnvironment")
    /// 403: the provider token is older than an hour; mint a new one.
    public static let expiredProviderToken = APNsReason(rawValue: "ExpiredProviderToken")
    /// 403: the action is not allowed.
    public static let forbidden = APNsReason(rawValue: "Forbidden")
    /// Not an APNs answer: Herald did not send the request because its headers do not fit in
    /// the connection's header area (the notification is dead-lettered with this reason).
    public static let requestHeadersTooLarge = APNsReason(rawValue: "RequestHeadersTooLarge")
    /// 403: the provider token is invalid or its signature does not verify.
    public static let invalidProviderToken = APNsReason(rawValue: "InvalidProviderToken")
    /// 403: no provider token and no certificate.
    public static let missingProviderToken = APNsReason(rawValue: "MissingProviderToken")
    /// 403: the token's key id belongs to another team than the connection's.
    public static let unrelatedKeyIdInToken = APNsReason(rawValue: "UnrelatedKeyIdInToken")
    /// 403: the token's key is not enabled for this environment.
    public static let badEnvironmentKeyIdInToken = APNsReason(rawValue: "BadEnvironmentKeyIdInToken")
    /// 404: the request path is wrong.
    public static let badPath = APNsReason(rawValue: "BadPath")
    /// 405: only POST is allowed.
    public static let methodNotAllowed = APNsReason(rawValue: "MethodNotAllowed")
    /// 410: the device token has expired.
    public static let expiredToken = APNsReason(rawValue: "ExpiredToken")
    /// 410: the device token is no longer active for the topic.
    public static let unregistered = APNsReason(rawValue: "Unregistered")
    /// 413: the payload is too large.
    public static let payloadTooLarge = APNsReason(rawValue: "PayloadTooLarge")
    /// 429: the provider token changed too often on this connection.
    public static let tooManyProviderTokenUpdates = APNsReason(rawValue: "TooManyProviderTokenUpdates")
    /// 429: too many requests to the same device token.
    public static let tooManyRequests = APNsReason(rawValue: "TooManyRequests")
    /// 500: APNs failed internally.
    public static let internalServerError = APNsReason(rawValue: "InternalServerError")
    /// 503: APNs is unavailable.
    public static let serviceUnavailable = APNsReason(rawValue: "ServiceUnavailable")
    /// 503 or GOAWAY: the APNs server is shutting down.
    public static let shutdown = APNsReason(rawValue: "Shutdown")
    /// Broadcast: broadcast is not enabled for the app.
    public static let featureNotEnabled = APNsReason(rawValue: "FeatureNotEnabled")
    /// Broadcast: apns-channel-id is missing.
    public static let missingChannelId = APNsReason(rawValue: "MissingChannelId")
    /// Broadcast: the channel id is malformed.
    public static let badChannelId = APNsReason(rawValue: "BadChannelId")
    /// Broadcast: no such channel.
    public static let channelNotRegistered = APNsReason(rawValue: "ChannelNotRegistered")
    /// Broadcast: the app has reached its channel limit.
    public static let cannotCreateChannelConfig = APNsReason(rawValue: "CannotCreateChannelConfig")
    /// Broadcast: the channel belongs to another bundle id.
    public static let topicMismatch = APNsReason(rawValue: "TopicMismatch")

    /// Every documented reason, in the order of Apple's table, broadcast reasons last.
    public static let all: [APNsReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId,
        .badPriority, .badTopic, .deviceTokenNotForTopic, .duplicateHeaders,
        .idleTimeout, .invalidPushType, .missingDeviceToken, .missingTopic,
        .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
        .expiredProviderToken, .forbidden, .invalidProviderToken, .missingProviderToken,
        .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badPath, .methodNotAllowed,
        .expiredToken, .unregistered, .payloadTooLarge, .tooManyProviderTokenUpdates,
        .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown,
        .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered,
        .cannotCreateChannelConfig, .topicMismatch,
    ]

    private static let known = Set(all)
}
