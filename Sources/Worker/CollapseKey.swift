import APNs

/// The key `DeliveryRules` files a collapsible notification under: its collapse id and its device
/// token, both as the job holds them.
///
/// A struct of the two strings rather than one joined `String`: joining built a ~75-byte string
/// (a heap allocation) each time a key was looked up, three times per collapsible notification
/// (read, sent, answered); this holds a reference to the string the job already has and the
/// token as the job keeps it (a packed token is 32 bytes inline: no string is built for it).
struct CollapseKey: Hashable {
    let collapseID: String
    let token: DeviceToken
}
