import APNs
import ArgumentParser
import Glibc
import Logging
import MockAPNs
import Queue
import Transport
import Worker

struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run Herald's main job on embedded defaults: private Redis, the APNs emulator, 100,000 notifications.",
        discussion: """
            Starts a private redis-server in a temporary directory and the APNs emulator (TLS, HTTP/2, \
            ES256 tokens checked), enqueues the notifications, runs one worker until every one has an \
            outcome, and prints the counts and the rate. Nothing outside the temporary directory is touched.
            """)

    @Option(help: "Notifications to enqueue.") var notifications = 100_000
    @Option(help: "Distinct device tokens they go to.") var tokens = 10_000
    @Option(help: "HTTP/2 connections.") var connections = 4
    @Option(name: .customLong("max-streams"), help: "Concurrent streams per connection.") var maxStreams = 1000
    @Option(name: .customLong("latency-ms"), help: "Emulated APNs round trip, ms.") var latencyMilliseconds: Int64 = 0
    @Option(name: .customLong("log-level")) var logLevel: String?

    func run() throws {
        let logger = try makeLogger(label: "herald.demo", level: logLevel ?? "warning")
        guard notifications >= 1, tokens >= 1 else { throw ValidationError("--notifications and --tokens must be at least 1") }
        let main = try EventLoop()
        let interrupted = InterruptFlag()
        let signals = try SignalWatcher(loop: main) { _ in interrupted.value = true; main.stop() }

        var template = Array("/tmp/herald-demo-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw DemoError("cannot create a temporary directory") }
        let directory = String(cString: made)
        let redisPort = try freeLocalPort()
        print("Herald demo: \(notifications) notifications to \(tokens) device tokens")
        print("  redis-server on 127.0.0.1:\(redisPort) in \(directory)")
        let redis = try ChildProcess(["redis-server", "--port", String(redisPort), "--bind", "127.0.0.1", "--dir", directory,
                                      "--save", "", "--appendonly", "no"], logFile: directory + "/redis.log")
        defer { redis.terminate() }
        let endpoint = RedisEndpoint(host: "127.0.0.1", port: redisPort)

        // The emulator: its own loop, a generated certificate and a generated provider key.
        let keyPEM = try ES256PrivateKey.generateP8()
        let keyFile = directory + "/AuthKey_DEMO000001.p8"
        try writeFile(keyFile, keyPEM, mode: 0o600)
        var mock = MockAPNsConfiguration()
        mock.certificateOut = directory + "/mock-apns.pem"
        mock.jwtKeyPEM = keyPEM
        mock.teamID = "TEAM000001"
        mock.keyID = "DEMO000001"
        mock.bundleID = "com.example.demo"
        mock.latencyMilliseconds = latencyMilliseconds
        mock.maxStreams = UInt32(maxStreams)
        let mockThread = try EventLoopThread()
        let server = ServerBox()
        let mockConfiguration = mock
        _ = try mockThread.submitAndWait { () -> Result<Int, any Error> in
            do {
                let instance = try MockAPNsServer(loop: mockThread.loop, configuration: mockConfiguration, logger: logger)
                try instance.start()
                server.server = instance
                return .success(instance.port)
            } catch { return .failure(error) }
        }.get()
        let mockPort = mockThread.submitAndWait { server.server!.port }
        print("  APNs emulator on 127.0.0.1:\(mockPort) (TLS, HTTP/2, ES256 tokens verified)")

        try waitForRedis(endpoint)
        let keys = QueueKeys()
        let enqueueStart = EventLoop.monotonicMilliseconds()
        try enqueueJobs(endpoint: endpoint, keys: keys)
        let enqueueSeconds = Double(EventLoop.monotonicMilliseconds() - enqueueStart) / 1000
        print("  enqueued \(notifications) jobs in \(formatSeconds(enqueueSeconds)) s")

        // The worker: one loop, the pool and the Redis reader.
        let workerThread = try EventLoopThread()
        let box = WorkerBox(thread: workerThread)
        let signer = try ProviderTokenSigner(teamID: "TEAM000001", keyID: "DEMO000001", key: ES256PrivateKey(pemFile: keyFile))
        let caFile = directory + "/mock-apns.pem"
        let workerConnections = connections
        let workerStreams = maxStreams
        let start = EventLoop.monotonicMilliseconds()
        try workerThread.submitAndWait { () -> Result<Void, any Error> in
            do {
                let tokens = try ProviderTokenSource(signer: signer, time: .system, logger: logger)
                let pool = try ConnectionPool(
                    loop: workerThread.loop,
                    configuration: PoolConfiguration(host: "127.0.0.1", port: mockPort, connections: workerConnections,
                                                     maxStreams: workerStreams, caFile: caFile),
                    tokens: tokens, logger: logger)
                var configuration = WorkerConfiguration(consumer: "demo-0")
                configuration.defaults = JobDefaults(bundleID: "com.example.demo")
                let worker = QueueWorker(loop: workerThread.loop, configuration: configuration, pool: pool, redis: endpoint, logger: logger)
                box.worker = worker
                worker.start()
                return .success(())
            } catch { return .failure(error) }
        }.get()

        // Progress once a second until every job has an outcome.
        var lastPrint = start
        var counters = WorkerCounters()
        while !interrupted.value {
            counters = workerThread.submitAndWait { box.worker!.counters }
            let now = EventLoop.monotonicMilliseconds()
            if counters.jobsFinished >= notifications { break }
            if now - lastPrint >= 1000 {
                lastPrint = now
                print("  … \(counters.accepted) accepted, \(counters.jobsFinished) jobs finished")
            }
            if now - start > 600_000 { throw DemoError("the demo did not finish within 10 minutes") }
            usleep(20_000)
        }
        let seconds = Double(EventLoop.monotonicMilliseconds() - start) / 1000
        let stats = mockThread.submitAndWait { server.server!.currentStatistics }
        workerThread.submitAndWait { box.worker!.drain() }
        var stopped = false
        for _ in 0..<500 where !stopped {
            usleep(10_000)
            stopped = workerThread.submitAndWait { box.worker!.pool.inFlight == 0 }
        }
        workerThread.shutdown()
        mockThread.submitAndWait { server.server!.stop() }
        mockThread.shutdown()
        _ = signals
        if interrupted.value { print("interrupted"); throw ExitCode(130) }

        let rate = Double(counters.accepted) / max(seconds, 0.001)
        print("""
            Done in \(formatSeconds(seconds)) s: \(Int(rate)) notifications/s
              accepted by APNs (emulator):  \(stats.acceptedUnique) unique, \(stats.duplicates) duplicates
              accepted (worker):            \(counters.accepted)
              dead-lettered:                \(counters.deadLettered)
              dead tokens (feedback):       \(counters.deadTokens)
              superseded:                   \(counters.superseded)
              retried:                      \(counters.retried)
              connections × streams:        \(connections) × \(maxStreams), emulator latency \(latencyMilliseconds) ms
            """)
        if counters.accepted + counters.deadLettered + counters.deadTokens + counters.superseded != notifications {
            throw DemoError("not every notification has an outcome")
        }
    }

    private func waitForRedis(_ endpoint: RedisEndpoint) throws {
        for _ in 0..<250 {
            if try ping(endpoint) { return }
            usleep(20_000)
        }
        throw DemoError("redis-server did not start on \(endpoint)")
    }

    private func ping(_ endpoint: RedisEndpoint) throws -> Bool {
        let loop = try EventLoop()
        let connection = RedisConnection(loop: loop, endpoint: endpoint)
        let probe = Probe(loop: loop)
        connection.delegate = probe
        connection.connect()
        loop.schedule(afterMilliseconds: 1000) { loop.stop() }
        loop.run()
        return probe.ready
    }

    private func enqueueJobs(endpoint: RedisEndpoint, keys: QueueKeys) throws {
        let loop = try EventLoop()
        let connection = RedisConnection(loop: loop, endpoint: endpoint)
        let fields: [(name: String, value: [UInt8])] = [
            (JobField.token, Array(String(repeating: "ab", count: 32).utf8)),
            (JobField.payload, Array(#"{"aps":{"alert":{"title":"Herald demo","body":"Hello from the queue"}}}"#.utf8)),
        ]
        let enqueuer = Enqueuer(loop: loop, connection: connection, keys: keys, fields: fields, count: notifications,
                                baseToken: String(repeating: "ab", count: 32), distinctTokens: tokens)
        connection.delegate = enqueuer
        connection.connect()
        loop.run()
        if let error = enqueuer.error { throw DemoError(error) }
    }
}

final class InterruptFlag: @unchecked Sendable { var value = false }
final class ServerBox: @unchecked Sendable { var server: MockAPNsServer? }

/// Says whether a Redis connection came up.
final class Probe: RedisConnectionDelegate {
    let loop: EventLoop
    var ready = false
    init(loop: EventLoop) { self.loop = loop }
    func redisConnectionIsReady(_ connection: RedisConnection) { ready = true; connection.close(); loop.stop() }
    func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) { loop.stop() }
}
