import Glibc
import Queue
import Transport

/// One whole measurement: starts (or attaches to) Redis, the emulator and the workers, enqueues
/// the load, waits until every notification has an outcome, stops what it started and returns
/// the `LoadReport`.
///
/// Runs on the calling thread, which watches: Redis every 50 ms (is the queue empty?), the
/// workers' /proc every 200 ms, the emulator's stats and the progress line every 500 ms. The
/// producer runs on a loop thread of its own, so watching never delays the paced XADDs.
/// Outcomes come from their sources: accepted and duplicated from the emulator, dead letters and
/// dead tokens from Redis, superseded from the workers' /metrics.
public final class LoadRun {
    public let configuration: LoadGenConfiguration
    /// Milestones for a person ("redis-server on …"); nil keeps the run quiet.
    public var log: ((String) -> Void)?
    /// The progress line, replaced in place (the caller decides whether stdout is a terminal).
    public var progress: ((String) -> Void)?

    private var children: [ChildProcess] = []
    private var workerProcesses: [ChildProcess] = []
    /// The redis-server and emulator this run started (their CPU is reported beside the workers').
    private var helperProcesses: [(name: String, process: ChildProcess)] = []
    private var directory = ""
    /// The attached Redis' password, handed to the workers in their environment.
    private var redisPassword: String?
    /// An attached Redis Cluster (`redis+cluster://`), and the master of each of the run's queues.
    private var clusterSeeds: RedisClusterSeeds?
    private var shardEndpoints: [RedisEndpoint] = []
    private let teamID = "TEAM000001"
    private let keyID = "LOADGEN001"

    public init(configuration: LoadGenConfiguration) {
        self.configuration = configuration
    }

    /// Runs the measurement. Everything started is stopped before it returns or throws.
    public func run() throws -> LoadReport {
        try configuration.validate()
        directory = try LoadRun.makeTemporaryDirectory()
        var succeeded = false
        defer {
            stopEverything()
            if succeeded && !configuration.keepFiles { LoadRun.removeDirectory(directory) }
        }
        let report = try measure()
        succeeded = true
        if configuration.keepFiles { log?("  files kept in \(directory)") }
        return report
    }

    // MARK: the run

    private func measure() throws -> LoadReport {
        let c = configuration
        var conditions = RunConditions.machine()
        conditions.heraldVersion = c.heraldVersion
        conditions.swiftVersion = c.swiftVersion
        conditions.gitCommit = RunConditions.gitCommit(executable: c.executable)
        if conditions.gitCommit == "unknown" { conditions.gitCommit = c.builtFromCommit }
        let executable = RunConditions.resolvedPath(c.executable)
        let keys = QueueKeys(queue: c.queue)
        // The run's queues: `keys` alone, or its shards (then `keys` itself stays unused).
        let allKeys = c.queueKeys

        // Redis.
        let (endpoint, redisURL) = try startRedis()
        redisPassword = endpoint.password
        // On an attached Redis Cluster every command goes to its key's master (the shards may
        // sit on different masters); otherwise one connection to the one Redis.
        let redis: any QueueToolRedis = try clusterSeeds.map { try ClusterRedisClient(seeds: $0) } ?? BlockingRedisClient(endpoint: endpoint)
        try redis.stopOnSignals()
        try waitForRedis(redis)
        let inspector = QueueInspector(redis: redis)
        for queueKeys in allKeys {
            let before = try inspector.stats(keys: queueKeys)
            if before.depth > 0 || before.retrySize > 0 {
                throw LoadGenError("\(queueKeys.jobs) already holds \(before.depth) jobs and \(queueKeys.retry) \(before.retrySize): a measurement needs an empty queue (use another --queue)")
            }
        }
        let deadBaselineIDs = try allKeys.map { try lastEntryID(redis, key: $0.dead) }
        let deadAddedBefore = try LoadRun.entriesAdded(redis, keys: allKeys.map(\.dead))
        let feedbackAddedBefore = try LoadRun.entriesAdded(redis, keys: allKeys.map(\.feedback))
        let redisVersion = (try? redis.run(["INFO", "server"]).string).flatMap(LoadRun.redisVersion) ?? "?"
        conditions.redis = c.redisURL == nil
            ? "private redis-server \(redisVersion) on \(endpoint.host):\(endpoint.port), --save '' --appendonly no"
            : clusterSeeds.map { "attached Redis Cluster \(redisVersion) at \($0)" } ?? "attached redis \(redisVersion) at \(endpoint.host):\(endpoint.port)"

        // The emulator.
        let apns = try startEmulator(executable: executable)
        conditions.emulator = apns.description
        guard let emulatorBaseline = emulatorStatistics(apns.stats) else {
            throw LoadGenError("no stats from the emulator at http://\(apns.stats.host):\(apns.stats.port)/_herald/stats")
        }
        if c.apnsHost != nil, (emulatorBaseline.latency?.count ?? 0) > 0 || (emulatorBaseline.latencyFromSchedule?.count ?? 0) > 0 {
            log?("  note: the attached emulator already measured \(emulatorBaseline.latency?.count ?? 0) latencies "
                 + "(\(emulatorBaseline.latencyFromSchedule?.count ?? 0) from a schedule); its percentiles include them")
        }

        // The producer's loop thread (after stopOnSignals, so it inherits the blocked signals).
        let producer = try EventLoopThread()
        defer { producer.shutdown() }
        let job = ProducerBox(factory: JobFactory(configuration: c))

        var metricsAddresses = c.workerMetrics.compactMap(LocalHTTPClient.address)
        var clockStart: Int64 = 0
        var enqueueStart: Int64 = 0
        var enqueueEnd: Int64? = nil
        var backlogBox: ProducerBox? = nil
        if c.backlog > 0 {
            // The backlog: unstamped bulk jobs, all in place before the workers start.
            log?("  enqueueing a backlog of \(PercentText.grouped(c.backlog)) bulk jobs …")
            let box = ProducerBox(factory: JobFactory(configuration: c))
            backlogBox = box
            startProducer(producer, box, endpoint: endpoint, keys: keys, shards: [], backlog: true)
            while true {
                let state = producerState(producer, box)
                if let error = state.error { throw LoadGenError("enqueueing the backlog failed: \(error)") }
                if state.finished { break }
                progress?("backlog: enqueued \(PercentText.grouped(state.added)) of \(PercentText.grouped(c.backlog)) jobs")
                try redis.idle(milliseconds: 200)
            }
        }
        _ = backlogBox
        var backlogAcceptedAtStart = 0
        var backlogRate: Double? = nil
        var backlogLeft: Int? = nil
        if c.isSteady {
            if !c.attachWorkers {
                metricsAddresses = try startWorkers(executable: executable, redisURL: redisURL, apns: apns)
                try waitUntilReady(metricsAddresses, redis: redis)
            }
            enqueueStart = EventLoop.monotonicMilliseconds()
            clockStart = enqueueStart
            if c.backlog > 0 { backlogAcceptedAtStart = emulatorStatistics(apns.stats)?.since(emulatorBaseline).acceptedUnique ?? 0 }
            startProducer(producer, job, endpoint: endpoint, keys: keys, shards: c.shards == nil ? [] : allKeys)
        } else {
            log?("  enqueueing \(PercentText.grouped(c.jobs)) jobs (\(PercentText.grouped(c.notifications)) notifications) …")
            enqueueStart = EventLoop.monotonicMilliseconds()
            startProducer(producer, job, endpoint: endpoint, keys: keys, shards: c.shards == nil ? [] : allKeys)
            if c.attachWorkers {
                clockStart = enqueueStart
            } else {
                // Drain mode: the backlog first, then the workers; the clock starts as they do.
                while true {
                    let state = producerState(producer, job)
                    if let error = state.error { throw LoadGenError("enqueueing failed: \(error)") }
                    if state.finished { break }
                    progress?("enqueued \(PercentText.grouped(state.added)) of \(PercentText.grouped(c.jobs)) jobs")
                    try redis.idle(milliseconds: 200)
                }
                enqueueEnd = EventLoop.monotonicMilliseconds()
                log?("  enqueued in \(PercentText.fixed(Double(enqueueEnd! - enqueueStart) / 1000, digits: 2)) s; starting \(c.workers) worker\(c.workers == 1 ? "" : "s")")
                clockStart = EventLoop.monotonicMilliseconds()
                metricsAddresses = try startWorkers(executable: executable, redisURL: redisURL, apns: apns)
            }
        }
        let sampler = ProcessSampler(pids: workerProcesses.map(\.pid))
        let helpers = helperProcesses.map { (name: $0.name, sampler: ProcessSampler(pids: [$0.process.pid])) }
        let helperCPUAtStart = helpers.map { helper -> Double in helper.sampler.sample(); return helper.sampler.totalCPUSeconds }
        let helperWaitAtStart = helpers.map(\.sampler.totalCPUWaitSeconds)
        let ownCPUAtStart = LoadRun.ownCPUSeconds()
        let own = ProcessSampler(pids: [getpid()])
        own.sample()
        let ownWaitAtStart = own.totalCPUWaitSeconds

        // Watch until every job has an outcome.
        let deadline = clockStart + Int64(c.timeoutSeconds) * 1000
        var clockEnd: Int64 = 0
        var timedOut = false
        var lastSample: Int64 = 0
        var lastProgress = clockStart
        var lastAccepted = 0
        var producerFinished = false
        var producerBehind: Int64 = 0
        // Per queue: when it was first empty (jobs and retry set) after the producer finished.
        var emptyAt: [Int64?] = Array(repeating: nil, count: allKeys.count)
        while true {
            let now = EventLoop.monotonicMilliseconds()
            if !producerFinished {
                let state = producerState(producer, job)
                if let error = state.error { throw LoadGenError("enqueueing failed: \(error)") }
                producerFinished = state.finished
                producerBehind = state.maxBehindMicros
                if producerFinished && enqueueEnd == nil {
                    enqueueEnd = now
                    if c.backlog > 0 {
                        // Everything accepted meanwhile, minus the measured jobs (answered within
                        // milliseconds when lanes work; any not yet answered make this an underestimate).
                        let accepted = emulatorStatistics(apns.stats)?.since(emulatorBaseline).acceptedUnique ?? 0
                        let seconds = Double(max(1, now - enqueueStart)) / 1000
                        backlogRate = Double(max(0, accepted - backlogAcceptedAtStart - c.jobs)) / seconds
                        // Not XLEN: acknowledged entries stay in the stream until the worker trims it.
                        backlogLeft = (try? redis.pipeline([["XLEN", .text(keys.jobs)], ["XINFO", "GROUPS", .text(keys.jobs)]]))
                            .map { LoadRun.unfinished(depth: $0[0], groups: $0[1], group: keys.group) }
                    }
                }
            }
            if now - lastSample >= 200 {
                sampler.sample()
                for helper in helpers { helper.sampler.sample() }
                lastSample = now
                try checkWorkersAlive()
            }
            if producerFinished {
                // Both lanes of every queue: the bulk stream (and its retry set) and the urgent stream.
                let replies = try redis.pipeline(allKeys.flatMap {
                    [["XLEN", .text($0.jobs)], ["XINFO", "GROUPS", .text($0.jobs)], ["ZCARD", .text($0.retry)],
                     ["XLEN", .text($0.urgentJobs)], ["XINFO", "GROUPS", .text($0.urgentJobs)]]
                })
                let at = EventLoop.monotonicMilliseconds()
                var allEmpty = true
                for index in allKeys.indices {
                    let base = 5 * index
                    let empty = LoadRun.unfinished(depth: replies[base], groups: replies[base + 1], group: allKeys[index].group) == 0
                        && replies[base + 2].integer == 0
                        && LoadRun.unfinished(depth: replies[base + 3], groups: replies[base + 4], group: allKeys[index].group) == 0
                    if empty && emptyAt[index] == nil { emptyAt[index] = at }
                    allEmpty = allEmpty && empty
                }
                if allEmpty {
                    clockEnd = at
                    break
                }
            }
            if now >= deadline {
                timedOut = true
                clockEnd = now
                break
            }
            if let progress, now - lastProgress >= 500 {
                let stats = try QueueStatsSum(allKeys.map { try inspector.stats(keys: $0) })
                let accepted = (emulatorStatistics(apns.stats)?.since(emulatorBaseline).acceptedUnique) ?? lastAccepted
                let rate = Double(accepted - lastAccepted) * 1000 / Double(max(1, now - lastProgress))
                lastAccepted = accepted
                lastProgress = now
                progress("\(PercentText.fixed(Double(now - clockStart) / 1000, digits: 1)) s  \(PercentText.grouped(Int(rate))) accepted/s  "
                    + "accepted \(PercentText.grouped(accepted))  dead letters \(PercentText.grouped(try LoadRun.entriesAdded(redis, keys: allKeys.map(\.dead)) - deadAddedBefore))  "
                    + "dead tokens \(PercentText.grouped(try LoadRun.entriesAdded(redis, keys: allKeys.map(\.feedback)) - feedbackAddedBefore))  queue \(PercentText.grouped(stats.depth))  "
                    + "pending \(PercentText.grouped(stats.pending))  retry \(PercentText.grouped(stats.retrySize))")
            }
            try redis.idle(milliseconds: 50)
        }
        sampler.sample()
        for helper in helpers { helper.sampler.sample() }
        let ownCPU = LoadRun.ownCPUSeconds() - ownCPUAtStart
        own.sample()
        conditions.loadAverageAtEnd = RunConditions.loadAverage()

        // Count every outcome; the workers publish their counters once a second, so give the
        // superseded count up to three seconds to catch up.
        var report = LoadReport()
        report.jobs = c.jobs + c.backlog
        report.notifications = c.notifications + c.backlog
        report.backlog = c.backlog
        report.backlogRatePerSecond = backlogRate
        report.backlogLeftAtEnd = backlogLeft
        report.timedOut = timedOut
        report.wallSeconds = Double(clockEnd - clockStart) / 1000
        report.enqueueSeconds = Double((enqueueEnd ?? clockEnd) - enqueueStart) / 1000
        report.supersededKnown = !(c.attachWorkers && metricsAddresses.isEmpty)
        let countingDeadline = EventLoop.monotonicMilliseconds() + 3_000
        while true {
            // Without the emulator's counts nothing can be called delivered: say so, rather than
            // report every notification as lost.
            guard let emulator = emulatorStatistics(apns.stats)?.since(emulatorBaseline) else {
                throw LoadGenError("could not read the emulator's counts from \(apns.stats.host):\(apns.stats.port)/_herald/stats (did it exit?); the run's outcomes are unknown")
            }
            report.accepted = emulator.acceptedUnique
            report.duplicated = emulator.duplicates
            report.rejectedByAPNs = emulator.rejectedTotal
            report.latency = emulator.latency
            // A drain has no schedule: what an attached emulator holds is an earlier run's.
            report.latencyFromSchedule = c.isSteady ? emulator.latencyFromSchedule : nil
            report.deadTokens = try LoadRun.entriesAdded(redis, keys: allKeys.map(\.feedback)) - feedbackAddedBefore
            report.deadLettered = c.fanout == 1
                ? try LoadRun.entriesAdded(redis, keys: allKeys.map(\.dead)) - deadAddedBefore
                : try zip(allKeys, deadBaselineIDs).reduce(0) { $0 + (try deadLetteredNotifications(redis, key: $1.0.dead, after: $1.1)) }
            report.superseded = supersededCount(metricsAddresses)
            if report.lost <= 0 || timedOut || EventLoop.monotonicMilliseconds() >= countingDeadline { break }
            try redis.idle(milliseconds: 250)
        }
        if c.isSteady { report.producerMaxBehindMilliseconds = Double(producerBehind) / 1000 }
        if c.isSteady || c.timelineWanted {
            // The run's windows only: from the clock's start (on the wall clock the stamps use) to now.
            let nowMicros = Enqueuer.wallClockMicros()
            let startMicros = nowMicros - (EventLoop.monotonicMilliseconds() - clockStart) * 1000
            report.timelineOriginMicros = startMicros
            report.timeline = emulatorTimeline(apns.stats)?.between(startMicros, nowMicros)
        }
        if c.shards != nil {
            let perShard = producerState(producer, job).addedPerShard
            report.queues = allKeys.indices.map { index in
                let jobs = index < perShard.count ? perShard[index] : 0
                return LoadReport.QueueRow(name: allKeys[index].queue, jobs: jobs, notifications: jobs * c.fanout,
                                           emptyAfterSeconds: emptyAt[index].map { Double($0 - clockStart) / 1000 })
            }
        }
        if !c.attachWorkers {
            report.workerCPUSeconds = sampler.totalCPUSeconds
            report.peakWorkerHWMBytes = sampler.peakHWMBytes
            report.maxWorkerRSSBytes = sampler.maxRSSBytes
        }
        report.otherCPUSeconds = zip(helpers, helperCPUAtStart).map { ($0.name, $0.sampler.totalCPUSeconds - $1) } + [("loadgen", ownCPU)]
        // Waiting for a CPU: what the machine's other processes (and each other) cost the run.
        func waited(_ now: Double?, since start: Double?) -> Double? { now.map { $0 - (start ?? 0) } }
        if !c.attachWorkers { report.workerCPUWaitSeconds = sampler.totalCPUWaitSeconds }
        report.otherCPUWaitSeconds = zip(helpers, helperWaitAtStart).compactMap { helper, start in
            waited(helper.sampler.totalCPUWaitSeconds, since: start).map { (helper.name, $0) }
        } + (waited(own.totalCPUWaitSeconds, since: ownWaitAtStart).map { [("loadgen", $0)] } ?? [])
        progress?("")

        conditions.mode = c.isSteady
            ? "steady, \(PercentText.trimmed(c.rate!, digits: 1)) jobs/s paced by a 1 ms timer (latency from each job's XADD, and from its scheduled time)"
            : c.attachWorkers ? "drain, attached workers (clock from the first XADD)" : "drain (all jobs enqueued first; clock from the workers' start)"
        conditions.shortMode = c.isSteady ? "steady at \(PercentText.trimmed(c.rate!, digits: 1)) jobs/s" : c.attachWorkers ? "drain, attached workers" : "drain"
        conditions.workers = c.attachWorkers
            ? "attached (already running), /metrics: \(c.workerMetrics.isEmpty ? "not given" : c.workerMetrics.joined(separator: ", "))"
            : "\(c.workers) process\(c.workers == 1 ? "" : "es") × \(c.threads) thread\(c.threads == 1 ? "" : "s")"
        conditions.threads = c.threads
        conditions.connections = c.connections
        conditions.maxStreams = c.maxStreams
        conditions.batch = c.batch.map(String.init) ?? "worker default (256)"  // WorkerConfiguration.defaultBatch
        conditions.results = c.results
        conditions.payloadBytes = c.payloadBytes
        conditions.tokens = c.tokens
        conditions.fanout = c.fanout
        conditions.collapseRatio = c.collapseRatio
        conditions.pushTypes = c.pushTypes.description
        conditions.emulatorLatencyMilliseconds = c.latencyMilliseconds
        conditions.faults = c.faultsDescription
        report.conditions = conditions
        return report
    }

    // MARK: Redis

    private func startRedis() throws -> (RedisEndpoint, String) {
        if let url = configuration.redisURL, RedisClusterSeeds.isClusterURL(url) {
            // An attached Redis Cluster: the queue's keys live on one master, which the run
            // inspects directly; the workers get the cluster URL and route by themselves.
            var seeds: RedisClusterSeeds
            do {
                seeds = try RedisClusterSeeds(url: url)
                if let password = configuration.redisPassword {
                    var endpoints = seeds.endpoints
                    for index in endpoints.indices { endpoints[index].password = password }
                    seeds = try RedisClusterSeeds(endpoints: endpoints)
                }
            } catch { throw LoadGenError("\(error)") }
            let router = try ClusterRedisClient(seeds: seeds)
            shardEndpoints = try configuration.queueKeys.map { try router.endpoint(forQueue: $0.queue) }
            clusterSeeds = seeds
            log?("  attached Redis Cluster \(seeds); " + zip(configuration.queueKeys, shardEndpoints)
                .map { "\($0.0.queue) on \($0.1.host):\($0.1.port)" }.joined(separator: ", "))
            return (shardEndpoints[0], seeds.urlWithoutPassword)
        }
        if let url = configuration.redisURL {
            var endpoint: RedisEndpoint
            do { endpoint = try RedisEndpoint(url: url) } catch { throw LoadGenError("\(error)") }
            if let password = configuration.redisPassword { endpoint.password = password }
            // The workers' command lines are readable by every local user: the password goes apart.
            return (endpoint, endpoint.urlWithoutPassword)
        }
        // redis-server cannot pick its own port (0 turns TCP off), so one is picked here; if
        // another process binds it first, redis-server exits and the next attempt picks again.
        var attempt = 0
        while true {
            attempt += 1
            let port = try freeLocalPort()
            let process = try ChildProcess(
                ["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "", "--appendonly", "no"],
                logFile: directory + "/redis.log")
            children.append(process)
            do {
                _ = try process.waitForLine(containing: "Ready to accept connections", timeoutMilliseconds: 10_000)
            } catch {
                let portTaken = ChildProcess.lines(ofFile: process.logFile).contains { $0.contains("Address already in use") }
                if portTaken && !process.isRunning && attempt < 3 { continue }
                throw error
            }
            helperProcesses.append(("redis-server", process))
            log?("  redis-server on 127.0.0.1:\(port) in \(directory)")
            return (RedisEndpoint(host: "127.0.0.1", port: port), "redis://127.0.0.1:\(port)")
        }
    }

    private func waitForRedis(_ redis: any QueueToolRedis) throws {
        let deadline = EventLoop.monotonicMilliseconds() + 10_000
        while true {
            do {
                _ = try redis.run(["PING"], timeoutMilliseconds: 1_000)
                return
            } catch QueueToolError.interrupted {
                throw QueueToolError.interrupted
            } catch {
                if EventLoop.monotonicMilliseconds() > deadline { throw LoadGenError("Redis at \(redis.targetDescription) did not answer: \(error)") }
                try redis.idle(milliseconds: 20)
                redis.reconnect()
            }
        }
    }

    /// Entries of a jobs stream not yet finished: undelivered (the group's lag) plus pending. The
    /// workers trim finished entries only every ~100 ms (`StreamTrim`), so XLEN would end the
    /// clock up to that late; without the group (no worker read yet) every entry is unfinished.
    static func unfinished(depth: RedisReply, groups: RedisReply, group: String) -> Int {
        let depth = Int(depth.integer ?? 0)
        guard case .array(let list) = groups,
              let info = list.map(RedisReplyReader.map).first(where: { $0["name"]?.string == group }) else { return depth }
        let pending = Int(info["pending"]?.integer ?? 0)
        return QueueLag.of(reported: info["lag"]?.integer, depth: depth, pending: pending).lag + pending
    }

    /// Entries ever added to stream `key` (XINFO STREAM's `entries-added`, Redis 7.0+), which
    /// trimming does not lower: the dead-letter and feedback streams are capped at about 1M
    /// entries, so a difference of XLENs undercounts once a run pushes them past the cap. Falls
    /// back to XLEN on an older Redis; a missing stream has had none.
    /// `entriesAdded` summed over several streams (one per queue).
    static func entriesAdded(_ redis: any QueueToolRedis, keys: [String]) throws -> Int {
        try keys.reduce(0) { $0 + (try entriesAdded(redis, key: $1)) }
    }

    static func entriesAdded(_ redis: any QueueToolRedis, key: String) throws -> Int {
        let reply = try redis.pipeline([["XINFO", "STREAM", .text(key)]])[0]
        switch reply {
        case .array(let fields):
            var index = 0
            while index + 1 < fields.count {
                if fields[index].string == "entries-added", let value = fields[index + 1].integer { return Int(value) }
                index += 2
            }
            return Int(try redis.run(["XLEN", .text(key)]).integer ?? 0)
        case .error(let message) where message.contains("no such key"):
            return 0
        case .error(let message):
            throw LoadGenError("XINFO STREAM \(key): \(message)")
        default:
            throw LoadGenError("XINFO STREAM \(key): unexpected reply \(reply)")
        }
    }

    private func lastEntryID(_ redis: any QueueToolRedis, key: String) throws -> String {
        let reply = try redis.run(["XREVRANGE", .text(key), "+", "-", "COUNT", "1"])
        if case .array(let entries) = reply, case .array(let entry)? = entries.first, let id = entry.first?.string { return id }
        return "0-0"
    }

    /// Notifications in the dead-letter entries written after `after` (an entry holds one token,
    /// several, or a whole malformed job).
    private func deadLetteredNotifications(_ redis: any QueueToolRedis, key: String, after: String) throws -> Int {
        var cursor = after
        var total = 0
        while true {
            let reply = try redis.run(["XRANGE", .text(key), .text("(" + cursor), "+", "COUNT", "1000"])
            guard case .array(let entries) = reply, !entries.isEmpty else { return total }
            for case .array(let entry) in entries {
                guard entry.count == 2, let id = entry[0].string, case .array(let fields) = entry[1] else { continue }
                cursor = id
                var tokens = 1
                var index = 0
                while index + 1 < fields.count {
                    if fields[index].string == "tokens", case .bulk(let value) = fields[index + 1] {
                        tokens = value.reduce(1) { $1 == UInt8(ascii: ",") ? $0 + 1 : $0 }
                    }
                    index += 2
                }
                total += tokens
            }
        }
    }

    static func redisVersion(_ info: String) -> String? {
        for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("redis_version:") {
            return String(line.dropFirst("redis_version:".count))
        }
        return nil
    }

    // MARK: the emulator

    /// Where APNs is, how workers trust it, and where its plain-HTTP stats are.
    struct APNsTarget: CustomStringConvertible {
        var host: String
        var port: Int
        var caFile: String?
        var stats: (host: String, port: Int)
        var started: Bool
        var description: String {
            started ? "private herald mock-apns on \(host):\(port) (TLS, HTTP/2, ES256 tokens verified)" : "attached APNs at \(host):\(port)"
        }
    }

    private func startEmulator(executable: String) throws -> APNsTarget {
        let c = configuration
        if let host = c.apnsHost, let port = c.apnsPort {
            guard let stats = c.apnsStats.flatMap(LocalHTTPClient.address) else { throw LoadGenError("--apns-stats must be HOST:PORT") }
            return APNsTarget(host: host, port: port, caFile: c.caFile, stats: stats, started: false)
        }
        let keyFile = directory + "/AuthKey_\(keyID).p8"
        try PEMFile.write(ES256PrivateKey.generateP8(), to: keyFile, mode: 0o600)
        let certificate = directory + "/mock-apns.pem"
        var arguments = [executable, "mock-apns", "--host", "127.0.0.1", "--port", "0", "--cert-out", certificate,
                         "--jwt-key", keyFile, "--team-id", teamID, "--key-id", keyID, "--bundle-id", c.bundleID,
                         "--max-streams", String(c.maxStreams), "--latency-ms", String(c.latencyMilliseconds),
                         "--measure-latency", "--stats-port", "0", "--log-level", "warning",
                         // The backlog's apns-ids too: a table that grows mid-run rehashes every id at
                         // once (160 ms of the emulator's loop at a million), which every request
                         // then waiting would count as latency.
                         "--expect-notifications", String(c.notifications + c.backlog),
                         "--timeline-window-ms", String(c.timelineWindowMilliseconds), "--timeline-over-ms", String(c.timelineOverMilliseconds)]
        for error in c.errors { arguments += ["--error", error] }
        if let goAway = c.goAwayAfter { arguments += ["--goaway-after", String(goAway)] }
        if let prefix = c.unregisteredPrefix { arguments += ["--unregistered-prefix", prefix] }
        let process = try ChildProcess(arguments, logFile: directory + "/mock-apns.log")
        children.append(process)
        helperProcesses.append(("emulator", process))
        let listening = try process.waitForLine(startingWith: "listening on ")
        let stats = try process.waitForLine(startingWith: "stats on ")
        guard let apns = LocalHTTPClient.address(listening), let statsAddress = LocalHTTPClient.address(stats) else {
            throw LoadGenError("the emulator said \"listening on \(listening)\", which is not HOST:PORT")
        }
        log?("  APNs emulator on \(apns.host):\(apns.port) (TLS, HTTP/2, ES256 tokens verified, latency \(c.latencyMilliseconds) ms)")
        return APNsTarget(host: apns.host, port: apns.port, caFile: certificate, stats: statsAddress, started: true)
    }

    /// The emulator's latency timeline; nil when it serves none.
    private func emulatorTimeline(_ address: (host: String, port: Int)) -> LatencySeries? {
        guard let response = LocalHTTPClient.get(host: address.host, port: address.port, path: "/_herald/timeline"),
              response.status == 200 else { return nil }
        return LatencySeries(json: response.body)
    }

    private func emulatorStatistics(_ address: (host: String, port: Int)) -> EmulatorStatistics? {
        guard let response = LocalHTTPClient.get(host: address.host, port: address.port, path: "/_herald/stats"),
              response.status == 200 else { return nil }
        return EmulatorStatistics(json: response.body)
    }

    // MARK: workers

    /// Starts the worker processes; returns their metrics addresses.
    private func startWorkers(executable: String, redisURL: String, apns: APNsTarget) throws -> [(host: String, port: Int)] {
        let c = configuration
        var environment = ["HERALD_CONFIG": ""]
        if let redisPassword { environment["HERALD_REDIS_PASSWORD"] = redisPassword }
        if apns.started {
            environment["HERALD_TEAM_ID"] = teamID
            environment["HERALD_KEY_ID"] = keyID
            environment["HERALD_KEY_FILE"] = directory + "/AuthKey_\(keyID).p8"
            environment["HERALD_BUNDLE_ID"] = c.bundleID
        }
        var addresses: [(host: String, port: Int)] = []
        var started: [ChildProcess] = []
        for index in 0..<c.workers {
            // Port 0: each worker binds a free port itself and prints it (no pick-then-bind race).
            var arguments = [executable, "worker", "--redis", redisURL, "--queue", c.queue]
            if let shards = c.shards { arguments += ["--shards", String(shards)] }
            arguments += ["--apns-host", apns.host,
                          "--apns-port", String(apns.port), "--connections", String(c.connections),
                          "--max-streams", String(c.maxStreams), "--threads", String(c.threads),
                          "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--log-level", "warning"]
            if let caFile = apns.caFile { arguments += ["--ca-file", caFile] }
            if let batch = c.batch { arguments += ["--batch", String(batch)] }
            if c.results { arguments.append("--results") }
            let process = try ChildProcess(arguments, logFile: directory + "/worker-\(index).log", environment: environment)
            children.append(process)
            workerProcesses.append(process)
            started.append(process)
        }
        for process in started {
            let line = try process.waitForLine(startingWith: "metrics on ")
            guard let port = Int(line.filter { !$0.isWhitespace }) else {
                throw LoadGenError("a worker printed an unreadable metrics port \"\(line)\" (see \(process.logFile))")
            }
            addresses.append(("127.0.0.1", port))
        }
        return addresses
    }

    /// Steady mode measures latency under load, so the workers must be connected first.
    private func waitUntilReady(_ addresses: [(host: String, port: Int)], redis: any QueueToolRedis) throws {
        let deadline = EventLoop.monotonicMilliseconds() + 30_000
        for address in addresses {
            while LocalHTTPClient.get(host: address.host, port: address.port, path: "/readyz")?.status != 200 {
                try checkWorkersAlive()
                if EventLoop.monotonicMilliseconds() > deadline { throw LoadGenError("a worker was not ready within 30 s (see \(directory))") }
                try redis.idle(milliseconds: 20)
            }
        }
        log?("  \(addresses.count) worker\(addresses.count == 1 ? "" : "s") ready")
    }

    private func checkWorkersAlive() throws {
        for process in workerProcesses where !process.isRunning {
            let tail = ChildProcess.lines(ofFile: process.logFile).suffix(8).joined(separator: "\n  ")
            throw LoadGenError("worker \(process.pid) exited during the run; its log \(process.logFile) ends:\n  \(tail)")
        }
    }

    private func supersededCount(_ addresses: [(host: String, port: Int)]) -> Int {
        var total = 0.0
        for address in addresses {
            guard let response = LocalHTTPClient.get(host: address.host, port: address.port, path: "/metrics"), response.status == 200 else { continue }
            total += PrometheusScrape.sum(response.text, metric: "herald_notifications_total", labels: ["outcome=\"superseded\""])
        }
        return Int(total)
    }

    /// Workers first (they drain), then the emulator, then Redis.
    private func stopEverything() {
        for process in children.reversed() { process.terminate() }
        children.removeAll()
        workerProcesses.removeAll()
    }

    // MARK: the producer

    /// With `shards`, each job goes to the shard of its (first) token, as `herald enqueue --shards` does.
    /// `backlog`: the `--backlog` bulk jobs, unpaced and unstamped (stamp 0: the emulator measures
    /// no latency for them); otherwise the measured jobs, into `--lane`'s stream.
    private func startProducer(_ thread: EventLoopThread, _ box: ProducerBox, endpoint: RedisEndpoint, keys: QueueKeys, shards: [QueueKeys],
                               backlog: Bool = false) {
        let jobs = backlog ? configuration.backlog : configuration.jobs
        let rate = backlog ? nil : configuration.rate
        let lane = backlog ? JobLane.bulk : configuration.lane
        let shardEndpoints = shards.isEmpty ? [] : self.shardEndpoints
        thread.submitAndWait {
            let connection = RedisConnection(loop: thread.loop, endpoint: endpoint)
            // On a cluster each shard's XADDs go to its own master (shards on one master share a connection).
            var byNode: [String: RedisConnection] = ["\(endpoint.host):\(endpoint.port)": connection]
            let shardConnections = shardEndpoints.map { shardEndpoint -> RedisConnection in
                let node = "\(shardEndpoint.host):\(shardEndpoint.port)"
                if let known = byNode[node] { return known }
                let made = RedisConnection(loop: thread.loop, endpoint: shardEndpoint)
                byNode[node] = made
                return made
            }
            let factory = box.factory
            let enqueuer = Enqueuer(loop: thread.loop, connection: connection, keys: keys, count: jobs, ratePerSecond: rate) { index, micros in
                if backlog { return factory.fields(job: index, stampMicros: 0) }
                // Unpaced, `micros` is the send time already. Paced, it is when the job was due:
                // the payload carries both, the emulator measures from each (`latency` from the
                // XADD, `latency_from_schedule` with the producer's own lateness in it). The send
                // time is when the XADD is queued; the connection writes the tick's XADDs together
                // right after, so a tick that builds many jobs puts a few µs of them in `latency`.
                guard rate != nil else { return factory.fields(job: index, stampMicros: micros) }
                return factory.fields(job: index, stampMicros: Enqueuer.wallClockMicros(), scheduledMicros: micros)
            }
            enqueuer.lane = lane
            enqueuer.stopsLoopWhenFinished = false
            enqueuer.shards = shards
            if byNode.count > 1 { enqueuer.shardConnections = shardConnections }
            connection.delegate = enqueuer
            box.enqueuer = enqueuer
            connection.connect()
            for other in byNode.values where other !== connection {
                other.delegate = enqueuer
                other.connect()
            }
        }
    }

    private func producerState(_ thread: EventLoopThread, _ box: ProducerBox) -> ProducerBox.State {
        thread.submitAndWait {
            guard let enqueuer = box.enqueuer else { return ProducerBox.State(added: 0, finished: false, error: nil, maxBehindMicros: 0) }
            return ProducerBox.State(added: enqueuer.added, finished: enqueuer.isFinished, error: enqueuer.error,
                                     maxBehindMicros: enqueuer.maxBehindMicros, addedPerShard: enqueuer.addedPerShard)
        }
    }

    /// This process's utime + stime, seconds.
    static func ownCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    // MARK: files

    /// A new directory under $TMPDIR (or /tmp) for the run's logs, key and certificate.
    static func makeTemporaryDirectory() throws -> String {
        let base = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/herald-loadgen-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw LoadGenError("cannot create a temporary directory: \(String(cString: strerror(errno)))") }
        return String(cString: made)
    }

    /// Removes the run's directory and the files in it (it has no subdirectories).
    static func removeDirectory(_ path: String) {
        if let handle = opendir(path) {
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name != "." && name != ".." { unlink(path + "/" + name) }
            }
            closedir(handle)
        }
        rmdir(path)
    }
}

/// The producer's state, touched only on its loop thread.
final class ProducerBox: @unchecked Sendable {
    struct State: Sendable {
        var added: Int
        var finished: Bool
        var error: String?
        var maxBehindMicros: Int64
        var addedPerShard: [Int] = []
    }

    let factory: JobFactory
    var enqueuer: Enqueuer?

    init(factory: JobFactory) { self.factory = factory }
}

/// Several queues' depth, pending entries and retry-set size added up (the progress line).
struct QueueStatsSum {
    var depth = 0, pending = 0, retrySize = 0

    init(_ stats: [QueueStats]) {
        for queue in stats {
            depth += queue.depth
            pending += queue.group?.pending ?? 0
            retrySize += queue.retrySize
        }
    }
}
