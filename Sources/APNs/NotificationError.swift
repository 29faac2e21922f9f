/// Why a notification cannot be sent as it is: one case per rule that `Notification.validate()`
/// checks.
///
/// The job pipeline writes `code` and `description` into the dead-letter entry, so that a
/// backend developer learns what to fix without Herald ever sending the notification to APNs.
/// Descriptions name the offending value where that is safe: at most the first 8 characters of
/// a device token, never more of a payload than its size and where its syntax broke.
public enum NotificationError: Error, Equatable, Sendable, CustomStringConvertible {
    case missingDeviceToken
    /// The token has a character other than `0-9a-fA-F` at `offset`.
    case badDeviceToken(tokenPrefix: String, offset: Int)
    case deviceTokenOddLength(tokenPrefix: String, length: Int)
    /// Fewer than `Notification.minDeviceTokenHexDigits` hex digits.
    case deviceTokenTooShort(tokenPrefix: String, length: Int)
    /// More than `Notification.maxDeviceTokenHexDigits` characters.
    case deviceTokenTooLong(tokenPrefix: String, length: Int)
    case missingTopic
    /// The topic is longer than `Notification.maxTopicBytes`; the text is an excerpt.
    case topicTooLong(String, byteCount: Int)
    /// The topic has a space, a control character or a non-ASCII character.
    case badTopic(String)
    case badPriority(Priority, pushType: PushType)
    case badExpiration(Int64)
    case emptyCollapseID
    case collapseIDTooLong(byteCount: Int)
    case collapseIDHasControlCharacter
    case badAPNsID(String)
    case payloadEmpty
    case payloadTooLarge(byteCount: Int, limit: Int)
    case payloadNotJSON(JSONScanner.SyntaxError)
    case payloadNotObject(found: JSONScanner.Value.Kind)
    case liveActivityMissingAPS
    case liveActivityMissingTimestamp
    case liveActivityBadTimestamp(found: JSONScanner.Value.Kind)
    case liveActivityMissingEvent
    /// `aps.event` is not one of `start`, `update`, `end`; the hint is a short excerpt or the JSON type found.
    case liveActivityBadEvent(hint: String)
    case liveActivityStartMissingAttributesType
    case liveActivityStartMissingAttributes
    /// `aps["content-state"]` is absent; the event word is `start`, `update` or `end`.
    case liveActivityMissingContentState(event: String)
    case liveActivityBadContentState(found: JSONScanner.Value.Kind)
    case liveActivityBadDismissalDate(found: JSONScanner.Value.Kind)
    case liveActivityBadStaleDate(found: JSONScanner.Value.Kind)
    case liveActivityBadRelevanceScore(found: JSONScanner.Value.Kind)
    /// `aps["input-push-token"]` is not the number 1; the hint is a short excerpt or the JSON type found.
    case liveActivityBadInputPushToken(hint: String)
    case liveActivityInputPushTokenNotStart(event: String)
    case liveActivityBadInputPushChannel(found: JSONScanner.Value.Kind)
    case liveActivityInputPushChannelNotStart(event: String)
    case liveActivityInputPushTokenAndChannel
    /// The topic does not carry `pushType`'s suffix, or (alert, background) carries the suffix
    /// of `suffixOf`; the topic is an excerpt.
    case topicPushTypeMismatch(topic: String, pushType: PushType, suffixOf: PushType?)

    /// A stable snake_case word for machines: dead-letter entries, metrics labels, alerts.
    public var code: String {
        switch self {
        case .missingDeviceToken: "missing_device_token"
        case .badDeviceToken: "bad_device_token"
        case .deviceTokenOddLength: "device_token_odd_length"
        case .deviceTokenTooShort: "device_token_too_short"
        case .deviceTokenTooLong: "device_token_too_long"
        case .missingTopic: "missing_topic"
        case .topicTooLong: "topic_too_long"
        case .badTopic: "bad_topic"
        case .badPriority: "bad_priority"
        case .badExpiration: "bad_expiration"
        case .emptyCollapseID: "empty_collapse_id"
        case .collapseIDTooLong: "collapse_id_too_long"
        case .collapseIDHasControlCharacter: "collapse_id_control_character"
        case .badAPNsID: "bad_apns_id"
        case .payloadEmpty: "payload_empty"
        case .payloadTooLarge: "payload_too_large"
        case .payloadNotJSON: "payload_not_json"
        case .payloadNotObject: "payload_not_object"
        case .liveActivityMissingAPS: "live_activity_missing_aps"
        case .liveActivityMissingTimestamp: "live_activity_missing_timestamp"
        case .liveActivityBadTimestamp: "live_activity_bad_timestamp"
        case .liveActivityMissingEvent: "live_activity_missing_event"
        case .liveActivityBadEvent: "live_activity_bad_event"
        case .liveActivityStartMissingAttributesType: "live_activity_start_missing_attributes_type"
        case .liveActivityStartMissingAttributes: "live_activity_start_missing_attributes"
        case .liveActivityMissingContentState: "live_activity_missing_content_state"
        case .liveActivityBadContentState: "live_activity_bad_content_state"
        case .liveActivityBadDismissalDate: "live_activity_bad_dismissal_date"
        case .liveActivityBadStaleDate: "live_activity_bad_stale_date"
        case .liveActivityBadRelevanceScore: "live_activity_bad_relevance_score"
        case .liveActivityBadInputPushToken: "live_activity_bad_input_push_token"
        case .liveActivityInputPushTokenNotStart: "live_activity_input_push_token_not_start"
        case .liveActivityBadInputPushChannel: "live_activity_bad_input_push_channel"
        case .liveActivityInputPushChannelNotStart: "live_activity_input_push_channel_not_start"
        case .liveActivityInputPushTokenAndChannel: "live_activity_input_push_token_and_channel"
        case .topicPushTypeMismatch: "topic_push_type_mismatch"
        }
    }

    public var description: String {
        switch self {
        case .missingDeviceToken:
            "The device token is empty."
        case .badDeviceToken(let prefix, let offset):
            "The device token \(Self.quoted(prefix)) has a character that is not hex at position \(offset)."
        case .deviceTokenOddLength(let prefix, let length):
            "The device token \(Self.quoted(prefix)) has \(length) hex digits; "
                + "a token is whole bytes, so the count must be even."
        case .deviceTokenTooShort(let prefix, let length):
            "The device token \(Self.quoted(prefix)) has \(length) hex digits; Herald accepts "
                + "\(Notification.minDeviceTokenHexDigits) to \(Notification.maxDeviceTokenHexDigits) (today's tokens have 64)."
        case .deviceTokenTooLong(let prefix, let length):
            "The device token \(Self.quoted(prefix)) is \(length) characters long; Herald accepts "
                + "\(Notification.minDeviceTokenHexDigits) to \(Notification.maxDeviceTokenHexDigits) hex digits (today's tokens have 64)."
        case .topicTooLong(let topic, let byteCount):
            "The topic \(Self.quoted(topic)) is \(byteCount) bytes; a topic is a bundle id (at most "
                + "\(Notification.maxBundleIDBytes) bytes) plus the push type's suffix, at most \(Notification.maxTopicBytes) bytes."
        case .missingTopic:
            "The topic (apns-topic) is empty; it is the app's bundle id plus the push type's suffix."
        case .badTopic(let topic):
            "The topic \(Self.quoted(topic)) contains a space, a control character or a non-ASCII character."
        case .badPriority(let priority, let pushType):
            "Priority \(priority.rawValue) is not allowed for push type \(pushType.rawValue); allowed: "
                + pushType.allowedPriorities.map(\.rawValue).sorted().map(String.init).joined(separator: ", ") + "."
        case .badExpiration(let expiration) where expiration < 0:
            "The expiration \(expiration) is negative; it is UNIX seconds, or 0 to try once without storing."
        case .badExpiration(let expiration):
            "The expiration \(expiration) is after the year 9999 (at most \(Notification.maxExpiration)); "
                + "it is UNIX seconds, not milliseconds, or 0 to try once without storing."
        case .emptyCollapseID:
            "The collapse id is empty; leave it out instead."
        case .collapseIDTooLong(let byteCount):
            "The collapse id is \(byteCount) bytes of UTF-8; APNs allows at most 64."
        case .collapseIDHasControlCharacter:
            "The collapse id contains a control character."
        case .badAPNsID(let id):
            "The apns-id \(Self.quoted(id)) is not a lowercase UUID like 123e4567-e89b-12d3-a456-426614174000."
        case .payloadEmpty:
            "The payload is empty; it must be a JSON object such as {\"aps\":{…}}."
        case .payloadTooLarge(let byteCount, let limit):
            "The payload is \(byteCount) bytes; this push type allows at most \(limit)."
        case .payloadNotJSON(let error):
            "The payload is not valid JSON: \(error)."
        case .payloadNotObject(let kind):
            "The payload is JSON but \(Self.article(kind)), not an object."
        case .liveActivityMissingAPS:
            "A Live Activity payload needs an \"aps\" object."
        case .liveActivityMissingTimestamp:
            "A Live Activity payload needs aps.timestamp (UNIX seconds)."
        case .liveActivityBadTimestamp(let kind):
            "aps.timestamp must be a number (UNIX seconds), not \(Self.article(kind))."
        case .liveActivityMissingEvent:
            "A Live Activity payload needs aps.event: start, update or end."
        case .liveActivityBadEvent(let hint):
            "aps.event is \(hint); it must be start, update or end."
        case .liveActivityStartMissingAttributesType:
            "A Live Activity start needs aps[\"attributes-type\"], the name of the attributes struct, as a string."
        case .liveActivityStartMissingAttributes:
            "A Live Activity start needs aps.attributes as an object."
        case .liveActivityMissingContentState(let event):
            "A Live Activity \(event) needs aps[\"content-state\"], an object with the activity's content (its ContentState)."
        case .liveActivityBadContentState(let kind):
            "aps[\"content-state\"] must be an object (the activity's ContentState), not \(Self.article(kind))."
        case .liveActivityBadDismissalDate(let kind):
            "aps[\"dismissal-date\"] must be a number (UNIX seconds), not \(Self.article(kind))."
        case .liveActivityBadStaleDate(let kind):
            "aps[\"stale-date\"] must be a number (UNIX seconds), not \(Self.article(kind))."
        case .liveActivityBadRelevanceScore(let kind):
            "aps[\"relevance-score\"] must be a number, not \(Self.article(kind))."
        case .liveActivityBadInputPushToken(let hint):
            "aps[\"input-push-token\"] is \(hint); it must be the number 1 (ask the device for the activity's push token), or be left out."
        case .liveActivityInputPushTokenNotStart(let event):
            "aps[\"input-push-token\"] is only for a start event, not \(event); leave it out."
        case .liveActivityBadInputPushChannel(let kind):
            "aps[\"input-push-channel\"] must be a channel id as a non-empty string, not \(kind == .string ? "an empty string" : Self.article(kind))."
        case .liveActivityInputPushChannelNotStart(let event):
            "aps[\"input-push-channel\"] is only for a start event, not \(event); leave it out."
        case .liveActivityInputPushTokenAndChannel:
            "A Live Activity start has both aps[\"input-push-token\"] and aps[\"input-push-channel\"]; an activity is updated either by its own token or by a channel: keep one."
        case .topicPushTypeMismatch(let topic, let pushType, let other) where pushType.topicSuffix.isEmpty:
            "The topic \(Self.quoted(topic)) ends in \(Self.quoted(other?.topicSuffix ?? "")), the suffix of push type "
                + "\(other?.rawValue ?? "?"), but the push type is \(pushType.rawValue), whose topic is the bare bundle id; "
                + "drop the suffix or send push_type \(other?.rawValue ?? "?")."
        case .topicPushTypeMismatch(let topic, let pushType, _):
            "The topic \(Self.quoted(topic)) does not end in \(Self.quoted(pushType.topicSuffix)), which push type "
                + "\(pushType.rawValue) needs after the bundle id (e.g. com.example.app\(pushType.topicSuffix)); leave topic out "
                + "to use the app's bundle id with that suffix."
        }
    }

    /// The first 8 characters of a device token, with "…" when there are more: enough to find
    /// the job, too little to be a usable token in a log.
    static func tokenPrefix(_ token: String) -> String {
        var prefix = String(token.unicodeScalars.prefix(8))
        if token.unicodeScalars.count > 8 { prefix += "…" }
        return prefix
    }

    /// At most `limit` characters of `text`, with "…" when there are more.
    static func excerpt(_ text: String, limit: Int) -> String {
        var excerpt = String(text.unicodeScalars.prefix(limit))
        if text.unicodeScalars.count > limit { excerpt += "…" }
        return excerpt
    }

    /// `text` in double quotes, control and invisible characters escaped so a log line stays one
    /// line (see `DeadLetterText`). Callers cut `text` first (`excerpt`, `tokenPrefix`); the
    /// limit here is only a backstop.
    static func quoted(_ text: String) -> String {
        DeadLetterText.quoted(text, limit: 120)
    }

    static func article(_ kind: JSONScanner.Value.Kind) -> String {
        switch kind {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .number: "a number"
        case .boolean: "a boolean"
        case .null: "null"
        }
    }
}
