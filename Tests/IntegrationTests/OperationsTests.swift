import Foundation
import Glibc
import HeraldBuildInfo
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// The operations surface of the real binaries: `herald worker`'s /metrics, /healthz and
    /// /readyz read with curl after known workloads, its config file with two apps (token and
    /// certificate auth), its log formats, and refused credentials, against `herald mock-apns`
    /// and a private redis-server. Every job is counted.
    @Suite(.serialized)
    struct Operations {
        @Test
        func metricsMatchTheWorkload() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator(["--unregistered-prefix", "dead"])
                let keys = QueueKeys()
                // Five devices get three versions of one collapse id first, so the first read holds
                // all of them: the two older versions of each are superseded.
                let devices = 5, versions = 3
                let collapsed = devices * versions
                let good = 2_000, deadTokens = 50
                let malformed = ["payload_not_json": 10, "missing_payload": 10, "unknown_push_type": 10]
                let malformedCount = malformed.values.reduce(0, +)
                let superseded = devices * (versions - 1)
                let enqueued = collapsed + good + deadTokens + malformedCount
                let accepted = devices + good

                _ = try await bed.client.xadd(keys.jobs, count: collapsed) { index in
                    [("token", WorkerHarness.deviceToken(index % devices, prefix: "c0")),
                     ("payload", #"{"aps":{"alert":"version \#(index / devices)"}}"#), ("collapse_id", "score")]
                }
                _ = try await bed.client.xadd(keys.jobs, count: good + deadTokens + malformedCount) { index in
                    switch index {
                    case ..<good:
                        return [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                    case ..<(good + deadTokens):
                        return [("token", WorkerHarness.deviceToken(index, prefix: "dead")), ("payload", WorkerHarness.payload(index))]
                    default:
                        let token = WorkerHarness.deviceToken(index, prefix: "0b")
                        switch (index - good - deadTokens) % 3 {
                        case 0: return [("token", token), ("payload", #"{"aps":{"alert":"unterminated"#)]
                        case 1: return [("token", token)]
                        default: return [("token", token), ("payload", WorkerHarness.payload(index)), ("push_type", "telegram")]
                        }
                    }
                }

                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app"] + emulator.workerArguments)
                try await waitFor("the worker drains the queue", timeout: .seconds(60), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                // The worker publishes once a second: scrape until the last publication is in.
                let outcomeNames = ["accepted", "dead_token", "dead_lettered", "superseded", "retried"]
                let scrape = try await http.scrape(until: "/metrics shows an outcome for every job", process: worker) { scrape in
                    let outcomes = outcomeNames.reduce(0) { $0 + max(0, scrape.count("herald_notifications_total", ["outcome": $1])) }
                    return outcomes >= enqueued && scrape.count("herald_jobs_read_total") >= enqueued
                        && scrape.count("herald_end_to_end_latency_seconds_count") >= accepted
                        && scrape.count("herald_apns_responses_total") >= accepted + deadTokens
                        && scrape.count("herald_queue_depth") == 0 && scrape.count("herald_dead_letter_stream_length") >= malformedCount
                        && scrape.count("herald_feedback_stream_length") >= deadTokens
                }
                let notifications = scrape.series("herald_notifications_total")
                #expect(scrape.count("herald_notifications_total", ["outcome": "accepted"]) == accepted, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["outcome": "dead_token"]) == deadTokens, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["outcome": "dead_lettered"]) == malformedCount, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["outcome": "superseded"]) == superseded, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["outcome": "retried"]) == 0, "\(notifications)")
                #expect(scrape.count("herald_notifications_total", ["app": "default", "queue": "default"]) == enqueued, "\(notifications)")
                for (reason, count) in malformed {
                    #expect(scrape.count("herald_jobs_dead_lettered_total", ["reason": reason]) == count,
                            "\(scrape.series("herald_jobs_dead_lettered_total"))")
                }
                #expect(scrape.count("herald_jobs_dead_lettered_total") == malformedCount, "\(scrape.series("herald_jobs_dead_lettered_total"))")
                let responses = scrape.series("herald_apns_responses_total")
                #expect(scrape.count("herald_apns_responses_total", ["app": "default", "status": "200", "reason": ""]) == accepted, "\(responses)")
                #expect(scrape.count("herald_apns_responses_total", ["status": "410", "reason": "Unregistered"]) == deadTokens, "\(responses)")
                #expect(scrape.count("herald_apns_responses_total") == accepted + deadTokens, "nothing else was answered: \(responses)")
                #expect(scrape.count("herald_jobs_read_total") == enqueued)
                #expect(scrape.count("herald_jobs_reclaimed_total") == 0)
                // Gone: they repeated herald_notifications_total{outcome="superseded"|"retried"} under other names.
                #expect(scrape.types["herald_jobs_superseded_total"] == nil && scrape.types["herald_jobs_retried_total"] == nil)
                #expect(scrape.count("herald_redis_errors_total") == 0)
                #expect(scrape.count("herald_end_to_end_latency_seconds_count", ["app": "default", "queue": "default"]) == accepted)
                #expect(scrape.count("herald_end_to_end_latency_seconds_bucket", ["le": "+Inf"]) == accepted)
                #expect(scrape.count("herald_apns_request_duration_seconds_count", ["app": "default"]) == accepted + deadTokens)
                #expect(scrape.types["herald_end_to_end_latency_seconds"] == "histogram")
                #expect(scrape.types["herald_notifications_total"] == "counter")
                #expect(scrape.count("herald_build_info", ["version": HeraldVersion.string, "commit": HeraldVersion.commit]) == 1, "\(scrape.series("herald_build_info"))")
                #expect(scrape.count("herald_credentials_rejected", ["app": "default"]) == 0)
                #expect(scrape.count("herald_dead_letter_stream_length") == malformedCount)
                #expect(scrape.count("herald_feedback_stream_length") == deadTokens)
                #expect(!scrape.text.contains(WorkerHarness.deviceToken(0)), "no device token is a label")

                // Redis and the emulator agree with the counters.
                #expect(try await bed.deadLettersByReason(keys) == malformed)
                #expect(try await bed.length(keys.feedback) == deadTokens)
                #expect(try await bed.client.integer("ZCARD", keys.retry) == 0)
                let counts = try await emulator.statistics()
                #expect(counts.accepted == accepted && counts.acceptedUnique == accepted && counts.duplicates == 0, "\(counts)")
                #expect(counts.rejected == ["Unregistered": deadTokens], "\(counts)")

                // The dashboard's and alerts' metric names exist on the live endpoint.
                let validate = try OperationsHTTP.run("/usr/bin/env", ["python3", Self.validateScript(), "--metrics-url", http.metricsURL])
                #expect(validate.0 == 0, "Deploy/validate.py --metrics-url failed:\n\(validate.1.split(separator: "\n").filter { !$0.hasPrefix("ok") }.joined(separator: "\n"))")

                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
            }
        }

        @Test
        func readinessFollowsRedis() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                // Two loops: /readyz is 200 only when both are, and both must come back.
                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app", "--threads", "2"]
                    + emulator.workerArguments)
                try await waitFor("/readyz answers 200", timeout: .seconds(15)) {
                    try worker.requireRunning()
                    return try http.status("/readyz") == 200
                }
                #expect(try http.status("/healthz") == 200)
                #expect(try http.status("/nowhere") == 404)
                #expect(try OperationsHTTP.curl(["-X", "POST", http.metricsURL]).status == 405)
                let head = try OperationsHTTP.curl(["-I", "http://127.0.0.1:\(http.port)/healthz"])
                #expect(head.status == 200 && head.body.hasPrefix("HTTP/1.1 200"), "\(head)")

                _ = try? await bed.client.send(["SHUTDOWN", "NOSAVE"])
                try await waitFor("redis-server exits", timeout: .seconds(10)) { !bed.redis.isRunning }
                bed.redis.stop()
                try await waitFor("/readyz answers 503 without Redis", timeout: .seconds(15)) {
                    try worker.requireRunning()
                    return try http.status("/readyz") == 503
                }
                #expect(try http.status("/healthz") == 200, "the process is alive without Redis: no restart")

                try bed.redis.start()
                try await waitFor("/readyz answers 200 with Redis back", timeout: .seconds(20)) {
                    try worker.requireRunning()
                    return try http.status("/readyz") == 200
                }
                #expect(try http.status("/healthz") == 200)
                // Back for real: jobs added now are delivered, every one.
                let count = 20
                _ = try await bed.client.xadd(keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                try await waitFor("the jobs added after the restart are delivered", timeout: .seconds(30)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                let scrape = try await http.scrape(until: "/metrics shows every delivery", process: worker) {
                    $0.count("herald_notifications_total", ["outcome": "accepted"]) >= count
                }
                #expect(scrape.count("herald_notifications_total", ["outcome": "accepted"]) == count)
                #expect(scrape.count("herald_redis_errors_total") >= 1, "the outage shows: \(scrape.series("herald_redis_errors_total"))")
                #expect(try await bed.length(keys.dead) == 0)
                #expect(try await worker.terminate() == 0, "SIGTERM drains and exits 0: \(worker.outputTail())")
                let counts = try await emulator.statistics()
                #expect(counts.acceptedUnique == count && counts.duplicates == 0, "\(counts)")
            }
        }

        @Test
        func configFileWithTwoAppsDeliversToBoth() async throws {
            try await withOperationsBed { bed in
                let client = try OperationsCredentials.makeClientCertificate(in: bed.directory, name: "certapp")
                let emulator = try await bed.startEmulator(["--client-ca", client.certificate])
                let app: (String) -> String = { name in
                    """
                        \(name):
                          apns_host: 127.0.0.1
                          apns_port: \(emulator.port)
                          ca_file: \(emulator.certificatePath)
                          connections: 2
                    """
                }
                let yaml = """
                    # two apps: provider-token auth and certificate auth
                    redis: \(bed.redis.url)
                    drain_timeout: 10
                    apps:
                    \(app("default"))
                          bundle_id: com.example.app
                          team_id: TEAM000001
                          key_id: KEY0000001
                          key_file: \(emulator.keyPath)
                    \(app("certapp"))
                          bundle_id: com.example.certapp
                          certificate_file: \(client.certificate)
                          private_key_file: \(client.key)
                    """
                let yamlPath = bed.directory.path("herald.yaml")
                try yaml.write(toFile: yamlPath, atomically: true, encoding: .utf8)

                // Jobs for both apps and one for an app the file does not name.
                let keys = QueueKeys()
                let defaultJobs = 40, certJobs = 30
                _ = try await bed.client.xadd(keys.jobs, count: defaultJobs + certJobs + 1) { index in
                    var fields = [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                    if index >= defaultJobs + certJobs {
                        fields.append(("app", "nosuchapp"))
                    } else if index >= defaultJobs {
                        fields.append(("app", "certapp"))
                    }
                    return fields
                }
                let (worker, http) = try bed.startWorker(["--config", yamlPath])
                try await waitFor("the worker drains the queue", timeout: .seconds(30)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                let scrape = try await http.scrape(until: "/metrics shows both apps' answers", process: worker) {
                    $0.count("herald_apns_responses_total") >= defaultJobs + certJobs && $0.count("herald_jobs_dead_lettered_total") >= 1
                }
                let responses = scrape.series("herald_apns_responses_total")
                #expect(scrape.count("herald_apns_responses_total", ["app": "default", "status": "200"]) == defaultJobs, "\(responses)")
                #expect(scrape.count("herald_apns_responses_total", ["app": "certapp", "status": "200"]) == certJobs, "\(responses)")
                #expect(scrape.count("herald_apns_responses_total") == defaultJobs + certJobs, "\(responses)")
                #expect(scrape.count("herald_jwt_mints_total", ["app": "certapp"]) <= 0, "certificate auth mints no token")
                #expect(scrape.count("herald_jobs_dead_lettered_total", ["reason": "unknown_app"]) == 1)
                #expect(scrape.count("herald_notifications_total", ["outcome": "accepted"]) == defaultJobs + certJobs)
                let dead = try await bed.client.entries(keys.dead)
                #expect(dead.count == 1 && dead.first?["reason"] == "unknown_app" && dead.first?["app"] == "nosuchapp", "\(dead)")
                let counts = try await emulator.statistics()
                #expect(counts.acceptedUnique == defaultJobs + certJobs && counts.duplicates == 0, "\(counts)")
                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
                #expect(!worker.stderr.contains("warning: the secret file"), "keys are 0600: \(worker.stderr)")

                // The same settings as JSON, with a queue of its own: the file's queue is drained,
                // and a --queue flag beats it. (The YAML file above named no queue: `default` was drained.)
                let json = """
                    {"redis": "\(bed.redis.url)", "queue": "filequeue", "drain_timeout": 10, "apps": {
                      "default": {"bundle_id": "com.example.app", "apns_host": "127.0.0.1", "apns_port": \(emulator.port),
                                  "ca_file": "\(emulator.certificatePath)", "team_id": "TEAM000001", "key_id": "KEY0000001",
                                  "key_file": "\(emulator.keyPath)", "connections": 1},
                      "certapp": {"bundle_id": "com.example.certapp", "apns_host": "127.0.0.1", "apns_port": \(emulator.port),
                                  "ca_file": "\(emulator.certificatePath)", "certificate_file": "\(client.certificate)",
                                  "private_key_file": "\(client.key)", "connections": 1}}}
                    """
                let jsonPath = bed.directory.path("herald.json")
                try json.write(toFile: jsonPath, atomically: true, encoding: .utf8)
                let fileQueue = QueueKeys(queue: "filequeue"), flagQueue = QueueKeys(queue: "flagqueue")
                let perQueue = 10
                // Tokens differ per queue: apns-ids derive from the entry id and the token, and
                // entry ids of different streams can be equal.
                for (number, queue) in [fileQueue, flagQueue, keys].enumerated() {
                    _ = try await bed.client.xadd(queue.jobs, count: perQueue) { index in
                        [("token", WorkerHarness.deviceToken(index, prefix: "f\(number)")), ("payload", WorkerHarness.payload(index)),
                         ("app", index % 2 == 0 ? "default" : "certapp")]
                    }
                }
                let fromFile = try bed.startWorker(["--config", jsonPath]).process
                try await waitFor("the JSON file's queue is drained", timeout: .seconds(30)) {
                    try fromFile.requireRunning()
                    return try await bed.drained(fileQueue)
                }
                #expect(try await fromFile.terminate() == 0, "\(fromFile.outputTail())")
                #expect(try await bed.length(flagQueue.jobs) == perQueue, "only the file's queue")
                #expect(try await bed.length(keys.jobs) == perQueue, "only the file's queue")

                let fromFlag = try bed.startWorker(["--config", jsonPath, "--queue", "flagqueue"]).process
                try await waitFor("the --queue flag's queue is drained", timeout: .seconds(30)) {
                    try fromFlag.requireRunning()
                    return try await bed.drained(flagQueue)
                }
                #expect(try await fromFlag.terminate() == 0, "\(fromFlag.outputTail())")
                #expect(try await bed.length(keys.jobs) == perQueue, "the flag's queue, not the default one")
                #expect(try await bed.length(fileQueue.dead) == 0)
                #expect(try await bed.length(flagQueue.dead) == 0)
                let after = try await emulator.statistics()
                #expect(after.acceptedUnique == defaultJobs + certJobs + 2 * perQueue && after.duplicates == 0, "\(after)")

                // A malformed file: a clear error naming the file, and a failing exit status.
                let broken = bed.directory.path("broken.yaml")
                try "apps:\n  default: [unclosed\n".write(toFile: broken, atomically: true, encoding: .utf8)
                let brokenRun = try bed.start(["worker", "--config", broken, "--no-metrics"])
                #expect(try await brokenRun.waitForExit() != 0)
                #expect(brokenRun.stderr.contains(broken) && brokenRun.stderr.contains("config file"), "\(brokenRun.stderr)")
                let mistyped = bed.directory.path("mistyped.yaml")
                try "batch: plenty\n".write(toFile: mistyped, atomically: true, encoding: .utf8)
                let mistypedRun = try bed.start(["worker", "--config", mistyped, "--no-metrics"])
                #expect(try await mistypedRun.waitForExit() != 0)
                #expect(mistypedRun.stderr.contains(mistyped) && mistypedRun.stderr.contains("batch"), "\(mistypedRun.stderr)")
                // Digits separated by colons are base-60 numbers in YAML; ones too large for an
                // integer are refused with their places named (the YAML library would trap on them).
                let baseSixty = bed.directory.path("base-sixty.yaml")
                try "threads: 999999999999999999:9\napps:\n  default:\n    connections: 1:0:0:0:0:0:0:0:0:0:0\n"
                    .write(toFile: baseSixty, atomically: true, encoding: .utf8)
                let baseSixtyRun = try bed.start(["worker", "--config", baseSixty, "--no-metrics"])
                #expect(try await baseSixtyRun.waitForExit() == 78, "\(baseSixtyRun.stderr)")
                #expect(baseSixtyRun.stderr.contains(baseSixty) && baseSixtyRun.stderr.contains("threads: 999999999999999999:9")
                        && baseSixtyRun.stderr.contains("apps.default.connections") && baseSixtyRun.stderr.contains("base-60"),
                        "\(baseSixtyRun.stderr)")
                // Merge keys nested eight deep under an app (10^8 settings to decode): refused at once.
                let laughs = bed.directory.path("laughs.yaml")
                try ((["m0: &m0 {connections: 1, max_streams: 2}"] + (1...7).map { level in
                    "m\(level): &m\(level) {<<: [" + Array(repeating: "*m\(level - 1)", count: 10).joined(separator: ", ") + "]}"
                }) + ["apps:", "  default:", "    <<: [" + Array(repeating: "*m7", count: 10).joined(separator: ", ") + "]", ""])
                    .joined(separator: "\n").write(toFile: laughs, atomically: true, encoding: .utf8)
                let laughsRun = try bed.start(["worker", "--config", laughs, "--no-metrics"])
                #expect(try await laughsRun.waitForExit() == 78, "\(laughsRun.stderr)")
                #expect(laughsRun.stderr.contains(laughs) && laughsRun.stderr.contains("more than 100000 values"), "\(laughsRun.stderr)")
                // An alias as a key over nine levels of ten: refused before the YAML library hashes
                // its 10^10 values to look for duplicate keys.
                let keyAlias = bed.directory.path("key-alias.yaml")
                try ((["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + (1...9).map { level in
                    "a\(level): &a\(level) [" + Array(repeating: "*a\(level - 1)", count: 10).joined(separator: ", ") + "]"
                }) + ["apps:", "  default:", "    ? *a9", "    : 1", ""])
                    .joined(separator: "\n").write(toFile: keyAlias, atomically: true, encoding: .utf8)
                let keyAliasRun = try bed.start(["worker", "--config", keyAlias, "--no-metrics"])
                #expect(try await keyAliasRun.waitForExit() == 78, "\(keyAliasRun.stderr)")
                #expect(keyAliasRun.stderr.contains("more than 100000 values"), "\(keyAliasRun.stderr)")
                // A misspelt key is an error too, not a setting silently left at its default.
                let misspelt = bed.directory.path("misspelt.yaml")
                try "drain_timout: 5\napps:\n  default:\n    conections: 8\n".write(toFile: misspelt, atomically: true, encoding: .utf8)
                let misspeltRun = try bed.start(["worker", "--config", misspelt, "--no-metrics"])
                #expect(try await misspeltRun.waitForExit() != 0)
                #expect(misspeltRun.stderr.contains(misspelt) && misspeltRun.stderr.contains("drain_timout")
                        && misspeltRun.stderr.contains("apps.default.conections"), "\(misspeltRun.stderr)")
                let missing = bed.directory.path("missing.yaml")
                let missingRun = try bed.start(["worker", "--config", missing, "--no-metrics"])
                #expect(try await missingRun.waitForExit() != 0)
                #expect(missingRun.stderr.contains(missing), "\(missingRun.stderr)")
            }
        }

        @Test
        func logFormatsAreStructured() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator(["--unregistered-prefix", "dead"])
                let keys = QueueKeys()
                let privateKey = try String(contentsOfFile: emulator.keyPath, encoding: .utf8)
                let keyBody = privateKey.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
                var tokens: [String] = []
                for (round, format) in ["json", "logfmt"].enumerated() {
                    // Good jobs, a dead token and a malformed job: each path that might log a token.
                    // Distinct in their first 8 digits, so a redacted token names one job.
                    let roundTokens = (0..<10).map { index in
                        let head = index == 9 ? "dead" + String(format: "%04x", round) : String(format: "7a%06x", round * 100 + index)
                        return head + WorkerHarness.deviceToken(round * 100 + index).suffix(56)
                    }
                    tokens += roundTokens
                    _ = try await bed.client.xadd(keys.jobs, count: roundTokens.count + 1) { index in
                        index < roundTokens.count
                            ? [("token", roundTokens[index]), ("payload", WorkerHarness.payload(index))]
                            : [("token", WorkerHarness.deviceToken(round, prefix: "bad0")), ("payload", "{")]
                    }
                    tokens.append(WorkerHarness.deviceToken(round, prefix: "bad0"))
                    // trace: the most the worker logs, so the most lines to search for secrets.
                    let (worker, _) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app",
                                                           "--log-format", format, "--log-level", "trace"] + emulator.workerArguments)
                    try await waitFor("the worker drains the queue", timeout: .seconds(30)) {
                        try worker.requireRunning()
                        return try await bed.drained(keys)
                    }
                    #expect(try await worker.terminate() == 0)
                    let lines = worker.stderr.split(separator: "\n").map(String.init)
                    #expect(lines.count >= 5, "\(format): \(worker.stderr)")
                    for line in lines {
                        switch format {
                        case "json":
                            let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
                            #expect(object != nil, "not a JSON object: \(line)")
                            for key in ["ts", "level", "logger", "msg"] {
                                #expect(object?[key] is String, "no \(key): \(line)")
                            }
                        default:
                            #expect(line.hasPrefix("ts=") && line.contains(" level=") && line.contains(" msg="), "not logfmt: \(line)")
                        }
                        for token in tokens {
                            #expect(!line.lowercased().contains(token), "a whole device token in the log: \(line)")
                        }
                        #expect(!line.contains("eyJ"), "a JWT in the log: \(line)")
                        #expect(!line.contains("PRIVATE KEY") && !keyBody.contains { line.contains($0) }, "the key in the log: \(line)")
                    }
                    let levels = Set(lines.compactMap { line in
                        format == "json"
                            ? ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["level"] as? String
                            : line.split(separator: " ").first { $0.hasPrefix("level=") }.map { String($0.dropFirst(6)) }
                    })
                    #expect(levels.isSubset(of: ["trace", "debug", "info", "notice", "warning", "error", "critical"]), "\(levels)")
                    #expect(lines.contains { $0.contains("connection up") }, "a state change is logged: \(format)")
                    // docs/operations.md: "`trace` logs one line per notification", each naming its
                    // token redacted to 8 hex digits.
                    let untraced = roundTokens.filter { token in !lines.contains { $0.contains(String(token.prefix(8))) } }
                    #expect(untraced.count == 0, "no trace line for \(untraced.count) of \(roundTokens.count) notifications")
                    // The stable metadata keys of the spec.
                    #expect(lines.contains { $0.contains(format == "json" ? "\"queue\":\"default\"" : " queue=default") }, "\(format)")
                    #expect(lines.contains { $0.contains(format == "json" ? "\"app\":\"default\"" : " app=default") }, "\(format)")
                }
                #expect(try await bed.length(keys.feedback) == 2)
                #expect(try await bed.length(keys.dead) == 2)
                let counts = try await emulator.statistics()
                #expect(counts.acceptedUnique == 18 && counts.rejected == ["Unregistered": 2], "\(counts)")
            }
        }

        @Test
        func credentialsRejectedParksJobs() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let wrongKey = try OperationsCredentials.makeProviderKey(in: bed.directory, name: "other")
                let keys = QueueKeys()
                let count = 40
                _ = try await bed.client.xadd(keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let (worker, http) = try bed.startWorker([
                    "--redis", bed.redis.url, "--bundle-id", "com.example.app", "--log-format", "json",
                    "--apns-host", "127.0.0.1", "--apns-port", String(emulator.port), "--ca-file", emulator.certificatePath,
                    "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", wrongKey,
                ])
                var parked = 0
                try await waitFor("every job is parked in the retry set", timeout: .seconds(30)) {
                    try worker.requireRunning()
                    parked = try await bed.client.integer("ZCARD", keys.retry)
                    let waiting = try await bed.length(keys.jobs)
                    let pending = try await bed.client.pendingCount(keys.jobs, group: keys.group)
                    return parked > 0 && parked + waiting == count && pending == 0
                }
                let scrape = try await http.scrape(until: "/metrics shows the refused credentials", process: worker) {
                    $0.count("herald_credentials_rejected", ["app": "default"]) == 1
                }
                #expect(scrape.count("herald_credentials_rejected", ["app": "default"]) == 1)
                // A halted app makes the worker unready, so an orchestrator and an operator see it.
                try await waitFor("/readyz says not ready while the app is halted", timeout: .seconds(10), interval: .milliseconds(100)) {
                    try http.status("/readyz") == 503
                }
                #expect(scrape.count("herald_apns_responses_total", ["status": "403", "reason": "InvalidProviderToken"]) >= 1,
                        "\(scrape.series("herald_apns_responses_total"))")
                #expect(scrape.count("herald_notifications_total", ["outcome": "dead_lettered"]) == 0)
                // What HeraldNoSuccessfulSend and HeraldAPNsForbidden read: an accepted series at
                // 0 (present, not missing) and the refusal counted on a series made at startup.
                #expect(scrape.count("herald_notifications_total", ["app": "default", "outcome": "accepted"]) == 0)
                #expect(scrape.count("herald_notifications_total", ["app": "default", "outcome": "handed_back"]) >= 1,
                        "\(scrape.series("herald_notifications_total"))")
                #expect(parked > 0, "the jobs wait in the retry set")
                #expect(try await bed.length(keys.dead) == 0, "refused credentials never burn jobs into the dead letters")
                let critical = worker.stderr.split(separator: "\n").filter { $0.contains("\"level\":\"critical\"") }
                #expect(!critical.isEmpty, "a critical line says why: \(worker.stderr.suffix(2000))")
                let counts = try await emulator.statistics()
                #expect(counts.accepted == 0 && counts.rejected["InvalidProviderToken", default: 0] >= 1, "\(counts)")
                let waiting = try await bed.length(keys.jobs)
                #expect(parked + waiting + counts.acceptedUnique == count, "nothing lost: \(parked) parked, \(waiting) unread")
                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
                #expect(try await bed.client.integer("ZCARD", keys.retry) == parked, "the parked jobs stay after the worker stops")
            }
        }

        /// `<repo>/Deploy/validate.py`, from this file's path.
        static func validateScript(filePath: String = #filePath) -> String {
            var repository = filePath as NSString
            for _ in 0..<3 { repository = repository.deletingLastPathComponent as NSString }
            return repository.appendingPathComponent("Deploy/validate.py")
        }
    }
}
