/// Turns APNs' answer to one request (status, reason, timestamp) into a `DeliveryOutcome`,
/// following the tables of answers in docs/job-format.md ("Retries", "Reasons").
///
/// Called by the transport for every finished stream and by tests of the emulator. The status
/// decides first and the reason refines it. Anything undocumented falls to the outcome that
/// cannot lose a job or burn a good one: unknown 400/404/405/413 reasons are permanent (those
/// statuses always mean the request is wrong), an unknown 403 stops the app but keeps the jobs,
/// any 410 reports the token, an unknown 429 backs off the token, and every other status
/// (5xx, 401, 502, 0, …) is retried on another connection.
public enum ResponseClassifier {
    public static func classify(status: Int, reason: APNsReason?, timestamp: Int64?) -> DeliveryOutcome {
        if status != 200, let reason, let outcome = broadcastOutcome(status: status, reason: reason) { return outcome }
        switch status {
        case 200:
            return .accepted
        case 400:
            if let reason, reason == .badDeviceToken || reason == .deviceTokenNotForTopic {
                return .deadToken(status: status, reason: reason, timestamp: timestamp)
            }
            if reason == .idleTimeout { return .retryOnAnotherConnection(.status(status, reason)) }
            return .permanent(status: status, reason: reason)
        case 403:
            if reason == .expiredProviderToken { return .refreshProviderToken }
            return .credentialsRejected(status: status, reason: reason)
        case 404, 405, 413:
            return .permanent(status: status, reason: reason)
        case 410:
            // 410 Gone always means the token is no longer valid; when APNs names no reason,
            // its word for that is Unregistered.
            return .deadToken(status: status, reason: reason ?? .unregistered, timestamp: timestamp)
        case 429:
            if reason == .tooManyProviderTokenUpdates { return .providerTokenUpdatesThrottled }
            return .retryTokenLater(reason: reason)
        default:
            return .retryOnAnotherConnection(.status(status, reason))
        }
    }

    /// Classifies a response from its status and raw JSON body; a 200's body is not read.
    public static func classify(status: Int, body: UnsafeRawBufferPointer) -> DeliveryOutcome {
        guard status != 200 else { return .accepted }
        let (reason, timestamp) = APNsErrorBody.parse(body)
        return classify(status: status, reason: reason, timestamp: timestamp)
    }
}
