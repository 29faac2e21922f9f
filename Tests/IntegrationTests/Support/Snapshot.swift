import APNs
import MockAPNs

/// What the client and the emulator counted at one moment, copied off the loop for assertions.
struct Snapshot: Sendable, CustomStringConvertible {
    // The caller (DeliveryRecorder).
    var queued = 0
    var finals = 0
    var extraOutcomes = 0
    var accepted = 0
    var tally: [String: Int] = [:]
    var finalOutcomes: [DeliveryOutcome?] = []
    var finalAttempts: [Int] = []
    var handOvers = 0
    var callerResends = 0
    var heldByCaller = 0
    var maxInFlightOnOneConnection = 0
    var maxInFlightBeforeFirstAnswer = 0
    var limitsWhenReady: [Int] = []
    var slotsWhenReady: [Int] = []
    var limitsAtFirstAccepted: [Int]? = nil
    var stoppedReasons: [String] = []

    // The pool.
    var connectionsOpened = 0
    var connectionFailures = 0
    var goAwaysReceived = 0
    var poolResends = 0
    var poolInFlight = 0
    var poolStoppedReason: String? = nil
    var peerLimits: [Int] = []

    // The emulator.
    var emulator: MockAPNsStatistics! = nil
    /// Queued notifications the emulator accepted exactly once, never, and more than once.
    var acceptedOnce = 0
    var neverAccepted = 0
    var acceptedMoreThanOnce = 0
    /// Notifications whose final outcome says accepted but the emulator never accepted, or the reverse.
    var disagreements = 0

    var description: String {
        "queued \(queued), final \(finals), extra \(extraOutcomes), handed over \(handOvers) (caller resends \(callerResends)), "
            + "held \(heldByCaller), outcomes \(tally.sorted { $0.key < $1.key }); pool opened \(connectionsOpened), "
            + "failures \(connectionFailures), goaways \(goAwaysReceived), resends \(poolResends), in flight \(poolInFlight), "
            + "stopped \(poolStoppedReason ?? "no"); emulator \(emulator.json()), once \(acceptedOnce), never \(neverAccepted), "
            + "more than once \(acceptedMoreThanOnce), disagreements \(disagreements)"
    }
}

extension TestBed {
    /// Copies every count. Loop thread only.
    func snapshot() -> Snapshot {
        var snapshot = Snapshot()
        if let recorder {
            snapshot.queued = recorder.notifications.count
            snapshot.finals = recorder.finalCount
            snapshot.extraOutcomes = recorder.extraOutcomes
            snapshot.accepted = recorder.acceptedCount
            snapshot.tally = recorder.tally
            snapshot.finalOutcomes = recorder.finalOutcomes
            snapshot.finalAttempts = recorder.finalAttempts
            snapshot.handOvers = recorder.handOvers
            snapshot.callerResends = recorder.callerResendTotal
            snapshot.heldByCaller = recorder.heldByCaller
            snapshot.maxInFlightOnOneConnection = recorder.maxInFlightOnOneConnection
            snapshot.maxInFlightBeforeFirstAnswer = recorder.maxInFlightBeforeFirstAnswer
            snapshot.limitsWhenReady = recorder.limitsWhenReady.map(\.peerMax)
            snapshot.slotsWhenReady = recorder.limitsWhenReady.map(\.slots)
            snapshot.limitsAtFirstAccepted = recorder.limitsAtFirstAccepted
            snapshot.stoppedReasons = recorder.stoppedReasons
            for index in recorder.notifications.indices {
                let times = server.acceptedCount(apnsID: apnsID(index: index))
                switch times {
                case 0: snapshot.neverAccepted += 1
                case 1: snapshot.acceptedOnce += 1
                default: snapshot.acceptedMoreThanOnce += 1
                }
                if (recorder.finalOutcomes[index] == .accepted) != (times > 0) { snapshot.disagreements += 1 }
            }
        }
        if let pool {
            snapshot.connectionsOpened = pool.connectionsOpened
            snapshot.connectionFailures = pool.connectionFailures
            snapshot.goAwaysReceived = pool.goAwaysReceived
            snapshot.poolResends = pool.resends
            snapshot.poolInFlight = pool.inFlight
            snapshot.poolStoppedReason = pool.stoppedReason
            snapshot.peerLimits = pool.connections.map(\.peerMaxConcurrentStreams)
        }
        snapshot.emulator = server.currentStatistics
        return snapshot
    }
}

extension Snapshot {
    /// Final outcomes equal to `outcome`.
    func count(of outcome: DeliveryOutcome) -> Int {
        finalOutcomes.reduce(0) { $0 + ($1 == outcome ? 1 : 0) }
    }
}
