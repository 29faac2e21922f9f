/// The rules of a broadcast push (`POST /4/broadcasts/apps/<bundle id>` with `apns-channel-id`):
/// one notification to every device subscribed to a Live Activity channel.
///
/// A broadcast always updates Live Activities, so it is held to the Live Activity payload rules
/// and priorities (5 or 10), but APNs allows it 5120 bytes instead of a device push's 4096. It
/// names the app by its bare bundle id in the path and sends no `apns-topic` and no
/// `apns-collapse-id` (neither is part of a broadcast request).
extension Notification {
    /// The longest channel id Herald sends, in bytes. APNs' channel ids are base64 text of a few
    /// dozen characters; a longer value is a mistake that would otherwise reach a header.
    public static let maxChannelIDBytes = 64

    /// Why `channelID` cannot be a channel id, or nil: it is 1…`maxChannelIDBytes` bytes of
    /// standard base64 (A–Z, a–z, 0–9, `+`, `/`, then at most two `=`), a multiple of 4 long,
    /// which is how APNs spells the ids it hands out when a channel is created.
    public static func channelIDError(_ channelID: String) -> ChannelIDError? {
        let bytes = channelID.utf8
        if bytes.isEmpty { return .empty }
        if bytes.count > maxChannelIDBytes { return .tooLong(byteCount: bytes.count) }
        var padding = 0
        var offset = 0
        for byte in bytes {
            defer { offset += 1 }
            if byte == UInt8(ascii: "=") {
                padding += 1
                if padding > 2 { return .notBase64(offset: offset) }
                continue
            }
            let isAlphabet = (byte &- UInt8(ascii: "A") < 26) || (byte &- UInt8(ascii: "a") < 26)
                || (byte &- UInt8(ascii: "0") < 10) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
            // Padding ends the text: nothing may follow it.
            guard isAlphabet, padding == 0 else { return .notBase64(offset: offset) }
        }
        if bytes.count % 4 != 0 { return .notBase64(offset: bytes.count) }
        return nil
    }

    /// Throws the first broadcast rule this notification breaks (`deviceToken` holds the channel
    /// id, see `isBroadcast`). The channel id itself is checked by `channelIDError`, whose
    /// reasons the job decoder reports on their own. Rules: push type `liveactivity`; the bundle
    /// id is 1…255 bytes of printable ASCII without spaces; priority 5 or 10; expiration within
    /// 0…`maxExpiration`; no collapse id; an apns-id is a canonical lowercase UUID; the payload
    /// is a non-empty JSON object of at most 5120 bytes with the Live Activity members
    /// (`aps.timestamp`, `aps.event`, and for `start` `attributes-type` and `attributes`).
    public func validateBroadcast() throws(NotificationError) {
        guard !topic.isEmpty else { throw .missingTopic }
        let length = topic.utf8.count
        guard length <= Self.maxBundleIDBytes else {
            throw .topicTooLong(NotificationError.excerpt(topic, limit: 40), byteCount: length)
        }
        for byte in topic.utf8 where byte <= 0x20 || byte >= 0x7F {
            throw .badTopic(NotificationError.excerpt(topic, limit: 100))
        }
        if let priority, !PushType.liveactivity.allows(priority) {
            throw .badPriority(priority, pushType: .liveactivity)
        }
        if let expiration, expiration < 0 || expiration > Self.maxExpiration {
            throw .badExpiration(expiration)
        }
        if apnsIDBits == nil, let apnsID, !UUIDString.isCanonical(apnsID) {
            throw .badAPNsID(NotificationError.excerpt(apnsID, limit: 40))
        }
        if let error = Self.broadcastPayloadError(payload) { throw error }
    }

    /// A broadcast job's `topic` names the app: its bundle id, with the Live Activity suffix
    /// (`.push-type.liveactivity`) a device push would carry taken off, since a broadcast's path
    /// names the bare bundle id. Returns `topic` itself when there is nothing to take off.
    public static func broadcastBundleID(fromTopic topic: String) -> String {
        let suffix = PushType.liveactivity.topicSuffix
        guard !suffix.isEmpty, topic.hasSuffix(suffix), topic.utf8.count > suffix.utf8.count else { return topic }
        return String(topic.dropLast(suffix.count))
    }

    /// Why a channel id is refused before it is sent; see `Notification.channelIDError`.
    public enum ChannelIDError: Error, Equatable, Sendable {
        case empty
        case tooLong(byteCount: Int)
        /// The byte at `offset` (or the length, when `offset` is the length) breaks base64.
        case notBase64(offset: Int)
    }
}
