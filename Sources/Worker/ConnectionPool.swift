import APNs
import Logging
import Observability
import Transport

/// Where and how a pool connects.
public struct PoolConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Connections kept open (`--connections`).
    public var connections: Int
    /// Herald's cap on concurrent streams per connection (`--max-streams`).
    public var maxStreams: Int
    /// An extra trust anchor (`--ca-file`), e.g. the emulator's certificate. Verification is always on.
    public var caFile: String?
    /// The app's certificate, for certificate-based authentication (then no provider tokens).
    public var clientCertificate: ClientCertificate?
    /// How often token bindings and liveness are re-checked.
    public var maintenanceIntervalMilliseconds: Int64 = 1_000
    /// Immediate resends on another connection after 500/503/resets before the caller decides.
    public var immediateRetries = 2

    public init(host: String, port: Int = 443, connections: Int = 4, maxStreams: Int = 1000, caFile: String? = nil) {
        self.host = host
        self.port = port
        self.connections = connections
        self.maxStreams = maxStreams
        self.caFile = caFile
    }

    public static let productionHost = "api.push.apple.com"
    public static let sandboxHost = "api.sandbox.push.apple.com"
}

/// Hears the final outcome of every request handed to a `ConnectionPool`, on the pool's loop.
public protocol ConnectionPoolDelegate: AnyObject {
    /// `request` reached an outcome the pool does not handle itself.
    func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome)
    /// Stream slots became free: the caller may hand over more requests.
    func poolHasFreeSlots(_ pool: ConnectionPool)
    /// APNs refused the app's credentials: the pool stopped sending until `resume()`.
    func pool(_ pool: ConnectionPool, stoppedSending reason: String)
}

/// N HTTP/2 connections to one APNs host for one set of credentials (team and key).
///
/// Each request goes to the connection with the most free stream slots. `freeSlots` is what the
/// caller may still hand over, so a caller that reads only that many jobs keeps memory bounded.
/// The pool resends on its own what APNs never processed (GOAWAY above `last_stream_id`, refused
/// streams, streams of a dropped connection that were never sent) without counting an attempt,
/// resends once after 403 ExpiredProviderToken with a fresh token, and retries 500/503/resets on
/// another connection a few times; every other outcome goes to its delegate. Connections that
/// close are replaced after an exponential backoff with jitter (1 s to 60 s). Loop-confined.
public final class ConnectionPool: APNsConnectionDelegate {
    public let loop: EventLoop
    public let configuration: PoolConfiguration
    public weak var delegate: (any ConnectionPoolDelegate)?
    public let tokens: ProviderTokenSource?
    private let tlsContext: TLSContext
    private var logger: Logger

    private var members: [Member]
    /// Requests waiting for a slot because the pool itself must resend them.
    private var resendQueue: [PendingRequest] = []
    private var resendHead = 0
    private var maintenanceTimer: EventLoop.TimerID?
    private var random = SystemRandomNumberGenerator()
    public private(set) var stoppedReason: String?
    private var running = false
    private var notifyingSlots = false

    /// Connection events since start, for metrics and tests.
    public private(set) var connectionsOpened = 0
    public private(set) var connectionFailures = 0
    public private(set) var goAwaysReceived = 0
    public private(set) var connectionResets = 0
    public private(set) var pingTimeouts = 0
    public private(set) var resends = 0
    /// Why the last connection that never became ready failed (for "cannot reach APNs" messages).
    public private(set) var lastConnectionError: ConnectionError?
    /// Every APNs answer, including those the pool retried itself: 200s, and the rest by "status reason".
    public private(set) var acceptedResponses = 0
    public private(set) var otherResponses: [String: Int] = [:]
    /// Stream open to response, for every answered request.
    public private(set) var requestDuration = LatencyHistogram()
    /// Wall-clock ms of the last accepted notification (0: none yet).
    public private(set) var lastAcceptedAt: Int64 = 0
    private var lastAcceptedStampedAt: Int64 = -1_000_000

    struct Member {
        var connection: APNsConnection?
        var consecutiveFailures = 0
        var reconnectTimer: EventLoop.TimerID?
        var acceptedSinceConnect = false
    }

    public init(loop: EventLoop, configuration: PoolConfiguration, tokens: ProviderTokenSource?, logger: Logger) throws(TLSError) {
        self.loop = loop
        self.configuration = configuration
        self.tokens = tokens
        self.logger = logger
        self.logger[metadataKey: "apns"] = "\(configuration.host):\(configuration.port)"
        tlsContext = try TLSContext(clientTrusting: configuration.caFile, certificate: configuration.clientCertificate)
        members = Array(repeating: Member(), count: max(1, configuration.connections))
    }

    /// Opens every connection. Loop thread only.
    public func start() {
        running = true
        for index in members.indices { open(index) }
        scheduleMaintenance()
    }

    /// Closes every connection; requests in flight come back as retryable outcomes.
    public func stop() {
        running = false
        if let maintenanceTimer { loop.cancel(maintenanceTimer) }
        for index in members.indices {
            if let timer = members[index].reconnectTimer { loop.cancel(timer) }
            members[index].connection?.close()
        }
    }

    /// Stops taking new requests and lets every connection finish what it holds (for draining).
    public func shutdownGracefully() {
        running = false
        if let maintenanceTimer { loop.cancel(maintenanceTimer) }
        for index in members.indices {
            if let timer = members[index].reconnectTimer { loop.cancel(timer) }
            members[index].connection?.shutdownGracefully()
        }
    }

    /// Sends again after credentials were fixed (e.g. a new key was loaded).
    public func resume() {
        stoppedReason = nil
        dispatchResends()
    }

    // MARK: capacity

    /// Requests the caller may hand over now.
    public var freeSlots: Int {
        if stoppedReason != nil { return 0 }
        var total = 0
        for member in members { total += member.connection?.streamSlots ?? 0 }
        return max(0, total - (resendQueue.count - resendHead))
    }

    /// Requests in flight on all connections plus those waiting to be resent.
    public var inFlight: Int {
        var total = resendQueue.count - resendHead
        for member in members { total += member.connection?.inFlight ?? 0 }
        return total
    }

    public var readyConnections: Int {
        members.reduce(0) { $0 + ($1.connection?.state == .ready ? 1 : 0) }
    }

    /// The pool's connections, for inspection (state, stream limits).
    public var connections: [APNsConnection] { members.compactMap(\.connection) }

    // MARK: sending

    /// Hands `request` to the connection with the most free slots. Returns false when no slot is free
    /// (the caller keeps the request); check `freeSlots` first to avoid that.
    @discardableResult
    public func send(_ request: consuming PendingRequest) -> Bool {
        guard stoppedReason == nil, let connection = bestConnection(excluding: nil) else { return false }
        return connection.submit(consume request)
    }

    private func bestConnection(excluding excluded: APNsConnection?) -> APNsConnection? {
        var best: APNsConnection? = nil
        var bestSlots = 0
        for member in members {
            guard let connection = member.connection, connection !== excluded else { continue }
            let slots = connection.streamSlots
            if slots > bestSlots {
                best = connection
                bestSlots = slots
            }
        }
        return best
    }

    private func enqueueResend(_ request: PendingRequest) {
        resends += 1
        resendQueue.append(request)
    }

    private func dispatchResends() {
        guard stoppedReason == nil else { return }
        while resendHead < resendQueue.count, let connection = bestConnection(excluding: nil) {
            guard connection.submit(resendQueue[resendHead]) else { break }
            resendHead += 1
        }
        if resendHead == resendQueue.count {
            resendQueue.removeAll(keepingCapacity: true)
            resendHead = 0
        } else if resendHead > 1024 {
            resendQueue.removeFirst(resendHead)
            resendHead = 0
        }
    }

    // MARK: connections

    private func open(_ index: Int) {
        members[index].reconnectTimer = nil
        guard running else { return }
        let connection = APNsConnection(
            loop: loop, host: configuration.host, port: configuration.port, tlsContext: tlsContext,
            maxStreams: configuration.maxStreams, identifier: index)
        connection.delegate = self
        if let tokens { connection.clock = tokens.time }
        members[index].connection = connection
        members[index].acceptedSinceConnect = false
        connectionsOpened += 1
        connection.connect()
    }

    private func memberIndex(_ connection: APNsConnection) -> Int? {
        members.firstIndex { $0.connection === connection }
    }

    public func connectionIsReady(_ connection: APNsConnection) {
        logger.info("connection up", metadata: ["connection": "\(connection.identifier)"])
        if let tokens {
            do {
                try tokens.refreshBinding(of: connection)
            } catch {
                stopSending("could not sign a provider token: \(error)")
                return
            }
        }
        dispatchResends()
        notifyFreeSlots()
    }

    public func connectionSlotsChanged(_ connection: APNsConnection) {
        dispatchResends()
        notifyFreeSlots()
    }

    private func notifyFreeSlots() {
        // A delegate that submits from here can free slots again only on a later tick: no recursion.
        guard !notifyingSlots, freeSlots > 0 else { return }
        notifyingSlots = true
        delegate?.poolHasFreeSlots(self)
        notifyingSlots = false
    }

    public func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
        recordResponse(request, outcome)
        switch outcome {
        case .accepted:
            if let index = memberIndex(connection) {
                members[index].acceptedSinceConnect = true
                members[index].consecutiveFailures = 0
            }
            request.attempts += 1
        case .retryOnAnotherConnection(let cause):
            if !cause.countsAsAttempt {
                // GOAWAY above last_stream_id, refused or never-sent streams: APNs never saw them.
                enqueueResend(request)
                return
            }
            request.attempts += 1
            if case .status(let status, _) = cause, status >= 500 {
                // The server is going away or overloaded: this connection takes nothing new.
                logger.warning("APNs answered \(status); reconnecting this connection after backoff",
                               metadata: ["connection": "\(connection.identifier)"])
                connection.shutdownGracefully()
            }
            if request.attempts <= configuration.immediateRetries, running, readyConnections > 0 {
                enqueueResend(request)
                return
            }
        case .refreshProviderToken:
            request.attempts += 1
            if let tokens, request.attempts <= 1 + configuration.immediateRetries {
                do {
                    try tokens.replaceExpiredToken(on: connection)
                    enqueueResend(request)
                    return
                } catch {
                    stopSending("could not sign a provider token: \(error)")
                }
            }
        case .credentialsRejected(let status, let reason):
            stopSending("APNs rejected the credentials (\(status) \(reason?.rawValue ?? "no reason")); fix the key, team or topic and restart")
        default:
            request.attempts += 1
        }
        delegate?.pool(self, completed: request, outcome: outcome)
    }

    private func recordResponse(_ request: PendingRequest, _ outcome: DeliveryOutcome) {
        let status: Int
        let reason: String
        switch outcome {
        case .accepted:
            acceptedResponses += 1
            requestDuration.record(milliseconds: loop.now - request.submittedAt)
            // The wall clock is read at most once a second, not per notification.
            if loop.now - lastAcceptedStampedAt >= 1000 {
                lastAcceptedStampedAt = loop.now
                lastAcceptedAt = (tokens?.time ?? .system).nowMilliseconds()
            }
            return
        case .permanent(let s, let r), .credentialsRejected(let s, let r): status = s; reason = r?.rawValue ?? ""
        case .deadToken(let s, let r, _): status = s; reason = r.rawValue
        case .retryTokenLater(let r): status = 429; reason = r?.rawValue ?? ""
        case .refreshProviderToken: status = 403; reason = "ExpiredProviderToken"
        case .providerTokenUpdatesThrottled: status = 429; reason = "TooManyProviderTokenUpdates"
        case .retryOnAnotherConnection(.status(let s, let r)): status = s; reason = r?.rawValue ?? ""
        case .retryOnAnotherConnection: return  // no answer: a transport event, counted with the connection
        }
        requestDuration.record(milliseconds: loop.now - request.submittedAt)
        otherResponses[APNsReason.countingKey(status: status, reason: reason), default: 0] += 1
    }

    public func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) {
        guard let index = memberIndex(connection) else { return }
        members[index].connection = nil
        switch error {
        case .goAway: goAwaysReceived += 1
        case .closedByPeer, .protocolError: connectionResets += 1
        case .pingUnanswered: pingTimeouts += 1
        default: break
        }
        let graceful = members[index].acceptedSinceConnect
        if !graceful {
            members[index].consecutiveFailures += 1
            connectionFailures += 1
            if let error { lastConnectionError = error }
        }
        guard running else { return }
        // A connection that delivered before it closed comes back quickly; one that failed to
        // deliver anything backs off from 1 s to 60 s, so Herald never opens and closes in a loop.
        let delay: Int64
        if graceful {
            delay = 50 + Int64.random(in: 0...150, using: &random)
        } else {
            delay = Backoff.reconnect.delayMilliseconds(afterFailures: members[index].consecutiveFailures, using: &random)
        }
        logger.warning("connection down", metadata: [
            "connection": "\(connection.identifier)", "error": "\(error.map { "\($0)" } ?? "closed")",
            "reconnect_ms": "\(delay)",
        ])
        members[index].reconnectTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in self?.open(index) }
        dispatchResends()
    }

    private func stopSending(_ reason: String) {
        guard stoppedReason == nil else { return }
        stoppedReason = reason
        logger.critical("stopped sending for this app", metadata: ["reason": "\(reason)"])
        delegate?.pool(self, stoppedSending: reason)
    }

    /// Requests the pool holds for resending but cannot send (stopped): handed back to the caller.
    public func takeQueuedResends() -> [PendingRequest] {
        let taken = Array(resendQueue[resendHead...])
        resendQueue.removeAll()
        resendHead = 0
        return taken
    }

    private func scheduleMaintenance() {
        maintenanceTimer = loop.schedule(afterMilliseconds: configuration.maintenanceIntervalMilliseconds) { [weak self] in
            guard let self, self.running else { return }
            if let tokens = self.tokens {
                for member in self.members {
                    guard let connection = member.connection, connection.state == .ready else { continue }
                    do { try tokens.refreshBinding(of: connection) } catch {
                        self.stopSending("could not sign a provider token: \(error)")
                    }
                }
            }
            self.scheduleMaintenance()
        }
    }
}
