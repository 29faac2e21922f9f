import APNs
import ArgumentParser
import Glibc
import HeraldBuildInfo
import HeraldConfig
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
            Reads herald:{QUEUE}:jobs with the consumer group `herald` (several queues with --queues \
            or --shards, read fairly), sends over pooled HTTP/2 \
            connections, and writes every outcome back: accepted jobs are acknowledged, dead tokens \
            go to :feedback, undeliverable jobs to :dead with a reason, retries to :retry. \
            On SIGTERM it stops reading, finishes in-flight notifications within --drain-timeout, \
            and exits 0. Run more processes (or --threads) to scale. Every flag has a HERALD_* \
            environment variable (e.g. HERALD_TEAM_ID); flags win.

            Exits 0 after a drain; 78 for a configuration error (config file, key or certificate \
            files, credentials, a HERALD_* value) and 64 for a bad flag, which a restart cannot fix; \
            69 when the metrics port is held. Redis or APNs going away never ends the worker: it \
            reconnects, and /readyz says so.
            """)

    @OptionGroup(title: "Redis") var queueOptions: QueueOptions
    @OptionGroup(title: "APNs") var target: APNsTargetOptions
    @OptionGroup(title: "APNs") var sandboxTarget: SandboxTargetOptions
    @OptionGroup(title: "Provider-token credentials") var credentials: CredentialsOptions

    @Option(name: .customLong("bundle-id"), help: "The app's bundle id: jobs without a topic use it plus the push type's suffix (env HERALD_BUNDLE_ID; default none: jobs must carry a topic).")
    var bundleID: String?
    @Option(help: "A YAML or JSON config file: settings and several apps (env HERALD_CONFIG; default none). Flags win over HERALD_* variables, which win over the file.")
    var config: String?
    @Option(help: "Entries per XREADGROUP at most, 1 to 100000 (env HERALD_BATCH; default 256).") var batch: Int?
    @Option(name: .customLong("claim-idle"), help: "Seconds before another worker's idle entries are taken over, 1 to 86400 (env HERALD_CLAIM_IDLE; default 60).") var claimIdle: Int?
    @Option(name: .customLong("idle-consumer-timeout"), help: "Seconds after which a consumer of the group that owns no pending entry (a worker that was scaled down or replaced) is removed, 0 (never) to 31536000 (env HERALD_IDLE_CONSUMER_TIMEOUT; default 3600).") var idleConsumerTimeout: Int?
    @Option(name: .customLong("max-attempts"), help: "Attempts per notification before it is dead-lettered, 1 to 1000 (env HERALD_MAX_ATTEMPTS; default 8).") var maxAttempts: Int?
    @Option(name: .customLong("max-deliveries"), help: "Deliveries of one entry to workers before it is dead-lettered, 1 to 1000000 (env HERALD_MAX_DELIVERIES; default 10).") var maxDeliveries: Int?
    @Option(name: .customLong("drain-timeout"), help: "Seconds to finish in-flight notifications on SIGTERM, 0 to 3600 (env HERALD_DRAIN_TIMEOUT; default 30).") var drainTimeout: Int?
    @Option(name: .customLong("token-backoff-capacity"), help: "Device tokens each event loop remembers as backing off after APNs answered 429 TooManyRequests (their other notifications wait in the retry set until the backoff passes; the oldest is forgotten when full), 0 (off) to 10000000 (env HERALD_TOKEN_BACKOFF_CAPACITY; default 65536).") var tokenBackoffCapacity: Int?
    @Option(help: "Event loops in this process, each with its own connections, 1 to 64 (env HERALD_THREADS; default 1).") var threads: Int?
    @Option(help: "Consumer name prefix in the group, unique per process (env HERALD_CONSUMER; default HOST-PID); the loop index is appended.") var consumer: String?
    @OptionGroup(title: "Logging") var log: LogOptions
    @Option(name: .customLong("metrics-port"), help: "Port of /metrics, /healthz and /readyz (env HERALD_METRICS_PORT; default 9464; 0 picks a free port and prints `metrics on PORT`).") var metricsPort: Int?
    @Option(name: .customLong("metrics-host"), help: "Address the metrics server binds (env HERALD_METRICS_HOST; default 0.0.0.0).") var metricsHost: String?
    @Flag(name: .customLong("no-metrics"), help: "Do not serve /metrics, /healthz, /readyz (default: served on --metrics-port).") var noMetrics = false
    @Flag(help: "Write every notification's outcome to herald:{QUEUE}:results for every queue this worker reads (env HERALD_RESULTS=1; default off: only jobs with receipt=1 get results).") var results = false
    @Option(name: .customLong("results-queues"), help: "Comma-separated queues whose every outcome goes to their results stream, of those this worker reads (env HERALD_RESULTS=NAME,NAME; default none).") var resultsQueues: String?
    @Option(name: .customLong("results-max-length"), help: "Results streams are trimmed to about this many entries, 1 to 100000000 (env HERALD_RESULTS_MAX_LENGTH; default 100000).") var resultsMaxLength: Int?

    /// A value out of range is a usage error (64) when a flag gave it, and a configuration error
    /// (78) when HERALD_* or the config file did: a restart cannot fix either, and systemd's
    /// RestartPreventExitStatus names both, but the status tells the operator where to look.
    private func outOfRange(flagGiven: Bool, _ message: String) -> any Error {
        flagGiven ? ValidationError(message) : CommandFailure.configuration(message + " (from HERALD_* or the config file)")
    }

    func run() throws {
        let file = try CommandFailure.configuring { try (config ?? environmentValue("CONFIG")).map(ConfigFile.load) }
        let logger = try log.makeLogger(label: "herald.worker", fileLevel: file?.logLevel, fileFormat: file?.logFormat)
        var queueSettings = queueOptions
        if queueSettings.redis == nil && environmentValue("REDIS") == nil { queueSettings.redis = file?.redis }
        if queueSettings.sentinel == nil && environmentValue("SENTINEL") == nil { queueSettings.sentinel = file?.sentinel }
        if queueSettings.sentinelMaster == nil && environmentValue("SENTINEL_MASTER") == nil { queueSettings.sentinelMaster = file?.sentinelMaster }
        // On a Redis Cluster each loop routes every queue to the master of the queue's slot; with
        // Sentinel it asks the sentinels for the master; otherwise the one Redis.
        let clusterSeeds = try queueSettings.isCluster(configCluster: file?.redisCluster)
            ? try CommandFailure.configuring { try queueSettings.clusterSeeds(configPasswordFile: file?.redisPasswordFile) } : nil
        let (endpoint, sentinel) = try clusterSeeds.map { ($0.endpoints[0], nil) } ?? CommandFailure.configuring {
            try queueSettings.target(configPasswordFile: file?.redisPasswordFile, configSentinelPasswordFile: file?.sentinelPasswordFile,
                                     configTLS: file.map { RedisTLS(caFile: $0.redisCAFile, certificateFile: $0.redisCert, keyFile: $0.redisKey) })
        }
        let queues = try queueSettings.queueKeys(file: file)
        let threadCount = try threads ?? intEnvironment("THREADS") ?? file?.threads ?? 1
        guard (1...64).contains(threadCount) else { throw outOfRange(flagGiven: threads != nil, "--threads must be 1 to 64, not \(threadCount)") }
        var base = WorkerConfiguration(consumer: "")
        base.queues = queues
        base.batch = try batch ?? intEnvironment("BATCH") ?? file?.batch ?? base.batch
        let claimIdleSeconds = try claimIdle ?? intEnvironment("CLAIM_IDLE") ?? file?.claimIdle ?? 60
        guard (1...86_400).contains(claimIdleSeconds) else { throw outOfRange(flagGiven: claimIdle != nil, "--claim-idle must be 1 to 86400 seconds, not \(claimIdleSeconds)") }
        base.claimIdleMilliseconds = Int64(claimIdleSeconds) * 1000
        let idleConsumerSeconds = try idleConsumerTimeout ?? intEnvironment("IDLE_CONSUMER_TIMEOUT") ?? file?.idleConsumerTimeout ?? 3_600
        guard (0...31_536_000).contains(idleConsumerSeconds) else {
            throw outOfRange(flagGiven: idleConsumerTimeout != nil, "--idle-consumer-timeout must be 0 (never) to 31536000 seconds, not \(idleConsumerSeconds)")
        }
        base.idleConsumerTimeoutMilliseconds = Int64(idleConsumerSeconds) * 1000
        base.maxAttempts = try maxAttempts ?? intEnvironment("MAX_ATTEMPTS") ?? file?.maxAttempts ?? base.maxAttempts
        base.maxDeliveries = try maxDeliveries ?? intEnvironment("MAX_DELIVERIES") ?? file?.maxDeliveries ?? base.maxDeliveries
        let drainSeconds = try drainTimeout ?? intEnvironment("DRAIN_TIMEOUT") ?? file?.drainTimeout ?? 30
        guard (0...3_600).contains(drainSeconds) else { throw outOfRange(flagGiven: drainTimeout != nil, "--drain-timeout must be 0 to 3600 seconds, not \(drainSeconds)") }
        base.drainTimeoutMilliseconds = Int64(drainSeconds) * 1000
        base.tokenBackoffCapacity = try tokenBackoffCapacity ?? intEnvironment("TOKEN_BACKOFF_CAPACITY") ?? file?.tokenBackoffCapacity ?? base.tokenBackoffCapacity
        guard (0...10_000_000).contains(base.tokenBackoffCapacity) else {
            throw outOfRange(flagGiven: tokenBackoffCapacity != nil, "--token-backoff-capacity must be 0 (off) to 10000000, not \(base.tokenBackoffCapacity)")
        }
        guard (1...100_000).contains(base.batch) else { throw outOfRange(flagGiven: batch != nil, "--batch must be 1 to 100000, not \(base.batch)") }
        guard (1...1_000).contains(base.maxAttempts) else { throw outOfRange(flagGiven: maxAttempts != nil, "--max-attempts must be 1 to 1000, not \(base.maxAttempts)") }
        guard (1...1_000_000).contains(base.maxDeliveries) else { throw outOfRange(flagGiven: maxDeliveries != nil, "--max-deliveries must be 1 to 1000000, not \(base.maxDeliveries)") }
        base.results = try resultsSelection(file: file, queues: queues.map(\.queue))
        base.resultsMaxLength = try resultsMaxLength ?? intEnvironment("RESULTS_MAX_LENGTH") ?? file?.resultsMaxLength ?? base.resultsMaxLength
        guard (1...100_000_000).contains(base.resultsMaxLength) else {
            throw outOfRange(flagGiven: resultsMaxLength != nil, "--results-max-length must be 1 to 100000000, not \(base.resultsMaxLength)")
        }

        // The settings above are checked first, so a value out of range is named before credentials are.
        let apps = try resolveApps(file: file)
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
        let consumerPrefix = consumer ?? environmentValue("CONSUMER") ?? "\(hostName())-\(getpid())"
        let metrics = HeraldMetrics()
        let health = HealthState(loops: threadCount)
        // The version and commit, as the usual constant-1 info gauge: join on it to tell deploys apart.
        metrics.gauge("herald_build_info", [("version", HeraldVersion.string), ("commit", HeraldVersion.commit),
                                            ("swift_version", HeraldVersion.swift)]).record(1)
        var metricsServer: MetricsHTTPServer? = nil
        if !noMetrics {
            let port = try metricsPort ?? intEnvironment("METRICS_PORT") ?? file?.metricsPort ?? 9464
            let publisher = MetricsHTTPServer.Publisher(metrics: metrics)
            var statistics: () -> MetricsHTTPServer.Statistics? = { nil }
            let server = MetricsHTTPServer(loop: main) { path in
                if path == "/metrics", let current = statistics() { publisher.publish(current) }
                return serveOperations(path: path, metrics: metrics, health: health)
            }
            statistics = { [weak server] in server?.currentStatistics }
            do {
                try server.start(host: metricsHost ?? environmentValue("METRICS_HOST") ?? file?.metricsHost ?? "0.0.0.0", port: port)
            } catch {
                // Most often the previous process still holds the port: worth a restart (69).
                throw CommandFailure.unavailable("cannot serve metrics on port \(port): \(error) (use --metrics-port or --no-metrics)")
            }
            metricsServer = server
            logger.info("metrics on :\(server.port)/metrics, health on /healthz and /readyz")
            if port == 0 {
                // A port the kernel picked is useless unless said, whatever the log level.
                print("metrics on \(server.port)")
                fflush(nil)
            }
        }
        for index in 0..<threadCount {
            let thread = try EventLoopThread()
            loops.append(thread)
            var configuration = base
            configuration.consumer = "\(consumerPrefix)-\(index)"
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
            let consumerConfig = configuration
            try thread.submitAndWait { () -> Result<Void, any Error> in
                do {
                    var workerApps: [WorkerApp] = []
                    for app in apps {
                        var appLogger = threadLogger
                        appLogger[metadataKey: "app"] = "\(app.name)"
                        let tokens = try app.credentials?.tokenSource(time: .system, logger: appLogger)
                        // Fails only on what the settings name: a CA, certificate or key file.
                        let pool = try CommandFailure.configuring {
                            try ConnectionPool(loop: thread.loop, configuration: app.pool, tokens: tokens, logger: appLogger)
                        }
                        pool.credentialsReloader = app.credentials?.reloader
                        // Both environments, or a broadcast host: another pool with the same
                        // credentials (provider tokens and certificates are valid for every host).
                        func secondPool(_ configuration: PoolConfiguration?, _ label: String, _ value: String) throws -> ConnectionPool? {
                            guard let configuration else { return nil }
                            var logger = appLogger
                            logger[metadataKey: label] = "\(value)"
                            let made = try CommandFailure.configuring {
                                try ConnectionPool(loop: thread.loop, configuration: configuration, tokens: tokens, logger: logger)
                            }
                            made.credentialsReloader = app.credentials?.reloader
                            return made
                        }
                        let sandboxPool = try secondPool(app.sandboxPool, "environment", "sandbox")
                        let broadcastPool = try secondPool(app.broadcastPool, "pool", "broadcast")
                        workerApps.append(WorkerApp(name: app.name, pool: pool, defaults: app.defaults, sandboxPool: sandboxPool,
                                                    broadcastPool: broadcastPool))
                    }
                    let worker = QueueWorker(loop: thread.loop, configuration: consumerConfig, apps: workerApps, redis: endpoint,
                                             sentinel: sentinel, logger: threadLogger)
                    worker.cluster = clusterSeeds.map { RedisClusterRouter(loop: thread.loop, seeds: $0, logger: threadLogger) }
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
        for app in apps {
            logger.info("worker started", metadata: [
                "version": "\(HeraldVersion.string)", "commit": "\(HeraldVersion.commit)",
                "queue": "\(queues.map(\.queue).joined(separator: ","))", "redis": "\(clusterSeeds?.description ?? sentinel.map { "sentinel \($0.summary)" } ?? endpoint.description)", "app": "\(app.name)", "apns": "\(app.pool.host):\(app.pool.port)\(app.sandboxPool.map { " and sandbox \($0.host):\($0.port)" } ?? "")\(app.broadcastPool.map { ", broadcasts \($0.host):\($0.port)" } ?? "")",
                "auth": "\(app.credentials == nil ? "certificate" : "token")", "threads": "\(threadCount)",
                "connections": "\(app.pool.connections)", "max_streams": "\(app.pool.maxStreams)",
            ])
        }
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
            "superseded": "\(total.superseded)", "retried": "\(total.retried)", "handed_back": "\(total.handedBack)", "scheduled": "\(total.scheduled)",
        ])
    }
}

/// One app as configured: where it sends, how it authenticates (token credentials, or none when
/// the pool presents a certificate), and its job defaults.
struct ResolvedApp: Sendable {
    let name: String
    let pool: PoolConfiguration
    /// With environment `both`: the sandbox pool beside `pool` (production).
    var sandboxPool: PoolConfiguration? = nil
    /// With a broadcast host: the pool the app's broadcasts go to.
    var broadcastPool: PoolConfiguration? = nil
    let credentials: ResolvedCredentials?
    let defaults: JobDefaults
}

extension WorkerCommand {
    /// `--results` / `--results-queues`, else HERALD_RESULTS (`1`, `true`, `0`, `false`, or queue
    /// names), else the file's `results:` (true, false, or a list of queue names). A named queue
    /// the worker does not read is a mistake that would silently write nothing: refused.
    func resultsSelection(file: ConfigFile?, queues: [String]) throws -> ResultsSelection {
        let selection: ResultsSelection
        var fromFlag = false
        if results {
            selection = .all
            fromFlag = true
        } else if let resultsQueues {
            selection = .queues(Set(resultsQueues.split(separator: ",").map { String($0.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed()) }.filter { !$0.isEmpty }))
            fromFlag = true
        } else if let text = environmentValue("RESULTS") {
            switch text.lowercased() {
            case "1", "true", "yes", "on", "all": selection = .all
            case "", "0", "false", "no", "off": selection = .none
            default: selection = .queues(Set(text.split(separator: ",").map { String($0.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed()) }.filter { !$0.isEmpty }))
            }
        } else {
            switch file?.results {
            case .enabled(true)?: selection = .all
            case .enabled(false)?, nil: selection = .none
            case .queues(let names)?: selection = .queues(Set(names))
            }
        }
        if case .queues(let names) = selection {
            let unknown = names.subtracting(queues).sorted()
            if !unknown.isEmpty {
                throw outOfRange(flagGiven: fromFlag, "results are asked for queues this worker does not read: \(unknown.joined(separator: ", ")) "
                    + "(it reads \(queues.joined(separator: ", ")); use --results for all of them)")
            }
        }
        return selection
    }

    func resolveApps(file: ConfigFile?) throws -> [ResolvedApp] {
        try Herald.resolveApps(file: file, target: target, sandbox: sandboxTarget, credentials: credentials, bundleID: bundleID)
    }
}

extension Herald {
    /// The apps a worker (or `herald send --app`) serves: `default` from flags and HERALD_* (over
    /// the file's `default`), and every other app of the config file.
    /// `sandbox`: the worker's sandbox host flags (nil for `herald send`, which sends to production only).
    static func resolveApps(file: ConfigFile?, target: APNsTargetOptions, sandbox: SandboxTargetOptions? = nil,
                            credentials: CredentialsOptions, bundleID: String?) throws -> [ResolvedApp] {
        var result: [ResolvedApp] = []
        let fileApps = file?.apps ?? [:]
        let names = Set(fileApps.keys).union(fileApps.isEmpty || credentials.anyGiven ? [WorkerApp.defaultName] : [])
        for name in names.sorted(by: { ($0 == WorkerApp.defaultName ? "" : $0) < ($1 == WorkerApp.defaultName ? "" : $1) }) {
            let fileApp = fileApps[name]
            let isDefault = name == WorkerApp.defaultName
            var pool = isDefault
                ? try target.poolConfiguration(file: fileApp)
                : try APNsTargetOptions.poolConfiguration(
                    environment: fileApp?.environment, host: fileApp?.apnsHost, port: fileApp?.apnsPort, caFile: fileApp?.caFile,
                    connections: fileApp?.connections, maxStreams: fileApp?.maxStreams)
            var tokenCredentials: ResolvedCredentials? = nil
            if let fileApp, fileApp.certificateFile != nil || fileApp.pkcs12File != nil, !(isDefault && credentials.anyGiven) {
                pool.clientCertificate = try clientCertificate(for: fileApp, name: name)
            } else {
                tokenCredentials = isDefault
                    ? try credentials.resolved(file: fileApp, appName: name)
                    : try CredentialsOptions.resolved(fileApp: fileApp, appName: name)
            }
            pool.responseTimeoutMilliseconds = try target.responseTimeoutMilliseconds()
            pool.pingIntervalMilliseconds = try target.pingIntervalMilliseconds()
            let sandboxPool = isDefault
                ? try target.sandboxPoolConfiguration(production: pool, sandbox: sandbox, file: fileApp)
                : try APNsTargetOptions.sandboxPoolConfiguration(environment: fileApp?.environment, production: pool,
                                                                 host: fileApp?.apnsSandboxHost, port: fileApp?.apnsSandboxPort)
            let broadcastPool = isDefault
                ? try target.broadcastPoolConfiguration(push: pool, file: fileApp)
                : try APNsTargetOptions.broadcastPoolConfiguration(push: pool, host: fileApp?.broadcastHost, port: fileApp?.broadcastPort)
            let bundle = isDefault ? (bundleID ?? environmentValue("BUNDLE_ID") ?? fileApp?.bundleID) : fileApp?.bundleID
            result.append(ResolvedApp(name: name, pool: pool, sandboxPool: sandboxPool, broadcastPool: broadcastPool,
                                      credentials: tokenCredentials, defaults: JobDefaults(bundleID: bundle)))
        }
        return result
    }

    private static func clientCertificate(for app: ConfigFile.App, name: String) throws -> ClientCertificate {
        if let p12 = app.pkcs12File {
            checkSecretFilePermissions(p12, warn: printWarning)
            let password = try CommandFailure.configuring { try app.pkcs12PasswordFile.map { try readSecretFile($0, warn: printWarning) } ?? "" }
            return .pkcs12(file: p12, password: password)
        }
        guard let certificate = app.certificateFile, let key = app.privateKeyFile else {
            throw CommandFailure.configuration("app \(name): certificate auth needs certificate_file and private_key_file (or pkcs12_file)")
        }
        checkSecretFilePermissions(key, warn: printWarning)
        return .pem(certificateFile: certificate, keyFile: key)
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
