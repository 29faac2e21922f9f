import APNs

/// What the emulator saw, for tests, the load generator and `--stats-out`.
public struct MockAPNsStatistics: Sendable, Equatable {
    /// Requests answered 200.
    public var accepted = 0
    /// Distinct `apns-id`s answered 200.
    public var acceptedUnique = 0
    /// 200 answers for an `apns-id` already accepted before (a resend or a crash duplicate).
    public var duplicates = 0
    /// Requests without an `apns-id` (not checked for duplicates).
    public var acceptedWithoutID = 0
    /// Answers other than 200, by reason.
    public var rejected: [String: Int] = [:]
    public var connections = 0
    public var streams = 0
    public var goAwaysSent = 0
    public var disconnects = 0
    public var tokensVerified = 0
    /// Connections open now.
    public var connectionsOpen = 0
    /// Streams open now on open connections: received and not yet closed (stalled ones among them).
    public var streamsOpen = 0
    /// Streams left unanswered on purpose (`stallRate`, `stallNext`).
    public var streamsStalled = 0
    /// Streams answered with RST_STREAM on purpose (`reset`).
    public var streamsReset = 0
    /// Error answers sent with a garbage body (`garbageBody`).
    public var garbageBodies = 0
    /// PING frames acknowledged, and left unacknowledged on purpose (`ignorePing`).
    public var pingsAnswered = 0
    public var pingsIgnored = 0
    /// Requests answered 403 InvalidProviderToken because every token was being rejected (`rejectTokens`).
    public var tokensRejected = 0
    /// SETTINGS frames sent to open connections by a run-time change of the stream limit.
    public var settingsSent = 0
    /// Broadcasts answered 200, and how many of them had an `apns-id` seen before (on a broadcast
    /// or a device push: one table counts both).
    public var broadcastsAccepted = 0
    public var broadcastDuplicates = 0
    /// Requests to the channel management API, and channels it created and deleted.
    public var channelRequests = 0
    public var channelsCreated = 0
    public var channelsDeleted = 0
    /// Channels held now, over every app.
    public var channels = 0
    /// Accepted broadcasts per channel that exists now, keyed `bundle id/channel id` (a deleted
    /// channel's count goes with it; `broadcastsAccepted` keeps the total).
    public var broadcastsByChannel: [String: Int] = [:]
    /// End-to-end latency of accepted notifications, when `MockAPNsConfiguration.measureLatency` is on.
    public var latency: LatencyPercentiles? = nil
    /// The same from the payloads' `"s"` stamps (when a paced producer meant to enqueue each),
    /// when any carried one.
    public var latencyFromSchedule: LatencyPercentiles? = nil

    public var rejectedTotal: Int { rejected.values.reduce(0, +) }

    /// The statistics as a JSON object (stable key order).
    public func json() -> String {
        // Channel ids are base64 (no quotes or backslashes); bundle ids come from request paths,
        // so they are escaped.
        let byChannel = broadcastsByChannel.keys.sorted().map { "\"\(MockAPNsStatistics.escaped($0))\":\(broadcastsByChannel[$0]!)" }.joined(separator: ",")
        let reasons = rejected.keys.sorted().map { "\"\($0)\":\(rejected[$0]!)" }.joined(separator: ",")
        return "{\"accepted\":\(accepted),\"accepted_unique\":\(acceptedUnique),\"duplicates\":\(duplicates),"
            + "\"accepted_without_id\":\(acceptedWithoutID),\"rejected\":{\(reasons)},\"rejected_total\":\(rejectedTotal),"
            + "\"connections\":\(connections),\"streams\":\(streams),\"goaways_sent\":\(goAwaysSent),"
            + "\"disconnects\":\(disconnects),\"tokens_verified\":\(tokensVerified),"
            + "\"connections_open\":\(connectionsOpen),\"streams_open\":\(streamsOpen),\"streams_stalled\":\(streamsStalled),"
            + "\"streams_reset\":\(streamsReset),\"garbage_bodies\":\(garbageBodies),\"pings_answered\":\(pingsAnswered),"
            + "\"pings_ignored\":\(pingsIgnored),\"tokens_rejected\":\(tokensRejected),\"settings_sent\":\(settingsSent)"
            + ",\"broadcasts_accepted\":\(broadcastsAccepted),\"broadcast_duplicates\":\(broadcastDuplicates),\"channels\":\(channels)"
            + ",\"channel_requests\":\(channelRequests),\"channels_created\":\(channelsCreated),\"channels_deleted\":\(channelsDeleted)"
            + ",\"broadcasts_by_channel\":{" + byChannel + "}"
            + (latency.map { ",\"latency\":" + $0.json() } ?? "")
            + (latencyFromSchedule.map { ",\"latency_from_schedule\":" + $0.json() } ?? "") + "}"
    }

    /// `text` escaped for a JSON string.
    static func escaped(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }
}
