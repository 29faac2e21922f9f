/// The rules APNs applies beyond a Live Activity's `timestamp`, `event` and start attributes,
/// and the rule that a topic carries its push type's suffix. Kept apart from
/// `Notification+Validation.swift` so each rule stays a small function; like the rest of
/// validation they read bytes in place and allocate only to describe a failure.
extension Notification {
    /// The `aps` members of a Live Activity checked after `timestamp`, `event` and the start
    /// attributes (which `liveActivityError` has already accepted), in one pass over `aps`:
    ///
    /// - `content-state` is an object, and present for every event (`start`, `update`, `end`):
    ///   the device decodes it into the activity's ContentState, and an end without it leaves the
    ///   last content shown with nothing to say it ended (Herald's strict reading).
    /// - `dismissal-date` and `stale-date`, when present, are numbers (UNIX seconds).
    /// - `relevance-score`, when present, is a number.
    /// - `input-push-token`, when present, is the number `1`, and only on `start`.
    /// - `input-push-channel`, when present, is a non-empty string, and only on `start`.
    /// - A start asks for one way to be updated: a push token or a channel, not both (an activity
    ///   has one push type; Apple names no answer for both, so Herald takes the strict reading).
    static func liveActivityMoreError(in json: JSONScanner) -> NotificationError? {
        guard let aps = json.rootMember("aps"), aps.kind == .object else { return .liveActivityMissingAPS }
        var event: JSONScanner.Value?
        var contentState: JSONScanner.Value?
        var dismissalDate: JSONScanner.Value?
        var staleDate: JSONScanner.Value?
        var relevanceScore: JSONScanner.Value?
        var inputPushToken: JSONScanner.Value?
        var inputPushChannel: JSONScanner.Value?
        // The payload was validated already, so this cannot throw. Later duplicates win, as in
        // every lookup of the scanner (and in the JSON decoders devices use).
        try? json.forEachMember(of: aps) { name, value in
            if json.textEquals(name, "event") {
                event = value
            } else if json.textEquals(name, "content-state") {
                contentState = value
            } else if json.textEquals(name, "dismissal-date") {
                dismissalDate = value
            } else if json.textEquals(name, "stale-date") {
                staleDate = value
            } else if json.textEquals(name, "relevance-score") {
                relevanceScore = value
            } else if json.textEquals(name, "input-push-token") {
                inputPushToken = value
            } else if json.textEquals(name, "input-push-channel") {
                inputPushChannel = value
            }
        }
        // `liveActivityError` accepted the event: it is one of start, update, end.
        guard let event else { return .liveActivityMissingEvent }
        let isStart = json.stringEquals(event, "start")
        guard let contentState else { return .liveActivityMissingContentState(event: eventWord(event, in: json)) }
        guard contentState.kind == .object else { return .liveActivityBadContentState(found: contentState.kind) }
        if let dismissalDate, dismissalDate.kind != .number { return .liveActivityBadDismissalDate(found: dismissalDate.kind) }
        if let staleDate, staleDate.kind != .number { return .liveActivityBadStaleDate(found: staleDate.kind) }
        if let relevanceScore, relevanceScore.kind != .number { return .liveActivityBadRelevanceScore(found: relevanceScore.kind) }
        if let inputPushToken {
            guard isStart else { return .liveActivityInputPushTokenNotStart(event: eventWord(event, in: json)) }
            // Exactly the number 1: not "1", true, 1.0 or 2.
            guard inputPushToken.kind == .number, inputPushToken.range.count == 1,
                  json.bytes[inputPushToken.range.lowerBound] == UInt8(ascii: "1") else {
                return .liveActivityBadInputPushToken(hint: valueHint(inputPushToken, in: json))
            }
        }
        if let inputPushChannel {
            guard isStart else { return .liveActivityInputPushChannelNotStart(event: eventWord(event, in: json)) }
            // A string's range includes its quotes: "" is two bytes.
            guard inputPushChannel.kind == .string, inputPushChannel.range.count > 2 else {
                return .liveActivityBadInputPushChannel(found: inputPushChannel.kind)
            }
            if inputPushToken != nil { return .liveActivityInputPushTokenAndChannel }
        }
        return nil
    }

    /// `update` or `end` (the only events that reach a rule that names one), else `start`.
    private static func eventWord(_ event: JSONScanner.Value, in json: JSONScanner) -> String {
        json.stringEquals(event, "update") ? "update" : json.stringEquals(event, "end") ? "end" : "start"
    }

    /// A short excerpt of a scalar's text, or its JSON type, for a description.
    private static func valueHint(_ value: JSONScanner.Value, in json: JSONScanner) -> String {
        switch value.kind {
        case .number, .boolean:
            let text = String(decoding: UnsafeBufferPointer(rebasing: json.bytes[value.range.prefix(16)]), as: UTF8.self)
            return value.range.count > 16 ? text + "…" : text
        case .string:
            return json.string(value).map { NotificationError.quoted(NotificationError.excerpt($0, limit: 16)) } ?? "a string"
        default:
            return NotificationError.article(value.kind)
        }
    }

    /// Why `topic` does not fit `pushType`, if it does not.
    ///
    /// A push type with a suffix (`voip`, `liveactivity`, …) needs a topic that is a bundle id
    /// followed by that suffix. An `alert` or `background` topic is the bare bundle id, so one
    /// that ends in another push type's suffix (`com.example.app.voip`) is a mistake APNs answers
    /// with TopicDisallowed, unless it is exactly `bundleID` (an app may be called
    /// `com.example.voip`). `mdm` topics are certificate UIDs: any topic passes.
    ///
    /// Broadcast sends (`/4/broadcasts/apps/<bundle id>`) name the bare bundle id for a
    /// `liveactivity` push: a broadcast job must be checked without this rule (or against
    /// `PushType.alert`'s), not with it.
    public static func topicPushTypeError(topic: String, pushType: PushType, bundleID: String?) -> NotificationError? {
        switch pushType {
        case .mdm:
            return nil
        case .alert, .background:
            // The usual job: its topic is the bundle id (the same string, so compared at once).
            if let bundleID, topic == bundleID { return nil }
            guard let other = suffixedPushType(endingOf: topic) else { return nil }
            return .topicPushTypeMismatch(topic: NotificationError.excerpt(topic, limit: 100), pushType: pushType,
                                          suffixOf: other)
        default:
            let suffix = pushType.topicSuffix
            let topicBytes = topic.utf8
            let suffixBytes = suffix.utf8
            guard topicBytes.count > suffixBytes.count, topicBytes.elementsEqual(suffixBytes, from: topicBytes.count - suffixBytes.count) else {
                return .topicPushTypeMismatch(topic: NotificationError.excerpt(topic, limit: 100), pushType: pushType,
                                              suffixOf: suffixedPushType(endingOf: topic))
            }
            return nil
        }
    }

    /// The push type whose suffix `topic` ends in (after at least one byte of bundle id), if any.
    static func suffixedPushType(endingOf topic: String) -> PushType? {
        let topicBytes = topic.utf8
        for candidate in PushType.allCases {
            let suffix = candidate.topicSuffix.utf8
            if !suffix.isEmpty, topicBytes.count > suffix.count,
               topicBytes.elementsEqual(suffix, from: topicBytes.count - suffix.count) {
                return candidate
            }
        }
        return nil
    }
}

extension String.UTF8View {
    /// Whether the bytes from `offset` on are exactly `other`.
    fileprivate func elementsEqual(_ other: String.UTF8View, from offset: Int) -> Bool {
        self[index(startIndex, offsetBy: offset)...].elementsEqual(other)
    }
}
