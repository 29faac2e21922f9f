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
    /// End-to-end latency of accepted notifications, when `MockAPNsConfiguration.measureLatency` is on.
    public var latency: LatencyPercentiles? = nil

    public var rejectedTotal: Int { rejected.values.reduce(0, +) }

    /// The statistics as a JSON object (stable key order).
    public func json() -> String {
        let reasons = rejected.keys.sorted().map { "\"\($0)\":\(rejected[$0]!)" }.joined(separator: ",")
        return "{\"accepted\":\(accepted),\"accepted_unique\":\(acceptedUnique),\"duplicates\":\(duplicates),"
            + "\"accepted_without_id\":\(acceptedWithoutID),\"rejected\":{\(reasons)},\"rejected_total\":\(rejectedTotal),"
            + "\"connections\":\(connections),\"streams\":\(streams),\"goaways_sent\":\(goAwaysSent),"
            + "\"disconnects\":\(disconnects),\"tokens_verified\":\(tokensVerified)"
            + (latency.map { ",\"latency\":" + $0.json() } ?? "") + "}"
    }
}
