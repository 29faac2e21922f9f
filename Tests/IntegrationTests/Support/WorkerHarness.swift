import APNs
import Foundation
import Glibc
import HeraldTestSupport
import Logging
import MockAPNs
import Queue
import Synchronization
import Transport
import Worker

/// The parts of a worker integration test, all real: Herald's APNs emulator over TLS and HTTP/2
/// (`EmulatorHost`), a `QueueWorker` with its `ConnectionPool` on a loop thread of its own
/// (`InProcessWorker`) or the `herald worker` binary (`WorkerProcess`), a private `redis-server`
/// (`RedisServer`) and the test's own Redis client (`RedisClient`). `QueueLedger` counts every
/// job on both sides; `waitFor` polls until a condition holds or fails with the last state.
enum WorkerHarness {
    static let teamID = "TEAM000001"
    static let keyID = "KEY0000001"
    static let bundleID = "com.example.herald"

    /// Quiet unless `HERALD_IT_LOG` names a level (e.g. `info`).
    static func makeLogger(_ label: String) -> Logger {
        guard let level = ProcessInfo.processInfo.environment["HERALD_IT_LOG"].flatMap(Logger.Level.init(rawValue:)) else {
            return Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() })
        }
        var logger = Logger(label: label, factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = level
        return logger
    }

    /// A valid 32-byte device token: `prefix`, then `index` in hex, zero-padded to 64 digits.
    static func deviceToken(_ index: Int, prefix: String = "00") -> String {
        let digits = String(index, radix: 16)
        return prefix + String(repeating: "0", count: 64 - prefix.count - digits.count) + digits
    }

    /// A small alert payload.
    static func payload(_ index: Int) -> String { #"{"aps":{"alert":"job \#(index)"}}"# }

    private static let consumerCounter = Mutex(0)

    /// A consumer name unique in this process.
    static func uniqueConsumer(_ name: String) -> String {
        let number = consumerCounter.withLock { value -> Int in value += 1; return value }
        return "it-\(getpid())-\(name)-\(number)"
    }

    // MARK: the herald binary

    /// The `herald` executable the subprocess tests run: `HERALD_BINARY` if set, else the one built
    /// next to this test bundle (same build, so never stale), else `<repo>/.build/debug/herald`,
    /// else `<repo>/.build-wt/debug/herald`. Missing: an error that says to build it first.
    static func heraldBinary(filePath: String = #filePath) throws -> String {
        var candidates: [String] = []
        if let explicit = ProcessInfo.processInfo.environment["HERALD_BINARY"], !explicit.isEmpty {
            candidates.append(explicit)
        }
        if let testExecutable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var directory = (testExecutable as NSString).deletingLastPathComponent
            // The bundle's executable may sit inside `HeraldPackageTests.xctest/`.
            if directory.hasSuffix(".xctest") { directory = (directory as NSString).deletingLastPathComponent }
            candidates.append((directory as NSString).appendingPathComponent("herald"))
        }
        // #filePath = <repo>/Tests/IntegrationTests/Support/WorkerHarness.swift
        var repository = filePath as NSString
        for _ in 0..<4 { repository = repository.deletingLastPathComponent as NSString }
        candidates.append(repository.appendingPathComponent(".build/debug/herald"))
        candidates.append(repository.appendingPathComponent(".build-wt/debug/herald"))
        for candidate in candidates where access(candidate, X_OK) == 0 {
            return candidate
        }
        throw RedisServerError(
            "the herald binary was not found (looked at \(candidates.joined(separator: ", "))); run `swift build` first "
                + "(or `swift build --scratch-path <dir> --product herald` and set HERALD_BINARY)")
    }
}

// MARK: the emulator

/// Herald's APNs emulator on a loop thread of its own, with a generated certificate (written for
/// the worker's `--ca-file`) and a generated provider key (written as a `.p8`) it verifies tokens with.
final class EmulatorHost: @unchecked Sendable {
    let thread: EventLoopThread
    let directory: TemporaryDirectory
    let certificatePath: String
    let keyPath: String
    let providerKey: ES256PrivateKey
    private(set) var port = 0
    private var server: MockAPNsServer!  // loop only

    init(_ configure: @Sendable (inout MockAPNsConfiguration) -> Void = { _ in }) async throws {
        thread = try EventLoopThread()
        directory = try TemporaryDirectory(prefix: "herald-worker-it")
        certificatePath = directory.path("emulator.pem")
        keyPath = directory.path("provider.p8")
        let pem = try ES256PrivateKey.generateP8()
        try pem.write(toFile: keyPath, atomically: true, encoding: .utf8)
        providerKey = try ES256PrivateKey(pem: pem)
        var configuration = MockAPNsConfiguration()
        configuration.port = 0
        configuration.certificateOut = certificatePath
        configuration.jwtKeyPEM = pem
        configuration.teamID = WorkerHarness.teamID
        configuration.keyID = WorkerHarness.keyID
        configure(&configuration)
        let settled = configuration
        let logger = WorkerHarness.makeLogger("herald.it.emulator")
        port = try await thread.submit { [self] in
            let server = try MockAPNsServer(loop: thread.loop, configuration: settled, logger: logger)
            try server.start()
            self.server = server
            return server.port
        }
    }

    func statistics() async throws -> MockAPNsStatistics {
        try await thread.submit { [self] in server.currentStatistics }
    }

    /// Runs `body` with the emulator on its loop (its in-process API, e.g. channels).
    func onServer<T: Sendable>(_ body: @escaping @Sendable (MockAPNsServer) throws -> T) async throws -> T {
        try await thread.submit { [self] in try body(server) }
    }

    /// How many times the emulator accepted each of `apnsIDs`.
    func acceptedCounts(_ apnsIDs: [String]) async throws -> [Int] {
        try await thread.submit { [self] in apnsIDs.map { server.acceptedCount(apnsID: $0) } }
    }

    func shutdown() {
        thread.submitAndWait { [self] in server?.stop() }
        thread.shutdown()
    }

    /// The flags that point `herald worker` at this emulator.
    var workerArguments: [String] {
        ["--apns-host", "127.0.0.1", "--apns-port", String(port), "--ca-file", certificatePath,
         "--team-id", WorkerHarness.teamID, "--key-id", WorkerHarness.keyID, "--key-file", keyPath,
         "--bundle-id", WorkerHarness.bundleID]
    }
}

// MARK: the worker in process

/// A `QueueWorker` and its `ConnectionPool` on a loop thread of their own, as one thread of
/// `herald worker` runs them. Everything loop-confined is touched only through `thread`.
final class InProcessWorker: @unchecked Sendable {
    let thread: EventLoopThread
    let configuration: WorkerConfiguration
    private var worker: QueueWorker!  // loop only
    private var stopped = false  // loop only

    init(emulator: EmulatorHost, redis: RedisEndpoint, connections: Int = 4, maxStreams: Int = 1000,
         configure: (inout WorkerConfiguration) -> Void = { _ in }) async throws {
        thread = try EventLoopThread()
        var configuration = WorkerConfiguration(consumer: WorkerHarness.uniqueConsumer("worker"))
        configuration.defaults = JobDefaults(bundleID: WorkerHarness.bundleID)
        configuration.drainTimeoutMilliseconds = 5_000
        configure(&configuration)
        self.configuration = configuration
        let settled = configuration
        let pool = PoolConfiguration(host: "127.0.0.1", port: emulator.port, connections: connections,
                                     maxStreams: maxStreams, caFile: emulator.certificatePath)
        let key = emulator.providerKey
        let logger = WorkerHarness.makeLogger("herald.it.worker")
        try await thread.submit { [self] in
            let signer = try ProviderTokenSigner(teamID: WorkerHarness.teamID, keyID: WorkerHarness.keyID, key: key)
            let tokens = try ProviderTokenSource(signer: signer, time: .system, logger: logger)
            let connectionPool = try ConnectionPool(loop: thread.loop, configuration: pool, tokens: tokens, logger: logger)
            let worker = QueueWorker(loop: thread.loop, configuration: settled, pool: connectionPool, redis: redis, logger: logger)
            worker.onStopped = { [unowned self] in stopped = true }
            self.worker = worker
            worker.start()
        }
    }

    func counters() async throws -> WorkerCounters {
        try await thread.submit { [self] in worker.counters }
    }

    /// Runs `body` with the worker on its loop (for tests that set up a state no outside
    /// event can reach on demand).
    func onLoop<T: Sendable>(_ body: @escaping @Sendable (QueueWorker) throws -> T) async throws -> T {
        try await thread.submit { [self] in try body(worker) }
    }

    /// The worker's own queue sample (what its gauges publish), nil while Redis is not ready.
    func sample() async throws -> QueueSample? {
        let thread = self.thread
        return try await withCheckedThrowingContinuation { continuation in
            thread.loop.execute { [self] in
                worker.sampleQueue { continuation.resume(returning: $0) }
            }
        }
    }

    /// Consumers this worker removed as idle (`--idle-consumer-timeout`).
    func consumersRemoved() async throws -> Int {
        try await thread.submit { [self] in worker.counters.consumersRemoved }
    }

    /// The worker's counts per queue (`configuration.queues` order).
    func queueCounters() async throws -> [WorkerCounters] {
        try await thread.submit { [self] in worker.queueCounters }
    }

    /// Notifications in flight on the pool right now.
    func inFlight() async throws -> Int {
        try await thread.submit { [self] in worker.pool.inFlight }
    }

    var isStopped: Bool { get async throws { try await thread.submit { [self] in stopped } } }

    /// Asks the worker to drain (as SIGTERM does) and waits until it has stopped.
    func drain(timeout: Duration = .seconds(20)) async throws {
        try await thread.submit { [self] in worker.drain() }
        _ = try await waitFor("the in-process worker stops after draining", timeout: timeout) {
            try await self.isStopped
        }
    }

    /// Drains (quickly: nothing should be in flight when a test ends) and ends the thread.
    func shutdown() async {
        try? await drain(timeout: .seconds(Int64(configuration.drainTimeoutMilliseconds / 1000) + 5))
        thread.shutdown()
    }
}

// MARK: the worker as a process

/// `herald worker` as a child process, its standard error kept in a file for failure messages.
final class WorkerProcess: @unchecked Sendable {
    let process: TestProcess
    let logPath: String

    init(arguments: [String], logPath: String) throws {
        let binary = try WorkerHarness.heraldBinary()
        process = TestProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["worker"] + arguments
        // Only what the test passes: no HERALD_* settings from the developer's shell.
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
        self.logPath = logPath
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits for the process to end; its exit status, or nil if it is still running at `timeout`.
    func waitForExit(timeout: Duration) async throws -> (status: Int32, signalled: Bool)? {
        let ended = try await waitFor("herald worker (pid \(pid)) exits", timeout: timeout, failOnTimeout: false) {
            !self.process.isRunning
        }
        guard ended else { return nil }
        process.waitUntilExit()
        return (process.terminationStatus, process.terminationReason == .uncaughtSignal)
    }

    /// The last lines the process logged.
    func logTail(_ characters: Int = 4000) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return String(text.suffix(characters))
    }
}

// MARK: counting every job

/// Every job's outcome at one moment, from Redis and the emulator: what the worker accepted
/// (per apns-id, so duplicates show), dead-lettered (by reason, counting each token of a fan-out
/// entry), reported as dead tokens, superseded, and what is still waiting or pending.
struct QueueLedger: Sendable, CustomStringConvertible {
    var enqueued = 0
    var acceptedUnique = 0
    var duplicates = 0
    var rejected: [String: Int] = [:]
    var deadLettered = 0
    var deadByReason: [String: Int] = [:]
    var feedback = 0
    var superseded = 0
    var jobsLength = 0
    var pending = 0
    var retry = 0
    /// Jobs held for their deliver_at (the scheduled set).
    var scheduled = 0

    /// Outcomes counted: each job (token) should have exactly one.
    var outcomes: Int { acceptedUnique + deadLettered + feedback + superseded }
    /// Every job has an outcome and nothing is left in the stream, the pending list or the retry set.
    var settled: Bool { outcomes == enqueued && jobsLength == 0 && pending == 0 && retry == 0 && scheduled == 0 }

    var description: String {
        "enqueued \(enqueued): accepted \(acceptedUnique) (+\(duplicates) duplicates), dead-lettered \(deadLettered) "
            + "\(deadByReason.sorted { $0.key < $1.key }), feedback \(feedback), superseded \(superseded) = \(outcomes); "
            + "stream \(jobsLength), pending \(pending), retry set \(retry), scheduled \(scheduled); emulator rejected \(rejected.sorted { $0.key < $1.key })"
    }

    /// Reads the ledger. `superseded` comes from the workers' counters (Redis keeps no trace of it).
    static func read(enqueued: Int, redis: RedisClient, emulator: EmulatorHost, keys: QueueKeys = QueueKeys(),
                     superseded: Int = 0) async throws -> QueueLedger {
        var ledger = QueueLedger(enqueued: enqueued, superseded: superseded)
        let statistics = try await emulator.statistics()
        ledger.acceptedUnique = statistics.acceptedUnique
        ledger.duplicates = statistics.duplicates
        ledger.rejected = statistics.rejected
        ledger.jobsLength = try await redis.integer("XLEN", keys.jobs)
        ledger.pending = try await redis.pendingCount(keys.jobs, group: keys.group)
        ledger.retry = try await redis.integer("ZCARD", keys.retry)
        ledger.scheduled = try await redis.integer("ZCARD", keys.scheduled)
        ledger.feedback = try await redis.integer("XLEN", keys.feedback)
        if try await redis.integer("XLEN", keys.dead) > 0 {
            for entry in try await redis.entries(keys.dead) {
                let tokens = entry["tokens"].map { $0.split(separator: ",").count } ?? 1
                ledger.deadLettered += tokens
                ledger.deadByReason[entry["reason"] ?? "?", default: 0] += tokens
            }
        }
        return ledger
    }
}

// MARK: waiting

struct WaitTimeout: Error, CustomStringConvertible {
    let description: String
}

/// Polls `condition` every `interval` until it holds; on timeout throws `WaitTimeout` naming
/// `what` (or returns false when `failOnTimeout` is false). No fixed sleeps decide a test.
@discardableResult
func waitFor(_ what: String, timeout: Duration, interval: Duration = .milliseconds(50), failOnTimeout: Bool = true,
             _ condition: () async throws -> Bool) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try await condition() { return true }
        if clock.now >= deadline {
            if failOnTimeout { throw WaitTimeout(description: "timed out after \(timeout) waiting until \(what)") }
            return false
        }
        try await Task.sleep(for: interval)
    }
}

/// Polls the ledger until every job is settled; on timeout throws with the last ledger (and `context`).
@discardableResult
func waitForSettledLedger(enqueued: Int, redis: RedisClient, emulator: EmulatorHost, timeout: Duration = .seconds(60),
                      superseded: @escaping () async throws -> Int = { 0 },
                      context: () -> String = { "" }) async throws -> QueueLedger {
    var last = QueueLedger()
    var lastError: (any Error)? = nil
    let settled = try await waitFor("every job has an outcome", timeout: timeout, interval: .milliseconds(100), failOnTimeout: false) {
        // Redis may be down for a while (the restart test): keep polling.
        do {
            last = try await QueueLedger.read(enqueued: enqueued, redis: redis, emulator: emulator, superseded: try await superseded())
            lastError = nil
        } catch {
            lastError = error
            return false
        }
        return last.settled || last.outcomes > enqueued
    }
    if !settled {
        throw WaitTimeout(description: "timed out after \(timeout) waiting for every job to settle: \(last)"
            + (lastError.map { "; last error: \($0)" } ?? "") + "\n\(context())")
    }
    return last
}

// MARK: one test's world

/// One worker test's world: a private redis-server, the test's Redis client, the emulator, and
/// the workers the test starts (in process or as `herald worker` processes). `close()` ends them
/// all; `withWorkerBed` makes sure it runs whatever the test does.
final class WorkerBed: @unchecked Sendable {
    let redis: RedisServer
    let client: RedisClient
    let emulator: EmulatorHost
    let keys = QueueKeys()
    private(set) var workers: [InProcessWorker] = []
    private(set) var processes: [WorkerProcess] = []

    init(appendOnly: Bool, redisTLS: RedisServer.TLS? = nil, emulator configure: @Sendable (inout MockAPNsConfiguration) -> Void) async throws {
        // Peers here close connections mid-write on purpose (GOAWAY, 503, kills, restarts); a TLS
        // write to such a socket must be an error the code handles, not a SIGPIPE that ends the
        // test process.
        signal(SIGPIPE, SIG_IGN)
        redis = try RedisServer(appendOnly: appendOnly, tls: redisTLS)
        client = try RedisClient(endpoint: redis.endpoint)
        emulator = try await EmulatorHost(configure)
    }

    /// Starts a `QueueWorker` in this process against this bed's Redis and emulator.
    @discardableResult
    func startWorker(connections: Int = 4, maxStreams: Int = 1000,
                     configure: (inout WorkerConfiguration) -> Void = { _ in }) async throws -> InProcessWorker {
        let worker = try await InProcessWorker(emulator: emulator, redis: redis.endpoint, connections: connections,
                                               maxStreams: maxStreams, configure: configure)
        workers.append(worker)
        return worker
    }

    /// Starts `herald worker` against this bed's Redis and emulator, with `extra` flags.
    func startProcess(_ extra: [String]) throws -> WorkerProcess {
        let arguments = redis.cliArguments + emulator.workerArguments + extra
        let process = try WorkerProcess(arguments: arguments, logPath: emulator.directory.path("worker-\(processes.count).log"))
        processes.append(process)
        return process
    }

    /// Adds `count` single-token jobs (`fields(i)` each) and returns their entry ids.
    @discardableResult
    func enqueue(_ count: Int, fields: @escaping @Sendable (Int) -> [(String, String)] = { index in
        [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
    }) async throws -> [String] {
        try await client.xadd(keys.jobs, count: count, fields: fields)
    }

    /// Superseded jobs, from every in-process worker's counters.
    func superseded() async throws -> Int {
        var total = 0
        for worker in workers { total += try await worker.counters().superseded }
        return total
    }

    /// Every in-process worker's counters, summed.
    func counters() async throws -> WorkerCounters {
        var total = WorkerCounters()
        for worker in workers { total = total + (try await worker.counters()) }
        return total
    }

    func ledger(enqueued: Int) async throws -> QueueLedger {
        try await QueueLedger.read(enqueued: enqueued, redis: client, emulator: emulator, keys: keys, superseded: try await superseded())
    }

    /// Waits until every job has an outcome and the queue is empty; the failure names the ledger,
    /// the workers' counters and the processes' logs.
    func waitUntilSettled(enqueued: Int, timeout: Duration = .seconds(60)) async throws -> QueueLedger {
        do {
            return try await waitForSettledLedger(
                enqueued: enqueued, redis: client, emulator: emulator, timeout: timeout, superseded: { try await self.superseded() })
        } catch let timeout as WaitTimeout {
            throw WaitTimeout(description: timeout.description + "\n" + (await diagnostics()))
        }
    }

    /// The workers' counters and the processes' logs, for failure messages.
    func diagnostics() async -> String {
        var lines: [String] = []
        for worker in workers {
            if let counters = try? await worker.counters() { lines.append("worker \(worker.configuration.consumer): \(counters)") }
        }
        for process in processes { lines.append("herald worker \(process.pid) log:\n\(process.logTail())") }
        return lines.joined(separator: "\n")
    }

    func close() async {
        for worker in workers { await worker.shutdown() }
        for process in processes where process.isRunning {
            process.signal(SIGKILL)
            _ = try? await process.waitForExit(timeout: .seconds(5))
        }
        client.shutdown()
        emulator.shutdown()
        redis.stop()
    }
}

/// Runs `body` with a fresh `WorkerBed` and closes it afterwards, also when `body` throws.
func withWorkerBed(appendOnly: Bool = false, redisTLS: RedisServer.TLS? = nil,
                   emulator configure: @Sendable (inout MockAPNsConfiguration) -> Void = { _ in },
                   _ body: (WorkerBed) async throws -> Void) async throws {
    let bed = try await WorkerBed(appendOnly: appendOnly, redisTLS: redisTLS, emulator: configure)
    do {
        try await body(bed)
    } catch {
        await bed.close()
        throw error
    }
    await bed.close()
}
