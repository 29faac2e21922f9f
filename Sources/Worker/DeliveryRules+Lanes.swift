import APNs
import Queue

/// The urgent lane's part of the delivery rules: which of the rules' queues are urgent streams,
/// and the urgent sub-queue of each app's send queue. Kept apart from `DeliveryRules.swift` so
/// the rules' main path reads as before: an urgent token only changes where it waits.
extension DeliveryRules.Lane {
    /// Queues `context` at the back of its line: the urgent one or the bulk one.
    mutating func append(_ context: UInt64, urgent isUrgent: Bool) {
        if isUrgent { urgent.append(context) } else { queue.append(context) }
    }

    /// Puts `context` first in its line.
    mutating func pushFront(_ context: UInt64, urgent isUrgent: Bool) {
        if isUrgent { urgent.pushFront(context) } else { queue.pushFront(context) }
    }
}

extension DeliveryRules {
    /// Urgent tokens waiting in `lane` (app) for a stream slot.
    public func queuedUrgent(lane: Int) -> Int { lanes[lane].urgent.count }

    /// Whether the rules' queue `queue` is an urgent stream.
    public func isUrgent(queue: Int) -> Bool { queue < urgentQueues.count && urgentQueues[queue] }

    /// The lane a retry of a job of `queue` must go back to (nil: the bulk lane, no field written).
    func retryLane(queue: Int) -> JobLane? { isUrgent(queue: queue) ? .urgent : nil }

    /// Counts one send at `priority` for the app (Apple throttles priority 10 per app).
    func countSend(_ priority: Priority, queue: Int, lane: Int, by delta: Int = 1) {
        switch priority {
        case .immediate: queueCounters[queue].apps[lane].sentPriority10 += delta
        case .powerAware: queueCounters[queue].apps[lane].sentPriority5 += delta
        case .lowest: queueCounters[queue].apps[lane].sentPriority1 += delta
        }
    }
}

extension DeliveryRules {
    /// Urgent tokens an app sends in a row while bulk tokens wait: 3, so urgent work takes up to
    /// three quarters of the sends and bulk keeps at least one quarter.
    static let urgentRunLimit = 3

    /// Urgent tokens waiting in every app's line.
    public var queuedUrgentTokens: Int { lanes.reduce(0) { $0 + $1.urgent.count } }
}
