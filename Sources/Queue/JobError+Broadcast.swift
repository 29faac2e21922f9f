import APNs

/// Why a broadcast job (one with `channel_id`) cannot be sent: the reasons its dead letter
/// carries, apart from the payload and header rules it shares with every notification.
public enum BroadcastJobError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The job names a channel and also `token` or `tokens`: Herald cannot tell which was meant.
    case channelAndTokens
    case emptyChannelID
    case channelIDTooLong(byteCount: Int)
    /// The channel id is not base64 text; `offset` is the first byte that breaks it.
    case badChannelID(String, offset: Int)
    /// A push type other than `liveactivity`: broadcasts update Live Activities only.
    case pushType(String)
    /// `collapse_id` is not part of a broadcast request.
    case collapseID

    public var code: String {
        switch self {
        case .channelAndTokens: "channel_and_tokens"
        case .emptyChannelID: "empty_channel_id"
        case .channelIDTooLong: "channel_id_too_long"
        case .badChannelID: "bad_channel_id"
        case .pushType: "broadcast_push_type"
        case .collapseID: "broadcast_collapse_id"
        }
    }

    public var description: String {
        switch self {
        case .channelAndTokens:
            "The job has `channel_id` and also `token` or `tokens`: a job is either a broadcast to one channel or a push to device tokens. Enqueue them as separate jobs."
        case .emptyChannelID:
            "The job's `channel_id` is empty; it must hold the channel id APNs returned when the channel was created (`herald channels create`)."
        case .channelIDTooLong(let count):
            "The job's `channel_id` is \(count) bytes long; a channel id is base64 text of at most \(Notification.maxChannelIDBytes) bytes."
        case .badChannelID(let value, let offset):
            "The channel_id \(DeadLetterText.quoted(value)) is not base64 text (A-Z, a-z, 0-9, +, / and = padding, a multiple of 4 long; byte \(offset) breaks it); use the id exactly as APNs returned it."
        case .pushType(let value):
            "The push_type \(DeadLetterText.quoted(value)) cannot be broadcast: a broadcast (a job with `channel_id`) updates Live Activities, so its push_type is liveactivity or left out."
        case .collapseID:
            "The job has `collapse_id`, which broadcasts do not carry (APNs takes no apns-collapse-id on a channel); remove it."
        }
    }
}

extension JobDecoder {
    /// The broadcast half of `decode`: a job with `channel_id`. The fields shared with device
    /// pushes were parsed already; this applies the broadcast rules and makes a job whose one
    /// "token" is the channel id (so retries, stable apns-ids and feedback work per channel as
    /// they do per token).
    static func decodeBroadcast(
        entryID: StreamEntryID, fields: StreamFields, channelID bytes: ArraySlice<UInt8>, hasTokens: Bool,
        pushTypeText: String?, topic: String?, priority: Priority?, expiration: Int64?, collapseID: String?, payload: ArraySlice<UInt8>,
        id: String?, idBase: String?, origin: String?, originID: StreamEntryID?, enqueuedAt: Int64?, attempts: Int,
        unknown: Int, defaults: JobDefaults, wantsReceipt: Bool
    ) -> Result<Job, JobError> {
        if hasTokens { return .failure(.broadcast(.channelAndTokens)) }
        let channelID = text(bytes)
        switch Notification.channelIDError(channelID) {
        case .empty: return .failure(.broadcast(.emptyChannelID))
        case .tooLong(let count): return .failure(.broadcast(.channelIDTooLong(byteCount: count)))
        case .notBase64(let offset): return .failure(.broadcast(.badChannelID(channelID, offset: offset)))
        case nil: break
        }
        if let pushTypeText, !pushTypeText.isEmpty, pushTypeText != PushType.liveactivity.rawValue {
            return .failure(.broadcast(.pushType(pushTypeText)))
        }
        if let collapseID, !collapseID.isEmpty { return .failure(.broadcast(.collapseID)) }
        guard let bundleID = topic.flatMap({ $0.isEmpty ? nil : Notification.broadcastBundleID(fromTopic: $0) }) ?? defaults.bundleID else {
            return .failure(.noTopic)
        }
        var template = Notification(
            deviceToken: channelID, topic: bundleID, pushType: .liveactivity, priority: priority,
            expiration: expiration, collapseID: nil, apnsID: nil, payload: payload)
        template.isBroadcast = true
        do { try template.validateBroadcast() } catch { return .failure(.notification(error)) }
        // The job keeps the channel in `tokens`; each send sets it again.
        template.deviceToken = ""
        return makeJob(entryID: entryID, fields: fields, tokens: JobTokens(channelID), invalid: [], template: template,
                       id: id, idBase: idBase, origin: origin, originID: originID, enqueuedAt: enqueuedAt,
                       attempts: attempts, unknown: unknown, defaults: defaults, wantsReceipt: wantsReceipt)
    }
}
