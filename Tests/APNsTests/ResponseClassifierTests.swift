import Testing

@testable import APNs

@Suite struct ResponseClassifierTests {
    @Test(arguments: [
        APNsReason.badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic, .duplicateHeaders,
        .invalidPushType, .missingDeviceToken, .missingTopic, .payloadEmpty, .topicDisallowed,
    ])
    func notificationFaults400ArePermanent(reason: APNsReason) {
        #expect(
            ResponseClassifier.classify(status: 400, reason: reason, timestamp: nil)
                == .permanent(status: 400, reason: reason))
    }

    @Test(arguments: [APNsReason.badDeviceToken, .deviceTokenNotForTopic])
    func tokenFaults400ReportTheToken(reason: APNsReason) {
        #expect(
            ResponseClassifier.classify(status: 400, reason: reason, timestamp: nil)
                == .deadToken(status: 400, reason: reason, timestamp: nil))
    }

    @Test func idleTimeoutRetriesOnAnotherConnection() {
        #expect(
            ResponseClassifier.classify(status: 400, reason: .idleTimeout, timestamp: nil)
                == .retryOnAnotherConnection(.status(400, .idleTimeout)))
    }

    @Test func expiredProviderTokenRefreshesTheToken() {
        #expect(
            ResponseClassifier.classify(status: 403, reason: .expiredProviderToken, timestamp: nil)
                == .refreshProviderToken)
    }

    @Test(arguments: [
        APNsReason.invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
        .badCertificate, .badCertificateEnvironment, .forbidden,
    ])
    func credentialFaults403StopTheApp(reason: APNsReason) {
        #expect(
            ResponseClassifier.classify(status: 403, reason: reason, timestamp: nil)
                == .credentialsRejected(status: 403, reason: reason))
    }

    @Test func badPathIsPermanent() {
        #expect(
            ResponseClassifier.classify(status: 404, reason: .badPath, timestamp: nil)
                == .permanent(status: 404, reason: .badPath))
    }

    @Test func methodNotAllowedIsPermanent() {
        #expect(
            ResponseClassifier.classify(status: 405, reason: .methodNotAllowed, timestamp: nil)
                == .permanent(status: 405, reason: .methodNotAllowed))
    }

    @Test(arguments: [APNsReason.unregistered, .expiredToken])
    func goneTokensAreReportedWithTheirTimestamp(reason: APNsReason) {
        #expect(
            ResponseClassifier.classify(status: 410, reason: reason, timestamp: 1_700_000_000_000)
                == .deadToken(status: 410, reason: reason, timestamp: 1_700_000_000_000))
    }

    @Test func payloadTooLargeIsPermanent() {
        #expect(
            ResponseClassifier.classify(status: 413, reason: .payloadTooLarge, timestamp: nil)
                == .permanent(status: 413, reason: .payloadTooLarge))
    }

    @Test func tooManyRequestsBacksOffTheToken() {
        #expect(
            ResponseClassifier.classify(status: 429, reason: .tooManyRequests, timestamp: nil)
                == .retryTokenLater(reason: .tooManyRequests))
    }

    @Test func tooManyProviderTokenUpdatesStopsMinting() {
        #expect(
            ResponseClassifier.classify(status: 429, reason: .tooManyProviderTokenUpdates, timestamp: nil)
                == .providerTokenUpdatesThrottled)
    }

    @Test func internalServerErrorRetriesOnAnotherConnection() {
        #expect(
            ResponseClassifier.classify(status: 500, reason: .internalServerError, timestamp: nil)
                == .retryOnAnotherConnection(.status(500, .internalServerError)))
    }

    @Test(arguments: [APNsReason.serviceUnavailable, .shutdown])
    func unavailableServerRetriesOnAnotherConnection(reason: APNsReason) {
        #expect(
            ResponseClassifier.classify(status: 503, reason: reason, timestamp: nil)
                == .retryOnAnotherConnection(.status(503, reason)))
    }

    @Test func successIsAccepted() {
        #expect(ResponseClassifier.classify(status: 200, reason: nil, timestamp: nil) == .accepted)
    }

    @Test func successIsAcceptedWhateverTheBodySays() {
        let body = Array(#"{"reason":"BadDeviceToken"}"#.utf8)
        #expect(body.withUnsafeBytes { ResponseClassifier.classify(status: 200, body: $0) } == .accepted)
        #expect(ResponseClassifier.classify(status: 200, reason: .badDeviceToken, timestamp: 1) == .accepted)
    }

    // MARK: Undocumented answers

    @Test(arguments: [400, 404, 405, 413])
    func unknownReasonOnRequestErrorIsPermanent(status: Int) {
        let reason = APNsReason(rawValue: "Novel")
        #expect(
            ResponseClassifier.classify(status: status, reason: reason, timestamp: nil)
                == .permanent(status: status, reason: reason))
        #expect(
            ResponseClassifier.classify(status: status, reason: nil, timestamp: nil)
                == .permanent(status: status, reason: nil))
    }

    @Test func unknown403KeepsJobs() {
        let reason = APNsReason(rawValue: "Novel")
        #expect(
            ResponseClassifier.classify(status: 403, reason: reason, timestamp: nil)
                == .credentialsRejected(status: 403, reason: reason))
        #expect(
            ResponseClassifier.classify(status: 403, reason: nil, timestamp: nil)
                == .credentialsRejected(status: 403, reason: nil))
    }

    @Test func gone410WithUnknownReasonStillReportsTheToken() {
        let reason = APNsReason(rawValue: "Novel")
        #expect(
            ResponseClassifier.classify(status: 410, reason: reason, timestamp: 7)
                == .deadToken(status: 410, reason: reason, timestamp: 7))
    }

    @Test func gone410WithoutReasonCountsAsUnregistered() {
        #expect(
            ResponseClassifier.classify(status: 410, reason: nil, timestamp: nil)
                == .deadToken(status: 410, reason: .unregistered, timestamp: nil))
    }

    @Test func unknown429BacksOffTheToken() {
        #expect(ResponseClassifier.classify(status: 429, reason: nil, timestamp: nil) == .retryTokenLater(reason: nil))
        let reason = APNsReason(rawValue: "Novel")
        #expect(
            ResponseClassifier.classify(status: 429, reason: reason, timestamp: nil) == .retryTokenLater(reason: reason)
        )
    }

    @Test(arguments: [0, 100, 201, 204, 301, 401, 402, 408, 500, 501, 502, 503, 504, 599, 999, -1])
    func otherStatusesRetryOnAnotherConnection(status: Int) {
        #expect(
            ResponseClassifier.classify(status: status, reason: nil, timestamp: nil)
                == .retryOnAnotherConnection(.status(status, nil)))
    }

    @Test func statusDecidesBeforeReason() {
        // A token reason under a server status must not burn the token.
        #expect(
            ResponseClassifier.classify(status: 503, reason: .badDeviceToken, timestamp: nil)
                == .retryOnAnotherConnection(.status(503, .badDeviceToken)))
        #expect(
            ResponseClassifier.classify(status: 400, reason: .unregistered, timestamp: nil)
                == .permanent(status: 400, reason: .unregistered))
    }

    @Test func tokenFault400KeepsATimestampIfSent() {
        #expect(
            ResponseClassifier.classify(status: 400, reason: .badDeviceToken, timestamp: 9)
                == .deadToken(status: 400, reason: .badDeviceToken, timestamp: 9))
    }

    // MARK: From raw bodies

    func classify(_ status: Int, _ body: String) -> DeliveryOutcome {
        Array(body.utf8).withUnsafeBytes { ResponseClassifier.classify(status: status, body: $0) }
    }

    @Test func bodyOf410GivesReasonAndTimestamp() {
        #expect(
            classify(410, #"{"reason":"Unregistered","timestamp":1700000000123}"#)
                == .deadToken(status: 410, reason: .unregistered, timestamp: 1_700_000_000_123))
    }

    @Test func bodyOf403ExpiredProviderTokenRefreshes() {
        #expect(classify(403, #"{"reason":"ExpiredProviderToken"}"#) == .refreshProviderToken)
    }

    @Test func malformedBodyFallsBackToTheStatus() {
        #expect(classify(403, "<html>") == .credentialsRejected(status: 403, reason: nil))
        #expect(classify(503, "") == .retryOnAnotherConnection(.status(503, nil)))
        #expect(classify(400, #"{"reason":"#) == .permanent(status: 400, reason: nil))
    }

    // MARK: Retry causes

    @Test func unprocessedRequestsDoNotCountAsAttempts() {
        #expect(!RetryCause.goAway(notProcessed: true).countsAsAttempt)
        #expect(!RetryCause.refusedStream.countsAsAttempt)
    }

    @Test(arguments: [
        RetryCause.goAway(notProcessed: false), .connectionLost, .streamReset(errorCode: 2), .status(503, .shutdown),
        .status(400, .idleTimeout),
    ])
    func possiblyProcessedRequestsCountAsAttempts(cause: RetryCause) {
        #expect(cause.countsAsAttempt)
    }
}
