/// The `apns-push-type` header value and the rules APNs attaches to each type: topic suffix,
/// payload limit and allowed priorities.
///
/// Owned by a `Notification`; used by validation, by the transport when it writes headers,
/// and by the APNs emulator when it checks what it receives. Case names are the header words.
public enum PushType: String, CaseIterable, Hashable, Sendable {
    case alert
    case background
    case location
    case voip
    case complication
    case fileprovider
    case mdm
    case liveactivity
    case pushtotalk
    case widgets
    case controls

    /// `rawValue` as a static string: the request writer hands its bytes, which live as long as
    /// the program, to nghttp2 without copying them first (`rawValue` builds a String per read).
    public var headerValue: StaticString {
        switch self {
        case .alert: "alert"
        case .background: "background"
        case .location: "location"
        case .voip: "voip"
        case .complication: "complication"
        case .fileprovider: "fileprovider"
        case .mdm: "mdm"
        case .liveactivity: "liveactivity"
        case .pushtotalk: "pushtotalk"
        case .widgets: "widgets"
        case .controls: "controls"
        }
    }

    /// What APNs expects after the bundle id in `apns-topic` for this push type.
    ///
    /// `mdm` has no suffix because its topic is not a bundle id at all but the UID of the
    /// MDM push certificate.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: ""
        case .location: ".location-query"
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        }
    }

    /// The `apns-topic` for an app's bundle id (for `mdm`, pass the certificate UID; it is returned as is).
    public func topic(bundleID: String) -> String {
        // `+` would copy the bundle id even for an empty suffix (append makes it unique).
        let suffix = topicSuffix
        return suffix.isEmpty ? bundleID : bundleID + suffix
    }

    /// The largest payload, in bytes, APNs accepts for this push type.
    public var maxPayloadBytes: Int {
        self == .voip ? 5120 : 4096
    }

    /// The `apns-priority` values APNs accepts for this push type.
    public var allowedPriorities: Set<Priority> {
        switch self {
        case .background: [.powerAware]
        case .liveactivity: [.powerAware, .immediate]
        default: [.lowest, .powerAware, .immediate]
        }
    }

    /// Whether APNs accepts `priority` for this push type.
    @inlinable
    public func allows(_ priority: Priority) -> Bool {
        switch self {
        case .background: priority == .powerAware
        case .liveactivity: priority != .lowest
        default: true
        }
    }

    /// The priority to send when a notification names none.
    ///
    /// APNs itself assumes 10 when the header is absent, which it then rejects for `background`;
    /// so the sender should always write this value explicitly.
    public var defaultPriority: Priority {
        self == .background ? .powerAware : .immediate
    }
}
