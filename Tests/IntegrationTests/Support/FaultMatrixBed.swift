import Foundation
import Glibc
import Queue
import Testing
import Transport

/// One cell of the fault matrix, all real processes: a private `redis-server` (`RedisServer`,
/// append-only when the cell restarts it), the test's `RedisClient`, the `herald mock-apns` binary
/// with its plain-HTTP control port (`/_herald/...`, switched while the worker runs), and `herald
/// worker` processes with their metrics port. `ledger()` counts every job from Redis (jobs stream,
/// pending list, retry set, dead letters, feedback) and the emulator's per-apns-id counts.
final class MatrixBed: @unchecked Sendable {
    let name: String
    let redis: RedisServer
    let client: RedisClient
    let directory: TemporaryDirectory
    let keys = QueueKeys()
    let started = ContinuousClock.now
    private(set) var emulator: MockAPNsProcess!
    private(set) var controlPort = 0
    private(set) var workers: [(process: HeraldProcess, http: OperationsHTTP)] = []
    private(set) var processes: [HeraldProcess] = []
    /// Jobs added so far, by kind (see `enqueue`).
    private(set) var enqueued = 0
    private(set) var malformed = 0
    private(set) var deadTokenJobs = 0
    private(set) var collapsePairs = 0

    /// Device tokens the emulator answers 410 Unregistered (`--unregistered-prefix`).
    static let deadPrefix = "dead"

    init(name: String, appendOnly: Bool = false) throws {
        signal(SIGPIPE, SIG_IGN)
        self.name = name
        redis = try RedisServer(appendOnly: appendOnly)
        client = try RedisClient(endpoint: redis.endpoint)
        directory = try TemporaryDirectory(prefix: "herald-matrix")
    }

    /// Starts `herald mock-apns` (dead-token prefix, plain-HTTP control port) with `extra` flags.
    func startEmulator(_ extra: [String] = []) async throws {
        let emulator = try await MockAPNsProcess(
            directory: directory, index: processes.count,
            extra: ["--stats-port", "0", "--unregistered-prefix", MatrixBed.deadPrefix, "--expect-notifications", "20000"] + extra)
        processes.append(emulator.process)
        var port = 0
        try await waitFor("the emulator prints `stats on`", timeout: .seconds(10), interval: .milliseconds(20)) {
            try emulator.process.requireRunning()
            guard let line = emulator.process.stdout.split(separator: "\n").first(where: { $0.hasPrefix("stats on ") }),
                  let value = line.split(separator: ":").last.flatMap({ Int($0) }) else { return false }
            port = value
            return true
        }
        controlPort = port
        self.emulator = emulator
    }

    /// Starts `herald worker` against this bed's Redis and emulator (small pool unless `extra`
    /// says otherwise), metrics on a free port.
    @discardableResult
    func startWorker(_ extra: [String] = [], redisURL: String? = nil, environment: [String: String] = [:],
                     emulatorArguments: Bool = true) throws -> (process: HeraldProcess, http: OperationsHTTP) {
        let port = try RedisServer.freePort()
        var arguments = ["worker", "--metrics-port", String(port), "--metrics-host", "127.0.0.1", "--log-format", "logfmt",
                         "--redis", redisURL ?? redis.url, "--bundle-id", WorkerHarness.bundleID,
                         "--consumer", "matrix-\(workers.count)"]
        if emulatorArguments { arguments += emulator.workerArguments }
        let process = try HeraldProcess(arguments: arguments + extra, directory: directory, index: processes.count,
                                        environment: environment)
        processes.append(process)
        let worker = (process, OperationsHTTP(port: port))
        workers.append(worker)
        return worker
    }

    /// Switches a fault of the running emulator (`/_herald/PATH`); the faults in force after it.
    @discardableResult
    func control(_ path: String) throws -> String {
        let (status, body) = try OperationsHTTP.curl(["http://127.0.0.1:\(controlPort)/_herald/\(path)"])
        guard status == 200 else { throw WaitTimeout(description: "/_herald/\(path) answered \(status): \(body)") }
        return body
    }

    /// The emulator's counts, live.
    func emulatorCounts() throws -> [String: Any] {
        let (status, body) = try OperationsHTTP.curl(["http://127.0.0.1:\(controlPort)/_herald/stats"])
        guard status == 200, let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else {
            throw WaitTimeout(description: "/_herald/stats answered \(status): \(body)")
        }
        return object
    }

    /// Adds `count` jobs: one in 50 to a dead token (410 from the emulator, a feedback entry), one in
    /// 100 malformed (priority 7: a `bad_priority` dead letter before anything is sent), and, when
    /// `collapsePairs` > 0, that many pairs of jobs to one token with one collapse id, back to back
    /// (the older one is superseded when a worker holds both, else both are sent). No collapse ids
    /// in cells that kill a worker: a dead worker's supersession count dies with it.
    func enqueue(_ count: Int, collapsePairs pairs: Int = 0) async throws {
        let base = enqueued
        try await client.xadd(keys.jobs, count: count) { offset in
            let index = base + offset
            if index % 100 == 99 {
                return [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)), ("priority", "7")]
            }
            if index % 50 == 7 {
                return [("token", WorkerHarness.deviceToken(index, prefix: MatrixBed.deadPrefix)), ("payload", WorkerHarness.payload(index))]
            }
            return [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
        }
        for index in base..<(base + count) {
            if index % 100 == 99 { malformed += 1 } else if index % 50 == 7 { deadTokenJobs += 1 }
        }
        enqueued += count
        if pairs > 0 {
            let pairBase = enqueued
            try await client.xadd(keys.jobs, count: pairs * 2) { offset in
                let token = WorkerHarness.deviceToken(1_000_000 + pairBase + offset / 2, prefix: "cc")
                return [("token", token), ("payload", WorkerHarness.payload(offset)), ("collapse_id", "c\(offset / 2)")]
            }
            enqueued += pairs * 2
            collapsePairs += pairs
        }
    }

    /// Accepted apns-ids that belong to jobs counted before `startOver()`.
    private var acceptedBefore = 0

    /// Counts from here on only: for a Redis that lost everything (the jobs counted so far were
    /// settled before, and their traces went with the data).
    func startOver() throws {
        acceptedBefore = try emulatorCounts()["accepted_unique"] as? Int ?? 0
        enqueued = 0
        malformed = 0
        deadTokenJobs = 0
        collapsePairs = 0
    }

    /// Every job's place now. `superseded` is summed from the running workers' metrics.
    func ledger() async throws -> MatrixLedger {
        var ledger = MatrixLedger(enqueued: enqueued)
        let counts = try emulatorCounts()
        ledger.accepted = (counts["accepted_unique"] as? Int ?? -1) - acceptedBefore
        ledger.duplicates = counts["duplicates"] as? Int ?? -1
        ledger.rejected = counts["rejected"] as? [String: Int] ?? [:]
        ledger.jobsLength = try await client.integer("XLEN", keys.jobs)
        ledger.pending = try await client.pendingCount(keys.jobs, group: keys.group)
        ledger.retry = try await client.integer("ZCARD", keys.retry)
        var tokens = Set<String>()
        for entry in try await client.entries(keys.feedback) {
            ledger.feedbackEntries += 1
            tokens.insert(entry["token"] ?? "?")
        }
        ledger.feedback = tokens.count
        for entry in try await client.entries(keys.dead) {
            let count = entry["tokens"].map { $0.split(separator: ",").count } ?? 1
            ledger.deadByReason[entry["reason"] ?? "?", default: 0] += count
        }
        for worker in workers where worker.process.isRunning {
            if let scrape = try? worker.http.scrape() {
                ledger.superseded += max(0, scrape.count("herald_notifications_total", ["outcome": "superseded"]))
            }
        }
        return ledger
    }

    /// Polls until every job has exactly one outcome and nothing waits anywhere; the last ledger.
    /// Fails at once when a worker that should run has exited.
    @discardableResult
    func waitUntilSettled(timeout: Duration = .seconds(60), running: [HeraldProcess]? = nil) async throws -> MatrixLedger {
        var last = MatrixLedger()
        let alive = running ?? workers.map(\.process)
        let settled = try await waitFor("every job is settled", timeout: timeout, interval: .milliseconds(200), failOnTimeout: false) {
            for process in alive { try process.requireRunning() }
            guard let ledger = try? await self.ledger() else { return false }
            last = ledger
            return ledger.settled || ledger.outcomes > ledger.enqueued
        }
        if !settled {
            throw WaitTimeout(description: "\(name): timed out after \(timeout) waiting for every job to settle: \(last)\n"
                              + "\(await redisState())\n\(diagnostics())")
        }
        return last
    }

    /// Resident set size of `process` in MiB (`VmRSS` of /proc/PID/status).
    static func rssMiB(_ process: HeraldProcess) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Double($0) }) else { return -1 }
        return kilobytes / 1024
    }

    /// The largest RSS among the running workers, MiB.
    var workerRSS: Double { workers.filter { $0.process.isRunning }.map { MatrixBed.rssMiB($0.process) }.max() ?? -1 }

    /// Prints the cell's one line of figures (and appends it to `HERALD_MATRIX_REPORT` when set).
    func report(_ ledger: MatrixLedger, rss: Double? = nil, note: String = "") {
        let seconds = Double((ContinuousClock.now - started).components.seconds)
            + Double((ContinuousClock.now - started).components.attoseconds) / 1e18
        let dead = ledger.deadByReason.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        let line = "fault-matrix | \(name) | enqueued \(ledger.enqueued) | accepted \(ledger.accepted) | dead-lettered \(ledger.deadLettered)"
            + " (\(dead.isEmpty ? "none" : dead)) | dead tokens \(ledger.feedback) | superseded \(ledger.superseded)"
            + " | retry set \(ledger.retry) | stream \(ledger.jobsLength) | pending \(ledger.pending) | duplicates \(ledger.duplicates)"
            + " | RSS \(String(format: "%.1f", rss ?? workerRSS)) MiB | \(String(format: "%.1f", seconds)) s"
            + (note.isEmpty ? "" : " | \(note)")
        print(line)
        if let path = ProcessInfo.processInfo.environment["HERALD_MATRIX_REPORT"], !path.isEmpty {
            if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
            if let handle = FileHandle(forWritingAtPath: path) {
                handle.seekToEndOfFile()
                handle.write(Data((line + "\n").utf8))
                try? handle.close()
            }
        }
    }

    /// The checks every cell ends with: the workers that should run still run, every job is
    /// counted (`parked` jobs may still wait in the retry set, or unread in the stream), duplicates within `duplicateBound`,
    /// RSS under 150 MiB.
    func expectCounted(_ ledger: MatrixLedger, parked: Bool = false, duplicateBound: Int = 0, alive: [HeraldProcess]? = nil,
                       sourceLocation: SourceLocation = #_sourceLocation) {
        for process in alive ?? workers.map(\.process) {
            #expect(process.isRunning, "\(name): the worker died: \(process.outputTail())", sourceLocation: sourceLocation)
        }
        if parked {
            #expect(ledger.outcomes + ledger.retry + ledger.jobsLength == ledger.enqueued && ledger.pending == 0,
                    "\(name): every job counted, the parked ones in the retry set or unread in the stream: \(ledger)",
                    sourceLocation: sourceLocation)
        } else {
            #expect(ledger.settled, "\(name): every job has one outcome: \(ledger)", sourceLocation: sourceLocation)
        }
        #expect(ledger.duplicates <= duplicateBound, "\(name): duplicates \(ledger.duplicates) > \(duplicateBound): \(ledger)",
                sourceLocation: sourceLocation)
        #expect(ledger.feedbackEntries == ledger.feedback || duplicateBound > 0,
                "\(name): a dead token reported twice without a crash: \(ledger)", sourceLocation: sourceLocation)
        #expect(ledger.feedback <= deadTokenJobs, "\(name): \(ledger)", sourceLocation: sourceLocation)
        // Parked cells leave jobs unread in the stream, malformed ones among them.
        #expect((ledger.deadByReason["bad_priority"] ?? 0) == malformed || (parked && (ledger.deadByReason["bad_priority"] ?? 0) < malformed),
                "\(name): each malformed job is one dead letter: \(ledger)", sourceLocation: sourceLocation)
        let rss = workerRSS
        #expect(rss < 150, "\(name): worker RSS \(rss) MiB", sourceLocation: sourceLocation)
    }

    /// What Redis holds of the queue's reading state (leases, the pending list, the group), for a
    /// cell that did not settle.
    func redisState() async -> String {
        var lines: [String] = []
        for (label, command) in [("leases", ["HGETALL", keys.jobs + ":leases"]),
                                 ("pending", ["XPENDING", keys.jobs, keys.group, "-", "+", "20"]),
                                 ("groups", ["XINFO", "GROUPS", keys.jobs])] {
            let reply = try? await client.send(command)
            lines.append("redis \(label): \(reply.map { "\($0)" } ?? "no answer")")
        }
        return lines.joined(separator: "\n")
    }

    func diagnostics() -> String {
        processes.map { "\($0.description):\n\($0.outputTail(2500))" }.joined(separator: "\n")
    }

    func close() {
        for process in processes where process.isRunning { process.signal(SIGKILL) }
        for process in processes { process.process.waitUntilExit() }
        client.shutdown()
        redis.stop()
    }
}

/// Runs one cell with a fresh bed, closed however the cell ends; a thrown error carries every
/// process' output.
func withMatrixBed(_ name: String, appendOnly: Bool = false, _ body: (MatrixBed) async throws -> Void) async throws {
    let bed = try MatrixBed(name: name, appendOnly: appendOnly)
    defer { bed.close() }
    do {
        try await body(bed)
    } catch {
        Issue.record("\(name): \(error)\n--- process output ---\n\(bed.diagnostics())")
    }
}

/// Where every job of a cell is.
struct MatrixLedger: CustomStringConvertible {
    var enqueued = 0
    var accepted = 0
    var duplicates = 0
    var rejected: [String: Int] = [:]
    var deadByReason: [String: Int] = [:]
    /// Distinct device tokens in the feedback stream, and its entries.
    var feedback = 0
    var feedbackEntries = 0
    var superseded = 0
    var retry = 0
    var jobsLength = 0
    var pending = 0

    var deadLettered: Int { deadByReason.values.reduce(0, +) }
    var outcomes: Int { accepted + deadLettered + feedback + superseded }
    var settled: Bool { outcomes == enqueued && jobsLength == 0 && pending == 0 && retry == 0 }

    var description: String {
        "enqueued \(enqueued): accepted \(accepted) (+\(duplicates) duplicates), dead-lettered \(deadLettered) "
            + "\(deadByReason.sorted { $0.key < $1.key }), dead tokens \(feedback) (\(feedbackEntries) entries), superseded \(superseded)"
            + " = \(outcomes); stream \(jobsLength), pending \(pending), retry set \(retry); emulator rejected \(rejected.sorted { $0.key < $1.key })"
    }
}

/// `HERALD_MATRIX=full` runs every cell; without it the slow ones (long waits by design) are skipped.
enum FaultMatrixMode {
    static let full = ProcessInfo.processInfo.environment["HERALD_MATRIX"] == "full"
}
