import APNs
import ArgumentParser
import Queue

/// What a notification is, the same flags for `herald send` (straight to APNs) and `herald
/// enqueue` (a job for the workers), so a trial with one turns into the other by changing the
/// command name. Each flag is the job field of the same name (docs/job-format.md).
struct NotificationOptions: ParsableArguments {
    @Option(name: [.customLong("token"), .customLong("tokens")],
            help: "Device token, hex; repeat the flag or separate tokens with commas for several (up to 10,000). Required unless --channel is given.")
    var tokenArguments: [String] = []

    @Option(name: .customLong("channel"),
            help: "Broadcast to this Live Activity channel id instead of device tokens (job field channel_id; push type liveactivity, payload up to 5120 bytes; default none).")
    var channelID: String?

    @Option(help: "The JSON payload, sent byte for byte (job field payload; at most 4096 bytes, 5120 for voip).")
    var payload = NotificationOptions.defaultPayload

    @Option(name: .customLong("bundle-id"),
            help: "The app's bundle id; the topic is this plus the push type's suffix (send: env HERALD_BUNDLE_ID; enqueue: default none, the worker's bundle id applies).")
    var bundleID: String?

    @Option(help: "apns-topic, when it is not the bundle id plus the push type's suffix (job field topic; default: from --bundle-id).")
    var topic: String?

    @Option(name: .customLong("push-type"), help: "apns-push-type (job field push_type).")
    var pushType: PushType = .alert

    @Option(help: "apns-priority: 10 now, 5 power-aware, 1 lowest (job field priority; default: 5 for background, else APNs' default 10).")
    var priority: Priority?

    @Option(help: "apns-expiration, UNIX seconds; 0 tries once (job field expiration; default none: APNs keeps it up to 30 days).")
    var expiration: Int64?

    @Option(name: .customLong("collapse-id"), help: "apns-collapse-id, up to 64 bytes (job field collapse_id; default none).")
    var collapseID: String?

    @Option(name: [.customLong("apns-id"), .customLong("id")],
            help: "apns-id, a lowercase UUID (job field id; default: send makes a random one, a job derives one from its entry id).")
    var apnsID: String?

    @Option(help: "Which app sends it: a name under apps: in the worker's config file (job field app; default default). send reads that app from --config.")
    var app: String?

    @Option(help: "Copies of the notification: each token gets this many (trials and benchmarks).")
    var count = 1

    static let defaultPayload = #"{"aps":{"alert":"Hello from Herald"}}"#

    /// Every token given, in order, comma-separated lists split and blanks dropped.
    var tokens: [String] {
        tokenArguments.flatMap { $0.split(separator: ",") }.map { QueueToolOutput.trimmed(String($0)) }.filter { !$0.isEmpty }
    }

    func validate() throws {
        if channelID != nil {
            guard tokens.isEmpty else { throw ValidationError("give --channel or --token, not both: a broadcast goes to a channel, not to devices") }
            guard pushType == .alert || pushType == .liveactivity else {
                throw ValidationError("--channel broadcasts Live Activity updates: leave --push-type out or give liveactivity, not \(pushType.rawValue)")
            }
            guard collapseID == nil else { throw ValidationError("--collapse-id cannot go with --channel: broadcasts carry no collapse id") }
        } else {
            guard !tokens.isEmpty else { throw ValidationError("give at least one --token (or --channel for a broadcast)") }
        }
        guard count >= 1 else { throw ValidationError("--count must be at least 1, not \(count)") }
        if apnsID != nil && count > 1 {
            throw ValidationError("--apns-id with --count would send one apns-id many times; leave --apns-id out")
        }
    }

    /// The topic from --topic, else --bundle-id (or `environmentBundleID`) plus the push type's suffix.
    func resolvedTopic(environmentBundleID: String?) -> String? {
        topic ?? (bundleID ?? environmentBundleID).map { pushType.topic(bundleID: $0) }
    }
}
