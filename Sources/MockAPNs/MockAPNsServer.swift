import Glibc
import APNs
import Logging
import Transport

/// Herald's APNs emulator: HTTP/2 over TLS on nghttp2's server API, on one event loop.
///
/// It answers like APNs: connections start at one concurrent stream and rise to `maxStreams` after
/// the first request with a valid provider token; tokens are verified (ES256, key id, team id),
/// refused when over an hour old, and a connection that changes its token less than 20 minutes
/// after first using the previous one gets 429 TooManyProviderTokenUpdates. Every request rule
/// of the APNs reference is checked and answered with APNs' status and JSON reason. Faults are
/// injected by configuration. Counts are kept per `apns-id` so a test or the load generator can
/// tell lost and duplicated notifications apart. Faults (`MockAPNsFaults`, the stream limit and
/// the latency) can be changed while running through `control(path:)`, which serves the
/// `/_herald/...` paths on the emulator's own port and on `herald mock-apns --stats-port`.
/// Loop-confined.
public final class MockAPNsServer: HTTP2ServerConnectionDelegate {
    public let loop: EventLoop
    public let configuration: MockAPNsConfiguration
    public private(set) var port = 0
    /// The certificate clients must trust (PEM), generated or loaded.
    public private(set) var certificatePEM = ""

    private var logger: Logger
    private var listener: HTTP2Listener?
    private var tlsContext: TLSContext?
    private let verifier: ProviderTokenVerifier?
    private var connections: [ObjectIdentifier: HTTP2ServerConnection] = [:]
    private var nextConnectionID = 1
    var statistics = MockAPNsStatistics()
    var acceptedIDs: IDCounter
    /// Broadcast channels per bundle id (`MockAPNsServer+Channels.swift`).
    var channels: ChannelStore
    private var channelsListener: HTTP2Listener?
    /// The channel management API's port (`--channels-port`); 0 until started, or when not served.
    public private(set) var channelsPort = 0
    /// The added round trip, from `--latency-ms`; `setLatency(milliseconds:)` changes it.
    public private(set) var latencyMilliseconds: Int64
    /// SETTINGS_MAX_CONCURRENT_STREAMS for connections past their first valid request, from
    /// `--max-streams`; `setMaxStreams(_:)` changes it on every open connection.
    public private(set) var maxStreams: UInt32
    /// The faults injected now: `configuration.faults` at start, changed by `control(path:)`.
    public private(set) var faults: MockAPNsFaults
    /// Counts of connections already closed, folded in from their own counters.
    private var closedPingsAnswered = 0
    private var closedPingsIgnored = 0
    /// Garbage bodies built once per kind and reason (the oversized one is 1 MiB).
    private var garbageBodies: [String: [UInt8]] = [:]
    private var throttled: [String: Int] = [:]
    /// `throttleWindowMilliseconds`: until when each throttled token keeps getting 429.
    private var throttledUntil: [String: Int64] = [:]
    /// Verification results by the token's bytes (a String key would let a different spelling
    /// that compares equal as Unicode text pass as the verified token).
    private var verifiedTokens: [[UInt8]: Result<ParsedProviderToken, ProviderTokenVerificationFailure>] = [:]
    private var random: SplitMix64
    /// Draws `apns-unique-id`s apart from `random`, so the faults a seed injects stay the same.
    private var uniqueIDRandom: SplitMix64
    private var delayed: [DelayedAnswer] = []
    private var delayedHead = 0
    private var delayTimerArmed = false
    private var latency: LatencyRecorder?
    /// From the payloads' `"s"` stamps (a paced producer's schedule), when measuring.
    private var latencyFromSchedule: LatencyRecorder?
    /// The enqueue latency per window of time (`/_herald/timeline`), when measuring latency.
    private var timeline: LatencyTimeline?

    /// Per-connection bookkeeping the emulator keeps in `HTTP2ServerConnection.userState`.
    final class ConnectionState {
        /// The provider token (after `bearer `) in use on this connection, as sent.
        var token: [UInt8]? = nil
        var tokenIssuedAt: Int64 = 0
        var tokenFirstUsedAt: Int64 = 0
        var streamsRaised = false
        var goAwaySent = false
        /// Accepted on the channel management listener: only `/1/apps/...` is served there.
        var servesChannels = false
    }

    struct DelayedAnswer {
        let dueAt: Int64
        weak var connection: HTTP2ServerConnection?
        let streamID: Int32
        let answer: Answer
    }

    struct Answer {
        var status: Int
        var reason: String?
        var timestamp: Int64?
        /// The apns-id to echo: the two words its text spells (a canonical id given, read as
        /// `uuid`, or one made for a request without one), or the text of another spelling as it
        /// came.
        var apnsIDText: String?
        var apnsIDWords: (high: UInt64, low: UInt64)?
        var uuid: UUIDKey?
        /// The apns-id as text (the broadcast answer's header list).
        var apnsID: String { apnsIDText ?? apnsIDWords.map { UUIDString.makeVerbatim(high: $0.high, low: $0.low) } ?? "" }
        /// The payload's enqueue stamp in µs since the epoch (0: none, or not measuring).
        var stampMicros: Int64 = 0
        /// The payload's schedule stamp `"s"` (when a paced producer meant to enqueue it), or 0.
        var scheduledMicros: Int64 = 0
        /// When set, the stream is reset with this HTTP/2 error code instead of answered.
        var resetErrorCode: UInt32? = nil
        /// A broadcast's channel as `bundle id/channel id` (nil: a device push).
        var channelKey: String? = nil
    }

    public init(loop: EventLoop, configuration: MockAPNsConfiguration, logger: Logger) throws {
        self.loop = loop
        self.configuration = configuration
        self.logger = logger
        random = SplitMix64(seed: configuration.seed)
        uniqueIDRandom = SplitMix64(seed: configuration.seed ^ 0x756E_6971_7565_4944)
        latencyMilliseconds = max(0, configuration.latencyMilliseconds)
        maxStreams = configuration.maxStreams
        faults = configuration.faults
        // Benchmarks say how many to expect, so the table never grows mid-run (a growth moves its
        // ids a few per request, but a table sized up front stays the cheapest).
        acceptedIDs = IDCounter(expected: configuration.expectedNotifications)
        latency = configuration.measureLatency ? LatencyRecorder() : nil
        latencyFromSchedule = configuration.measureLatency ? LatencyRecorder() : nil
        timeline = configuration.measureLatency
            ? LatencyTimeline(windowMicros: configuration.timelineWindowMilliseconds * 1000, overMicros: configuration.timelineOverMilliseconds * 1000)
            : nil
        channels = ChannelStore(maxChannelsPerApp: configuration.maxChannelsPerApp)
        if let pem = configuration.jwtKeyPEM {
            guard let team = configuration.teamID, let key = configuration.keyID else {
                throw MockAPNsError.configuration("--jwt-key needs --team-id and --key-id to check the token's iss and kid")
            }
            verifier = ProviderTokenVerifier(publicKey: try ES256PublicKey(pem: pem), teamID: team, keyID: key)
        } else {
            verifier = nil
        }
    }

    /// Loads or generates the certificate and starts listening. Loop thread only.
    public func start() throws {
        let certificateFile: String
        let keyFile: String
        var generatedDirectory: String? = nil
        if let cert = configuration.certificateFile, let key = configuration.keyFile {
            certificateFile = cert
            keyFile = key
            certificatePEM = try PEMFile.read(path: cert)
        } else {
            let generated = try SelfSignedCertificate.generate()
            let directory = try makeTemporaryDirectory()
            generatedDirectory = directory
            certificateFile = configuration.certificateOut ?? directory + "/mock-apns.pem"
            keyFile = directory + "/mock-apns.key"
            try generated.write(certificateTo: certificateFile, keyTo: keyFile)
            certificatePEM = generated.certificatePEM
        }
        if let out = configuration.certificateOut, out != certificateFile {
            try PEMFile.write(certificatePEM, to: out, mode: 0o644)
        }
        let context = try TLSContext(serverCertificateFile: certificateFile, keyFile: keyFile, clientCAFile: configuration.clientCAFile)
        if let directory = generatedDirectory {
            // OpenSSL holds the certificate and key now: leave nothing behind in /tmp.
            unlink(keyFile)
            if certificateFile.hasPrefix(directory + "/") { unlink(certificateFile) }
            rmdir(directory)
        }
        tlsContext = context
        listener = try HTTP2Listener(loop: loop, host: configuration.host, port: configuration.port) { [weak self] fd in
            self?.accept(fd)
        }
        port = listener!.port
        if let channelsPort = configuration.channelsPort {
            channelsListener = try HTTP2Listener(loop: loop, host: configuration.host, port: channelsPort) { [weak self] fd in
                self?.accept(fd, servesChannels: true)
            }
            self.channelsPort = channelsListener!.port
        }
        logger.info("APNs emulator listening", metadata: [
            "address": "\(configuration.host):\(port)", "max_streams": "\(configuration.maxStreams)",
            "verifies_tokens": "\(verifier != nil)", "channels_port": "\(channelsPort)",
        ])
    }

    /// Stops listening and drops every connection.
    public func stop() {
        listener?.close()
        listener = nil
        channelsListener?.close()
        channelsListener = nil
        for connection in connections.values { connection.abort() }
        connections.removeAll()
    }

    public var currentStatistics: MockAPNsStatistics {
        var current = statistics
        current.latency = latency?.percentiles
        if let latencyFromSchedule, latencyFromSchedule.count > 0 { current.latencyFromSchedule = latencyFromSchedule.percentiles }
        current.connectionsOpen = connections.count
        current.channels = channels.count
        current.broadcastsByChannel = channels.broadcastCounts()
        current.pingsAnswered = closedPingsAnswered
        current.pingsIgnored = closedPingsIgnored
        for connection in connections.values {
            current.streamsOpen += connection.streamsOpen
            current.pingsAnswered += connection.pingsAnswered
            current.pingsIgnored += connection.pingsIgnored
        }
        return current
    }

    /// Forgets which apns-ids were accepted (keeping the table's capacity) but keeps every count.
    /// Between independent runs of a benchmark that share one emulator: each run then pays for a
    /// table holding its own ids, not every id of the runs before it. A duplicate of an id
    /// accepted before the call is not recognised after it.
    public func forgetAcceptedIDs() {
        acceptedIDs.removeAll()
    }

    /// Changes the added round trip for requests that arrive from now on. Benchmarks switch it
    /// between paired runs so that a run at latency L and its reference at 0 ms share one phase of
    /// the machine. Answers already waiting keep their due time, and answers are sent in arrival
    /// order, so right after lowering it a fast answer may wait for a slower one ahead of it.
    public func setLatency(milliseconds: Int64) {
        latencyMilliseconds = max(0, milliseconds)
    }

    /// Changes SETTINGS_MAX_CONCURRENT_STREAMS: a SETTINGS frame goes at once to every connection
    /// past its first valid request, and connections that have not got there yet rise to `value`
    /// instead of `--max-streams`. Streams a client opens beyond the new limit before it has
    /// acknowledged the frame are refused (REFUSED_STREAM) by nghttp2.
    public func setMaxStreams(_ value: UInt32) {
        maxStreams = value
        for connection in connections.values {
            guard let state = connection.userState as? ConnectionState, state.streamsRaised else { continue }
            connection.setMaxConcurrentStreams(value)
            statistics.settingsSent += 1
        }
    }

    /// Replaces the injected faults (what the `/_herald/...` switches do); PING handling changes
    /// on open connections at once, the other faults apply to requests from now on.
    public func setFaults(_ newFaults: MockAPNsFaults) {
        faults = newFaults
        for connection in connections.values { connection.answersPings = !faults.ignorePing }
    }

    static let controlPrefix = "/_herald/"

    /// The run-time control path: what `GET` (or `POST`) on `path` does and answers, as an HTTP
    /// status and a JSON body. Served on the emulator's own port (HTTP/2) and on `--stats-port`
    /// (plain HTTP). Every switch answers with the faults in force after it (`/_herald/faults`).
    ///
    /// | path | effect |
    /// | --- | --- |
    /// | `/_herald/stats` | the counts (`MockAPNsStatistics.json()`) |
    /// | `/_herald/faults` | the faults in force |
    /// | `/_herald/timeline` | the latency per window of time (`LatencyTimeline.json`), with `--measure-latency` |
    /// | `/_herald/forget-ids` | `forgetAcceptedIDs()` |
    /// | `/_herald/latency/MS` | `setLatency(milliseconds:)` |
    /// | `/_herald/max-streams/N` | `setMaxStreams(_:)` |
    /// | `/_herald/stall/RATE` | leave a share of requests unanswered (0 stops) |
    /// | `/_herald/stall-next/N` | leave the next N requests unanswered (0 stops) |
    /// | `/_herald/reset-streams/CODE:RATE` or `off` | reset a share of streams with an HTTP/2 error code |
    /// | `/_herald/garbage-body/KIND[:RATE]` or `off` | garbage bodies on error answers |
    /// | `/_herald/ignore-ping/on` or `off` | stop or resume acknowledging PINGs |
    /// | `/_herald/reject-tokens/on` or `off` | answer every provider token 403 InvalidProviderToken, or stop |
    /// | `/_herald/withhold-window/on` or `off` | connections accepted from now on never open their flow-control window again, or do |
    public func control(path: String) -> (status: Int, body: String) {
        // The prefix is dropped by its bytes, as requests are routed: a combining mark after it
        // stays in the name instead of joining the prefix's last character.
        let rest = path.utf8.starts(with: MockAPNsServer.controlPrefix.utf8)
            ? String(decoding: path.utf8.dropFirst(MockAPNsServer.controlPrefix.utf8.count), as: UTF8.self) : path
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        let name = parts.first.map(String.init) ?? ""
        let argument = parts.count == 2 ? String(parts[1]) : nil
        func usage(_ form: String) -> (Int, String) { (400, "{\"error\":\"want \(MockAPNsServer.controlPrefix)\(form)\"}") }
        func onOff(_ text: String?) -> Bool? { text == "on" ? true : text == "off" ? false : nil }
        var changed = faults
        switch (name, parts.count) {
        case ("stats", 1):
            return (200, currentStatistics.json())
        case ("faults", 1):
            return (200, faults.json(maxStreams: maxStreams, latencyMilliseconds: latencyMilliseconds))
        case ("timeline", 1):
            guard let timeline else { return (404, "{\"error\":\"no timeline: the emulator measures latency only with --measure-latency\"}") }
            return (200, timeline.json)
        case ("forget-ids", 1):
            forgetAcceptedIDs()
            return (200, "{}")
        case ("latency", 2):
            guard let milliseconds = argument.flatMap({ Int64($0) }), milliseconds >= 0 else { return usage("latency/MILLISECONDS") }
            setLatency(milliseconds: milliseconds)
        case ("max-streams", 2):
            guard let limit = argument.flatMap({ UInt32($0) }) else { return usage("max-streams/N") }
            setMaxStreams(limit)
        case ("stall", 2):
            guard let rate = argument.flatMap({ Double($0) }), (0...1).contains(rate) else { return usage("stall/RATE (0 to 1)") }
            changed.stallRate = rate
        case ("stall-next", 2):
            guard let count = argument.flatMap({ Int($0) }), count >= 0 else { return usage("stall-next/N") }
            changed.stallNext = count
        case ("reset-streams", 2):
            if argument == "off" {
                changed.reset = nil
            } else {
                guard let reset = argument.flatMap({ InjectedReset(argument: $0) }) else { return usage("reset-streams/CODE:RATE or off") }
                changed.reset = reset
            }
        case ("garbage-body", 2):
            if argument == "off" {
                changed.garbageBody = nil
            } else {
                guard let garbage = argument.flatMap({ InjectedGarbageBody(argument: $0) }) else {
                    return usage("garbage-body/KIND[:RATE] (KIND: \(GarbageBodyKind.allCases.map(\.rawValue).joined(separator: ", "))) or off")
                }
                changed.garbageBody = garbage
            }
        case ("ignore-ping", 2):
            guard let on = onOff(argument) else { return usage("ignore-ping/on or off") }
            changed.ignorePing = on
        case ("reject-tokens", 2):
            guard let on = onOff(argument) else { return usage("reject-tokens/on or off") }
            changed.rejectTokens = on
        case ("withhold-window", 2):
            guard let on = onOff(argument) else { return usage("withhold-window/on or off") }
            changed.withholdWindow = on
        default:
            return (404, "{\"error\":\"no such control path; try \(MockAPNsServer.controlPrefix)stats or \(MockAPNsServer.controlPrefix)faults\"}")
        }
        if changed != faults { setFaults(changed) }
        logger.info("emulator faults changed", metadata: ["path": "\(path)"])
        return (200, faults.json(maxStreams: maxStreams, latencyMilliseconds: latencyMilliseconds))
    }

    /// How many times `apnsID` was accepted.
    public func acceptedCount(apnsID: String) -> Int {
        guard let key = UUIDKey(canonical: apnsID.lowercased()) else { return 0 }
        return Int(acceptedIDs.count(of: key))
    }

    private func accept(_ fd: Int32, servesChannels: Bool = false) {
        guard let tlsContext else { return }
        do {
            let connection = try HTTP2ServerConnection(
                loop: loop, fd: fd, tlsContext: tlsContext, identifier: nextConnectionID, initialMaxConcurrentStreams: 1)
            nextConnectionID += 1
            let state = ConnectionState()
            state.servesChannels = servesChannels
            connection.userState = state
            connection.answersPings = !faults.ignorePing
            connection.grantsWindow = !faults.withholdWindow
            connection.delegate = self
            connections[ObjectIdentifier(connection)] = connection
            statistics.connections += 1
        } catch {
            logger.warning("could not accept a connection", metadata: ["error": "\(error)"])
        }
    }

    public func connectionClosed(_ connection: HTTP2ServerConnection, error: ConnectionError?) {
        guard connections.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        closedPingsAnswered += connection.pingsAnswered
        closedPingsIgnored += connection.pingsIgnored
    }

    // MARK: requests

    public func connection(_ connection: HTTP2ServerConnection, received request: HTTP2ServerRequest) {
        statistics.streams += 1
        guard let state = connection.userState as? ConnectionState else { return }
        if request.pathHasPrefix(MockAPNsServer.controlPrefix) {
            // Control requests (GET or POST) are never subject to faults.
            let (status, body) = request.method == "GET" || request.method == "POST"
                ? control(path: request.path) : (405, "{\"reason\":\"MethodNotAllowed\"}")
            connection.respond(streamID: request.streamID, status: status, apnsID: nil, body: Array(body.utf8))
            return
        }
        if state.servesChannels {
            // The channel management API: answered at once, without the injected stream faults.
            let answer = channelManagementAnswer(request, state: state, certificateAuthenticated: connection.peerCertificateVerified)
            connection.respond(streamID: request.streamID, status: answer.status, headers: answer.headers, body: answer.body)
            return
        }
        if let limit = configuration.disconnectAfterStreams, connection.streamsReceived >= limit {
            statistics.disconnects += 1
            connection.abort()
            return
        }
        var answer = request.pathHasPrefix(MockAPNsServer.broadcastPrefix)
            ? evaluateBroadcast(request, state: state, certificateAuthenticated: connection.peerCertificateVerified)
            : evaluate(request, state: state, certificateAuthenticated: connection.peerCertificateVerified)
        if answer.status == 200, !state.streamsRaised {
            state.streamsRaised = true
            connection.setMaxConcurrentStreams(maxStreams)
        }
        if let limit = configuration.goAwayAfterStreams, connection.streamsReceived >= limit, !state.goAwaySent {
            state.goAwaySent = true
            statistics.goAwaysSent += 1
            connection.sendGoAway(lastStreamID: connection.lastStreamID, reasonJSON: "{\"reason\":\"Shutdown\"}")
        }
        if faults.streamFaultsOn {
            // Decided after the request was judged (so a valid first request still raises the
            // connection's stream limit), instead of answering it.
            if faults.stallNext > 0 || (faults.stallRate > 0 && draw() < faults.stallRate) {
                if faults.stallNext > 0 { faults.stallNext -= 1 }
                // Nothing is kept: the stream's slot lives in the connection until the client
                // resets the stream or the connection ends.
                statistics.streamsStalled += 1
                return
            }
            if let reset = faults.reset, reset.rate > 0, draw() < reset.rate {
                answer.resetErrorCode = reset.errorCode
            }
        }
        if latencyMilliseconds > 0 {
            delayed.append(DelayedAnswer(dueAt: loop.now + latencyMilliseconds, connection: connection, streamID: request.streamID, answer: answer))
            armDelayTimer()
        } else {
            send(answer, on: connection, streamID: request.streamID)
        }
    }

    private func armDelayTimer() {
        guard !delayTimerArmed, delayedHead < delayed.count else { return }
        delayTimerArmed = true
        // Latency is constant, so answers fall due in arrival order: one timer for the head.
        loop.schedule(afterMilliseconds: delayed[delayedHead].dueAt - loop.now) { [weak self] in
            guard let self else { return }
            self.delayTimerArmed = false
            while self.delayedHead < self.delayed.count, self.delayed[self.delayedHead].dueAt <= self.loop.now {
                let item = self.delayed[self.delayedHead]
                self.delayedHead += 1
                if let connection = item.connection, connection.isOpen {
                    self.send(item.answer, on: connection, streamID: item.streamID)
                }
            }
            if self.delayedHead == self.delayed.count {
                self.delayed.removeAll(keepingCapacity: true)
                self.delayedHead = 0
            } else if self.delayedHead > 4096 {
                self.delayed.removeFirst(self.delayedHead)
                self.delayedHead = 0
            }
            self.armDelayTimer()
        }
    }

    func send(_ answer: Answer, on connection: HTTP2ServerConnection, streamID: Int32) {
        if let code = answer.resetErrorCode {
            // Counted when sent, like answers: a reset lost with its connection was not seen.
            statistics.streamsReset += 1
            connection.resetStream(streamID: streamID, errorCode: code)
            return
        }
        if answer.channelKey != nil {
            sendWithUniqueID(answer, on: connection, streamID: streamID)
            return
        }
        // Like APNs: production sends no apns-unique-id; the sandbox does (`--unique-ids`).
        let uniqueID = configuration.uniqueIDs ? uniqueID() : nil
        // Counted when answered: an answer lost with its connection was not delivered.
        if answer.status == 200 {
            statistics.accepted += 1
            if let uuid = answer.uuid {
                if acceptedIDs.increment(uuid) == 1 { statistics.acceptedUnique += 1 } else { statistics.duplicates += 1 }
            } else {
                statistics.acceptedWithoutID += 1
            }
            if answer.stampMicros > 0 {
                let now = LatencyRecorder.nowMicros()
                latency?.record(stampMicros: answer.stampMicros, nowMicros: now)
                timeline?.record(stampMicros: answer.stampMicros, nowMicros: now)
                if answer.scheduledMicros > 0 { latencyFromSchedule?.record(stampMicros: answer.scheduledMicros, nowMicros: now) }
            }
            connection.respond(streamID: streamID, status: 200, apnsID: answer.apnsIDText, apnsIDWords: answer.apnsIDWords, uniqueID: uniqueID, body: [])
            return
        }
        let reason = answer.reason ?? "Unknown"
        statistics.rejected[reason, default: 0] += 1
        if let garbage = faults.garbageBody, garbage.rate > 0, garbage.rate >= 1 || draw() < garbage.rate {
            statistics.garbageBodies += 1
            connection.respond(streamID: streamID, status: answer.status, apnsID: answer.apnsIDText, apnsIDWords: answer.apnsIDWords, uniqueID: uniqueID,
                               body: garbageBody(garbage.kind, reason: reason))
            return
        }
        var body = "{\"reason\":\"\(reason)\""
        if let timestamp = answer.timestamp { body += ",\"timestamp\":\(timestamp)" }
        body += "}"
        connection.respond(streamID: streamID, status: answer.status, apnsID: answer.apnsIDText, apnsIDWords: answer.apnsIDWords, uniqueID: uniqueID, body: Array(body.utf8))
    }

    /// A fresh `apns-unique-id`, as APNs' sandbox sends with every answer (it names the
    /// notification in Apple's delivery log); two draws of the seeded generator, no String.
    private func uniqueID() -> UUIDBits {
        UUIDBits(high: uniqueIDRandom.next(), low: uniqueIDRandom.next())
    }

    func garbageBody(_ kind: GarbageBodyKind, reason: String) -> [UInt8] {
        let key = kind.rawValue + ":" + reason
        if let cached = garbageBodies[key] { return cached }
        let body = InjectedGarbageBody.body(kind, reason: reason)
        if garbageBodies.count > 64 { garbageBodies.removeAll() }
        garbageBodies[key] = body
        return body
    }

    /// A uniform draw from [0, 1) on the emulator's seeded generator.
    func draw() -> Double {
        Double(random.next() >> 11) / Double(1 << 53)
    }

    /// Applies APNs' request rules in the order APNs reports them, then the injected faults.
    func evaluate(_ request: HTTP2ServerRequest, state: ConnectionState, certificateAuthenticated: Bool = false) -> Answer {
        let headerAPNsID = request.headerBytes("apns-id")
        var answer = acceptedAnswer(apnsID: headerAPNsID)
        let uuid = answer.uuid
        if let uuid { acceptedIDs.prefetch(uuid) }
        func reject(_ status: Int, _ reason: String) -> Answer {
            answer.status = status
            answer.reason = reason
            return answer
        }
        guard request.method == "POST" else { return reject(405, "MethodNotAllowed") }
        // The path's bytes after the prefix are the token: no String for the path or the token.
        let prefix = "/3/device/"
        guard request.pathHasPrefix(prefix) else { return reject(404, "BadPath") }
        let tokenBytes = request.pathBytes[prefix.utf8.count...]
        if tokenBytes.isEmpty { return reject(400, "MissingDeviceToken") }
        if request.hasDuplicateHeader(prefix: "apns-", orName: "authorization") {
            return reject(400, "DuplicateHeaders")
        }
        if headerAPNsID != nil, uuid == nil { return reject(400, "BadMessageId") }

        // Credentials: a verified client certificate, or a provider token (APNs ignores the header with a certificate).
        let now = configuration.time.nowMilliseconds()
        if !certificateAuthenticated, let (status, reason) = providerTokenRejection(request, state: state, now: now) {
            return reject(status, reason)
        }

        // Headers and payload, through Herald's own rules.
        guard let topic = request.header("apns-topic").value, !topic.isEmpty else { return reject(400, "MissingTopic") }
        let pushTypeText = request.header("apns-push-type").value ?? "alert"
        guard let pushType = PushType(rawValue: pushTypeText) else { return reject(400, "InvalidPushType") }
        if let bundle = configuration.bundleID, topic != pushType.topic(bundleID: bundle) {
            return reject(400, "TopicDisallowed")
        }
        if configuration.bundleID == nil, !pushType.topicSuffix.isEmpty, !topic.hasSuffix(pushType.topicSuffix) {
            return reject(400, "BadTopic")
        }
        // Like APNs: no apns-priority header means 10 (which a background push may not use).
        var priority: Priority? = .immediate
        if let text = request.header("apns-priority").value {
            guard let value = Int(text), let parsedPriority = Priority(rawValue: value) else { return reject(400, "BadPriority") }
            priority = parsedPriority
        }
        var expiration: Int64? = nil
        if let text = request.header("apns-expiration").value {
            guard let value = Int64(text) else { return reject(400, "BadExpirationDate") }
            expiration = value
        }
        if request.bodyTruncated { return reject(413, "PayloadTooLarge") }
        var notification = Notification(
            deviceToken: "", topic: topic, pushType: pushType, priority: priority, expiration: expiration,
            collapseID: request.header("apns-collapse-id").value, apnsID: answer.apnsIDText, payload: request.body)
        // Packed when it is 64 hex digits (either case, which the rules allow), else kept as its
        // text with ASCII letters folded: the token rule's answer is the same either way.
        notification.token = DeviceToken(lowercasing: tokenBytes)
        // Parsed as canonical already (`UUIDKey(canonical:)` accepts exactly what `isCanonical`
        // does): the bits skip validation's second pass over the same 36 bytes.
        if let uuid { notification.apnsIDBits = UUIDBits(high: uuid.high, low: uuid.low) }
        do {
            try notification.validate(bundleID: configuration.bundleID)
        } catch {
            let (status, reason) = MockAPNsServer.apnsAnswer(for: error)
            return reject(status, reason)
        }

        // Injected faults.
        // Folded only when a token fault is configured: no String per request otherwise.
        let lowerToken = configuration.unregisteredPrefix == nil && configuration.throttlePrefix == nil && configuration.badTokenPrefixes.isEmpty
            ? "" : String(decoding: tokenBytes, as: UTF8.self).lowercased()
        if !configuration.badTokenPrefixes.isEmpty, configuration.badTokenPrefixes.contains(where: { lowerToken.hasPrefix($0) }) {
            return reject(400, "BadDeviceToken")
        }
        if let dead = configuration.unregisteredPrefix, lowerToken.hasPrefix(dead) {
            answer = reject(410, "Unregistered")
            answer.timestamp = now
            return answer
        }
        if let throttle = configuration.throttlePrefix, lowerToken.hasPrefix(throttle) {
            let seen = throttled[lowerToken, default: 0]
            throttled[lowerToken] = seen + 1
            let window = configuration.throttleWindowMilliseconds
            if seen < configuration.throttleCount || (window > 0 && now < throttledUntil[lowerToken, default: 0]) {
                if window > 0 { throttledUntil[lowerToken] = now + window }
                return reject(429, "TooManyRequests")
            }
        }
        if !configuration.injectedErrors.isEmpty {
            let value = draw()
            var threshold = 0.0
            for error in configuration.injectedErrors {
                threshold += error.rate
                if value < threshold {
                    answer = reject(error.status, error.reason)
                    if error.status == 410 { answer.timestamp = now }
                    return answer
                }
            }
        }
        if latency != nil { (answer.stampMicros, answer.scheduledMicros) = MockAPNsServer.stamps(request.body) }
        return answer
    }

    /// Checks the request's provider token as APNs does (present, valid, under an hour old, not
    /// changed on the connection within 20 minutes): nil when it passes, else APNs' status and
    /// reason. Shared by device pushes, broadcasts and the channel management API.
    func providerTokenRejection(_ request: HTTP2ServerRequest, state: ConnectionState, now: Int64) -> (Int, String)? {
        // Compared as bytes with the connection's current token: no String per request.
        guard let authorization = request.headerBytes("authorization"), authorization.starts(with: "bearer ".utf8) else {
            return (403, "MissingProviderToken")
        }
        if faults.rejectTokens {
            statistics.tokensRejected += 1
            return (403, "InvalidProviderToken")
        }
        let jwt = authorization.dropFirst(7)
        let isCurrent = state.token.map { current in
            current.count == jwt.count && (jwt.isEmpty || current.withUnsafeBytes { a in jwt.withUnsafeBytes { b in memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 } })
        } ?? false
        let issuedAt: Int64
        if isCurrent {
            // The connection's current token: verified when it first arrived.
            issuedAt = state.tokenIssuedAt
        } else {
            switch verify(String(decoding: jwt, as: UTF8.self)) {
            case .success(let token): issuedAt = token.iat
            case .failure: return (403, "InvalidProviderToken")
            }
        }
        if now / 1000 - issuedAt > 3600 { return (403, "ExpiredProviderToken") }
        if !isCurrent {
            if state.token != nil, now - state.tokenFirstUsedAt < 20 * 60_000 {
                return (429, "TooManyProviderTokenUpdates")
            }
            state.token = Array(jwt)
            state.tokenIssuedAt = issuedAt
            state.tokenFirstUsedAt = now
        }
        return nil
    }

    /// The payload's top-level `"t"` (enqueued) and `"s"` (scheduled) as µs since the epoch, each 0
    /// when missing or not a stamp; `"s"` is read only beside a `"t"`.
    static func stamps(_ body: [UInt8]) -> (enqueued: Int64, scheduled: Int64) {
        body.withUnsafeBufferPointer { bytes in
            let scanner = JSONScanner(bytes)
            let (t, s) = scanner.rootMembers("t", "s")
            guard let t, let stamp = scanner.int64(t).flatMap(LatencyRecorder.stampMicros) else {
                return (0, 0)
            }
            let scheduled = s.flatMap(scanner.int64).flatMap(LatencyRecorder.stampMicros) ?? 0
            return (stamp, scheduled)
        }
    }

    private func verify(_ jwt: String) -> Result<ParsedProviderToken, ProviderTokenVerificationFailure> {
        let key = Array(jwt.utf8)
        if let cached = verifiedTokens[key] { return cached }
        let result: Result<ParsedProviderToken, ProviderTokenVerificationFailure>
        if let verifier {
            result = verifier.verify(jwt)
        } else {
            do { result = .success(try ParsedProviderToken.parse(jwt)) } catch { result = .failure(.malformed(error)) }
        }
        statistics.tokensVerified += 1
        if verifiedTokens.count > 256 { verifiedTokens.removeAll() }
        verifiedTokens[key] = result
        return result
    }

    /// APNs' status and reason for a request that breaks one of Herald's validation rules.
    /// APNs has no reason for malformed JSON or Live Activity fields; the emulator says `BadPayload`.
    static func apnsAnswer(for error: NotificationError) -> (Int, String) {
        switch error {
        case .missingDeviceToken: return (400, "MissingDeviceToken")
        case .badDeviceToken, .deviceTokenOddLength, .deviceTokenTooShort, .deviceTokenTooLong: return (400, "BadDeviceToken")
        case .missingTopic: return (400, "MissingTopic")
        case .badTopic, .topicTooLong: return (400, "BadTopic")
        case .badPriority: return (400, "BadPriority")
        case .badExpiration: return (400, "BadExpirationDate")
        case .emptyCollapseID, .collapseIDTooLong, .collapseIDHasControlCharacter: return (400, "BadCollapseId")
        case .badAPNsID: return (400, "BadMessageId")
        case .payloadEmpty: return (400, "PayloadEmpty")
        case .payloadTooLarge: return (413, "PayloadTooLarge")
        case .topicPushTypeMismatch: return (400, "TopicDisallowed")
        default: return (400, "BadPayload")
        }
    }

    /// A 200 answer echoing the request's `apns-id` header (nil: none): a canonical id is read
    /// from its bytes and echoed from its two words (the same text); another spelling is kept as
    /// text, to be echoed as it came; a request without one gets a fresh id.
    func acceptedAnswer(apnsID header: ArraySlice<UInt8>?) -> Answer {
        let uuid = header.flatMap(UUIDKey.init(canonical:))
        return Answer(status: 200, reason: nil, timestamp: nil,
                      apnsIDText: uuid == nil ? header.map { String(decoding: $0, as: UTF8.self) } : nil,
                      apnsIDWords: uuid.map { ($0.high, $0.low) } ?? (header == nil ? UUIDString.stamped(generatedID()) : nil),
                      uuid: uuid)
    }

    func generatedID() -> UUIDBits {
        UUIDBits(high: random.next(), low: random.next())
    }
}

public enum MockAPNsError: Error, CustomStringConvertible {
    case configuration(String)
    case file(String)

    public var description: String {
        switch self {
        case .configuration(let message): return message
        case .file(let message): return message
        }
    }
}

/// A UUID as 128 bits: the key of the emulator's per-`apns-id` counts.
struct UUIDKey: Hashable {
    let high: UInt64
    let low: UInt64

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Only the form APNs accepts in an `apns-id` (`UUIDString.isCanonical`: lowercase 8-4-4-4-12),
    /// checked and read in one pass.
    init?(canonical text: String) {
        var text = text
        guard let key = text.withUTF8({ UUIDKey(canonical: UnsafeRawBufferPointer($0)) }) else { return nil }
        self = key
    }

    /// The same, from the header's bytes.
    init?(canonical bytes: ArraySlice<UInt8>) {
        guard let key = bytes.withUnsafeBytes({ UUIDKey(canonical: $0) }) else { return nil }
        self = key
    }

    init?(canonical bytes: UnsafeRawBufferPointer) {
        guard let bits = UUIDBits(canonicalUUIDText: bytes) else { return nil }
        high = bits.high
        low = bits.low
    }
}
