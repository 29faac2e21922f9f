import Foundation
import Glibc
import HeraldTestSupport
import Queue
import Testing
import Transport

/// The operations tests' world, all real processes: a private `redis-server` (the shared
/// `RedisServer` fixture) with the test's `RedisClient`, the `herald mock-apns` binary as the APNs
/// emulator (`MockAPNsProcess`), and `herald worker` processes (`HeraldProcess`) scraped over HTTP
/// with curl (`OperationsHTTP`). `close()` kills whatever is still running; `withOperationsBed`
/// makes sure it runs however the test ends.
final class OperationsBed: @unchecked Sendable {
    let redis: RedisServer
    let client: RedisClient
    let directory: TemporaryDirectory
    private(set) var processes: [HeraldProcess] = []

    init() throws {
        redis = try RedisServer()
        client = try RedisClient(endpoint: redis.endpoint)
        directory = try TemporaryDirectory(prefix: "herald-ops")
    }

    /// Starts `herald mock-apns` with its certificate and a fresh provider key in this bed's directory.
    /// With `verifying`, it checks tokens against that key (another emulator's `keyPath`) instead:
    /// two emulators for one app's two APNs environments.
    func startEmulator(_ extra: [String] = [], verifying: String? = nil) async throws -> MockAPNsProcess {
        let emulator = try await MockAPNsProcess(directory: directory, index: processes.count, extra: extra, verifying: verifying)
        processes.append(emulator.process)
        return emulator
    }

    /// Starts `herald arguments…` with no `HERALD_*` variable from the developer's shell.
    func start(_ arguments: [String], environment: [String: String] = [:]) throws -> HeraldProcess {
        let process = try HeraldProcess(arguments: arguments, directory: directory, index: processes.count, environment: environment)
        processes.append(process)
        return process
    }

    /// Starts `herald worker` on a free metrics port; `arguments` follow `worker`.
    func startWorker(_ arguments: [String]) throws -> (process: HeraldProcess, metrics: OperationsHTTP) {
        let port = try RedisServer.freePort()
        let process = try start(["worker", "--metrics-port", String(port), "--metrics-host", "127.0.0.1"] + arguments)
        return (process, OperationsHTTP(port: port))
    }

    /// Every entry of `stream`, counted.
    func length(_ key: String) async throws -> Int { try await client.integer("XLEN", key) }

    /// The worker has drained `keys`: nothing left in the stream, nothing pending.
    func drained(_ keys: QueueKeys) async throws -> Bool {
        let waiting = try await length(keys.jobs)
        let pending = try await client.pendingCount(keys.jobs, group: keys.group)
        return waiting == 0 && pending == 0
    }

    /// Dead letters of `keys` by reason.
    func deadLettersByReason(_ keys: QueueKeys) async throws -> [String: Int] {
        var result: [String: Int] = [:]
        for entry in try await client.entries(keys.dead) { result[entry["reason"] ?? "?", default: 0] += 1 }
        return result
    }

    /// The last lines every process wrote, for failure messages.
    func diagnostics() -> String {
        processes.map { "\($0.description):\n\($0.outputTail())" }.joined(separator: "\n")
    }

    func close() {
        for process in processes where process.isRunning { process.signal(SIGKILL) }
        for process in processes { process.reap() }
        client.shutdown()
        redis.stop()
    }
}

/// Runs `body` with a fresh `OperationsBed`; a failure carries the processes' output. The bed is
/// closed however `body` ends.
func withOperationsBed(_ body: (OperationsBed) async throws -> Void) async throws {
    let bed = try OperationsBed()
    defer { bed.close() }
    do {
        try await body(bed)
    } catch {
        Issue.record("\(error)\n--- process output ---\n\(bed.diagnostics())")
    }
}

/// One `herald` subprocess, stdout and stderr each to a file of the bed's directory.
final class HeraldProcess: @unchecked Sendable, CustomStringConvertible {
    let process: TestProcess
    let arguments: [String]
    let stdoutPath: String
    let stderrPath: String

    init(arguments: [String], directory: TemporaryDirectory, index: Int, environment extra: [String: String] = [:]) throws {
        let binary = try WorkerHarness.heraldBinary()
        self.arguments = arguments
        stdoutPath = directory.path("herald-\(index)-\(arguments.first ?? "").out")
        stderrPath = directory.path("herald-\(index)-\(arguments.first ?? "").err")
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process = TestProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        // Only what the test passes: no HERALD_* settings (credentials above all) from the shell.
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
        for (name, value) in extra { environment[name] = value }
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }
    var description: String { "herald \(arguments.joined(separator: " ")) (pid \(pid))" }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    func outputTail(_ characters: Int = 3000) -> String {
        "stdout: \(stdout.suffix(characters))\nstderr: \(stderr.suffix(characters))"
    }

    /// Waits for the process to end and returns its exit status (a signal that killed it counts as 128 + signal).
    func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
        try await waitFor("\(description) exits", timeout: timeout) { !self.process.isRunning }
        process.waitUntilExit()
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    }

    /// SIGTERM, then the exit status.
    func terminate(timeout: Duration = .seconds(30)) async throws -> Int32 {
        signal(SIGTERM)
        return try await waitForExit(timeout: timeout)
    }

    func reap() {
        if !process.isRunning { process.waitUntilExit() }
    }

    /// Fails the wait at once (with the output) when the process has ended on its own.
    func requireRunning() throws {
        if !process.isRunning {
            throw WaitTimeout(description: "\(description) exited early with \(process.terminationStatus):\n\(outputTail())")
        }
    }
}

/// `herald mock-apns` on a free port: its certificate (`certificatePath`, the workers' `--ca-file`)
/// and the provider key it verifies tokens with (`keyPath`, written by `--write-key`).
final class MockAPNsProcess: @unchecked Sendable {
    let process: HeraldProcess
    let certificatePath: String
    let keyPath: String
    let statsPath: String
    let port: Int

    init(directory: TemporaryDirectory, index: Int, extra: [String], verifying: String? = nil) async throws {
        certificatePath = directory.path("mock-\(index).pem")
        keyPath = verifying ?? directory.path("mock-\(index).p8")
        statsPath = directory.path("mock-\(index)-stats.json")
        let key = verifying.map { ["--jwt-key", $0, "--team-id", "TEAM000001", "--key-id", "KEY0000001"] } ?? ["--write-key", keyPath]
        process = try HeraldProcess(
            arguments: ["mock-apns", "--port", "0", "--cert-out", certificatePath, "--stats-out", statsPath] + key + extra,
            directory: directory, index: index)
        var found = 0
        let process = self.process
        try await waitFor("the emulator prints `listening on`", timeout: .seconds(15), interval: .milliseconds(20)) {
            try process.requireRunning()
            guard let line = process.stdout.split(separator: "\n").first(where: { $0.hasPrefix("listening on ") }),
                  let port = line.split(separator: ":").last.flatMap({ Int($0) }) else { return false }
            found = port
            return true
        }
        port = found
    }

    /// The flags that point a worker's `default` app at this emulator with the key it verifies.
    var workerArguments: [String] {
        ["--apns-host", "127.0.0.1", "--apns-port", String(port), "--ca-file", certificatePath,
         "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", keyPath]
    }

    /// The emulator's counts: live from GET /_herald/stats (HTTP/2 over TLS) when curl speaks
    /// HTTP/2, else from `--stats-out` after SIGTERM (the emulator is stopped then).
    func statistics() async throws -> EmulatorCounts {
        if OperationsHTTP.curlHasHTTP2 {
            let (status, body) = try OperationsHTTP.curl(["--http2", "--cacert", certificatePath,
                                                          "https://127.0.0.1:\(port)/_herald/stats"])
            guard status == 200 else { throw WaitTimeout(description: "GET /_herald/stats answered \(status): \(body)") }
            return try EmulatorCounts(json: body)
        }
        if process.isRunning { _ = try await process.terminate() }
        return try EmulatorCounts(json: try String(contentsOfFile: statsPath, encoding: .utf8))
    }
}

/// The emulator's JSON counts (`MockAPNsStatistics.json()`), the fields the tests read.
struct EmulatorCounts: CustomStringConvertible {
    let accepted: Int
    let acceptedUnique: Int
    let duplicates: Int
    let rejected: [String: Int]
    let text: String

    init(json text: String) throws {
        let object = try JSONSerialization.jsonObject(with: Data(text.utf8))
        guard let fields = object as? [String: Any] else { throw WaitTimeout(description: "emulator stats are not an object: \(text)") }
        accepted = fields["accepted"] as? Int ?? -1
        acceptedUnique = fields["accepted_unique"] as? Int ?? -1
        duplicates = fields["duplicates"] as? Int ?? -1
        rejected = fields["rejected"] as? [String: Int] ?? [:]
        self.text = text
    }

    var description: String { text.trimmingCharacters(in: .whitespacesAndNewlines) }
}

/// A worker's operations endpoints on 127.0.0.1, reached with curl, a real HTTP client.
struct OperationsHTTP: Sendable {
    let port: Int

    var metricsURL: String { "http://127.0.0.1:\(port)/metrics" }

    /// The status of GET `path` (0 when nothing answers).
    func status(_ path: String) throws -> Int {
        try OperationsHTTP.curl(["http://127.0.0.1:\(port)\(path)"]).status
    }

    func scrape() throws -> MetricsScrape {
        let (status, body) = try OperationsHTTP.curl([metricsURL])
        guard status == 200 else { throw WaitTimeout(description: "GET /metrics answered \(status): \(body)") }
        return MetricsScrape(text: body)
    }

    /// Scrapes until `condition` holds (the worker publishes once a second); the last scrape.
    func scrape(until what: String, timeout: Duration = .seconds(20), process: HeraldProcess,
                _ condition: (MetricsScrape) -> Bool) async throws -> MetricsScrape {
        var last = MetricsScrape(text: "")
        do {
            try await waitFor(what, timeout: timeout, interval: .milliseconds(100)) {
                try process.requireRunning()
                guard let scrape = try? self.scrape() else { return false }
                last = scrape
                return condition(scrape)
            }
        } catch let timeout as WaitTimeout {
            throw WaitTimeout(description: "\(timeout.description); last scrape:\n\(last.herald)")
        }
        return last
    }

    static let curlHasHTTP2: Bool = {
        guard let (_, output) = try? run("/usr/bin/env", ["curl", "-V"]) else { return false }
        return output.split(separator: "\n").contains { $0.hasPrefix("Features:") && $0.contains("HTTP2") }
    }()

    /// `curl -s` with `arguments`: the HTTP status (0 when the connection failed) and the body.
    static func curl(_ arguments: [String]) throws -> (status: Int, body: String) {
        let (_, output) = try run("/usr/bin/env", ["curl", "-s", "--max-time", "5", "-w", "\n%{http_code}"] + arguments)
        guard let newline = output.lastIndex(of: "\n") else { return (0, output) }
        return (Int(output[output.index(after: newline)...]) ?? 0, String(output[..<newline]))
    }

    /// Runs a tool to its end: exit status and standard output (standard error discarded).
    static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> (Int32, String) {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let pipe = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// One /metrics scrape in the Prometheus text format, as samples with their labels.
struct MetricsScrape: Sendable {
    struct Sample: Sendable {
        let name: String
        let labels: [String: String]
        let value: Double
    }

    let text: String
    let samples: [Sample]
    /// `# TYPE` lines: metric name to type.
    let types: [String: String]

    init(text: String) {
        self.text = text
        var samples: [Sample] = []
        var types: [String: String] = [:]
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                if parts.count >= 4 { types[String(parts[2])] = String(parts[3]) }
                continue
            }
            if line.hasPrefix("#") || line.isEmpty { continue }
            if let sample = MetricsScrape.parse(Substring(line)) { samples.append(sample) }
        }
        self.samples = samples
        self.types = types
    }

    /// `name{a="x",b="y"} value` or `name value`.
    static func parse(_ line: Substring) -> Sample? {
        var labels: [String: String] = [:]
        let name: Substring
        var rest: Substring
        if let brace = line.firstIndex(of: "{"), brace < (line.firstIndex(of: " ") ?? line.endIndex) {
            name = line[..<brace]
            rest = line[line.index(after: brace)...]
            while let equals = rest.firstIndex(of: "=") {
                let key = rest[..<equals].trimmingCharacters(in: CharacterSet(charactersIn: ", "))
                var index = rest.index(after: equals)
                guard index < rest.endIndex, rest[index] == "\"" else { return nil }
                index = rest.index(after: index)
                var value = ""
                while index < rest.endIndex, rest[index] != "\"" {
                    if rest[index] == "\\", rest.index(after: index) < rest.endIndex {
                        index = rest.index(after: index)
                        value.append(rest[index] == "n" ? "\n" : rest[index])
                    } else {
                        value.append(rest[index])
                    }
                    index = rest.index(after: index)
                }
                guard index < rest.endIndex else { return nil }
                labels[key] = value
                rest = rest[rest.index(after: index)...]
                if rest.hasPrefix("}") { break }
            }
            guard let close = rest.firstIndex(of: "}") else { return nil }
            rest = rest[rest.index(after: close)...]
        } else {
            guard let space = line.firstIndex(of: " ") else { return nil }
            name = line[..<space]
            rest = line[space...]
        }
        guard let value = Double(rest.trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "") else { return nil }
        return Sample(name: String(name), labels: labels, value: value)
    }

    /// The sum of every series of `name` whose labels include `labels`; nil when there is none.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        var total: Double? = nil
        for sample in samples where sample.name == name && labels.allSatisfy({ sample.labels[$0.key] == $0.value }) {
            total = (total ?? 0) + sample.value
        }
        return total
    }

    /// `value` as a whole number, -1 when absent (so a missing series never equals a count).
    func count(_ name: String, _ labels: [String: String] = [:]) -> Int {
        value(name, labels).map { Int($0) } ?? -1
    }

    /// Every series of `name`, for messages.
    func series(_ name: String) -> String {
        samples.filter { $0.name == name }
            .map { "\($0.name)\($0.labels.sorted { $0.key < $1.key }) \($0.value)" }.joined(separator: "\n")
    }

    /// Herald's own samples without histogram buckets, for failure messages.
    var herald: String {
        text.split(separator: "\n").filter { $0.hasPrefix("herald_") && !$0.contains("_bucket{") }.joined(separator: "\n")
    }
}

/// Files and keys the tests make with the `openssl` tool.
enum OperationsCredentials {
    /// A self-signed P-256 client certificate (extendedKeyUsage clientAuth) and its key (mode 0600):
    /// the certificate is also the CA the emulator's `--client-ca` trusts.
    static func makeClientCertificate(in directory: TemporaryDirectory, name: String) throws -> (certificate: String, key: String) {
        let certificate = directory.path("\(name).pem")
        let key = directory.path("\(name).key")
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", key, "-out", certificate, "-days", "2", "-subj", "/CN=\(name)",
                     "-addext", "extendedKeyUsage=clientAuth"])
        chmod(key, 0o600)
        return (certificate, key)
    }

    /// A new ES256 provider key as a PKCS#8 `.p8` (mode 0600).
    static func makeProviderKey(in directory: TemporaryDirectory, name: String) throws -> String {
        let path = directory.path("\(name).p8")
        try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
        chmod(path, 0o600)
        return path
    }

    private static func openssl(_ arguments: [String]) throws {
        let (status, output) = try OperationsHTTP.run("/usr/bin/env", ["openssl"] + arguments)
        guard status == 0 else {
            throw WaitTimeout(description: "openssl \(arguments.joined(separator: " ")) failed with \(status): \(output)")
        }
    }
}
