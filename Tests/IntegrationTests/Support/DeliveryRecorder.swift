import APNs
import Transport
import Worker

/// The caller of a `ConnectionPool` in integration tests: hands over queued notifications as the
/// pool frees slots, records every outcome per `context` (the notification's index), and tells
/// its test bed after each event so that waiters can re-check their conditions.
///
/// It counts every job: each index ends with exactly one final outcome, and an outcome for an
/// index that already has one is counted in `extraOutcomes` (the pool must never do that).
/// Loop-confined.
final class DeliveryRecorder: ConnectionPoolDelegate {
    /// What the caller does with `retryOnAnotherConnection` outcomes the pool hands back after
    /// its own immediate retries.
    enum RetryPolicy {
        /// Record them as final.
        case reportOnly
        /// Queue the notification again, up to this many times, like Herald's pipeline would.
        case resend(upTo: Int)
    }

    let retryPolicy: RetryPolicy
    private let onEvent: () -> Void
    var closed = false

    private(set) var notifications: [Notification] = []
    /// The next never-handed-over index.
    private(set) var next = 0
    /// Indices the caller queued again after a retryable outcome.
    private var resendQueue: [Int] = []
    private(set) var handOvers = 0
    private(set) var finalOutcomes: [DeliveryOutcome?] = []
    private(set) var finalCount = 0
    /// The pool's attempt count for each final outcome (sends APNs saw, per the pool).
    private(set) var finalAttempts: [Int] = []
    private(set) var extraOutcomes = 0
    /// Retryable outcomes the caller resent (per index and in total).
    private var callerResends: [Int] = []
    private(set) var callerResendTotal = 0
    private(set) var stoppedReasons: [String] = []

    /// The most streams seen in flight on one connection.
    private(set) var maxInFlightOnOneConnection = 0
    /// The same, before the first answer arrived.
    private(set) var maxInFlightBeforeFirstAnswer = 0
    private(set) var answers = 0
    /// Each connection's (peer limit, free slots) when the pool first offered its slots, before
    /// any stream was opened on it.
    private(set) var limitsWhenReady: [(peerMax: Int, slots: Int)] = []
    private var connectionsSeen = Set<ObjectIdentifier>()
    /// Every connection's peer limit when the first 200 came back.
    private(set) var limitsAtFirstAccepted: [Int]? = nil

    init(retryPolicy: RetryPolicy, onEvent: @escaping () -> Void) {
        self.retryPolicy = retryPolicy
        self.onEvent = onEvent
    }

    func enqueue(_ batch: [Notification]) {
        notifications.append(contentsOf: batch)
        finalOutcomes.append(contentsOf: repeatElement(nil, count: batch.count))
        finalAttempts.append(contentsOf: repeatElement(0, count: batch.count))
        callerResends.append(contentsOf: repeatElement(0, count: batch.count))
    }

    var allFinal: Bool { finalCount == notifications.count }
    /// Notifications the caller still holds: never handed over, or queued again.
    var heldByCaller: Int { notifications.count - next + resendQueue.count }

    /// Hands over what the pool has room for: resends first, then new notifications.
    func feed(_ pool: ConnectionPool) {
        guard !closed else { return }
        var free = pool.freeSlots
        while free > 0 {
            let index: Int
            let fromResends: Bool
            if let resend = resendQueue.first {
                index = resend
                fromResends = true
            } else if next < notifications.count {
                index = next
                fromResends = false
            } else {
                break
            }
            guard pool.send(PendingRequest(notification: notifications[index], context: UInt64(index))) else { break }
            if fromResends { resendQueue.removeFirst() } else { next += 1 }
            handOvers += 1
            free -= 1
        }
        observe(pool)
    }

    private func observe(_ pool: ConnectionPool) {
        for connection in pool.connections {
            maxInFlightOnOneConnection = max(maxInFlightOnOneConnection, connection.inFlight)
            if answers == 0 { maxInFlightBeforeFirstAnswer = max(maxInFlightBeforeFirstAnswer, connection.inFlight) }
        }
    }

    // MARK: ConnectionPoolDelegate

    func poolHasFreeSlots(_ pool: ConnectionPool) {
        for connection in pool.connections where connection.state == .ready && connection.streamsOpened == 0 {
            if connectionsSeen.insert(ObjectIdentifier(connection)).inserted {
                limitsWhenReady.append((connection.peerMaxConcurrentStreams, connection.streamSlots))
            }
        }
        feed(pool)
        onEvent()
    }

    func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome) {
        answers += 1
        let index = Int(request.context)
        if outcome == .accepted, limitsAtFirstAccepted == nil {
            limitsAtFirstAccepted = pool.connections.map(\.peerMaxConcurrentStreams)
        }
        if finalOutcomes[index] != nil {
            extraOutcomes += 1
        } else if case .retryOnAnotherConnection = outcome, case .resend(let limit) = retryPolicy,
                  callerResends[index] < limit, !closed {
            callerResends[index] += 1
            callerResendTotal += 1
            resendQueue.append(index)
        } else {
            finalOutcomes[index] = outcome
            finalAttempts[index] = request.attempts
            finalCount += 1
        }
        onEvent()
    }

    func pool(_ pool: ConnectionPool, stoppedSending reason: String) {
        stoppedReasons.append(reason)
        onEvent()
    }

    // MARK: counting

    /// Final outcomes by kind, e.g. `["accepted": 990, "deadToken(410 Unregistered)": 10]`.
    var tally: [String: Int] {
        var counts: [String: Int] = [:]
        for outcome in finalOutcomes {
            guard let outcome else { continue }
            counts[DeliveryRecorder.kind(outcome), default: 0] += 1
        }
        return counts
    }

    func count(where predicate: (DeliveryOutcome) -> Bool) -> Int {
        finalOutcomes.reduce(0) { $0 + (($1.map(predicate) ?? false) ? 1 : 0) }
    }

    var acceptedCount: Int { count { $0 == .accepted } }

    static func kind(_ outcome: DeliveryOutcome) -> String {
        switch outcome {
        case .accepted: return "accepted"
        case .permanent(let status, let reason): return "permanent(\(status) \(reason?.rawValue ?? "-"))"
        case .deadToken(let status, let reason, _): return "deadToken(\(status) \(reason.rawValue))"
        case .retryTokenLater(let reason): return "retryTokenLater(\(reason?.rawValue ?? "-"))"
        case .retryOnAnotherConnection(let cause): return "retryOnAnotherConnection(\(cause))"
        case .refreshProviderToken: return "refreshProviderToken"
        case .providerTokenUpdatesThrottled: return "providerTokenUpdatesThrottled"
        case .credentialsRejected(let status, let reason): return "credentialsRejected(\(status) \(reason?.rawValue ?? "-"))"
        }
    }

    var summary: String {
        "queued \(notifications.count), handed over \(handOvers) (caller resends \(callerResendTotal)), final \(finalCount), "
            + "extra \(extraOutcomes), held \(heldByCaller), max in flight/connection \(maxInFlightOnOneConnection), "
            + "stopped \(stoppedReasons), outcomes \(tally.sorted { $0.key < $1.key })"
    }
}
