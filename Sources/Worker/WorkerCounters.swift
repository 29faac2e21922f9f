import Observability

/// What one worker loop did, counted on its loop and read by metrics, tests and the load generator.
///
/// Notification outcomes are counted per app (`apps`, in the worker's lane order), so /metrics can
/// label them with the app that sent them; the totals (`accepted`, `deadLettered`, …) are their
/// sums. A job that names no app this worker serves (dead-lettered `unknown_app`), or whose `app`
/// field could not be read (`field_too_large`), belongs to no app: it is counted in
/// `unattributedDeadLettered`.
public struct WorkerCounters: Sendable, Equatable {
    public var jobsRead = 0
    public var jobsReclaimed = 0
    public var jobsFinished = 0
    public var notificationsSent = 0
    /// Outcomes per app, indexed like the worker's lanes.
    public var apps: [AppOutcomes] = []
    /// Dead-lettered notifications of jobs that belong to none of the worker's apps.
    public var unattributedDeadLettered = 0
    public var deadLetteredByReason: [String: Int] = [:]
    public var unknownFields = 0
    public var redisErrors = 0
    /// Consumers of the group removed as idle with nothing pending (`--idle-consumer-timeout`).
    public var consumersRemoved = 0
    /// Notifications not sent because their device token was backing off after a 429 (parked in
    /// the retry set, no attempt spent; also counted as handed back).
    public var tokenBackoffDeferred = 0

    public init() {}

    /// Counters for a worker with `apps` lanes.
    public init(apps: Int) {
        self.apps = Array(repeating: AppOutcomes(), count: apps)
    }

    public var accepted: Int { apps.reduce(0) { $0 + $1.accepted } }
    public var deadTokens: Int { apps.reduce(0) { $0 + $1.deadTokens } }
    public var deadLettered: Int { apps.reduce(unattributedDeadLettered) { $0 + $1.deadLettered } }
    public var superseded: Int { apps.reduce(0) { $0 + $1.superseded } }
    public var retried: Int { apps.reduce(0) { $0 + $1.retried } }
    public var handedBack: Int { apps.reduce(0) { $0 + $1.handedBack } }
    public var wrongEnvironment: Int { apps.reduce(0) { $0 + $1.wrongEnvironment } }
    public var scheduled: Int { apps.reduce(0) { $0 + $1.scheduled } }
    /// Enqueue-to-answer latency of accepted notifications, every app's together.
    public var endToEndLatency: LatencyHistogram {
        var total = LatencyHistogram()
        for app in apps { total.merge(app.endToEndLatency) }
        return total
    }

    public static func + (a: WorkerCounters, b: WorkerCounters) -> WorkerCounters {
        var sum = a
        sum.jobsRead += b.jobsRead
        sum.jobsReclaimed += b.jobsReclaimed
        sum.jobsFinished += b.jobsFinished
        sum.notificationsSent += b.notificationsSent
        if sum.apps.count < b.apps.count { sum.apps += Array(repeating: AppOutcomes(), count: b.apps.count - sum.apps.count) }
        for index in b.apps.indices { sum.apps[index] = sum.apps[index] + b.apps[index] }
        sum.unattributedDeadLettered += b.unattributedDeadLettered
        sum.deadLetteredByReason.merge(b.deadLetteredByReason, uniquingKeysWith: +)
        sum.unknownFields += b.unknownFields
        sum.redisErrors += b.redisErrors
        sum.consumersRemoved += b.consumersRemoved
        sum.tokenBackoffDeferred += b.tokenBackoffDeferred
        return sum
    }
}

/// One app's notification outcomes on one loop: each notification read for the app ends in
/// exactly one of them (retried and handed back end only this worker's part: the notification
/// comes back through the retry set and is counted again when read again).
public struct AppOutcomes: Sendable, Equatable {
    public var accepted = 0
    public var deadTokens = 0
    public var deadLettered = 0
    public var superseded = 0
    public var retried = 0
    public var handedBack = 0
    /// Of `accepted`, those APNs took only in the app's other environment (`wrong_environment`
    /// feedback); not an outcome of its own.
    public var wrongEnvironment = 0
    /// Notifications handed to APNs (every attempt) by their effective `apns-priority` (the
    /// job's, else its push type's default): Apple throttles an app's priority-10 sends.
    public var sentPriority10 = 0
    public var sentPriority5 = 0
    public var sentPriority1 = 0
    /// Held for a `deliver_at` still ahead: written to the scheduled set, counted again when due.
    public var scheduled = 0
    /// Enqueue-to-answer latency of the app's accepted notifications.
    public var endToEndLatency = LatencyHistogram()

    public init() {}

    public static func + (a: AppOutcomes, b: AppOutcomes) -> AppOutcomes {
        var sum = a
        sum.accepted += b.accepted
        sum.deadTokens += b.deadTokens
        sum.deadLettered += b.deadLettered
        sum.superseded += b.superseded
        sum.retried += b.retried
        sum.handedBack += b.handedBack
        sum.wrongEnvironment += b.wrongEnvironment
        sum.sentPriority10 += b.sentPriority10
        sum.sentPriority5 += b.sentPriority5
        sum.sentPriority1 += b.sentPriority1
        sum.scheduled += b.scheduled
        sum.endToEndLatency.merge(b.endToEndLatency)
        return sum
    }
}
