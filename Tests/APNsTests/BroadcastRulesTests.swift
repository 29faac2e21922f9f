import Testing

@testable import APNs

@Suite struct BroadcastRulesTests {
    @Test(arguments: [400, 403, 404, 410])
    func unknownOrDeletedChannelsAreReportedLikeDeadTokens(status: Int) {
        for reason in [APNsReason.channelNotRegistered, .badChannelId] {
            #expect(ResponseClassifier.classify(status: status, reason: reason, timestamp: nil)
                == .deadToken(status: status, reason: reason, timestamp: nil))
        }
    }

    @Test(arguments: [400, 403, 404])
    func otherBroadcastReasonsArePermanentAndNeverHaltTheApp(status: Int) {
        for reason in [APNsReason.featureNotEnabled, .missingChannelId, .cannotCreateChannelConfig, .topicMismatch] {
            #expect(ResponseClassifier.classify(status: status, reason: reason, timestamp: nil)
                == .permanent(status: status, reason: reason))
        }
    }

    @Test func deviceReasonsAreClassifiedAsBefore() {
        #expect(ResponseClassifier.classify(status: 403, reason: .forbidden, timestamp: nil) == .credentialsRejected(status: 403, reason: .forbidden))
        #expect(ResponseClassifier.classify(status: 410, reason: .unregistered, timestamp: 5) == .deadToken(status: 410, reason: .unregistered, timestamp: 5))
        #expect(ResponseClassifier.classify(status: 400, reason: .badExpirationDate, timestamp: nil) == .permanent(status: 400, reason: .badExpirationDate))
    }

    @Test func channelIDs() {
        #expect(Notification.channelIDError("dHN0LXNyY2gtY2hubA==") == nil)
        #expect(Notification.channelIDError("ab+/") == nil)
        #expect(Notification.channelIDError("") == .empty)
        #expect(Notification.channelIDError(String(repeating: "A", count: 68)) == .tooLong(byteCount: 68))
        #expect(Notification.channelIDError("ab-_") == .notBase64(offset: 2))
        #expect(Notification.channelIDError("abc") == .notBase64(offset: 3))
        #expect(Notification.channelIDError("a=bc") == .notBase64(offset: 2))
        #expect(Notification.channelIDError("ab\u{0}c") == .notBase64(offset: 2))
    }

    @Test func broadcastBundleIDDropsTheLiveActivitySuffixOnly() {
        #expect(Notification.broadcastBundleID(fromTopic: "com.a.push-type.liveactivity") == "com.a")
        #expect(Notification.broadcastBundleID(fromTopic: "com.a") == "com.a")
        #expect(Notification.broadcastBundleID(fromTopic: "com.a.voip") == "com.a.voip")
    }
}
