import Observability

/// What one worker loop did, counted on its loop and read by metrics, tests and the load generator.
public struct WorkerCounters: Sendable, Equatable {
    public var jobsRead = 0
    public var jobsReclaimed = 0
    public var jobsFinished = 0
    public var notificationsSent = 0
    public var accepted = 0
    public var deadTokens = 0
    public var deadLettered = 0
    public var deadLetteredByReason: [String: Int] = [:]
    public var superseded = 0
    public var retried = 0
    public var handedBack = 0
    public var unknownFields = 0
    public var redisErrors = 0
    /// Consumers of the group removed as idle with nothing pending (`--idle-consumer-timeout`).
    public var consumersRemoved = 0
    /// Enqueue-to-answer latency of accepted notifications.
    public var endToEndLatency = LatencyHistogram()

    public init() {}

    public static func + (a: WorkerCounters, b: WorkerCounters) -> WorkerCounters {
        var sum = a
        sum.jobsRead += b.jobsRead
        sum.jobsReclaimed += b.jobsReclaimed
        sum.jobsFinished += b.jobsFinished
        sum.notificationsSent += b.notificationsSent
        sum.accepted += b.accepted
        sum.deadTokens += b.deadTokens
        sum.deadLettered += b.deadLettered
        sum.deadLetteredByReason.merge(b.deadLetteredByReason, uniquingKeysWith: +)
        sum.superseded += b.superseded
        sum.retried += b.retried
        sum.handedBack += b.handedBack
        sum.unknownFields += b.unknownFields
        sum.redisErrors += b.redisErrors
        sum.consumersRemoved += b.consumersRemoved
        sum.endToEndLatency.merge(b.endToEndLatency)
        return sum
    }
}
