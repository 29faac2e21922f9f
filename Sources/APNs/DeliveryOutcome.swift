/// Why a notification must be sent again on another (or a fresh) connection.
///
/// Carried by `DeliveryOutcome.retryOnAnotherConnection`; the transport builds the non-status
/// cases from HTTP/2 events, and the retry policy uses `countsAsAttempt` to decide whether the
/// attempt spends one of the job's tries.
public enum RetryCause: Equatable, Sendable {
    /// An HTTP status that means "not now, not here": 5xx, 400 IdleTimeout, or a status APNs does not document.
    case status(Int, APNsReason?)
    /// The connection received GOAWAY; `notProcessed` when this stream's id is above the
    /// frame's `last_stream_id`, so APNs never looked at it.
    case goAway(notProcessed: Bool)
    /// The server reset this stream (RST_STREAM) with an HTTP/2 error code.
    case streamReset(errorCode: UInt32)
    /// The connection died with the request in flight; APNs may or may not have delivered it.
    case connectionLost
    /// The stream was refused (REFUSED_STREAM): the server did not process it.
    case refusedStream
    /// No answer within the response deadline (`--response-timeout`): Herald reset the stream.
    /// APNs may or may not have delivered it, so it counts as an attempt with an unknown outcome.
    case responseTimeout

    /// Whether this attempt counts against the job's retry budget. Requests the server
    /// provably never processed are free to resend.
    public var countsAsAttempt: Bool {
        switch self {
        case .goAway(notProcessed: true), .refusedStream: false
        case .status, .goAway(notProcessed: false), .streamReset, .connectionLost, .responseTimeout: true
        }
    }
}

/// What the sender must do with a notification after one attempt to deliver it.
///
/// `ResponseClassifier` produces it from APNs' answer, the transport from connection events;
/// the job pipeline acts on it (acknowledge, dead-letter, report the token, retry, or stop the
/// app's sending).
public enum DeliveryOutcome: Equatable, Sendable {
    /// APNs accepted the notification (200).
    case accepted
    /// The notification itself is at fault: dead-letter it, never retry.
    case permanent(status: Int, reason: APNsReason?)
    /// The device token is dead or wrong for the topic: report it (with APNs' timestamp, ms since
    /// the epoch, when it sent one) and never retry.
    case deadToken(status: Int, reason: APNsReason, timestamp: Int64?)
    /// Too many notifications to this device token (429): back off this token only, then retry.
    case retryTokenLater(reason: APNsReason?)
    /// The connection or server is the problem: resend elsewhere, with backoff.
    case retryOnAnotherConnection(RetryCause)
    /// The provider token expired (403 ExpiredProviderToken): mint a new one and resend.
    case refreshProviderToken
    /// The provider token changed too often on the connection (429 TooManyProviderTokenUpdates):
    /// stop minting, wait, then resend.
    case providerTokenUpdatesThrottled
    /// APNs rejects the app's credentials (403): stop sending for this app and alert; the
    /// notifications are not at fault and stay queued.
    case credentialsRejected(status: Int, reason: APNsReason?)
}
