extension ResponseClassifier {
    /// The broadcast-only reasons, classified by the reason whatever the status, so that none of
    /// them can fall into a status rule meant for device pushes (a 403 would halt the whole app):
    ///
    /// - ChannelNotRegistered, BadChannelId: the channel was deleted or never existed. Like a
    ///   dead device token: reported on the feedback stream (with `channel_id`), never retried.
    /// - FeatureNotEnabled: the app's Broadcast capability is off. Permanent for the job, not a
    ///   halt of the app: its device pushes still work, and parking every job would only delay
    ///   the dead letters that tell the operator what to switch on.
    /// - MissingChannelId, CannotCreateChannelConfig, TopicMismatch: the request or the app's
    ///   channel set-up is wrong; resending the same request cannot help.
    static func broadcastOutcome(status: Int, reason: APNsReason) -> DeliveryOutcome? {
        if reason == .channelNotRegistered || reason == .badChannelId {
            return .deadToken(status: status, reason: reason, timestamp: nil)
        }
        if reason == .featureNotEnabled || reason == .missingChannelId || reason == .cannotCreateChannelConfig
            || reason == .topicMismatch {
            return .permanent(status: status, reason: reason)
        }
        return nil
    }
}
