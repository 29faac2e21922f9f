import ArgumentParser
import Glibc
import HeraldBuildInfo
import LoadGen
import MockAPNs
import Queue

struct LoadGenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "loadgen",
        abstract: "Measure Herald: throughput, end-to-end latency, CPU and memory, with the exact conditions.",
        discussion: """
            Starts a private redis-server (or --redis), the APNs emulator (or --apns-host) and --workers \
            worker processes (or --attach-workers), enqueues the load, waits until every notification has \
            an outcome, stops what it started and reports. Drain mode (default) enqueues everything first \
            and starts the clock as the workers start; --rate paces the jobs instead (steady mode). \
            Latency runs from each job's enqueue time (when its XADD is queued, stamped into the payload as \
            "t") to the emulator's answer, recorded in an HdrHistogram; in steady mode a second latency \
            runs from when each job was due by the schedule ("s"), so the producer's own lateness shows \
            there. Progress shows on a terminal; in a pipe only the report. \
            Exits 1 when a notification was lost or duplicated, or the run timed out.
            """)

    @Option(help: "Notifications to send (jobs × --fanout).") var notifications = 100_000
    @Option(help: "Distinct device tokens.") var tokens = 10_000
    @Option(name: .customLong("payload-bytes"), help: "Payload size in bytes (valid JSON, padded exactly).") var payloadBytes = 256
    @Option(help: "Tokens per job (fan-out).") var fanout = 1
    @Option(name: .customLong("collapse-ratio"), help: "Share of jobs that reuse the token and collapse id of the job before (0…1).") var collapseRatio = 0.0
    @Option(name: .customLong("push-types"), help: "Push-type mix, e.g. alert=0.9,background=0.1.") var pushTypes = "alert=1"
    @Option(help: "Jobs per second, steady mode (default: none, drain mode).") var rate: Double?
    @Option(help: "Priority lanes: enqueue this many bulk jobs before the workers start, then the --rate jobs (measured) while they drain; needs --rate (default 0: no backlog).") var backlog = 0
    @Option(help: "The stream the measured jobs go to: urgent (herald:{QUEUE}:jobs:urgent) or bulk, behind the --backlog (default bulk).") var lane = "bulk"
    @Option(help: "Worker processes to start.") var workers = 1
    @Option(help: "Event loops per worker process.") var threads = 1
    @Option(help: "HTTP/2 connections per worker loop.") var connections = 4
    @Option(name: .customLong("max-streams"), help: "Concurrent streams per connection (worker and emulator).") var maxStreams = 1000
    @Option(help: "Worker XREADGROUP batch (default: the worker's, 256).") var batch: Int?
    @Flag(help: "Start the workers with --results: every outcome also goes to the results stream (default: off).") var results = false
    @Option(name: .customLong("latency-ms"), help: "Emulated APNs round trip, ms.") var latencyMilliseconds = 0
    @Option(name: .customLong("error"), help: "Emulator fault STATUS:REASON:RATE, e.g. 503:ServiceUnavailable:0.01 (repeatable).") var errors: [String] = []
    @Option(name: .customLong("goaway-after"), help: "Emulator sends GOAWAY after this many streams per connection (default: never).") var goAwayAfter: Int?
    @Option(name: .customLong("unregistered-prefix"), help: "Tokens with this hex prefix are 410 Unregistered; --unregistered-share of the tokens get it (default none).") var unregisteredPrefix: String?
    @Option(name: .customLong("unregistered-share"), help: "Share of tokens with --unregistered-prefix, 0 to 1.") var unregisteredShare = 0.05
    @Option(help: "Seconds to wait for every outcome.") var timeout = 600
    @Option(help: "Seed for tokens, collapse and push-type draws.") var seed: UInt64 = 1
    @Option(help: "Attach to this Redis instead of starting one (redis://…, or a Redis Cluster as redis+cluster://host:port,host:port/; default: a private redis-server).") var redis: String?
    @Option(name: .customLong("redis-password-file"), help: "A file holding the attached Redis' password (or env HERALD_REDIS_PASSWORD / HERALD_REDIS_PASSWORD_FILE); the workers get it in their environment (default: no password).")
    var redisPasswordFile: String?
    @Option(help: "Queue name (must be empty).") var queue = "default"
    @Option(help: "Drive N shard queues QUEUE-0 … QUEUE-(N-1) (each job to its token's shard, as herald enqueue --shards does; fan-out jobs stay whole in their first token's shard); the workers read them all and the report adds a row per queue. 1 to 256 (default: one queue).")
    var shards: Int?
    @Option(name: .customLong("apns-host"), help: "Attach to this APNs emulator instead of starting one (default: one is started).") var apnsHost: String?
    @Option(name: .customLong("apns-port"), help: "Port of the attached emulator (with --apns-host; default 443).") var apnsPort: Int?
    @Option(name: .customLong("ca-file"), help: "CA the workers trust for --apns-host (default: the system's CAs).") var caFile: String?
    @Option(name: .customLong("apns-stats"), help: "HOST:PORT of the attached emulator's --stats-port (default: the emulator loadgen starts).") var apnsStats: String?
    @Flag(name: .customLong("attach-workers"), help: "Measure workers already running: only enqueue and watch.") var attachWorkers = false
    @Option(name: .customLong("worker-metrics"), help: "HOST:PORT of an attached worker's /metrics (repeatable; for the superseded count).") var workerMetrics: [String] = []
    @Option(help: "Write the report as JSON here (default: not written).") var json: String?
    @Option(help: "Write a latency-percentile chart (SVG) here (default: not written).") var plot: String?
    @Option(help: "Write the latency over time here as CSV: per window, answers, mean and largest latency, and answers over --timeline-over-ms (steady runs summarise it in the report either way; default: not written).") var timeline: String?
    @Option(name: .customLong("timeline-window-ms"), help: "Width of the timeline's windows, ms (the emulator keeps the last 65,536).") var timelineWindowMilliseconds: Int64 = 10
    @Option(name: .customLong("timeline-over-ms"), help: "Answers slower than this count as over in the timeline, ms.") var timelineOverMilliseconds: Int64 = 5
    @Flag(name: .customLong("keep-files"), help: "Keep the temporary directory (logs, key, certificate).") var keepFiles = false

    func run() throws {
        var configuration = LoadGenConfiguration()
        configuration.notifications = notifications
        configuration.tokens = tokens
        configuration.payloadBytes = payloadBytes
        configuration.fanout = fanout
        configuration.collapseRatio = collapseRatio
        do { configuration.pushTypes = try PushTypeMix(parsing: pushTypes) } catch { throw ValidationError(error.description) }
        configuration.rate = rate
        configuration.backlog = backlog
        guard let jobLane = JobLane(rawValue: lane) else { throw ValidationError("--lane takes urgent or bulk, not \(lane)") }
        configuration.lane = jobLane
        configuration.workers = workers
        configuration.threads = threads
        configuration.connections = connections
        configuration.maxStreams = maxStreams
        configuration.batch = batch
        configuration.results = results
        configuration.latencyMilliseconds = latencyMilliseconds
        configuration.errors = errors
        configuration.goAwayAfter = goAwayAfter
        configuration.unregisteredPrefix = unregisteredPrefix?.lowercased()
        configuration.unregisteredShare = unregisteredShare
        configuration.timeoutSeconds = timeout
        configuration.seed = seed
        configuration.redisURL = redis
        if redis != nil { configuration.redisPassword = try RedisPassword.resolve(flagFile: redisPasswordFile, configFile: nil) }
        configuration.queue = queue
        configuration.shards = shards
        configuration.apnsHost = apnsHost
        configuration.apnsPort = apnsPort
        configuration.caFile = caFile
        configuration.apnsStats = apnsStats
        configuration.attachWorkers = attachWorkers
        configuration.workerMetrics = workerMetrics
        configuration.keepFiles = keepFiles
        configuration.timelineWanted = timeline != nil
        configuration.timelineWindowMilliseconds = timelineWindowMilliseconds
        configuration.timelineOverMilliseconds = timelineOverMilliseconds
        configuration.heraldVersion = HeraldVersion.string
        configuration.builtFromCommit = HeraldVersion.commit
        configuration.swiftVersion = HeraldVersion.swift
        do { try configuration.validate() } catch { throw ValidationError(error.description) }
        for error in errors where InjectedError(argument: error) == nil {
            throw ValidationError("--error takes STATUS:REASON:RATE with a rate from 0 to 1, e.g. 503:ServiceUnavailable:0.01; got \(error)")
        }

        let report = try LoadGenCommand.execute(configuration, terminal: isatty(1) == 1)
        print(report.text())
        if let json { try writeFile(json, report.json() + "\n", mode: 0o644) }
        if let plot {
            guard let latency = report.latency else { throw ValidationError("no latency was measured, so there is no plot") }
            try writeFile(plot, PercentilePlot.svg(latency: latency, title: "Herald end-to-end latency (enqueue → APNs answer)",
                                                   subtitle: LoadGenCommand.plotSubtitle(report)), mode: 0o644)
        }
        if let timeline {
            guard let series = report.timeline else {
                throw ValidationError("the emulator served no latency timeline (/_herald/timeline: one started without --measure-latency, or an older one), so there is none to write")
            }
            try writeFile(timeline, series.csv(originMicros: report.timelineOriginMicros), mode: 0o644)
        }
        if !report.isClean { throw ExitCode(ExitStatus.failure.rawValue) }
    }

    /// Runs `configuration`, with milestones and a progress line when stdout is a terminal.
    static func execute(_ configuration: LoadGenConfiguration, terminal: Bool, milestones: Bool? = nil) throws -> LoadReport {
        let run = LoadRun(configuration: configuration)
        if milestones ?? terminal {
            run.log = { line in clearProgress(terminal); print(line); fflush(nil) }
        }
        if terminal {
            run.progress = { line in
                print("\r\u{1B}[2K" + line, terminator: "")
                fflush(nil)
            }
        }
        do {
            let report = try run.run()
            clearProgress(terminal)
            return report
        } catch QueueToolError.interrupted {
            clearProgress(terminal)
            print("interrupted: everything loadgen started was stopped")
            throw ExitCode(130)
        } catch let error as LoadGenError {
            // A failed run is no usage error: say what happened, without the help text.
            clearProgress(terminal)
            let bytes = Array("error: \(error.description)\n".utf8)
            _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            throw ExitCode.failure
        }
    }

    static func clearProgress(_ terminal: Bool) {
        if terminal { print("\r\u{1B}[2K", terminator: ""); fflush(nil) }
    }

    /// Two lines of conditions under the plot's title.
    static func plotSubtitle(_ report: LoadReport) -> [String] {
        let c = report.conditions
        let rate = PercentText.grouped(Int(report.notificationsPerSecond.rounded()))
        return [
            "\(PercentText.grouped(report.notifications)) notifications · \(c.payloadBytes)-byte payloads · workers: \(c.workers) · \(c.connections) connections × \(c.maxStreams) streams",
            "\(c.shortMode): \(rate) notifications/s · emulator latency \(c.emulatorLatencyMilliseconds) ms · faults: \(c.faults)",
            "\(c.cores) cores, \(c.cpuModel), load \(c.loadAverageAtStart.prefix { $0 != " " }) · herald \(c.heraldVersion), Swift \(c.swiftVersion), git \(c.gitCommit) · \(c.date)",
        ]
    }
}
