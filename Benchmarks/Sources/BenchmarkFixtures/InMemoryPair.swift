import APNs
@_spi(Benchmarks) import Transport

/// A real `APNsConnection` (Herald's client: slots, header builder, nghttp2 client session,
/// classification) wired back to back with an `InMemoryAPNsResponder` (an nghttp2 server
/// session answering every stream with one status), bytes pumped between them in memory: no
/// socket, no TLS, no event loop iteration. What it costs per notification is Herald's
/// per-notification path plus nghttp2's two sessions.
public final class InMemoryPair: APNsConnectionDelegate {
    public let loop: EventLoop
    public let connection: APNsConnection
    let responder: InMemoryAPNsResponder
    public private(set) var completed = 0
    public private(set) var accepted = 0
    public private(set) var other = 0

    public init(status: Int = 200, body: String = "", streams: Int = 1000) throws {
        loop = try EventLoop()
        connection = APNsConnection(
            loop: loop, host: "api.push.apple.com", port: 443,
            tlsContext: try TLSContext(clientTrusting: nil), maxStreams: streams)
        responder = InMemoryAPNsResponder(loop: loop, status: status, body: body, maxConcurrentStreams: UInt32(streams))
        connection.delegate = self
        connection.setAuthorization(jwt: String(decoding: Fixtures.authorization.dropFirst(7), as: UTF8.self), generation: 1)
        try connection.startInMemory()
        try responder.startInMemory()
        // Exchange prefaces and SETTINGS so the connection sees the responder's stream limit.
        for _ in 0..<4 { pump() }
        precondition(connection.streamSlots == streams, "SETTINGS did not arrive: \(connection.streamSlots) slots")
    }

    /// Moves whatever each side has queued to the other; returns the bytes moved.
    @discardableResult
    public func pump() -> Int {
        let sent = connection.sendInMemory { responder.receiveInMemory($0) }
        let received = responder.sendInMemory { connection.receiveInMemory($0) }
        return sent + received
    }

    /// Sends `count` copies of `request` as fast as slots allow and waits for every answer.
    public func send(_ count: Int, _ request: PendingRequest) {
        let target = completed + count
        var remaining = count
        while completed < target {
            while remaining > 0, connection.streamSlots > 0 {
                guard connection.submit(request) else { fatalError("nghttp2 refused a stream") }
                remaining -= 1
            }
            if pump() == 0, completed < target { fatalError("in-memory pair stalled at \(completed)/\(target)") }
        }
    }

    public func connectionIsReady(_ connection: APNsConnection) {}
    public func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
        completed += 1
        if outcome == .accepted { accepted += 1 } else { other += 1 }
    }
    public func connectionSlotsChanged(_ connection: APNsConnection) {}
    public func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) {
        fatalError("in-memory connection closed: \(String(describing: error))")
    }
}
