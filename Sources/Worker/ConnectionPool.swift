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
    /// How long a stream may wait for its answer before it is reset (`--response-timeout`).
    public var responseTimeoutMilliseconds: Int64 = 30_000
    /// How long a connection may go without input before a PING checks it (`--ping-interval`); an
    /// unanswered PING closes it after this long again, at most 10 s.
    public var pingIntervalMilliseconds: Int64 = 60_000
    /// 5xx answers in a row on one connection (no success between) after which it is replaced,
    /// as a failure. A single 500 or 503 leaves the connection up: closing on each one turns a
    /// low error rate into a reconnect storm. Answers arrive in bursts, so a short run of 5xx
    /// says little; 32 in a row (one in 10^22 at a 20 % error rate) says the server is down.
    public var serverErrorsBeforeReconnect = 32
    /// The first wait before a halted app (credentials refused) is probed again; it doubles after
    /// each refused probe, up to `maximumProbeIntervalMilliseconds`.
    public var firstProbeDelayMilliseconds: Int64 = 15_000
    public var maximumProbeIntervalMilliseconds: Int64 = 600_000

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
    /// `request` reached an outcome the pool does not handle itself (`attempts` counted).
    func pool(_ pool: ConnectionPool, completed request: PendingRequest, outcome: DeliveryOutcome)
    /// Stream slots became free: the caller may hand over more requests.
    func poolHasFreeSlots(_ pool: ConnectionPool)
    /// APNs refused the app's credentials on a fresh connection with a fresh token too: the pool
    /// stopped sending, and probes again by itself.
    func pool(_ pool: ConnectionPool, stoppedSending reason: String)
    /// A halted pool is probing: it takes requests again, one at a time until APNs accepts one.
    func poolResumedSending(_ pool: ConnectionPool)
}

extension ConnectionPoolDelegate {
    public func poolResumedSending(_ pool: ConnectionPool) {}
}

/// Reloads an app's credentials from their files before a halted pool probes again, so fixing a
/// key file needs no restart. Returns the new signer (token authentication), or nil to keep the
/// current one.
public typealias CredentialsReloader = () throws -> ProviderTokenSigner?

/// N HTTP/2 connections to one APNs host for one set of credentials (team and key).
///
/// Each request goes to the connection with the most free stream slots. `freeSlots` is what the
/// caller may still hand over, so a caller that reads only that many jobs keeps memory bounded.
///
/// The pool resends on its own only what costs no attempt: what APNs never processed (GOAWAY
/// above `last_stream_id`, refused streams, streams of a dropped connection that were never sent)
/// and a request answered 403 ExpiredProviderToken, with a fresh token. Every other outcome, 5xx,
/// resets and response timeouts included, goes to the delegate with `attempts` counted: the
/// delegate's retry policy decides what happens next.
///
/// Connections: one that receives GOAWAY after delivering is replaced at once while it finishes
/// its streams ("retiring"); one that failed is replaced after an exponential backoff with jitter
/// (1 s to 60 s), so Herald never opens and closes in a loop; `serverErrorsBeforeReconnect` 5xx in
/// a row replace a connection as a failure.
///
/// Credentials: a 403 that blames them (InvalidProviderToken, BadCertificate, …) on one request
/// makes them suspect, not dead: that connection is replaced by a fresh one carrying a freshly
/// minted token, while the others keep sending. Only rejections on such a fresh connection
/// (`freshRejectionsToHalt` of them, with no acceptance between) halt the app (`stoppedReason`;
/// the delegate hears it). A halted pool reloads its credentials
/// (`credentialsReloader`) and probes with one request after a backoff (15 s doubling to 10 min),
/// and resumes when APNs accepts it. Loop-confined.
public final class ConnectionPool: APNsConnectionDelegate {
    public let loop: EventLoop
    public let configuration: PoolConfiguration
    public weak var delegate: (any ConnectionPoolDelegate)?
    /// Handed to each connection it opens (`APNsConnection.prefetcher`): told which contexts are
    /// about to complete.
    public var prefetcher: (any CompletionPrefetching)?
    public let tokens: ProviderTokenSource?
    /// Reloads the key or certificate before each probe of a halted pool.
    public var credentialsReloader: CredentialsReloader?
    private let tlsContext: TLSContext
    private var logger: Logger

    private var members: [Member]
    /// Connections that got GOAWAY (or were retired) and finish their streams; their member slot
    /// already holds a replacement.
    private var retiring: [APNsConnection] = []
    /// The credential epoch each live connection was opened in (see `isFresh`).
    private var epochs: [ObjectIdentifier: Int] = [:]
    /// Requests waiting for a slot because the pool itself must resend them.
    private var resendQueue: [PendingRequest] = []
    private var resendHead = 0
    private var maintenanceTimer: EventLoop.TimerID?
    private var random = SystemRandomNumberGenerator()
    public private(set) var stoppedReason: String?
    private var running = false
    private var notifyingSlots = false

    private var credentials = Credentials.trusted
    private var credentialEpoch = 0
    /// The token generation minted when the current suspicion (or probe) began.
    private var suspicionTokenGeneration: UInt64 = 0
    private var lastSuspicionMintAt: Int64 = -1_000_000
    private var probeTimer: EventLoop.TimerID?
    private var refusedProbes = 0
    /// Credential rejections on fresh connections since the suspicion began, none accepted.
    private var freshRejections = 0
    /// Fresh-connection rejections (with none accepted) that halt the app: more than one, so a
    /// single odd 403 on a fresh connection cannot halt it either.
    public static let freshRejectionsToHalt = 3

    enum Credentials: Equatable {
        /// APNs accepts them (or nothing says otherwise).
        case trusted
        /// One rejection: a fresh connection with a fresh token decides.
        case suspect
        /// Rejected on a fresh connection too: nothing is sent until a probe.
        case halted
        /// A halted pool trying again: one request in flight until APNs accepts one.
        case probing
    }

    /// Connection events since start, for metrics and tests.
    public private(set) var connectionsOpened = 0
    public private(set) var connectionFailures = 0
    public private(set) var goAwaysReceived = 0
    public private(set) var connectionResets = 0
    public private(set) var pingTimeouts = 0
    public private(set) var resends = 0
    /// 5xx answers, response timeouts, credential suspicions and halts since start.
    public private(set) var serverErrors = 0
    public private(set) var responseTimeouts = 0
    public private(set) var credentialSuspicions = 0
    public private(set) var halts = 0
    /// Why the last connection that never became ready failed (for "cannot reach APNs" messages).
    public private(set) var lastConnectionError: ConnectionError?
    /// Every APNs answer, including those the pool resent itself: 200s, and the rest by "status reason".
    public private(set) var acceptedResponses = 0
    public private(set) var otherResponses: [String: Int] = [:]
    /// Stream open to response, for every answered request.
    public private(set) var requestDuration = LatencyHistogram()
    /// Wall-clock ms of the last accepted notification (0: none yet).
    public private(set) var lastAcceptedAt: Int64 = 0
    private var lastAcceptedStampedAt: Int64 = -1_000_000

    struct Member {
        var connection: APNsConnection? {
            didSet { unretained = connection.map { Unmanaged.passUnretained($0) } }
        }
        /// `connection` without a reference count, for `send` (see there).
        private(set) var unretained: Unmanaged<APNsConnection>?
        var consecutiveFailures = 0
        var reconnectTimer: EventLoop.TimerID?
        var acceptedSinceConnect = false
        var serverErrorsInARow = 0
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
        cancelTimers()
        for index in members.indices { members[index].connection?.close() }
        for connection in retiring { connection.close() }
    }

    /// Stops taking new requests and lets every connection finish what it holds (for draining).
    public func shutdownGracefully() {
        running = false
        cancelTimers()
        for index in members.indices { members[index].connection?.shutdownGracefully() }
    }

    private func cancelTimers() {
        if let maintenanceTimer { loop.cancel(maintenanceTimer) }
        if let probeTimer { loop.cancel(probeTimer) }
        probeTimer = nil
        for index in members.indices {
            if let timer = members[index].reconnectTimer { loop.cancel(timer) }
            members[index].reconnectTimer = nil
        }
    }

    /// Probes a halted pool now instead of at its next scheduled probe.
    public func resume() {
        guard running, credentials == .halted else { return }
        if let probeTimer { loop.cancel(probeTimer) }
        probe()
    }

    /// Whether APNs refused this app's credentials on a fresh connection too (nothing is sent).
    public var isHalted: Bool { credentials == .halted }

    // MARK: capacity

    /// Requests the caller may hand over now.
    public var freeSlots: Int {
        if stoppedReason != nil { return 0 }
        var total = 0
        for index in members.indices { total += members[index].connection?.streamSlots ?? 0 }
        if credentials == .probing {
            // One notification tells whether APNs takes the credentials again.
            total = min(total, inFlight == 0 ? 1 : 0)
        }
        return max(0, total - (resendQueue.count - resendHead))
    }

    /// Requests in flight on all connections plus those waiting to be resent.
    public var inFlight: Int {
        var total = resendQueue.count - resendHead
        for index in members.indices { total += members[index].connection?.inFlight ?? 0 }
        for connection in retiring { total += connection.inFlight }
        return total
    }

    public var readyConnections: Int {
        members.reduce(0) { $0 + ($1.connection?.state == .ready ? 1 : 0) }
    }

    /// The pool's connections, for inspection (state, stream limits): the members, then those retiring.
    public var connections: [APNsConnection] { members.compactMap(\.connection) + retiring }

    // MARK: sending

    /// Hands `request` to the connection with the most free slots. Returns false when no slot is free
    /// or nghttp2 refused the stream: the request is dropped then, and the caller sends it again
    /// from what it kept (the worker, its context); check `freeSlots` first to avoid that.
    @discardableResult
    public func send(_ request: consuming PendingRequest) -> Bool {
        guard stoppedReason == nil, let best = bestMember(), let connection = members[best].unretained else { return false }
        // Submitted through an unretained reference: a connection has a side table (its timers
        // hold it weakly), so a retain and a release of it per request took the runtime's slow
        // path. Sound because `members` holds the connection and `submit` calls nothing back (its
        // completions, flushes and closes wait for later in the tick): nothing can let it go
        // during the call.
        var staged: PendingRequest? = consume request
        return connection._withUnsafeGuaranteedRef { $0.submit(staged.take()!) }
    }

    /// The connection with the most free stream slots.
    private func bestConnection() -> APNsConnection? {
        bestMember().flatMap { members[$0].connection }
    }

    /// The member whose connection has the most free stream slots, if any has one. The scan reads
    /// each member's slots in place: binding each connection to a local retained and released it,
    /// and each count change of a connection is the slow path (see `send`).
    private func bestMember() -> Int? {
        var best = -1
        var bestSlots = 0
        for index in members.indices {
            let slots = members[index].connection?.streamSlots ?? 0
            if slots > bestSlots {
                best = index
                bestSlots = slots
            }
        }
        return best < 0 ? nil : best
    }

    private func enqueueResend(_ request: PendingRequest) {
        resends += 1
        resendQueue.append(request)
    }

    private func dispatchResends() {
        guard stoppedReason == nil else { return }
        while resendHead < resendQueue.count, let connection = bestConnection() {
            if credentials == .probing && inFlight > resendQueue.count - resendHead { break }
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
        guard running, credentials != .halted, members[index].connection == nil else { return }
        let connection = APNsConnection(
            loop: loop, host: configuration.host, port: configuration.port, tlsContext: tlsContext,
            maxStreams: configuration.maxStreams, identifier: index)
        connection.delegate = self
        connection.prefetcher = prefetcher
        connection.responseTimeoutMilliseconds = configuration.responseTimeoutMilliseconds
        connection.pingIntervalMilliseconds = configuration.pingIntervalMilliseconds
        connection.pingTimeoutMilliseconds = min(10_000, configuration.pingIntervalMilliseconds)
        if let tokens { connection.clock = tokens.time }
        members[index].connection = connection
        members[index].acceptedSinceConnect = false
        members[index].serverErrorsInARow = 0
        epochs[ObjectIdentifier(connection)] = credentialEpoch
        connectionsOpened += 1
        connection.connect()
    }

    /// Moves member `index`'s connection to the retiring list (it finishes its streams and takes
    /// nothing new) and opens its replacement: at once after a graceful end, after the member's
    /// failure backoff otherwise.
    private func retire(_ index: Int, failed: Bool, reason: String) {
        guard let connection = members[index].connection else { return }
        members[index].connection = nil
        retiring.append(connection)
        connection.shutdownGracefully()
        scheduleReplacement(index, failed: failed, reason: reason)
    }

    private func scheduleReplacement(_ index: Int, failed: Bool, reason: String) {
        guard running, credentials != .halted, members[index].reconnectTimer == nil else { return }
        let delay: Int64
        if failed {
            members[index].consecutiveFailures += 1
            connectionFailures += 1
            delay = Backoff.reconnect.delayMilliseconds(afterFailures: members[index].consecutiveFailures, using: &random)
        } else if retiring.count > 2 * members.count {
            // Connections that got GOAWAY but keep their streams open: do not pile up more.
            delay = 100 + Int64.random(in: 0...100, using: &random)
        } else {
            delay = 0
        }
        if failed {
            logger.warning("connection replaced", metadata: ["connection": "\(index)", "reason": "\(reason)", "reconnect_ms": "\(delay)"])
        }
        if delay == 0 {
            open(index)
        } else {
            members[index].reconnectTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in self?.open(index) }
        }
    }

    /// The member slot holding `connection` (compared in place, without retaining each member's
    /// connection: see `bestConnection`). Runs once per answer.
    private func memberIndex(_ connection: APNsConnection) -> Int? {
        for index in members.indices where members[index].connection === connection { return index }
        return nil
    }

    public func connectionIsReady(_ connection: APNsConnection) {
        logger.debug("connection up", metadata: ["connection": "\(connection.identifier)"])
        if let tokens {
            do {
                try tokens.refreshBinding(of: connection)
            } catch {
                halt("could not sign a provider token: \(error)")
                return
            }
        }
        dispatchResends()
        notifyFreeSlots()
    }

    public func connectionIsGoingAway(_ connection: APNsConnection) {
        guard let index = memberIndex(connection) else { return }
        // The server is closing it: a replacement opens now, while it finishes its streams.
        retire(index, failed: !members[index].acceptedSinceConnect, reason: "GOAWAY")
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

    public func connectionHasCompletions(_ connection: APNsConnection) {
        // The delegate is loaded from its weak reference once per batch and lent to each
        // completion: loading it per answer took a weak load and a release each, and the worker
        // has weak references (a side table), where each count change is the runtime's slow path.
        let delegate = self.delegate
        handOutCompletions(of: connection, to: delegate)
    }

    private func handOutCompletions(of connection: APNsConnection, to delegate: (any ConnectionPoolDelegate)?) {
        // Each request is handled where it lies, and moved again only to be resent.
        var request: PendingRequest?
        while let outcome = connection.nextCompletion(into: &request) {
            handle(&request!, outcome: outcome, on: connection, delegate: delegate)
        }
    }

    public func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
        var request = consume request
        handle(&request, outcome: outcome, on: connection, delegate: delegate)
    }

    /// `request` is handled where it lies (the caller's variable): unwrapped from an optional at
    /// each use, it was copied whole (240 bytes) to read one field and again to hand it on. A
    /// request queued to be resent is copied (the rare path); the caller's copy goes with its
    /// variable.
    private func handle(_ request: inout PendingRequest, outcome: DeliveryOutcome, on connection: APNsConnection,
                        delegate: (any ConnectionPoolDelegate)?) {
        recordResponse(submittedAt: request.submittedAt, outcome)
        let index = memberIndex(connection)
        switch outcome {
        case .accepted:
            if let index {
                members[index].acceptedSinceConnect = true
                members[index].consecutiveFailures = 0
                members[index].serverErrorsInARow = 0
            }
            if credentials != .trusted, isFresh(connection) { credentialsAccepted() }
            request.attempts += 1
        case .retryOnAnotherConnection(let cause):
            if !cause.countsAsAttempt {
                // GOAWAY above last_stream_id, refused or never-sent streams: APNs never saw them.
                enqueueResend(request)
                return
            }
            request.attempts += 1
            switch cause {
            case .status(let status, _) where status >= 500:
                serverErrors += 1
                if let index {
                    members[index].serverErrorsInARow += 1
                    if members[index].serverErrorsInARow >= configuration.serverErrorsBeforeReconnect {
                        retire(index, failed: true, reason: "\(members[index].serverErrorsInARow) answers \(status) in a row")
                    }
                }
            case .responseTimeout:
                responseTimeouts += 1
            default:
                break
            }
        case .refreshProviderToken:
            // A credential fault, not the notification's: no attempt is spent.
            if let tokens {
                let before = connection.tokenGeneration
                do {
                    try tokens.replaceExpiredToken(on: connection)
                } catch {
                    halt("could not sign a provider token: \(error)")
                }
                if credentials != .halted && connection.tokenGeneration != before {
                    enqueueResend(request)
                    return
                }
            }
            // The token is too young to have expired: the clock (or the key) is wrong.
            credentialsRejected(on: connection, status: 403, reason: .expiredProviderToken)
            delegate?.pool(self, completed: request, outcome: .credentialsRejected(status: 403, reason: .expiredProviderToken))
            return
        case .credentialsRejected(let status, let reason):
            credentialsRejected(on: connection, status: status, reason: reason)
        default:
            request.attempts += 1
        }
        delegate?.pool(self, completed: request, outcome: outcome)
    }

    // MARK: credentials

    /// Whether `connection` was opened since the current suspicion (or probe) began, with a token
    /// minted since then: only its answers judge the credentials.
    private func isFresh(_ connection: APNsConnection) -> Bool {
        guard epochs[ObjectIdentifier(connection)] == credentialEpoch else { return false }
        return tokens == nil || connection.tokenGeneration >= suspicionTokenGeneration
    }

    private func credentialsRejected(on connection: APNsConnection, status: Int, reason: APNsReason?) {
        let word = "\(status) \(reason?.rawValue ?? "no reason")"
        switch credentials {
        case .halted:
            return
        case .trusted:
            beginSuspicion(connection, word: word)
        case .suspect, .probing:
            guard isFresh(connection) else { return }
            freshRejections += 1
            if credentials == .probing || freshRejections >= ConnectionPool.freshRejectionsToHalt {
                halt("APNs rejected the credentials (\(word)) on a fresh connection with a fresh token; fix the key, team, topic or clock: Herald probes again by itself")
            }
        }
    }

    /// One rejection: that connection is replaced by a fresh one carrying a freshly minted token;
    /// the other connections keep sending.
    private func beginSuspicion(_ connection: APNsConnection, word: String) {
        credentials = .suspect
        credentialSuspicions += 1
        credentialEpoch += 1
        freshRejections = 0
        logger.warning("APNs rejected the credentials on one connection; checking them on a fresh connection with a fresh token",
                       metadata: ["connection": "\(connection.identifier)", "answer": "\(word)"])
        mintForFreshConnections()
        if credentials == .suspect, let index = memberIndex(connection) {
            retire(index, failed: false, reason: "credentials rejected (\(word))")
        }
    }

    /// A token minted now for the connections opened from here on (at most one a minute, so a
    /// flood of rejections cannot make Herald mint in a loop).
    private func mintForFreshConnections() {
        guard let tokens else { return }
        if loop.now - lastSuspicionMintAt >= 60_000 || tokens.current == nil {
            do {
                try tokens.mint()
                lastSuspicionMintAt = loop.now
            } catch {
                halt("could not sign a provider token: \(error)")
                return
            }
        }
        suspicionTokenGeneration = tokens.current?.generation ?? 0
    }

    private func credentialsAccepted() {
        if credentials == .probing {
            logger.notice("APNs accepts the credentials again; sending resumed", metadata: ["refused_probes": "\(refusedProbes)"])
        } else {
            logger.info("APNs accepted the credentials on a fresh connection; the rejection was not the app's")
        }
        credentials = .trusted
        refusedProbes = 0
        freshRejections = 0
        notifyFreeSlots()
    }

    /// Stops sending for this app: every connection retires, nothing is sent until a probe.
    private func halt(_ reason: String) {
        guard credentials != .halted else { return }
        if credentials == .probing { refusedProbes += 1 }
        credentials = .halted
        stoppedReason = reason
        halts += 1
        let doublings = Int64(min(refusedProbes, 16))
        let delay = min(configuration.maximumProbeIntervalMilliseconds, configuration.firstProbeDelayMilliseconds << doublings)
        logger.critical("stopped sending for this app", metadata: ["reason": "\(reason)", "next_probe_ms": "\(delay)"])
        for index in members.indices {
            if let timer = members[index].reconnectTimer { loop.cancel(timer) }
            members[index].reconnectTimer = nil
            if members[index].connection != nil { retire(index, failed: false, reason: "credentials refused") }
        }
        if let probeTimer { loop.cancel(probeTimer) }
        probeTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in
            guard let self, self.running, self.credentials == .halted else { return }
            self.probe()
        }
        delegate?.pool(self, stoppedSending: reason)
    }

    /// Reloads the credentials, opens fresh connections with a fresh token and lets one request
    /// through; its answer decides (`credentialsAccepted`, or `halt` again with a longer wait).
    private func probe() {
        probeTimer = nil
        credentials = .probing
        if let credentialsReloader {
            do {
                if let signer = try credentialsReloader(), let tokens { tokens.replaceSigner(signer) }
            } catch {
                // The file is still broken: stay halted and look again later.
                halt("cannot reload the app's credentials: \(error)")
                return
            }
        }
        credentialEpoch += 1
        lastSuspicionMintAt = -1_000_000
        mintForFreshConnections()
        guard credentials == .probing else { return }
        stoppedReason = nil
        logger.info("probing APNs with the app's credentials", metadata: ["refused_probes": "\(refusedProbes)"])
        for index in members.indices where members[index].connection == nil { open(index) }
        delegate?.poolResumedSending(self)
    }

    private func recordResponse(submittedAt: Int64, _ outcome: DeliveryOutcome) {
        let status: Int
        let reason: String
        switch outcome {
        case .accepted:
            acceptedResponses += 1
            requestDuration.record(milliseconds: loop.now - submittedAt)
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
        requestDuration.record(milliseconds: loop.now - submittedAt)
        otherResponses[APNsReason.countingKey(status: status, reason: reason), default: 0] += 1
    }

    public func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) {
        epochs[ObjectIdentifier(connection)] = nil
        switch error {
        case .goAway: goAwaysReceived += 1
        case .closedByPeer, .protocolError: connectionResets += 1
        case .pingUnanswered: pingTimeouts += 1
        default: break
        }
        if let position = retiring.firstIndex(where: { $0 === connection }) {
            // Its member slot was refilled when it began retiring.
            retiring.remove(at: position)
            dispatchResends()
            notifyFreeSlots()
            return
        }
        guard let index = memberIndex(connection) else { return }
        members[index].connection = nil
        let graceful = members[index].acceptedSinceConnect
        if !graceful, let error { lastConnectionError = error }
        guard running, credentials != .halted else { return }
        if graceful {
            // A connection that delivered before it closed comes back quickly.
            let delay = 50 + Int64.random(in: 0...150, using: &random)
            logger.info("connection down", metadata: [
                "connection": "\(connection.identifier)", "error": "\(error.map { "\($0)" } ?? "closed")", "reconnect_ms": "\(delay)",
            ])
            members[index].reconnectTimer = loop.schedule(afterMilliseconds: delay) { [weak self] in self?.open(index) }
        } else {
            scheduleReplacement(index, failed: true, reason: error.map { "\($0)" } ?? "closed")
        }
        dispatchResends()
    }

    /// Requests the pool holds for resending but cannot send (halted): handed back to the caller.
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
                        self.halt("could not sign a provider token: \(error)")
                    }
                }
            }
            self.scheduleMaintenance()
        }
    }
}
