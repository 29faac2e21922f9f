import APNs

/// Why a job cannot be turned into notifications: the reason a dead-letter entry carries.
public enum JobError: Error, Equatable, Sendable, CustomStringConvertible {
    case missingPayload
    case missingToken
    case tooManyTokens(count: Int, limit: Int)
    case unknownPushType(String)
    case badPriority(String)
    case badExpiration(String)
    case noTopic
    case badAPNsID(String)
    /// Herald's `attempts` is not a whole number within 0…`JobLimits.maxAttempts`.
    case badAttempts(String)
    /// Herald's `enqueued_at` is not ms since the epoch within 0…`JobLimits.maxTimestampMilliseconds`.
    case badEnqueuedAt(String)
    /// Herald's `origin` is not a stream entry id `<ms>-<seq>` with ms within 0…`JobLimits.maxTimestampMilliseconds`.
    case badOrigin(String)
    /// `deliver_at` is neither ms since the epoch nor RFC 3339 text within 1970 … 9999.
    case badDeliverAt(String)
    case notification(NotificationError)
    /// A broadcast job rule (`channel_id`); see `JobError+Broadcast.swift`.
    case broadcast(BroadcastJobError)

    /// A stable snake_case word for machines (dead-letter `reason`, metrics labels).
    public var code: String {
        switch self {
        case .missingPayload: "missing_payload"
        case .missingToken: "missing_token"
        case .tooManyTokens: "too_many_tokens"
        case .unknownPushType: "unknown_push_type"
        case .badPriority: "bad_priority"
        case .badExpiration: "bad_expiration"
        case .noTopic: "missing_topic"
        case .badAPNsID: "bad_apns_id"
        case .badAttempts: "bad_attempts"
        case .badEnqueuedAt: "bad_enqueued_at"
        case .badOrigin: "bad_origin"
        case .badDeliverAt: "bad_deliver_at"
        case .notification(let error): error.code
        case .broadcast(let error): error.code
        }
    }

    public var description: String {
        switch self {
        case .missingPayload:
            "The job has no `payload` field; it must hold the notification's JSON, e.g. {\"aps\":{\"alert\":\"Hi\"}}."
        case .missingToken:
            "The job has neither `token` (one hex device token) nor `tokens` (comma-separated hex device tokens)."
        case .tooManyTokens(let count, let limit):
            "The job lists \(count) tokens; one job fans out to at most \(limit). Split it into several jobs."
        case .unknownPushType(let value):
            "The push_type \(JobError.quoted(value)) is not one of "
                + PushType.allCases.map(\.rawValue).joined(separator: ", ") + "."
        case .badPriority(let value):
            "The priority \(JobError.quoted(value)) is not 10, 5 or 1."
        case .badExpiration(let value):
            "The expiration \(JobError.quoted(value)) is not a whole number of UNIX seconds (0 means try once)."
        case .noTopic:
            "The job has no `topic` and this worker has no --bundle-id to derive one from."
        case .badAPNsID(let value):
            "The id \(JobError.quoted(value)) is not a canonical lowercase UUID (8-4-4-4-12 hex digits)."
        case .badAttempts(let value):
            "The attempts \(JobError.quoted(value)) is not a whole number from 0 to \(JobLimits.maxAttempts); "
                + "it is Herald's own field, which producers must not set."
        case .badEnqueuedAt(let value):
            "The enqueued_at \(JobError.quoted(value)) is not ms since the epoch from 0 to \(JobLimits.maxTimestampMilliseconds) "
                + "(the year 9999); it is Herald's own field, which producers must not set."
        case .badOrigin(let value):
            "The origin \(JobError.quoted(value)) is not a stream entry id <ms>-<seq> with ms from 0 to "
                + "\(JobLimits.maxTimestampMilliseconds) (the year 9999); it is Herald's own field, which producers must not set."
        case .badDeliverAt(let value):
            "The deliver_at \(JobError.quoted(value)) is neither whole ms since the epoch (e.g. 1795510800000) nor an RFC 3339 time "
                + "(e.g. 2026-11-24T09:00:00Z or 2026-11-24T10:00:00.250+01:00) from 1970 to the year 9999."
        case .notification(let error):
            error.description
        case .broadcast(let error):
            error.description
        }
    }

    /// A producer's value in a message: escaped and cut to 40 characters (see `DeadLetterText`).
    static func quoted(_ value: String) -> String {
        DeadLetterText.quoted(value)
    }
}
