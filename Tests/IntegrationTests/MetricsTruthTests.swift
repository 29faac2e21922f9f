import Foundation
import Glibc
import HeraldTestSupport
import Queue
import Testing

extension IntegrationTests {
    /// What /metrics says is what happened: a real `herald worker` with two apps (config file),
    /// the emulator and a private redis-server. Outcomes and latency carry the app of each job,
    /// the process metrics agree with /proc, the exposition passes `promtool check metrics`, and
    /// the metric names are exactly docs/operations.md's table. The alert rules pass their
    /// promtool unit tests. Every job is counted.
    @Suite(.serialized)
    struct MetricsTruth {
        @Test
        func twoAppsAreLabelledByTheirOwnName() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator(["--unregistered-prefix", "dead"])
                let app: (String, String) -> String = { name, bundle in
                    """
                        \(name):
                          bundle_id: \(bundle)
                          apns_host: 127.0.0.1
                          apns_port: \(emulator.port)
                          ca_file: \(emulator.certificatePath)
                          team_id: TEAM000001
                          key_id: KEY0000001
                          key_file: \(emulator.keyPath)
                          connections: 2
                    """
                }
                let yaml = """
                    redis: \(bed.redis.url)
                    drain_timeout: 10
                    apps:
                    \(app("default", "com.example.app"))
                    \(app("second", "com.example.second"))
                    """
                let yamlPath = bed.directory.path("two-apps.yaml")
                try yaml.write(toFile: yamlPath, atomically: true, encoding: .utf8)

                // default: good jobs, dead tokens and malformed jobs. second: three versions of one
                // collapse id for four devices first (one read holds them all: the two older
                // versions of each are superseded), good jobs and malformed jobs. And jobs for an
                // app the worker does not serve.
                let keys = QueueKeys()
                let devices = 4, versions = 3
                let defaultGood = 60, defaultDead = 7, defaultMalformed = 5
                let secondGood = 40, secondMalformed = 3, nobody = 2
                let collapsed = devices * versions
                _ = try await bed.client.xadd(keys.jobs, count: collapsed) { index in
                    [("token", WorkerHarness.deviceToken(index % devices, prefix: "c0")), ("app", "second"),
                     ("payload", #"{"aps":{"alert":"version \#(index / devices)"}}"#), ("collapse_id", "score")]
                }
                let rest = defaultGood + defaultDead + defaultMalformed + secondGood + secondMalformed + nobody
                _ = try await bed.client.xadd(keys.jobs, count: rest) { index in
                    var remaining = index
                    if remaining < defaultGood {
                        return [("token", WorkerHarness.deviceToken(index, prefix: "d0")), ("payload", WorkerHarness.payload(index))]
                    }
                    remaining -= defaultGood
                    if remaining < defaultDead {
                        return [("token", WorkerHarness.deviceToken(index, prefix: "dead")), ("payload", WorkerHarness.payload(index)),
                                ("app", "default")]
                    }
                    remaining -= defaultDead
                    if remaining < defaultMalformed {
                        return [("token", WorkerHarness.deviceToken(index, prefix: "0b"))]  // missing_payload
                    }
                    remaining -= defaultMalformed
                    if remaining < secondGood {
                        return [("token", WorkerHarness.deviceToken(index, prefix: "e0")), ("payload", WorkerHarness.payload(index)),
                                ("app", "second")]
                    }
                    remaining -= secondGood
                    if remaining < secondMalformed {
                        return [("token", WorkerHarness.deviceToken(index, prefix: "0c")), ("payload", WorkerHarness.payload(index)),
                                ("app", "second"), ("push_type", "telegram")]  // unknown_push_type
                    }
                    return [("token", WorkerHarness.deviceToken(index, prefix: "0d")), ("payload", WorkerHarness.payload(index)),
                            ("app", "nosuchapp")]
                }
                let enqueued = collapsed + rest
                let defaultAccepted = defaultGood, secondAccepted = devices + secondGood
                let superseded = devices * (versions - 1)

                let startedAt = Date().timeIntervalSince1970
                let (worker, http) = try bed.startWorker(["--config", yamlPath])
                try await waitFor("the worker drains the queue", timeout: .seconds(60), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                let outcomes = ["accepted", "dead_token", "dead_lettered", "superseded", "retried", "handed_back"]
                let scrape = try await http.scrape(until: "/metrics shows an outcome for every notification", process: worker) { scrape in
                    outcomes.reduce(0) { $0 + max(0, scrape.count("herald_notifications_total", ["outcome": $1])) } >= enqueued
                        && scrape.count("herald_end_to_end_latency_seconds_count") >= defaultAccepted + secondAccepted
                        && scrape.count("herald_dead_letter_stream_length") >= defaultMalformed + secondMalformed + nobody
                }
                let notifications = scrape.series("herald_notifications_total")
                func outcome(_ app: String, _ name: String) -> Int {
                    scrape.count("herald_notifications_total", ["app": app, "queue": "default", "outcome": name])
                }
                // Each app's own outcomes, every one at 0 when nothing happened (made at startup).
                #expect(outcome("default", "accepted") == defaultAccepted, "\(notifications)")
                #expect(outcome("default", "dead_token") == defaultDead, "\(notifications)")
                #expect(outcome("default", "dead_lettered") == defaultMalformed, "\(notifications)")
                #expect(outcome("default", "superseded") == 0, "\(notifications)")
                #expect(outcome("second", "accepted") == secondAccepted, "\(notifications)")
                #expect(outcome("second", "dead_token") == 0, "\(notifications)")
                #expect(outcome("second", "dead_lettered") == secondMalformed, "\(notifications)")
                #expect(outcome("second", "superseded") == superseded, "\(notifications)")
                for app in ["default", "second"] {
                    #expect(outcome(app, "retried") == 0 && outcome(app, "handed_back") == 0, "\(notifications)")
                }
                // The jobs of no app of the worker: app="", and only as dead letters.
                #expect(outcome("", "dead_lettered") == nobody, "\(notifications)")
                #expect(scrape.count("herald_notifications_total") == enqueued, "every notification once: \(notifications)")
                #expect(scrape.count("herald_notifications_total", ["app": "all"]) == -1, "no app=\"all\" any more: \(notifications)")
                // Latency per app, as many as each app had accepted.
                #expect(scrape.count("herald_end_to_end_latency_seconds_count", ["app": "default", "queue": "default"]) == defaultAccepted)
                #expect(scrape.count("herald_end_to_end_latency_seconds_count", ["app": "second", "queue": "default"]) == secondAccepted)
                #expect(scrape.count("herald_end_to_end_latency_seconds_bucket", ["app": "second", "le": "+Inf"]) == secondAccepted)
                #expect(scrape.count("herald_apns_request_duration_seconds_count", ["app": "default"]) == defaultAccepted + defaultDead)
                #expect(scrape.count("herald_apns_request_duration_seconds_count", ["app": "second"]) == secondAccepted)
                // APNs' answers per app agree, and the 403 series wait at 0.
                #expect(scrape.count("herald_apns_responses_total", ["app": "default", "status": "200"]) == defaultAccepted)
                #expect(scrape.count("herald_apns_responses_total", ["app": "default", "status": "410"]) == defaultDead)
                #expect(scrape.count("herald_apns_responses_total", ["app": "second", "status": "200"]) == secondAccepted)
                #expect(scrape.count("herald_apns_responses_total", ["app": "second", "status": "403", "reason": "InvalidProviderToken"]) == 0,
                        "\(scrape.series("herald_apns_responses_total"))")
                #expect(scrape.count("herald_notifications_queued", ["app": "second"]) == 0)
                #expect(scrape.count("herald_streams_in_flight", ["app": "default"]) == 0)
                // The by-reason breakdown sums to the dead_lettered outcome.
                #expect(scrape.count("herald_jobs_dead_lettered_total") == defaultMalformed + secondMalformed + nobody)
                #expect(scrape.count("herald_jobs_dead_lettered_total", ["reason": "unknown_app"]) == nobody)

                // Redis and the emulator agree.
                #expect(try await bed.deadLettersByReason(keys)
                        == ["missing_payload": defaultMalformed, "unknown_push_type": secondMalformed, "unknown_app": nobody])
                #expect(try await bed.length(keys.feedback) == defaultDead)
                let counts = try await emulator.statistics()
                #expect(counts.acceptedUnique == defaultAccepted + secondAccepted && counts.duplicates == 0, "\(counts)")

                // The alert rules, over this idle state held for half an hour: nothing fires.
                let verdict = try MetricsTruth.alertRules(over: scrape, alert: "HeraldNoSuccessfulSend", firingForApps: [])
                #expect(verdict.0 == 0, "HeraldNoSuccessfulSend on this worker's /metrics:\n\(verdict.1)")

                // The process metrics are the worker's own, read from /proc as the kernel sees it now.
                try checkProcessMetrics(scrape, pid: worker.pid, startedAt: startedAt)
                // The exposition is valid, and names exactly the metrics docs/operations.md lists.
                try checkExposition(scrape.text)
                let documented = try MetricsTruth.documentedMetrics()
                let exported = Set(scrape.types.keys)
                #expect(exported == Set(documented.keys),
                        "exported, not in the table: \(exported.subtracting(documented.keys).sorted()); in the table, not exported: \(Set(documented.keys).subtracting(exported).sorted())")
                for (name, type) in documented where scrape.types[name] != nil {
                    #expect(scrape.types[name] == type, "\(name): the table says \(type), /metrics \(scrape.types[name] ?? "?")")
                }

                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
            }
        }

        /// A bad deploy: the worker cannot reach APNs (nothing listens on its port), so it does not
        /// read its queue. Before any success the series HeraldNoSuccessfulSend needs are there:
        /// `accepted` at 0 (not missing), no connection ready, the jobs in the queue, connection
        /// failures counted, no last-success time; and the alert rules fire on that state.
        /// Nothing is lost: the jobs wait in Redis.
        @Test
        func aWorkerThatNeverSucceedsShowsItsWork() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let closedPort = try RedisServer.freePort()
                let keys = QueueKeys()
                let count = 20
                _ = try await bed.client.xadd(keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let (worker, http) = try bed.startWorker([
                    "--redis", bed.redis.url, "--bundle-id", "com.example.app", "--drain-timeout", "5",
                    "--apns-host", "127.0.0.1", "--apns-port", String(closedPort), "--ca-file", emulator.certificatePath,
                    "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", emulator.keyPath,
                ])
                let scrape = try await http.scrape(until: "/metrics shows the waiting jobs and failed connections", process: worker) {
                    $0.count("herald_queue_depth") == count
                        && $0.count("herald_connection_events_total", ["app": "default", "event": "failed"]) > 0
                }
                #expect(scrape.count("herald_notifications_total", ["app": "default", "outcome": "accepted"]) == 0,
                        "the accepted series exists at 0: \(scrape.series("herald_notifications_total"))")
                #expect(scrape.value("herald_last_success_timestamp_seconds") == nil, "no success yet, so no time of one")
                #expect(scrape.count("herald_connections", ["app": "default", "state": "ready"]) == 0)
                #expect(scrape.count("herald_jobs_read_total") == 0, "no connection, no reading: the jobs wait in Redis")
                #expect(scrape.count("herald_apns_responses_total") == 0, "APNs never answered")
                // The alert rules, over this state held for half an hour: HeraldNoSuccessfulSend fires.
                let verdict = try MetricsTruth.alertRules(over: scrape, alert: "HeraldNoSuccessfulSend", firingForApps: ["default"])
                #expect(verdict.0 == 0, "HeraldNoSuccessfulSend on this worker's /metrics:\n\(verdict.1)")

                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
                let parked = try await bed.client.integer("ZCARD", keys.retry)
                let unread = try await bed.length(keys.jobs)
                #expect(parked + unread == count, "nothing lost: \(parked) handed back, \(unread) unread of \(count)")
                #expect(try await bed.client.pendingCount(keys.jobs, group: keys.group) == 0)
                #expect(try await bed.length(keys.dead) == 0)
            }
        }

        /// With `--threads 2` every loop has its own connections and streams: the per-app gauges
        /// show both loops' together, not whichever loop published last, and the counters count
        /// both loops' notifications.
        @Test
        func gaugesOfSeveralLoopsAddUp() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                let count = 200
                _ = try await bed.client.xadd(keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let startedAt = Date().timeIntervalSince1970
                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app", "--threads", "2",
                                                          "--connections", "2", "--max-streams", "50"] + emulator.workerArguments)
                try await waitFor("the worker drains the queue", timeout: .seconds(30), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                // 2 loops x 2 connections (one loop's gauge alone would say 2).
                let scrape = try await http.scrape(until: "/metrics shows both loops' connections and every notification", process: worker) {
                    $0.count("herald_connections", ["app": "default", "state": "ready"]) == 4
                        && $0.count("herald_notifications_total", ["outcome": "accepted"]) == count
                }
                // A connection allows 1 stream until its first accepted request, then up to 50.
                let free = scrape.count("herald_stream_slots_free", ["app": "default"])
                #expect(free >= 4 && free <= 200, "\(free) slots free on 4 connections")
                #expect(scrape.count("herald_streams_in_flight", ["app": "default"]) == 0)
                #expect(scrape.count("herald_credentials_rejected", ["app": "default"]) == 0)
                let lastSuccess = scrape.value("herald_last_success_timestamp_seconds", ["app": "default"]) ?? 0
                #expect(lastSuccess >= startedAt - 1 && lastSuccess <= Date().timeIntervalSince1970 + 1, "last success \(lastSuccess)")
                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
                let counts = try await emulator.statistics()
                #expect(counts.acceptedUnique == count && counts.duplicates == 0, "\(counts)")
            }
        }

        /// The process metrics come even when the worker has no file descriptor left (when
        /// `process_open_fds` matters most): the scrape's own connection takes the last one, and
        /// /proc is read through descriptors opened at start.
        @Test
        func processMetricsSurviveDescriptorExhaustion() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                let count = 30
                _ = try await bed.client.xadd(keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app"] + emulator.workerArguments)
                try await waitFor("the worker drains the queue", timeout: .seconds(30), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                // One descriptor left: the scrape's connection takes it. The limit bounds descriptor
                // numbers, not their count, so it is set just above the lowest free number: once
                // the scrape has that one, every other free number is at or above the limit.
                let listed = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(worker.pid)/fd").compactMap { Int($0) }
                let inUse = Set(listed)
                let lowestFree = (0...).first { !inUse.contains($0) }!
                let limit = lowestFree + 1
                let (status, output) = try OperationsHTTP.run("/usr/bin/prlimit", ["--pid", String(worker.pid), "--nofile=\(limit):\(limit)"])
                try #require(status == 0, "prlimit: \(output)")
                let scrape = try http.scrape()
                _ = try OperationsHTTP.run("/usr/bin/prlimit", ["--pid", String(worker.pid), "--nofile=4096:4096"])
                #expect(scrape.value("process_max_fds") == Double(limit), "\(scrape.series("process_max_fds"))")
                let used = scrape.value("process_open_fds") ?? -1
                #expect(abs(used - Double(listed.count + 1)) <= 1, "process_open_fds \(used); \(listed.count) listed before the scrape")
                #expect((scrape.value("process_resident_memory_bytes") ?? 0) > 0, "/proc/self/stat read without a new descriptor")
                #expect((scrape.value("process_cpu_seconds_total") ?? 0) > 0)

                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
                let counts = try await emulator.statistics()
                #expect(counts.acceptedUnique == count && counts.duplicates == 0, "every job delivered: \(counts)")
                #expect(try await bed.length(keys.dead) == 0)
            }
        }

        /// The alert rules fire in the cases they are written for and stay quiet in the others
        /// (Deploy/prometheus/alerts.test.yaml), and the deployment files agree with what Herald
        /// exports (Deploy/validate.py, static checks).
        @Test
        func alertRulesPassTheirUnitTests() throws {
            let promtool = try MetricsTruth.promtool()
            let deploy = MetricsTruth.repository.appendingPathComponent("Deploy")
            let check = try OperationsHTTP.run(promtool, ["check", "rules", deploy.appendingPathComponent("prometheus/alerts.yaml").path])
            #expect(check.0 == 0, "promtool check rules:\n\(check.1)")
            let test = try MetricsTruth.runCapturingAll(promtool, ["test", "rules", deploy.appendingPathComponent("prometheus/alerts.test.yaml").path])
            #expect(test.0 == 0, "promtool test rules:\n\(test.1)")
            let validate = try MetricsTruth.runCapturingAll("/usr/bin/env", ["python3", deploy.appendingPathComponent("validate.py").path])
            #expect(validate.0 == 0, "Deploy/validate.py:\n\(validate.1.split(separator: "\n").filter { !$0.hasPrefix("ok") }.joined(separator: "\n"))")
        }

        /// process_* against /proc/PID: the same start time, the same descriptor limit, about the
        /// same descriptors open and memory resident, and CPU spent.
        func checkProcessMetrics(_ scrape: MetricsScrape, pid: Int32, startedAt: Double) throws {
            for name in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                         "process_open_fds", "process_max_fds", "process_start_time_seconds"] {
                #expect(scrape.value(name) != nil, "\(name) missing")
            }
            #expect(scrape.types["process_cpu_seconds_total"] == "counter")
            #expect(scrape.types["process_resident_memory_bytes"] == "gauge")
            let start = scrape.value("process_start_time_seconds") ?? 0
            #expect(start >= startedAt - 2 && start <= Date().timeIntervalSince1970, "started \(start), the test started it at \(startedAt)")
            #expect((scrape.value("process_cpu_seconds_total") ?? 0) > 0, "it delivered notifications: CPU was spent")

            let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
            let openFiles = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }?
                .split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first.flatMap { Double($0) }
            #expect(openFiles != nil && scrape.value("process_max_fds") == openFiles, "limits: \(openFiles ?? -1)")

            let open = scrape.value("process_open_fds") ?? 0
            let listed = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
            // The worker holds its APNs connections (2 apps x 2), Redis, epoll, eventfds, logs;
            // between the scrape and the listing only the metrics connection may come or go.
            #expect(open >= 8 && abs(open - Double(listed)) <= 4, "process_open_fds \(open), /proc/\(pid)/fd lists \(listed)")

            let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            func kilobytes(_ field: String) -> Double? {
                status.split(separator: "\n").first { $0.hasPrefix(field + ":") }?
                    .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) }
            }
            let resident = scrape.value("process_resident_memory_bytes") ?? 0
            let virtual = scrape.value("process_virtual_memory_bytes") ?? 0
            if let rss = kilobytes("VmRSS") {
                #expect(resident > rss * 1024 / 2 && resident < rss * 1024 * 2, "process_resident_memory_bytes \(resident), VmRSS \(rss) kB")
            }
            if let size = kilobytes("VmSize") {
                #expect(virtual == size * 1024 || abs(virtual - size * 1024) < 64 * 1024 * 1024, "process_virtual_memory_bytes \(virtual), VmSize \(size) kB")
            }
            #expect(resident > 1_048_576 && virtual >= resident, "resident \(resident), virtual \(virtual)")
        }

        /// `promtool check metrics` on the scrape: the text format, and Prometheus' naming rules.
        func checkExposition(_ text: String) throws {
            let promtool = try MetricsTruth.promtool()
            let path = NSTemporaryDirectory() + "herald-scrape-\(getpid()).txt"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            defer { unlink(path) }
            let (status, output) = try MetricsTruth.runCapturingAll("/bin/sh", ["-c", "\"$0\" check metrics < \"$1\"", promtool, path])
            #expect(status == 0, "promtool check metrics:\n\(output)")
        }

        /// promtool's unit test of `alert` over the worker's state as `scrape` saw it, held for 30
        /// minutes (every sample constant; histograms left out), expecting it to fire for exactly
        /// `firingForApps` at the end: (exit status, output).
        static func alertRules(over scrape: MetricsScrape, alert: String, firingForApps apps: [String]) throws -> (Int32, String) {
            var lines = [
                "rule_files:",
                "  - \(repository.appendingPathComponent("Deploy/prometheus/alerts.yaml").path)",
                "evaluation_interval: 1m",
                "tests:",
                "  - interval: 1m",
                "    input_series:",
            ]
            for sample in scrape.samples where !sample.name.hasSuffix("_bucket") && !sample.name.hasSuffix("_sum") && !sample.name.hasSuffix("_count") {
                var labels = sample.labels
                labels["instance"] = "worker-1"
                labels["job"] = "herald"
                let text = labels.sorted { $0.key < $1.key }.map { key, value in
                    "\(key)=\"\(value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\""
                }.joined(separator: ",")
                let series = "\(sample.name){\(text)}".replacingOccurrences(of: "'", with: "''")
                lines.append("      - series: '\(series)'")
                lines.append("        values: '\(sample.value.isFinite ? String(sample.value) : "+Inf")x30'")
            }
            lines += ["    alert_rule_test:", "      - eval_time: 30m", "        alertname: \(alert)", "        exp_alerts:\(apps.isEmpty ? " []" : "")"]
            for app in apps {
                lines += [
                    "          - exp_labels: {severity: critical, app: \(app)}",
                    "            exp_annotations:",
                    "              summary: \"Herald app \(app): no notification accepted for 10 minutes while it has work\"",
                    "              description: \"No worker has had a notification for app \(app) accepted by APNs in the last 10 minutes while notifications for it wait, are retried or handed back. Look at credentials (HeraldCredentialsRejected), APNs reachability and herald_apns_responses_total by status.\"",
                    "              runbook_url: docs/operations.md#heraldnosuccessfulsend",
                ]
            }
            let yaml = lines.joined(separator: "\n") + "\n"
            let path = NSTemporaryDirectory() + "herald-alert-\(getpid())-\(alert).yaml"
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            defer { unlink(path) }
            let result = try runCapturingAll(try promtool(), ["test", "rules", path])
            return (result.0, result.1 + (result.0 == 0 ? "" : "\n--- test file ---\n" + yaml))
        }

        /// The worker's metrics table in docs/operations.md (section "### Metrics"): name to type.
        static func documentedMetrics() throws -> [String: String] {
            let text = try String(contentsOf: repository.appendingPathComponent("docs/operations.md"), encoding: .utf8)
            var table: [String: String] = [:]
            var inSection = false
            for line in text.split(separator: "\n") {
                if line.hasPrefix("#") { inSection = line.trimmingCharacters(in: .whitespaces) == "### Metrics" }
                guard inSection, line.hasPrefix("| `") else { continue }
                let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count > 3, cells[1].hasPrefix("`"), ["counter", "gauge", "histogram"].contains(cells[2]) else { continue }
                table[cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = cells[2]
            }
            return table
        }

        static var repository: URL {
            var url = URL(fileURLWithPath: #filePath)
            for _ in 0..<3 { url.deleteLastPathComponent() }
            return url
        }

        /// promtool, from Debian's `prometheus` package (`make deps` installs it).
        static func promtool() throws -> String {
            for candidate in ["/usr/bin/promtool", "/usr/local/bin/promtool"] where FileManager.default.isExecutableFile(atPath: candidate) {
                return candidate
            }
            throw WaitTimeout(description: "promtool is not installed: run `make deps` (Debian's prometheus package) to test the alert rules")
        }

        /// Runs a tool to its end: exit status and standard output and error together.
        static func runCapturingAll(_ executable: String, _ arguments: [String]) throws -> (Int32, String) {
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            let pipe = Pipe()
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }
}
