import APNs
import ArgumentParser
import Glibc
import Logging
import Observability
import Queue
import Transport
import Worker

struct WorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Deliver the jobs of a Redis queue to APNs until SIGTERM or SIGINT.",
        discussion: """
            Reads herald:{QUEUE}:jobs with the consumer group `herald`, sends over pooled HTTP/2 \
            connections, and writes every outcome back: accepted jobs are acknowledged, dead tokens \
            go to :feedback, undeliverable jobs to :dead with a reason, retries to :retry. \
            On SIGTERM it stops reading, finishes in-flight notifications within --drain-timeout, \
            and exits 0. Run more processes (or --threads) to scale. Every flag has a HERALD_* \
            environment variable (e.g. HERALD_TEAM_ID); flags win.
            """)

    @OptionGroup var queueOptions: QueueOptions
    @OptionGroup var target: APNsTargetOptions
    @OptionGroup var credentials: CredentialsOptions

    @Option(name: .customLong("bundle-id"), help: "The app's bundle id: jobs without a topic use it plus the push type's suffix (env HERALD_BUNDLE_ID).")
    var bundleID: String?
    @Option(help: "Entries per XREADGROUP at most (env HERALD_BATCH; default 512).") var batch: Int?
    @Option(name: .customLong("claim-idle"), help: "Seconds before another worker's idle entries are taken over (env HERALD_CLAIM_IDLE; default 60).") var claimIdle: Int?
    @Option(name: .customLong("max-attempts"), help: "Attempts per notification before it is dead-lettered (env HERALD_MAX_ATTEMPTS; default 8).") var maxAttempts: Int?
    @Option(name: .customLong("max-deliveries"), help: "Deliveries of one entry to workers before it is dead-lettered (env HERALD_MAX_DELIVERIES; default 10).") var maxDeliveries: Int?
    @Option(name: .customLong("drain-timeout"), help: "Seconds to finish in-flight notifications on SIGTERM (env HERALD_DRAIN_TIMEOUT; default 30).") var drainTimeout: Int?
    @Option(help: "Event loops in this process, each with its own connections (env HERALD_THREADS; default 1).") var threads: Int?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error, critical (env HERALD_LOG_LEVEL).") var logLevel: String?
    @Option(name: .customLong("log-format"), help: "text, json or logfmt (env HERALD_LOG_FORMAT; default text).") var logFormat: String?
    @Option(name: .customLong("metrics-port"), help: "Port of /metrics, /healthz and /readyz (env HERALD_METRICS_PORT; default 9464; 0 picks a free port).") var metricsPort: Int?
    @Option(name: .customLong("metrics-host"), help: "Address the metrics server binds (env HERALD_METRICS_HOST; default 0.0.0.0).") var metricsHost: String?
    @Flag(name: .customLong("no-metrics"), help: "Do not serve /metrics, /healthz, /readyz.") var noMetrics = false

    func run() throws {
        let logger = try makeLogger(label: "herald.worker", level: logLevel, format: logFormat)
        let endpoint = try queueOptions.endpoint()
        let keys = queueOptions.keys()
        let poolConfiguration = try target.poolConfiguration()
        let threadCount = try threads ?? intEnvironment("THREADS") ?? 1
        guard (1...64).contains(threadCount) else { throw ValidationError("--threads must be 1 to 64") }
        var base = WorkerConfiguration(consumer: "")
        base.keys = keys
        base.defaults = JobDefaults(bundleID: bundleID ?? environmentValue("BUNDLE_ID"))
        base.batch = try batch ?? intEnvironment("BATCH") ?? base.batch
        base.claimIdleMilliseconds = Int64(try claimIdle ?? intEnvironment("CLAIM_IDLE") ?? 60) * 1000
        base.maxAttempts = try maxAttempts ?? intEnvironment("MAX_ATTEMPTS") ?? base.maxAttempts
        base.maxDeliveries = try maxDeliveries ?? intEnvironment("MAX_DELIVERIES") ?? base.maxDeliveries
        base.drainTimeoutMilliseconds = Int64(try drainTimeout ?? intEnvironment("DRAIN_TIMEOUT") ?? 30) * 1000
        guard base.batch >= 1 else { throw ValidationError("--batch must be at least 1") }
        guard base.maxAttempts >= 1 else { throw ValidationError("--max-attempts must be at least 1") }
        // Refuse to start without credentials, and say how to try Herald locally instead.
        let resolvedCredentials = try credentials.resolved()
        _ = try resolvedCredentials.tokenSource(time: .system, logger: logger)

        let main = try EventLoop()
        var stopping = false
        let running = RunningCount(threadCount)
        var loops: [EventLoopThread] = []
        var workers: [WorkerBox] = []
        let signals = try SignalWatcher(loop: main) { signal in
            if stopping { return }
            stopping = true
            logger.info("signal \(signal): draining")
            for box in workers { box.drain() }
        }
        let host = hostName()
        let pid = getpid()
        let metrics = HeraldMetrics()
        let health = HealthState(loops: threadCount)
        metrics.gauge("herald_build_info", [("version", HeraldVersion.string), ("swift_version", HeraldVersion.swift)]).record(1)
        var metricsServer: MetricsHTTPServer? = nil
        if !noMetrics {
            let port = try metricsPort ?? intEnvironment("METRICS_PORT") ?? 9464
            let server = MetricsHTTPServer(loop: main) { path in
                serveOperations(path: path, metrics: metrics, health: health)
            }
            do {
                try server.start(host: metricsHost ?? environmentValue("METRICS_HOST") ?? "0.0.0.0", port: port)
            } catch {
                throw ValidationError("cannot serve metrics on port \(port): \(error) (use --metrics-port or --no-metrics)")
            }
            metricsServer = server
            logger.info("metrics on :\(server.port)/metrics, health on /healthz and /readyz")
        }
        for index in 0..<threadCount {
            let thread = try EventLoopThread()
            loops.append(thread)
            var configuration = base
            configuration.consumer = "\(host)-\(pid)-\(index)"
            var loggerWithThread = logger
            loggerWithThread[metadataKey: "thread"] = "\(index)"
            let threadLogger = loggerWithThread
            let box = WorkerBox(thread: thread)
            workers.append(box)
            let stoppedOnMain: @Sendable () -> Void = {
                main.execute {
                    running.value -= 1
                    if running.value == 0 { main.stop() }
                }
            }
            let poolConfig = poolConfiguration
            let consumerConfig = configuration
            try thread.submitAndWait { () -> Result<Void, any Error> in
                do {
                    let tokens = try resolvedCredentials.tokenSource(time: .system, logger: threadLogger)
                    let pool = try ConnectionPool(loop: thread.loop, configuration: poolConfig, tokens: tokens, logger: threadLogger)
                    let worker = QueueWorker(loop: thread.loop, configuration: consumerConfig, pool: pool, redis: endpoint, logger: threadLogger)
                    let publisher = WorkerMetrics(metrics: metrics, health: health, loopIndex: index, worker: worker)
                    worker.onStopped = {
                        publisher.stop()
                        stoppedOnMain()
                    }
                    box.worker = worker
                    box.publisher = publisher
                    worker.start()
                    publisher.start()
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }.get()
        }
        logger.info("worker started", metadata: [
            "queue": "\(keys.queue)", "redis": "\(endpoint)", "apns": "\(poolConfiguration.host):\(poolConfiguration.port)",
            "threads": "\(threadCount)", "connections": "\(poolConfiguration.connections)", "max_streams": "\(poolConfiguration.maxStreams)",
        ])
        main.run()
        _ = signals
        metricsServer?.stop()
        var total = WorkerCounters()
        for box in workers {
            total = total + box.thread.submitAndWait { box.worker?.counters ?? WorkerCounters() }
            box.thread.shutdown()
        }
        logger.info("worker exited", metadata: [
            "accepted": "\(total.accepted)", "dead_lettered": "\(total.deadLettered)", "dead_tokens": "\(total.deadTokens)",
            "superseded": "\(total.superseded)", "retried": "\(total.retried)", "handed_back": "\(total.handedBack)",
        ])
    }
}

/// Worker loops still running; touched only on the main loop.
final class RunningCount: @unchecked Sendable {
    var value: Int
    init(_ value: Int) { self.value = value }
}

/// Holds one loop's worker; touched only on that loop's thread.
final class WorkerBox: @unchecked Sendable {
    let thread: EventLoopThread
    var worker: QueueWorker?
    var publisher: WorkerMetrics?

    init(thread: EventLoopThread) { self.thread = thread }

    func drain() {
        thread.loop.execute { [self] in worker?.drain() }
    }
}

func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    gethostname(&buffer, buffer.count)
    let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return name.isEmpty ? "herald" : name
}

/// The answers of the operations endpoints.
func serveOperations(path: String, metrics: HeraldMetrics, health: HealthState) -> MetricsHTTPServer.Response {
    switch path {
    case "/metrics":
        return MetricsHTTPServer.Response(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: metrics.render())
    case "/healthz":
        let (live, why) = health.isLive(now: EventLoop.monotonicMilliseconds())
        return MetricsHTTPServer.Response(status: live ? 200 : 503, body: Array((why + "\n").utf8))
    case "/readyz":
        let (ready, why) = health.isReady()
        return MetricsHTTPServer.Response(status: ready ? 200 : 503, body: Array((why + "\n").utf8))
    default:
        return MetricsHTTPServer.Response(status: 404, body: Array("try /metrics, /healthz or /readyz\n".utf8))
    }
}

/// Herald's version, shown in herald_build_info and --version.
enum HeraldVersion {
    static let string = "0.1.0"
    #if swift(>=6.3)
    static let swift = "6.3"
    #else
    static let swift = "6"
    #endif
}
