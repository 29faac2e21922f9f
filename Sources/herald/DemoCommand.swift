import ArgumentParser
import Glibc
import HeraldBuildInfo
import LoadGen

struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run Herald's main job on embedded defaults: private Redis, the APNs emulator, 100,000 notifications.",
        discussion: """
            A small preset of `herald loadgen`: starts a private redis-server in a temporary directory \
            and the APNs emulator (TLS, HTTP/2, ES256 tokens checked), enqueues the notifications, runs \
            one worker process until every one has an outcome, and prints the counts and the rate. \
            Nothing outside the temporary directory is touched.
            """)

    @Option(help: "Notifications to enqueue.") var notifications = 100_000
    @Option(help: "Distinct device tokens they go to.") var tokens = 10_000
    @Option(help: "HTTP/2 connections.") var connections = 4
    @Option(name: .customLong("max-streams"), help: "Concurrent streams per connection.") var maxStreams = 1000
    @Option(name: .customLong("latency-ms"), help: "Emulated APNs round trip, ms.") var latencyMilliseconds = 0

    func run() throws {
        var configuration = LoadGenConfiguration()
        configuration.notifications = notifications
        configuration.tokens = tokens
        configuration.workers = 1
        configuration.connections = connections
        configuration.maxStreams = maxStreams
        configuration.latencyMilliseconds = latencyMilliseconds
        configuration.bundleID = "com.example.demo"
        configuration.timeoutSeconds = 600
        configuration.heraldVersion = HeraldVersion.string
        configuration.swiftVersion = HeraldVersion.swift
        do { try configuration.validate() } catch { throw ValidationError(error.description) }

        print("Herald demo: \(PercentText.grouped(notifications)) notifications to \(PercentText.grouped(tokens)) device tokens")
        fflush(nil)
        let report = try LoadGenCommand.execute(configuration, terminal: isatty(1) == 1, milestones: true)
        let g = PercentText.grouped
        var latency = "not measured"
        if let measured = report.latency {
            let ms = { (value: Double) in PercentText.trimmed(value, digits: 1) }
            latency = "p50 \(ms(measured.p50)) ms, p99 \(ms(measured.p99)) ms, max \(ms(measured.max)) ms (mostly time waiting in the queue)"
        }
        print("""
            Done in \(PercentText.fixed(report.wallSeconds, digits: 2)) s: \(g(Int(report.notificationsPerSecond.rounded()))) notifications/s
              accepted by APNs (emulator):  \(g(report.accepted)) unique, \(g(report.duplicated)) duplicates
              dead-lettered:                \(g(report.deadLettered))
              dead tokens (feedback):       \(g(report.deadTokens))
              superseded:                   \(g(report.superseded))
              lost:                         \(g(report.lost))
              enqueue → APNs latency:       \(latency)
              connections × streams:        \(connections) × \(maxStreams), emulator latency \(latencyMilliseconds) ms
            Measure more: herald loadgen --help (rates, latency, faults, JSON and a latency chart).
            """)
        if !report.isClean {
            // A failed run is no usage error: say what happened, without the help text.
            let bytes = Array("error: not every notification has exactly one outcome (lost \(report.lost), duplicated \(report.duplicated))\n".utf8)
            _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            throw ExitCode(ExitStatus.failure.rawValue)
        }
    }
}
