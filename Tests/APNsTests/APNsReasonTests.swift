import Testing

@testable import APNs

@Suite struct APNsReasonTests {
    @Test func allHoldsEveryDocumentedReasonOnce() {
        #expect(APNsReason.all.count == 38)
        #expect(Set(APNsReason.all).count == 38)
    }

    @Test(arguments: APNsReason.all)
    func documentedReasonsAreKnown(reason: APNsReason) {
        #expect(reason.isKnown)
        #expect(reason.description == reason.rawValue)
        #expect(reason.rawValue.first?.isUppercase == true)
    }

    @Test func undocumentedReasonIsPreservedButUnknown() {
        let reason = APNsReason(rawValue: "SomethingNew")
        #expect(!reason.isKnown)
        #expect(reason.rawValue == "SomethingNew")
        #expect(reason != .badTopic)
    }

    @Test func reasonsAreCaseSensitive() {
        #expect(!APNsReason(rawValue: "baddevicetoken").isKnown)
    }

    @Test(arguments: [
        (APNsReason.badCollapseId, "BadCollapseId"), (.badDeviceToken, "BadDeviceToken"),
        (.badExpirationDate, "BadExpirationDate"), (.badMessageId, "BadMessageId"), (.badPriority, "BadPriority"),
        (.badTopic, "BadTopic"), (.deviceTokenNotForTopic, "DeviceTokenNotForTopic"),
        (.duplicateHeaders, "DuplicateHeaders"), (.idleTimeout, "IdleTimeout"), (.invalidPushType, "InvalidPushType"),
        (.missingDeviceToken, "MissingDeviceToken"), (.missingTopic, "MissingTopic"), (.payloadEmpty, "PayloadEmpty"),
        (.topicDisallowed, "TopicDisallowed"), (.badCertificate, "BadCertificate"),
        (.badCertificateEnvironment, "BadCertificateEnvironment"), (.expiredProviderToken, "ExpiredProviderToken"),
        (.forbidden, "Forbidden"), (.invalidProviderToken, "InvalidProviderToken"),
        (.missingProviderToken, "MissingProviderToken"), (.unrelatedKeyIdInToken, "UnrelatedKeyIdInToken"),
        (.badEnvironmentKeyIdInToken, "BadEnvironmentKeyIdInToken"), (.badPath, "BadPath"),
        (.methodNotAllowed, "MethodNotAllowed"), (.expiredToken, "ExpiredToken"), (.unregistered, "Unregistered"),
        (.payloadTooLarge, "PayloadTooLarge"), (.tooManyProviderTokenUpdates, "TooManyProviderTokenUpdates"),
        (.tooManyRequests, "TooManyRequests"), (.internalServerError, "InternalServerError"),
        (.serviceUnavailable, "ServiceUnavailable"), (.shutdown, "Shutdown"), (.featureNotEnabled, "FeatureNotEnabled"),
        (.missingChannelId, "MissingChannelId"), (.badChannelId, "BadChannelId"),
        (.channelNotRegistered, "ChannelNotRegistered"), (.cannotCreateChannelConfig, "CannotCreateChannelConfig"),
        (.topicMismatch, "TopicMismatch"),
    ])
    func constantIsSpelledAsAPNsSpellsIt(reason: APNsReason, word: String) {
        #expect(reason.rawValue == word)
        #expect(APNsReason(rawValue: word) == reason)
        #expect(APNsReason.all.contains(reason))
    }
}
