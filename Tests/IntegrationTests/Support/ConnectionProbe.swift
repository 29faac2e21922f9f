import APNs
import Transport

/// Watches raw `APNsConnection`s (no pool) and keeps what happened to them in order, so a test
/// can wait for "ready", an outcome for a given context, or "closed with this error".
/// Loop-confined.
final class ConnectionProbe: APNsConnectionDelegate {
    enum Event: CustomStringConvertible {
        case ready(connection: Int)
        case completed(connection: Int, context: UInt64, outcome: DeliveryOutcome)
        case closed(connection: Int, error: ConnectionError?)

        var description: String {
            switch self {
            case .ready(let connection): return "#\(connection) ready"
            case .completed(let connection, let context, let outcome):
                return "#\(connection) context \(context): \(DeliveryRecorder.kind(outcome))"
            case .closed(let connection, let error): return "#\(connection) closed (\(error.map { "\($0)" } ?? "no error"))"
            }
        }
    }

    private(set) var events: [Event] = []
    private let onEvent: () -> Void

    init(onEvent: @escaping () -> Void) {
        self.onEvent = onEvent
    }

    func isReady(_ connection: Int) -> Bool {
        events.contains { if case .ready(connection) = $0 { return true } else { return false } }
    }

    func outcome(of context: UInt64) -> DeliveryOutcome? {
        for event in events {
            if case .completed(_, context, let outcome) = event { return outcome }
        }
        return nil
    }

    func closeError(of connection: Int) -> ConnectionError?? {
        for event in events {
            if case .closed(connection, let error) = event { return .some(error) }
        }
        return nil
    }

    func connectionIsReady(_ connection: APNsConnection) {
        events.append(.ready(connection: connection.identifier))
        onEvent()
    }

    func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
        events.append(.completed(connection: connection.identifier, context: request.context, outcome: outcome))
        onEvent()
    }

    func connectionSlotsChanged(_ connection: APNsConnection) {}

    func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) {
        events.append(.closed(connection: connection.identifier, error: error))
        onEvent()
    }
}
