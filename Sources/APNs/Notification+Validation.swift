/// The checks Herald makes before a notification may use an HTTP/2 stream, so that a job APNs
/// would reject is dead-lettered with a clear reason instead of costing a request (APNs slows
/// down and disconnects senders that collect errors).
///
/// Runs once per notification on the job pipeline's hot path: it reads bytes in place and
/// allocates only to describe a failure.
extension Notification {
    /// The longest `apns-collapse-id` APNs accepts, in bytes of UTF-8.
    public static let maxCollapseIDBytes = 64
    /// The shortest device token Herald sends, in hex digits (8 bytes). Today's tokens are 64
    /// (32 bytes); APNs says never to assume the length, so the range leaves room both ways.
    public static let minDeviceTokenHexDigits = 16
    /// The longest device token Herald sends, in hex digits (100 bytes). A longer "token" is a
    /// mistake, and it would otherwise reach the request path (an HTTP/2 header).
    public static let maxDeviceTokenHexDigits = 200
    /// The longest bundle id, in bytes (the limit of a CFBundleIdentifier).
    public static let maxBundleIDBytes = 255
    /// The longest `apns-topic`: a bundle id plus the longest push-type suffix
    /// (`.push-type.liveactivity`, 23 bytes), 278 bytes. MDM topics (certificate UIDs) are shorter.
    public static let maxTopicBytes = 278
    /// The latest `apns-expiration` Herald accepts: 9999-12-31 23:59:59 UTC in UNIX seconds. Later
    /// values are no date APNs could mean, and Herald multiplies expirations by 1000.
    public static let maxExpiration: Int64 = 253_402_300_799

    /// Throws the first rule this notification breaks, checking headers before the payload.
    ///
    /// Rules: the device token is hex (either case) of even length, 16…200 digits (8…100 bytes);
    /// the topic is 1…278 bytes of printable ASCII without spaces; the priority is one the push
    /// type allows; the expiration is within 0…`maxExpiration`; a collapse id is 1…64 bytes without control
    /// characters; an apns-id is a canonical lowercase UUID; the payload is a non-empty JSON
    /// object within the push type's size limit; a Live Activity payload has `aps.timestamp` (a
    /// number) and `aps.event` (`start`, `update` or `end`), and a `start` also has
    /// `aps["attributes-type"]` (a string) and `aps.attributes` (an object). Background pushes
    /// are only held to their priority: `content-available` and the absence of alert, sound and
    /// badge are advice that APNs does not enforce with an error.
    public func validate() throws(NotificationError) {
        try validate(bundleID: nil)
    }

    /// `validate()`, knowing the app's bundle id (the worker's `bundle_id`): an `alert` or
    /// `background` topic that is exactly this bundle id passes even when the bundle id itself
    /// ends like a push type's suffix (an app called `com.example.voip` is legitimate).
    public func validate(bundleID: String?) throws(NotificationError) {
        try validateDeviceToken()
        try validateAllButDeviceToken(bundleID: bundleID)
    }

    /// `validate(bundleID:)` without the device token: for a template whose token is kept apart
    /// and checked with `deviceTokenError` first (the job decoder's), so its errors come in the
    /// same order.
    public func validateAllButDeviceToken(bundleID: String?) throws(NotificationError) {
        try validateTopic()
        if let error = Self.topicPushTypeError(topic: topic, pushType: pushType, bundleID: bundleID) { throw error }
        if let priority, !pushType.allows(priority) {
            throw .badPriority(priority, pushType: pushType)
        }
        if let expiration, expiration < 0 || expiration > Self.maxExpiration {
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
        if let error = Self.deviceTokenError(token) { throw error }
    }

    /// The device-token rule for a token as the worker keeps it: a packed token is 64 hex
    /// digits, which the rule allows, so only a token kept as text is scanned.
    @inline(__always)
    public static func deviceTokenError(_ token: DeviceToken) -> NotificationError? {
        guard let text = token.text else { return nil }
        return deviceTokenError(text)
    }

    /// The device-token rule alone (hex of even length, 16…200 digits), for tokens checked apart
    /// from a whole notification (a fan-out job's other tokens).
    public static func deviceTokenError(_ token: String) -> NotificationError? {
        let length = token.utf8.count
        if length == 0 { return .missingDeviceToken }
        // Before the scan: a huge value is refused at the cost of reading its length.
        if length > maxDeviceTokenHexDigits {
            return .deviceTokenTooLong(tokenPrefix: NotificationError.tokenPrefix(token), length: length)
        }
        // Scanned as a buffer, not through UTF8View, and borrowed through `utf8Span` (a `var`
        // copy for `withUTF8` retained and released the token's storage).
        let badOffset = token.utf8Span.span.withUnsafeBufferPointer { firstNonHexDigit(in: $0) }
        if let badOffset { return .badDeviceToken(tokenPrefix: NotificationError.tokenPrefix(token), offset: badOffset) }
        if length % 2 != 0 { return .deviceTokenOddLength(tokenPrefix: NotificationError.tokenPrefix(token), length: length) }
        if length < minDeviceTokenHexDigits {
            return .deviceTokenTooShort(tokenPrefix: NotificationError.tokenPrefix(token), length: length)
        }
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
        let length = topic.utf8.count
        guard length <= Self.maxTopicBytes else {
            throw .topicTooLong(NotificationError.excerpt(topic, limit: 40), byteCount: length)
        }
        // Bundle ids and MDM certificate UIDs are always printable ASCII; anything else in a
        // header is a mistake at best and header injection at worst.
        // Over the contiguous UTF-8, borrowed (no copy, no retain): iterating `utf8` cost ~40
        // instructions a byte.
        if topic.utf8Span.span.withUnsafeBufferPointer({ $0.contains { $0 <= 0x20 || $0 >= 0x7F } }) {
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
            return Self.liveActivityError(in: json) ?? Self.liveActivityMoreError(in: json)
        }
        return nil
    }

    /// Checks the `aps` members a Live Activity needs, in one pass over `aps`.
    static func liveActivityError(in json: JSONScanner) -> NotificationError? {
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
