import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import HeraldTestSupport
@testable import LoadGen
import Queue
import Testing

extension IntegrationTests {
    /// `herald loadgen` end to end through the real binary: it starts its own redis-server, emulator
    /// and worker process, and its JSON report must account for every notification. Nested in the
    /// serialized integration suite: a run loads both cores and must not overlap the other tests.
    @Suite(.serialized) struct LoadGenRunTests {
        /// Runs `executable arguments…` with the HERALD_ settings of the test's environment left out
        /// (but HERALD_BINARY), stdout and stderr into one file; stopped after `timeout` seconds.
        func run(_ executable: String, _ arguments: [String], timeout: TimeInterval = 240) throws -> (status: Int32, output: String) {
            let directory = try TemporaryDirectory(prefix: "herald-lg-run")
            let outputPath = directory.path("output.txt")
            _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            for name in environment.keys where name.hasPrefix("HERALD_") && name != "HERALD_BINARY" { environment[name] = nil }
            process.environment = environment
            process.standardInput = FileHandle.nullDevice
            let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let deadline = Date().addingTimeInterval(timeout)
            while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
            if process.isRunning { process.terminate(); process.waitUntilExit() }
            return (process.terminationStatus, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
        }

        /// Runs `herald loadgen arguments…` with `--json` into a fresh directory; returns the parsed
        /// report, the directory and the printed text.
        func loadgen(_ arguments: [String], timeout: TimeInterval = 240) throws -> (report: [String: Any], directory: TemporaryDirectory, output: String) {
            let directory = try TemporaryDirectory(prefix: "herald-lg-test")
            let jsonPath = directory.path("report.json")
            let (status, text) = try run(try WorkerHarness.heraldBinary(),
                                         ["loadgen"] + arguments + ["--json", jsonPath, "--timeout", "180"], timeout: timeout)
            #expect(status == 0, "herald loadgen exited \(status):\n\(text)")
            let data = try #require(FileManager.default.contents(atPath: jsonPath), "no JSON report; output:\n\(text)")
            let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            return (report, directory, text)
        }

        func int(_ object: [String: Any]?, _ key: String) -> Int? { (object?[key] as? NSNumber)?.intValue }
        func double(_ object: [String: Any]?, _ key: String) -> Double? { (object?[key] as? NSNumber)?.doubleValue }

        @Test func outcomeStreamsAreCountedByEntriesAddedNotByLengthSoTrimmingCannotHideAny() throws {
            let server = try RedisServer()
            defer { server.stop() }
            let redis = try BlockingRedisClient(endpoint: server.endpoint)
            #expect(try LoadRun.entriesAdded(redis, key: "lg:dead") == 0)
            // Capped like the dead-letter and feedback streams, at 2 instead of ~1M.
            for index in 0..<5 {
                try redis.run(["XADD", "lg:dead", "MAXLEN", "2", "*", "n", .text(String(index))])
            }
            #expect(try redis.run(["XLEN", "lg:dead"]).integer == 2)
            // Redis 6.2 has no `entries-added`: loadgen falls back to the length, which a cap
            // lowers, so there it can report a loss that was not one, never hide one.
            #expect(try LoadRun.entriesAdded(redis, key: "lg:dead") == (RedisServer.isRedis7 ? 5 : 2))
            try redis.run(["SET", "lg:text", "x"])
            #expect(throws: LoadGenError.self) { try LoadRun.entriesAdded(redis, key: "lg:text") }
        }

        @Test func shardsAreDrivenAndReportedPerQueue() throws {
            // Two workers read three shards; dead tokens land in their shard's :feedback and count.
            let (report, _, output) = try loadgen(["--notifications", "6000", "--tokens", "600", "--shards", "3", "--workers", "2",
                                                   "--unregistered-prefix", "ff", "--unregistered-share", "0.1"])
            let outcomes = report["outcomes"] as? [String: Any]
            #expect(int(outcomes, "lost") == 0 && int(outcomes, "duplicated") == 0, "\(output)")
            #expect((int(outcomes, "dead_tokens") ?? 0) > 0, "dead tokens of every shard counted: \(output)")
            let queues = try #require(report["queues"] as? [[String: Any]], "a row per queue: \(output)")
            #expect(queues.compactMap { $0["queue"] as? String } == ["default-0", "default-1", "default-2"])
            #expect(queues.compactMap { int($0, "notifications") }.reduce(0, +) == 6000, "\(queues)")
            #expect(queues.allSatisfy { (int($0, "jobs") ?? 0) > 0 && double($0, "empty_after_seconds") != nil }, "\(queues)")
            #expect(output.contains("per queue"), "\(output)")
        }

        @Test func everyNotificationIsAcceptedExactlyOnceAndMeasured() throws {
            let (report, _, output) = try loadgen(["--notifications", "5000", "--tokens", "1000", "--workers", "1"])
            let outcomes = report["outcomes"] as? [String: Any]
            #expect(int(report, "notifications") == 5000)
            #expect(int(outcomes, "accepted") == 5000, "\(output)")
            #expect(int(outcomes, "lost") == 0)
            #expect(int(outcomes, "duplicated") == 0)
            #expect(int(outcomes, "dead_tokens") == 0)
            #expect((double(report, "notifications_per_second") ?? 0) > 0)

            let latency = try #require(report["latency"] as? [String: Any], "no latency in \(report)")
            #expect(int(latency, "count") == 5000)
            // A drain sends each job as soon as it is made: there is no schedule to measure from.
            #expect(report["latency_from_schedule"] is NSNull, "\(report)")
            let percentiles = ["p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "max_ms"].compactMap { double(latency, $0) }
            #expect(percentiles.count == 5)
            #expect(zip(percentiles, percentiles.dropFirst()).allSatisfy { $0 <= $1 }, "percentiles not monotonic: \(percentiles)")
            #expect(percentiles[0] > 0)

            let workers = report["workers"] as? [String: Any]
            #expect((double(workers, "cpu_seconds") ?? 0) > 0)
            #expect((int(workers, "peak_vmhwm_bytes") ?? 0) > 1_000_000)
            if ProcessSampler.runQueueWaits(pid: getpid()) != nil {
                // The kernel keeps schedstat: every process's wait for a CPU is reported.
                #expect((double(workers, "cpu_wait_seconds") ?? -1) >= 0, "\(report)")
                let others = report["other_processes"] as? [String: Any]
                for name in ["redis_server", "emulator", "loadgen"] {
                    #expect((double(others, name + "_cpu_wait_seconds") ?? -1) >= 0, "\(name) in \(report)")
                }
                #expect(output.contains("waiting for a CPU      worker "), "\(output)")
            }

            let conditions = try #require(report["conditions"] as? [String: Any])
            #expect((int(conditions, "cores") ?? 0) >= 1)
            for key in ["cpu_model", "date", "herald_version", "swift_version", "git_commit", "mode", "redis", "emulator", "faults"] {
                #expect(!((conditions[key] as? String) ?? "").isEmpty, "condition \(key) missing")
            }
            #expect(int(conditions, "payload_bytes") == 256)
            #expect(int(conditions, "connections") == 4)
            #expect(int(conditions, "max_streams") == 1000)
            #expect(output.contains("lost                   0"))
        }

        /// A process as /proc shows it: its pid and its start time (field 22 of `stat`), which
        /// together name one process even if the pid is reused.
        struct ProcessIdentity: Equatable {
            let pid: Int32
            let startTime: Substring
        }

        /// Fields 3… of /proc/PID/stat (after "(comm)"): state, parent, …; nil if there is no such process.
        static func statFields(_ pid: Int32) -> [Substring]? {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            return stat[stat.index(after: close)...].split(separator: " ")
        }

        /// Processes whose parent is `parent`.
        static func children(of parent: Int32) -> [ProcessIdentity] {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            return entries.compactMap(Int32.init).compactMap { pid in
                guard let fields = statFields(pid), fields.count > 19, Int32(fields[1]) == parent else { return nil }
                return ProcessIdentity(pid: pid, startTime: fields[19])
            }
        }

        /// Gone, a zombie, or its pid now names another process.
        static func hasExited(_ process: ProcessIdentity) -> Bool {
            guard let fields = statFields(process.pid), fields.count > 19 else { return true }
            return fields[0] == "Z" || fields[19] != process.startTime
        }

        @Test func killingTheLoadGeneratorOutrightStopsEverythingItStarted() throws {
            let directory = try TemporaryDirectory(prefix: "herald-lg-kill")
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: try WorkerHarness.heraldBinary())
            // A steady run far longer than the test: it is killed while everything runs.
            process.arguments = ["loadgen", "--rate", "100", "--notifications", "100000", "--timeout", "600"]
            var environment = ProcessInfo.processInfo.environment
            for name in environment.keys where name.hasPrefix("HERALD_") && name != "HERALD_BINARY" { environment[name] = nil }
            environment["TMPDIR"] = directory.path
            process.environment = environment
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let pid = process.processIdentifier
            // redis-server, the emulator and one worker.
            var children: [ProcessIdentity] = []
            let started = Date().addingTimeInterval(60)
            while Date() < started {
                children = Self.children(of: pid)
                if children.count >= 3 { break }
                Thread.sleep(forTimeInterval: 0.1)
            }
            guard children.count >= 3 else {
                kill(pid, SIGTERM)
                process.waitUntilExit()
                Issue.record("loadgen started \(children.count) of its 3 processes within 60 s")
                return
            }
            // Let them settle into the run, then kill loadgen with no chance to clean up. (No
            // waitUntilExit: Foundation may not see the exit while orphans hold its pipe.)
            Thread.sleep(forTimeInterval: 1)
            kill(pid, SIGKILL)
            // Beyond a worker's 30 s drain timeout: on SIGTERM it may wait for Redis, stopping at
            // the same moment. A passing run ends as soon as all three are gone.
            let deadline = Date().addingTimeInterval(45)
            while Date() < deadline, !children.allSatisfy(Self.hasExited) { Thread.sleep(forTimeInterval: 0.1) }
            let left = children.filter { !Self.hasExited($0) }
            #expect(left.isEmpty, "still running 45 s after loadgen was killed: \(left.map(\.pid))")
            for child in left { kill(child.pid, SIGKILL) }
        }

        @Test func unregisteredTokensAreCountedAsDeadTokens() throws {
            // 2,000 notifications over 500 tokens: each token 4 times; 10 % of the tokens are dead.
            let (report, _, output) = try loadgen(["--notifications", "2000", "--tokens", "500", "--unregistered-prefix", "dead",
                                                   "--unregistered-share", "0.1"])
            let outcomes = report["outcomes"] as? [String: Any]
            #expect(int(outcomes, "dead_tokens") == 200, "\(output)")
            #expect(int(outcomes, "accepted") == 1800)
            #expect(int(outcomes, "lost") == 0)
            #expect(int(outcomes, "duplicated") == 0)
            #expect(((report["conditions"] as? [String: Any])?["faults"] as? String)?.contains("dead") == true)
        }

        /// An emulator that keeps no timeline (started without --measure-latency), attached: the
        /// run is still counted and reported, and the timeline asked for is refused by name.
        @Test func aTimelineAnAttachedEmulatorCannotGiveIsRefusedAfterTheReport() async throws {
            let directory = try TemporaryDirectory(prefix: "herald-lg-attached")
            let certificate = directory.path("mock.pem")
            let key = directory.path("mock.p8")
            let emulator = try HeraldProcess(arguments: ["mock-apns", "--port", "0", "--stats-port", "0", "--cert-out", certificate, "--write-key", key],
                                             directory: directory, index: 0)
            defer { emulator.signal(SIGKILL); emulator.reap() }
            var port = 0, statsPort = 0
            try await waitFor("the emulator prints its ports", timeout: .seconds(15), interval: .milliseconds(20)) {
                try emulator.requireRunning()
                func announced(_ prefix: String) -> Int? {
                    emulator.stdout.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
                }
                guard let listening = announced("listening on "), let stats = announced("stats on ") else { return false }
                (port, statsPort) = (listening, stats)
                return true
            }
            let timeline = directory.path("timeline.csv")
            let loadgen = try HeraldProcess(
                arguments: ["loadgen", "--notifications", "500", "--tokens", "50", "--apns-host", "127.0.0.1", "--apns-port", String(port),
                            "--ca-file", certificate, "--apns-stats", "127.0.0.1:\(statsPort)", "--timeline", timeline, "--timeout", "120"],
                directory: directory, index: 1,
                // An attached emulator's credentials reach the workers loadgen starts through its environment.
                environment: ["HERALD_TEAM_ID": "TEAM000001", "HERALD_KEY_ID": "KEY0000001", "HERALD_KEY_FILE": key])
            let status = try await loadgen.waitForExit(timeout: .seconds(180))
            #expect(status != 0, "\(loadgen.outputTail())")
            #expect(loadgen.stdout.contains("lost                   0"), "the run's report first: \(loadgen.outputTail())")
            #expect(loadgen.stderr.contains("the emulator served no latency timeline"), "\(loadgen.outputTail())")
            #expect(!FileManager.default.fileExists(atPath: timeline))
        }

        @Test func steadyModeWritesAPercentilePlotAPersonCanRead() throws {
            let plotDirectory = try TemporaryDirectory(prefix: "herald-lg-plot")
            let plot = plotDirectory.path("latency.svg")
            let timelineFile = plotDirectory.path("timeline.csv")
            let (report, _, output) = try loadgen(["--notifications", "3000", "--tokens", "300", "--rate", "2000", "--plot", plot,
                                                   "--timeline", timelineFile, "--timeline-over-ms", "0"])
            let outcomes = report["outcomes"] as? [String: Any]
            #expect(int(outcomes, "accepted") == 3000, "\(output)")
            #expect(int(outcomes, "lost") == 0)
            #expect(double(report, "producer_max_behind_ms") != nil)
            // Both latencies, over the same answers; no job can be answered before it was due,
            // and it is sent when due or later, so each percentile from the schedule is at least
            // the one from the XADD.
            let latency = try #require(report["latency"] as? [String: Any], "\(output)")
            let fromSchedule = try #require(report["latency_from_schedule"] as? [String: Any], "\(output)")
            #expect(int(latency, "count") == 3000)
            #expect(int(fromSchedule, "count") == 3000)
            for key in ["p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "max_ms"] {
                let sent = try #require(double(latency, key)), due = try #require(double(fromSchedule, key))
                #expect(due >= sent, "\(key): \(due) ms from the schedule, \(sent) ms from the XADD")
            }
            #expect(output.contains("latency from the schedule"), "\(output)")
            // Jobs due within the 1 ms before each tick are sent at the tick: half a tick late at the
            // median, so the two medians differ (the same stamp twice would make them equal).
            #expect((double(fromSchedule, "p50_ms") ?? 0) > (double(latency, "p50_ms") ?? 0), "\(output)")
            // The timeline: every answer in exactly one window of 10 ms, over a run of about 1.5 s,
            // and every answer over the 0 ms threshold.
            let csv = try String(contentsOfFile: timelineFile, encoding: .utf8).split(separator: "\n")
            #expect(csv.first == "offset_ms,unix_ms,answered,mean_ms,max_ms,over_0ms", "\(csv.prefix(3))")
            let rows = csv.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false) }
            #expect(rows.allSatisfy { $0.count == 6 }, "\(rows.prefix(3))")
            #expect(rows.reduce(0) { $0 + (Int($1[2]) ?? -1_000_000) } == 3000, "\(csv.prefix(5))")
            #expect(rows.reduce(0) { $0 + (Int($1[5]) ?? -1_000_000) } == 3000)
            #expect((100...400).contains(rows.count), "\(rows.count) windows for a 1.5 s run")
            let timeline = try #require(report["timeline"] as? [String: Any], "\(report)")
            #expect(int(timeline, "windows") == rows.count)
            #expect(int(timeline, "answers_over") == 3000)
            #expect(output.contains("latency over time      \(rows.count) windows of 10 ms"), "\(output)")
            let svg = try String(contentsOfFile: plot, encoding: .utf8)
            #expect(svg.hasPrefix("<?xml"))
            #expect(svg.contains("<svg") && svg.hasSuffix("</svg>\n"))
            for label in ["Percentile", "Latency (ms)", "50%", "90%", "99%", "99.9%", "99.99%", "p99", "max", "3,000 notifications", "steady"] {
                #expect(svg.contains(label), "the plot lacks \(label)")
            }
            #if canImport(FoundationXML)
            let parser = XMLParser(data: Data(svg.utf8))
            #expect(parser.parse(), "not well-formed XML: \(String(describing: parser.parserError))")
            #endif
        }

        /// `Benchmarks/tools/ab_loadgen.py`, the A/B comparison: its statistics (self-test), then a
        /// real block of A B B A with the built herald as both builds. Each run's JSON must be where
        /// the schedule says, and every metric the report pairs must be read from loadgen's JSON (a
        /// renamed field would show as "—"). A build that writes no report stops the comparison.
        @Test func theABComparisonRunsEachBuildInABBAOrderAndReadsEveryMetric() throws {
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("Benchmarks/tools/ab_loadgen.py").path
            func python(_ arguments: [String]) throws -> (status: Int32, output: String) {
                try run("/usr/bin/env", ["python3", script] + arguments)
            }
            let selfTest = try python(["--self-test"])
            #expect(selfTest.status == 0 && selfTest.output.contains("self-test: ok"), "\(selfTest.output)")

            let herald = try WorkerHarness.heraldBinary()
            let runs = try TemporaryDirectory(prefix: "herald-ab-runs")
            let compared = try python(["--a", herald, "--b", herald, "--env-b", "HERALD_AB_TEST=1", "--blocks", "1",
                                       "--out", runs.path("out"), "--", "--notifications", "2000", "--tokens", "200"])
            #expect(compared.status == 0, "\(compared.output)")
            for name in ["run-01-A", "run-02-B", "run-03-B", "run-04-A"] {
                #expect(FileManager.default.fileExists(atPath: runs.path("out/\(name).json")), "\(name).json missing:\n\(compared.output)")
            }
            let rows = compared.output.split(separator: "\n").filter { $0.hasPrefix("| ") && $0.contains("is better)") }
            #expect(rows.count == 7, "\(compared.output)")
            for row in rows {
                // The two medians (a ratio is "—" only when A's value is 0, as a tiny run's CPU may be).
                let cells = row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                #expect(cells.count >= 3 && cells[1] != "—" && cells[2] != "—", "a metric was not found in loadgen's JSON: \(row)")
            }
            #expect(compared.output.contains("1 block(s) of A B B A: 2 runs of each, 2 pairs"), "\(compared.output)")

            let broken = try python(["--a", "/bin/false", "--b", herald, "--blocks", "1", "--out", runs.path("broken"), "--",
                                     "--notifications", "100"])
            #expect(broken.status != 0 && broken.output.contains("run 1 (A) wrote no report"), "\(broken.output)")
            let refused = try python(["--a", herald, "--b", herald, "--", "--json", "x.json"])
            #expect(refused.status != 0 && refused.output.contains("leave it out"), "\(refused.output)")
        }
    }
}
