/// One notification as Herald will send it: the device it goes to, the APNs headers, and the
/// JSON payload.
///
/// Built by the job decoder from a Redis entry, checked with `validate()` before it is queued,
/// and turned into an HTTP/2 request by the transport (`POST /3/device/<deviceToken>`).
public struct Notification: Sendable {
    /// The device token: hex text, either case (see `normalizedDeviceToken`), or a broadcast's
    /// channel id. The job decoder packs a 64-digit token (`DeviceToken`); read `deviceToken`
    /// for its text.
    public var token: DeviceToken
    /// The device token's text. Builds a string when the token is packed: the request writer
    /// and the hash read `token` instead.
    public var deviceToken: String {
        get { token.string }
        set { token = DeviceToken(newValue) }
    }
    /// `apns-topic`: usually `pushType.topic(bundleID:)`.
    public var topic: String
    /// `apns-push-type`.
    public var pushType: PushType
    /// `apns-priority`; `nil` means `pushType.defaultPriority` (see `effectivePriority`).
    public var priority: Priority?
    /// `apns-expiration` in UNIX seconds; `0` means try once and don't store; `nil` means APNs
    /// stores it for its usual time.
    public var expiration: Int64?
    /// `apns-collapse-id`: a newer notification with the same id replaces the older one on the device.
    public var collapseID: String?
    /// `apns-id`: a canonical lowercase UUID; APNs generates one when absent.
    public var apnsID: String? {
        get { apnsIDText ?? apnsIDBits.map { UUIDString.make($0) } }
        set {
            apnsIDText = newValue
            apnsIDBits = nil
        }
    }
    /// The apns-id as the 128 bits `UUIDString.make` spells, when Herald derived it: the request
    /// headers are written from the bits, so no String is built per notification. Setting it
    /// replaces `apnsID`.
    public var apnsIDBits: UUIDBits? {
        get { apnsIDValue }
        set {
            apnsIDValue = newValue
            if newValue != nil { apnsIDText = nil }
        }
    }
    @usableFromInline var apnsIDText: String?
    @usableFromInline var apnsIDValue: UUIDBits?
    /// The UTF-8 JSON text of the payload. A slice: the worker's jobs keep their payload inside
    /// the stream entry's packed fields instead of copying it out (see `StreamFields`).
    public var payload: ArraySlice<UInt8>
    /// A broadcast to a Live Activity channel (`POST /4/broadcasts/apps/<topic>`) rather than a
    /// device push: `deviceToken` then holds the channel id (sent as `apns-channel-id`) and
    /// `topic` the bare bundle id. Kept in the token's place so the worker's per-token machinery
    /// (stable apns-ids, retries, feedback) serves channels without a second code path.
    public var isBroadcast: Bool

    /// The priority to write in `apns-priority`: the one given, else the push type's default.
    /// Always send it, because APNs' own default (10) is wrong for `background`.
    public var effectivePriority: Priority {
        priority ?? pushType.defaultPriority
    }

    /// The device token in lowercase hex, the form to put in the request path and in dead-token
    /// reports so that one device always has one spelling. Returns `deviceToken` itself, without
    /// allocating, when it has no uppercase letters.
    public var normalizedDeviceToken: String {
        guard let deviceToken = token.text else { return token.string }
        guard deviceToken.utf8.contains(where: { $0 &- UInt8(ascii: "A") < 26 }) else { return deviceToken }
        return String(
            decoding: deviceToken.utf8.map { $0 &- UInt8(ascii: "A") < 26 ? $0 | 0x20 : $0 }, as: UTF8.self)
    }
}

extension Notification {
    /// A notification whose payload is a whole array (a copy-free slice of it is kept).
    @inlinable
    public init(
        deviceToken: String,
        topic: String,
        pushType: PushType,
        priority: Priority? = nil,
        expiration: Int64? = nil,
        collapseID: String? = nil,
        apnsID: String? = nil,
        payload: [UInt8]
    ) {
        self.init(deviceToken: deviceToken, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
                  collapseID: collapseID, apnsID: apnsID, payload: payload[...])
    }

    /// The same, with the payload a slice of a larger buffer (a job's fields, as read).
    ///
    /// Declared in an extension and handed to the memberwise initializer: written as
    /// assignments to `self`, the optimizer built the value in a temporary and copied it whole
    /// into place (a retain and release of each of its references, for every job decoded).
    public init(
        deviceToken: String, topic: String, pushType: PushType, priority: Priority? = nil, expiration: Int64? = nil,
        collapseID: String? = nil, apnsID: String? = nil, payload: ArraySlice<UInt8>
    ) {
        self.init(token: DeviceToken(deviceToken), topic: topic, pushType: pushType, priority: priority,
                  expiration: expiration, collapseID: collapseID, apnsIDText: apnsID, apnsIDValue: nil, payload: payload, isBroadcast: false)
    }
}
