/// The key `DeliveryRules` files a collapsible notification under: its collapse id and its device
/// token, both as the job holds them.
///
/// A struct of the two strings rather than one joined `String`: joining built a ~75-byte string
/// (a heap allocation) each time a key was looked up, three times per collapsible notification
/// (read, sent, answered); this holds references to strings the job already has.
struct CollapseKey: Hashable {
    let collapseID: String
    let token: String
}
