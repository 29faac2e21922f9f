/// The checks Herald makes before a notification may use an HTTP/2 stream, so that a job APNs
/// would reject is dead-lettered with a clear reason instead of costing a request (APNs slows
/// down and disconnects senders that collect errors).
///
/// Runs once per notification on the job pipeline's hot path: it reads bytes in place and
/// allocates only to describe a failure.
extension Notification {
    /// The longest `apns-collapse-id` APNs accepts, in bytes of UTF-8.
    public static let maxCollapseIDBytes = 64

    /// Throws the first rule this notification breaks, checking headers before the payload.
    ///
    /// Rules: the device token is non-empty hex (either case) of even length, any length; the
    /// topic is non-empty printable ASCII without spaces; the priority is one the push type
    /// allows; the expiration is not negative; a collapse id is 1…64 bytes without control
    /// characters; an apns-id is a canonical lowercase UUID; the payload is a non-empty JSON
    /// object within the push type's size limit; a Live Activity payload has `aps.timestamp` (a
    /// number) and `aps.event` (`start`, `update` or `end`), and a `start` also has
    /// `aps["attributes-type"]` (a string) and `aps.attributes` (an object). Background pushes
    /// are only held to their priority: `content-available` and the absence of alert, sound and
    /// badge are advice that APNs does not enforce with an error.
    public func validate() throws(NotificationError) {
        try validateDeviceToken()
        try validateTopic()
        if let priority, !pushType.allows(priority) {
            throw .badPriority(priority, pushType: pushType)
        }
        if let expiration, expiration < 0 {
            throw .badExpiration(expiration)
        }
        if let collapseID {
            try Self.validateCollapseID(collapseID)
        }
        // Bits (`apnsIDBits`) always spell a canonical UUID; only text can be wrong.
        if apnsIDBits == nil, let apnsID, !UUIDString.isCanonical(apnsID) {
            throw .badAPNsID(NotificationError.excerpt(apnsID, limit: 40))
        }
        if let error = payload.withUnsafeBufferPointer({ payloadError(in: JSONScanner($0)) }) {
            throw error
        }
    }

    private func validateDeviceToken() throws(NotificationError) {
        if let error = Self.deviceTokenError(deviceToken) { throw error }
    }

    /// The device-token rule alone (non-empty hex of even length), for tokens checked apart from
    /// a whole notification (a fan-out job's other tokens).
    public static func deviceTokenError(_ token: String) -> NotificationError? {
        // A native String's bytes are contiguous: scan them as a buffer, not through UTF8View.
        var token = token
        let (badOffset, length) = token.withUTF8 { (firstNonHexDigit(in: $0), $0.count) }
        if let badOffset { return .badDeviceToken(tokenPrefix: NotificationError.tokenPrefix(token), offset: badOffset) }
        if length == 0 { return .missingDeviceToken }
        if length % 2 != 0 { return .deviceTokenOddLength(tokenPrefix: NotificationError.tokenPrefix(token), length: length) }
        return nil
    }

    /// The offset of the first byte that is not an ASCII hex digit (either case), or nil. Eight
    /// bytes at a time while they all are, then byte by byte to name the offending one.
    static func firstNonHexDigit(in bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var offset = 0
        if let base = bytes.baseAddress {
            while offset + 8 <= bytes.count,
                  allHexDigits(UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)) {
                offset += 8
            }
        }
        while offset < bytes.count {
            if !isHexDigit(bytes[offset]) { return offset }
            offset += 1
        }
        return nil
    }

    /// Whether all eight bytes of `word` are hex digits. Each byte is below 0x80 once the first
    /// test passes, so adding `0x80 - bound` sets its top bit exactly when it is ≥ bound, with no
    /// carry into the next byte.
    @inline(__always)
    static func allHexDigits(_ word: UInt64) -> Bool {
        let high: UInt64 = 0x8080_8080_8080_8080
        guard word & high == 0 else { return false }
        let atLeast0 = word &+ 0x5050_5050_5050_5050      // ≥ "0" (0x30)
        let above9 = word &+ 0x4646_4646_4646_4646        // ≥ ":" (0x3A)
        let folded = word | 0x2020_2020_2020_2020         // "A"…"F" → "a"…"f"
        let atLeastA = folded &+ 0x1F1F_1F1F_1F1F_1F1F    // ≥ "a" (0x61)
        let aboveF = folded &+ 0x1919_1919_1919_1919      // ≥ "g" (0x67)
        let digit = atLeast0 & ~above9
        let letter = atLeastA & ~aboveF
        return (digit | letter) & high == high
    }

    private func validateTopic() throws(NotificationError) {
        guard !topic.isEmpty else { throw .missingTopic }
        // Bundle ids and MDM certificate UIDs are always printable ASCII; anything else in a
        // header is a mistake at best and header injection at worst.
        for byte in topic.utf8 where byte <= 0x20 || byte >= 0x7F {
            throw .badTopic(NotificationError.excerpt(topic, limit: 100))
        }
    }

    private static func validateCollapseID(_ collapseID: String) throws(NotificationError) {
        let utf8 = collapseID.utf8
        guard !utf8.isEmpty else { throw .emptyCollapseID }
        guard utf8.count <= maxCollapseIDBytes else { throw .collapseIDTooLong(byteCount: utf8.count) }
        for byte in utf8 where byte < 0x20 || byte == 0x7F {
            throw .collapseIDHasControlCharacter
        }
    }

    private func payloadError(in json: JSONScanner) -> NotificationError? {
        guard json.bytes.count > 0 else { return .payloadEmpty }
        guard json.bytes.count <= pushType.maxPayloadBytes else {
            return .payloadTooLarge(byteCount: json.bytes.count, limit: pushType.maxPayloadBytes)
        }
        let root: JSONScanner.Value
        do {
            root = try json.validate()
        } catch {
            return .payloadNotJSON(error)
        }
        guard root.kind == .object else { return .payloadNotObject(found: root.kind) }
        if pushType == .liveactivity {
            return Self.liveActivityError(in: json)
        }
        return nil
    }

    /// Checks the `aps` members a Live Activity needs, in one pass over `aps`.
    private static func liveActivityError(in json: JSONScanner) -> NotificationError? {
        guard let aps = json.rootMember("aps"), aps.kind == .object else { return .liveActivityMissingAPS }
        var timestamp: JSONScanner.Value?
        var event: JSONScanner.Value?
        var attributesType: JSONScanner.Value?
        var attributes: JSONScanner.Value?
        // The payload was validated already, so this cannot throw.
        try? json.forEachMember(of: aps) { name, value in
            if json.textEquals(name, "timestamp") {
                timestamp = value
            } else if json.textEquals(name, "event") {
                event = value
            } else if json.textEquals(name, "attributes-type") {
                attributesType = value
            } else if json.textEquals(name, "attributes") {
                attributes = value
            }
        }
        guard let timestamp else { return .liveActivityMissingTimestamp }
        guard timestamp.kind == .number else { return .liveActivityBadTimestamp(found: timestamp.kind) }
        guard let event else { return .liveActivityMissingEvent }
        if json.stringEquals(event, "update") || json.stringEquals(event, "end") { return nil }
        guard json.stringEquals(event, "start") else { return .liveActivityBadEvent(hint: eventHint(event, in: json)) }
        guard let attributesType, attributesType.kind == .string else {
            return .liveActivityStartMissingAttributesType
        }
        guard let attributes, attributes.kind == .object else { return .liveActivityStartMissingAttributes }
        return nil
    }

    private static func eventHint(_ event: JSONScanner.Value, in json: JSONScanner) -> String {
        guard let text = json.string(event) else { return NotificationError.article(event.kind) }
        return NotificationError.quoted(NotificationError.excerpt(text, limit: 16))
    }

    @inline(__always)
    static func isHexDigit(_ byte: UInt8) -> Bool {
        byte &- UInt8(ascii: "0") < 10 || (byte | 0x20) &- UInt8(ascii: "a") < 6
    }
}
