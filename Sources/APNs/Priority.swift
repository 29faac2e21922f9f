/// The `apns-priority` header value: how urgently APNs should deliver a notification.
///
/// Owned by a `Notification`; `PushType` says which values each push type allows, and the
/// transport writes `rawValue` as the header text.
public enum Priority: Int, CaseIterable, Hashable, Sendable {
    /// `10`: deliver immediately. APNs' default when the header is absent.
    case immediate = 10
    /// `5`: deliver with the device's power considerations in mind; the only value `background` allows.
    case powerAware = 5
    /// `1`: prioritize the device's power over all other factors.
    case lowest = 1
}
