import APNs
import Foundation
import Logging
import MockAPNs
import Transport
import Worker

/// One event-loop thread hosting Herald's APNs emulator and, on the same loop, the client under
/// test (a `ConnectionPool` fed by a `DeliveryRecorder`, or raw `APNsConnection`s watched by a
/// `ConnectionProbe`), talking real TLS and HTTP/2 over 127.0.0.1.
///
/// Every loop-confined object here is created and touched only on the loop thread: tests reach
/// them through `onLoop`, and wait for what they expect with `waitUntil`, whose conditions run on
/// the loop after each delivery event (and on a short poll for counters that raise no event).
/// That discipline is what makes the `@unchecked Sendable` true.
final class TestBed: @unchecked Sendable {
    static let teamID = "TEAM000001"
    static let keyID = "KEY0000001"
    static let topic = "com.example.herald"

    let thread: EventLoopThread
    var loop: EventLoop { thread.loop }
    let directory: TemporaryDirectory
    /// The emulator's certificate, written at start: the client's `caFile`.
    let certificatePath: String
    /// The provider key (`.p8` PEM) the emulator verifies tokens with.
    let providerKeyPEM: String
    let providerKey: ES256PrivateKey
    /// Distinguishes this test's apns-ids from any other test's.
    let idSeed = UInt64.random(in: 1..<(1 << 60))
    let logger: Logger

    // Loop-confined.
    private(set) var server: MockAPNsServer!
    var pool: ConnectionPool!
    var tokens: ProviderTokenSource?
    var recorder: DeliveryRecorder!
    var probe: ConnectionProbe!
    var rawConnections: [APNsConnection] = []
    private var waiters: [Waiter] = []
    private var pollArmed = false
    private var nextWaiterID = 0

    private struct Waiter {
        let id: Int
        let condition: @Sendable (TestBed) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
        let deadline: Int64
    }

    /// Starts the loop and the emulator (port 0, a generated certificate, token verification on).
    /// `configure` adjusts the emulator's configuration before it starts.
    init(emulator configure: @Sendable (inout MockAPNsConfiguration) throws -> Void = { _ in }) async throws {
        thread = try EventLoopThread()
        directory = try TemporaryDirectory(prefix: "herald-it")
        certificatePath = directory.path("emulator.pem")
        providerKeyPEM = try ES256PrivateKey.generateP8()
        providerKey = try ES256PrivateKey(pem: providerKeyPEM)
        logger = TestBed.makeLogger()
        var configuration = MockAPNsConfiguration()
        configuration.port = 0
        configuration.certificateOut = certificatePath
        configuration.jwtKeyPEM = providerKeyPEM
        configuration.teamID = TestBed.teamID
        configuration.keyID = TestBed.keyID
        try configure(&configuration)
        let settled = configuration
        try await thread.submit { [self] in
            let server = try MockAPNsServer(loop: loop, configuration: settled, logger: logger)
            try server.start()
            self.server = server
        }
    }

    /// Quiet unless `HERALD_IT_LOG` names a level (e.g. `info`): the pool logs every reconnect.
    static func makeLogger() -> Logger {
        guard let level = ProcessInfo.processInfo.environment["HERALD_IT_LOG"].flatMap(Logger.Level.init(rawValue:)) else {
            return Logger(label: "herald.integration", factory: { _ in SwiftLogNoOpLogHandler() })
        }
        var logger = Logger(label: "herald.integration")
        logger.logLevel = level
        return logger
    }

    /// Closes the client and the emulator, then stops the loop thread.
    func shutdown() {
        thread.submitAndWait { [self] in
            recorder?.closed = true
            pool?.stop()
            for connection in rawConnections { connection.close() }
            server?.stop()
            for waiter in waiters { waiter.continuation.resume(returning: false) }
            waiters.removeAll()
        }
        thread.shutdown()
    }

    /// Runs `body` on the loop with this bed and returns its result.
    @discardableResult
    func onLoop<T: Sendable>(_ body: @escaping @Sendable (TestBed) throws -> T) async throws -> T {
        try await thread.submit { [self] in try body(self) }
    }

    // MARK: the client

    /// A token source signing with `key` (the emulator's key unless given) on `time`.
    func makeTokenSource(key: ES256PrivateKey? = nil, refreshMinutes: Int = ProviderTokenSource.defaultRefreshMinutes,
                         time: TimeSource = .system) throws -> ProviderTokenSource {
        let signer = try ProviderTokenSigner(teamID: TestBed.teamID, keyID: TestBed.keyID, key: key ?? providerKey)
        return try ProviderTokenSource(signer: signer, refreshMinutes: refreshMinutes, time: time, logger: logger)
    }

    /// Creates the pool (trusting the emulator's certificate unless `trusted` is false) and its
    /// recorder, and starts it. Loop thread only.
    func startPool(
        connections: Int, maxStreams: Int, trusted: Bool = true, tokenKey: ES256PrivateKey? = nil,
        refreshMinutes: Int = ProviderTokenSource.defaultRefreshMinutes, time: TimeSource = .system,
        adjust: (inout PoolConfiguration) -> Void = { _ in }, retryPolicy: DeliveryRecorder.RetryPolicy = .reportOnly
    ) throws {
        var configuration = PoolConfiguration(
            host: "127.0.0.1", port: server.port, connections: connections, maxStreams: maxStreams,
            caFile: trusted ? certificatePath : nil)
        adjust(&configuration)
        let tokens = try makeTokenSource(key: tokenKey, refreshMinutes: refreshMinutes, time: time)
        self.tokens = tokens
        let pool = try ConnectionPool(loop: loop, configuration: configuration, tokens: tokens, logger: logger)
        let recorder = DeliveryRecorder(retryPolicy: retryPolicy) { [unowned self] in checkWaiters() }
        pool.delegate = recorder
        self.pool = pool
        self.recorder = recorder
        pool.start()
    }

    /// Queues `count` more notifications (device tokens starting with `tokenPrefix`) with the
    /// recorder and hands over as many as the pool has slots for. Loop thread only.
    @discardableResult
    func enqueue(_ count: Int, tokenPrefix: String = "00") -> Range<Int> {
        let first = recorder.notifications.count
        let batch = (first..<first + count).map { notification(index: $0, tokenPrefix: tokenPrefix) }
        recorder.enqueue(batch)
        recorder.feed(pool)
        return first..<first + count
    }

    /// A valid alert with a canonical apns-id unique to this bed and `index`.
    func notification(index: Int, tokenPrefix: String = "00") -> APNs.Notification {
        APNs.Notification(
            deviceToken: TestBed.deviceToken(index: index, prefix: tokenPrefix), topic: TestBed.topic, pushType: .alert,
            apnsID: apnsID(index: index), payload: Array(#"{"aps":{"alert":"notification \#(index)"}}"#.utf8))
    }

    func apnsID(index: Int) -> String {
        UUIDString.make(high: idSeed, low: UInt64(index))
    }

    /// 32 bytes of hex: `prefix` then the index, zero-padded.
    static func deviceToken(index: Int, prefix: String) -> String {
        let digits = String(index, radix: 16)
        return prefix + String(repeating: "0", count: 64 - prefix.count - digits.count) + digits
    }

    /// A raw connection to the emulator (or `host`/`port`) watched by this bed's probe. Loop only.
    func connectRaw(host: String = "127.0.0.1", port: Int? = nil, trusting caFile: String?, maxStreams: Int = 10) throws -> APNsConnection {
        if probe == nil { probe = ConnectionProbe { [unowned self] in checkWaiters() } }
        let context = try TLSContext(clientTrusting: caFile)
        let connection = APNsConnection(
            loop: loop, host: host, port: port ?? server.port, tlsContext: context, maxStreams: maxStreams,
            identifier: rawConnections.count)
        connection.delegate = probe
        rawConnections.append(connection)
        connection.connect()
        return connection
    }

    // MARK: waiting

    /// Waits until `condition` (run on the loop) holds, or `timeout` passes; returns whether it held.
    /// Conditions are re-checked after every delivery event and every few milliseconds.
    func waitUntil(timeout: Duration = .seconds(60), _ condition: @escaping @Sendable (TestBed) -> Bool) async -> Bool {
        let milliseconds = timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
        return await withCheckedContinuation { continuation in
            loop.execute { [self] in
                if condition(self) {
                    continuation.resume(returning: true)
                    return
                }
                nextWaiterID += 1
                waiters.append(Waiter(id: nextWaiterID, condition: condition, continuation: continuation,
                                      deadline: EventLoop.monotonicMilliseconds() + milliseconds))
                armPoll()
            }
        }
    }

    /// Waits until every notification queued so far has a final outcome.
    func waitForAllOutcomes(timeout: Duration = .seconds(60)) async -> Bool {
        await waitUntil(timeout: timeout) { $0.recorder.allFinal }
    }

    /// Returns once a loop timer of `milliseconds` has fired, so every timer due earlier fired
    /// first: used only to let the pool's periodic maintenance (which raises no event) run.
    func letTimersRun(milliseconds: Int64) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute { [self] in
                loop.schedule(afterMilliseconds: milliseconds) { continuation.resume() }
            }
        }
    }

    private func checkWaiters() {
        guard !waiters.isEmpty else { return }
        let now = EventLoop.monotonicMilliseconds()
        var index = 0
        while index < waiters.count {
            let waiter = waiters[index]
            if waiter.condition(self) {
                waiters.remove(at: index)
                waiter.continuation.resume(returning: true)
            } else if now >= waiter.deadline {
                waiters.remove(at: index)
                waiter.continuation.resume(returning: false)
            } else {
                index += 1
            }
        }
    }

    private func armPoll() {
        guard !pollArmed, !waiters.isEmpty else { return }
        pollArmed = true
        loop.schedule(afterMilliseconds: 5) { [weak self] in
            guard let self else { return }
            pollArmed = false
            checkWaiters()
            armPoll()
        }
    }

    // MARK: reporting

    /// What the client and the emulator counted, for failure messages. Loop only.
    func describe() -> String {
        var lines: [String] = []
        if let recorder { lines.append("client: \(recorder.summary)") }
        if let pool {
            lines.append("pool: opened \(pool.connectionsOpened), failures \(pool.connectionFailures), goaways \(pool.goAwaysReceived), resends \(pool.resends), inFlight \(pool.inFlight), ready \(pool.readyConnections), stopped \(pool.stoppedReason ?? "no")")
        }
        if let probe { lines.append("probe: \(probe.events)") }
        if let server { lines.append("emulator: \(server.currentStatistics.json())") }
        return lines.joined(separator: "\n")
    }
}
