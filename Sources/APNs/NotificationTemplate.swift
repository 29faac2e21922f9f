/// The part of a notification its sends share: everything but the device token and the apns-id,
/// held by reference.
///
/// A request in flight names its template instead of carrying a copy of the notification: one
/// retain per send instead of one for each of the notification's references (topic, payload,
/// collapse id), and a request a third the size to move into its stream slot and out again. The
/// worker's `Job` is one (it subclasses this class, so naming a job's template allocates
/// nothing); a notification sent on its own is wrapped in one.
///
/// Immutable: `template`'s token and apns-id are never read for a request (the request carries
/// its own).
open class NotificationTemplate: @unchecked Sendable {
    /// Everything but the device token and apns-id of the notifications sent from it.
    public let template: Notification

    public init(template: Notification) {
        self.template = template
    }
}
