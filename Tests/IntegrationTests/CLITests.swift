import Foundation
import Glibc
import HeraldBuildInfo
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// The command line as users meet it, through the real `herald` binary: --version and the
    /// build it names, help that states defaults and allowed values, the same notification flags
    /// for `send` and `enqueue`, and sysexits exit statuses (64 usage, 65 bad job data, 69 Redis
    /// or APNs unavailable, 78 configuration) against a private redis-server and `herald mock-apns`.
    @Suite(.serialized)
    struct CLI {
        // MARK: version

        @Test
        func versionNamesTheReleaseAndTheCommit() async throws {
            try await withOperationsBed { bed in
                let run = try await CLIRun(bed, ["--version"])
                #expect(run.status == 0, "\(run)")
                #expect(run.stdout == HeraldVersion.description + "\n", "\(run)")
                #expect(run.stdout.hasPrefix("herald \(HeraldVersion.string) (commit "), "\(run)")
                // With a checkout, the commit baked in is one of its commits: HEAD when the build
                // came after the last commit, else an ancestor of it (commits since the build, with
                // `swift test --skip-build`), never a made-up or fixed value.
                let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
                let (gitStatus, _) = try OperationsHTTP.run("/usr/bin/env", ["git", "-C", repository, "rev-parse", "HEAD"])
                if gitStatus == 0 {
                    #expect(HeraldVersion.commit.count == 12 && HeraldVersion.commit.allSatisfy(\.isHexDigit))
                    let (ancestor, output) = try OperationsHTTP.run("/usr/bin/env", ["git", "-C", repository, "merge-base", "--is-ancestor",
                                                                                    HeraldVersion.commit, "HEAD"])
                    #expect(ancestor == 0, "\(HeraldVersion.commit) is not HEAD or an ancestor of it: \(output)")
                } else {
                    #expect(HeraldVersion.commit == (ProcessInfo.processInfo.environment["HERALD_COMMIT"] ?? "unknown"))
                }
            }
        }

        /// The worker says what it runs: `herald_build_info{version,commit}` on /metrics, and the
        /// version and commit on its startup log line. Every job enqueued is delivered and counted.
        @Test
        func workerExportsBuildInfoAndLogsIt() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                _ = try await bed.client.xadd(keys.jobs, count: 20) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app", "--log-format", "logfmt"]
                                                         + emulator.workerArguments)
                let scrape = try await http.scrape(until: "every job delivered and herald_build_info published", process: worker) { scrape in
                    scrape.count("herald_notifications_total", ["outcome": "accepted"]) >= 20 && scrape.value("herald_build_info") != nil
                }
                #expect(scrape.value("herald_build_info", ["version": HeraldVersion.string, "commit": HeraldVersion.commit]) == 1,
                        "\(scrape.series("herald_build_info"))")
                #expect(try await bed.drained(keys))
                #expect(try await emulator.statistics().accepted == 20)
                let started = worker.stderr.split(separator: "\n").first { $0.contains("worker started") } ?? ""
                #expect(started.contains("version=\(HeraldVersion.string)") && started.contains("commit=\(HeraldVersion.commit)"), "\(worker.stderr)")
                #expect(try await worker.terminate() == 0)
            }
        }

        // MARK: help

        /// Every option of every command has a help text that states its default (or has one the
        /// parser prints), and the closed sets are enumerations, so help and completion list them.
        @Test
        func helpStatesDefaultsAndAllowedValues() async throws {
            try await withOperationsBed { bed in
                let commands = try await CLIHelp.dump(bed, [])
                #expect(commands.count >= 12, "\(commands.map(\.path))")
                var missing: [String] = []
                for command in commands {
                    for argument in command.arguments where argument.shown && !["help", "version"].contains(argument.name) {
                        if argument.abstract.isEmpty { missing.append("\(command.path) --\(argument.name): no help") }
                        let statesDefault = argument.defaultValue != nil || argument.abstract.lowercased().contains("default")
                            || argument.abstract.contains("repeatable") || argument.abstract.lowercased().contains("required")
                        if argument.kind == "option" && !statesDefault {
                            missing.append("\(command.path) --\(argument.name): no default stated")
                        }
                    }
                }
                #expect(missing.isEmpty, "\(missing.joined(separator: "\n"))")

                let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
                let expectedValues: [String: [String]] = [
                    "log-level": levels, "log-format": ["text", "json", "logfmt"], "environment": ["production", "sandbox", "both"],
                    "push-type": ["alert", "background", "location", "voip", "complication", "fileprovider", "mdm",
                                  "liveactivity", "pushtotalk", "widgets", "controls"],
                    "priority": ["10", "5", "1"],
                ]
                var seen: Set<String> = []
                for command in commands {
                    for argument in command.arguments {
                        guard let values = expectedValues[argument.name] else { continue }
                        seen.insert(argument.name)
                        #expect(argument.allValues == values, "\(command.path) --\(argument.name): \(argument.allValues)")
                    }
                }
                #expect(seen == Set(expectedValues.keys))
                // And the text help shows them to people.
                let help = try await CLIRun(bed, ["worker", "--help"])
                #expect(help.status == 0)
                let text = help.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
                #expect(text.contains("values: trace, debug, info, notice, warning, error, critical"), "\(help.stdout)")
                #expect(text.contains("values: production, sandbox, both"))
                // Shell completion offers the same values.
                let bash = try await CLIRun(bed, ["--generate-completion-script", "bash"])
                #expect(bash.status == 0)
                #expect(bash.stdout.contains("'trace'$'\\n''debug'$'\\n''info'"), "\(bash.stdout.prefix(500))")
                #expect(bash.stdout.contains("'production'$'\\n''sandbox'"))
            }
        }

        // MARK: send and enqueue

        /// `send` and `enqueue` take the same notification flags, with the same help; what only
        /// one of them has is where a job and a request differ (Redis and custom fields; APNs
        /// connection and credentials).
        @Test
        func sendAndEnqueueTakeTheSameNotificationFlags() async throws {
            try await withOperationsBed { bed in
                let send = try #require(try await CLIHelp.dump(bed, ["send"]).first)
                let enqueue = try #require(try await CLIHelp.dump(bed, ["enqueue"]).first)
                let notification: Set<String> = ["token", "payload", "bundle-id", "topic", "push-type", "priority", "expiration",
                                                 "collapse-id", "apns-id", "app", "count"]
                let sendNames = Set(send.arguments.map(\.name)), enqueueNames = Set(enqueue.arguments.map(\.name))
                #expect(notification.isSubset(of: sendNames) && notification.isSubset(of: enqueueNames))
                // enqueue's own: the Redis connection and queue flags (QueueOptions, the same as the
                // queue tools', so read from `herald stats`) and what only a job has.
                let stats = try #require(try await CLIHelp.dump(bed, ["stats"]).first)
                let redisFlags = Set(stats.arguments.map(\.name)).subtracting(["all-queues", "json", "help", "h", "version"])
                #expect(redisFlags.isSuperset(of: ["redis", "redis-password-file", "queue"]), "\(redisFlags)")
                #expect(enqueueNames.subtracting(sendNames).subtracting(redisFlags) == ["field", "distinct-tokens", "wait-replicas", "wait-timeout", "lane", "at"])
                #expect(sendNames.isDisjoint(with: redisFlags), "\(sendNames.intersection(redisFlags))")
                #expect(sendNames.subtracting(enqueueNames) == [
                    "environment", "apns-host", "apns-port", "apns-broadcast-host", "apns-broadcast-port", "ca-file", "connections", "max-streams", "response-timeout", "ping-interval",
                    "team-id", "key-id", "key-file", "token-refresh-minutes", "config", "quiet", "timeout", "log-level", "log-format",
                ])
                for name in notification {
                    let a = send.arguments.first { $0.name == name }, b = enqueue.arguments.first { $0.name == name }
                    #expect(a?.abstract == b?.abstract && a?.aliases == b?.aliases, "--\(name) differs")
                }
                #expect(send.arguments.first { $0.name == "token" }?.aliases == ["token", "tokens"])
                #expect(send.arguments.first { $0.name == "apns-id" }?.aliases == ["apns-id", "id"])
            }
        }

        /// What the flags say is what lands in the stream: several tokens (repeated and
        /// comma-separated) as `tokens`, `--app`, custom `--field`s, and the APNs headers; every
        /// entry is counted.
        @Test
        func enqueueWritesTheFlagsAsJobFields() async throws {
            try await withOperationsBed { bed in
                let keys = QueueKeys()
                let a = WorkerHarness.deviceToken(1), b = WorkerHarness.deviceToken(2), c = WorkerHarness.deviceToken(3)
                let run = try await CLIRun(bed, [
                    "enqueue", "--redis", bed.redis.url, "--token", a, "--tokens", "\(b), \(c)", "--app", "marketing",
                    "--field", "user_id=42", "--field", "campaign=spring=sale", "--push-type", "background", "--priority", "5",
                    "--payload", #"{"aps":{"content-available":1}}"#, "--expiration", "0", "--collapse-id", "news",
                    "--id", "123e4567-e89b-12d3-a456-426614174000", "--topic", "com.example.app",
                ])
                #expect(run.status == 0, "\(run)")
                let entries = try await bed.client.entries(keys.jobs)
                #expect(entries.count == 1)
                let job = try #require(entries.first)
                #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == job.id)
                #expect(job["tokens"] == "\(a),\(b),\(c)" && job["token"] == nil)
                #expect(job["app"] == "marketing" && job["user_id"] == "42" && job["campaign"] == "spring=sale")
                #expect(job["push_type"] == "background" && job["priority"] == "5" && job["expiration"] == "0")
                #expect(job["collapse_id"] == "news" && job["id"] == "123e4567-e89b-12d3-a456-426614174000" && job["topic"] == "com.example.app")

                let copies = try await CLIRun(bed, ["enqueue", "--redis", bed.redis.url, "--token", a, "--count", "3", "--distinct-tokens", "3",
                                                    "--bundle-id", "com.example.app", "--push-type", "voip", "--lane", "bulk"])
                #expect(copies.status == 0, "\(copies)")
                let all = try await bed.client.entries(keys.jobs)
                #expect(all.count == 4)
                #expect(Set(all.dropFirst().compactMap { $0["token"] }).count == 3)
                #expect(all.dropFirst().allSatisfy { $0["topic"] == "com.example.app.voip" && $0["push_type"] == "voip" })
            }
        }

        // MARK: exit statuses

        /// Usage 64, bad job data 65, Redis unavailable 69, configuration 78, success 0: each
        /// exit status from the binary, and nothing enqueued by a command that failed.
        @Test
        func exitStatusesFollowSysexits() async throws {
            try await withOperationsBed { bed in
                let keys = QueueKeys()
                let token = WorkerHarness.deviceToken(7)
                let closed = "redis://127.0.0.1:\(try RedisServer.freePort())"
                let badConfig = bed.directory.path("bad.yaml")
                try "apps: [this is not a mapping\n".write(toFile: badConfig, atomically: true, encoding: .utf8)
                let cases: [(arguments: [String], environment: [String: String], status: Int32, says: String)] = [
                    (["--bogus"], [:], 64, "Unknown option"),
                    (["enqueue", "--redis", bed.redis.url, "--token", token, "--priority", "7"], [:], 64, "--priority"),
                    (["enqueue", "--redis", bed.redis.url], [:], 64, "--token"),
                    (["enqueue", "--redis", bed.redis.url, "--token", token, "--field", "payload=x"], [:], 64, "payload"),
                    (["enqueue", "--redis", bed.redis.url, "--token", "abcd"], [:], 65, "device_token_too_short"),
                    (["enqueue", "--redis", bed.redis.url, "--token", token, "--payload", "[1]"], [:], 65, "payload_not_object"),
                    (["enqueue", "--redis", bed.redis.url, "--token", token, "--collapse-id", String(repeating: "c", count: 65)], [:], 65, "not enqueued"),
                    (["enqueue", "--redis", closed, "--token", token], [:], 69, "cannot connect to Redis"),
                    (["stats", "--redis", closed], [:], 69, "cannot reach Redis"),
                    (["dead-letters", "list", "--redis", closed], [:], 69, "cannot reach Redis"),
                    (["worker", "--config", badConfig, "--no-metrics"], [:], 78, "bad.yaml"),
                    (["worker", "--config", bed.directory.path("absent.yaml"), "--no-metrics"], [:], 78, "config file"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], [:], 78, "no APNs credentials"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics", "--team-id", "TEAM000001", "--key-id", "KEY0000001",
                      "--key-file", bed.directory.path("absent.p8")], [:], 78, "absent.p8"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], ["HERALD_LOG_LEVEL": "loud"], 78, "HERALD_LOG_LEVEL"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], ["HERALD_CONNECTIONS": "many"], 78, "HERALD_CONNECTIONS"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics", "--batch", "0"], [:], 64, "--batch must be 1 to 100000"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], ["HERALD_BATCH": "0"], 78, "--batch must be 1 to 100000"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], ["HERALD_DRAIN_TIMEOUT": "9999"], 78, "--drain-timeout must be"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics", "--token-backoff-capacity", "20000000"], [:], 64,
                     "--token-backoff-capacity must be 0 (off) to 10000000"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], ["HERALD_TOKEN_BACKOFF_CAPACITY": "99999999"], 78,
                     "--token-backoff-capacity must be"),
                    (["worker", "--redis", bed.redis.url, "--no-metrics"], ["HERALD_ENVIRONMENT": "staging"], 78, "production, sandbox or both"),
                    (["stats", "--redis", bed.redis.url], [:], 0, "default"),
                ]
                for item in cases {
                    let run = try await CLIRun(bed, item.arguments, environment: item.environment)
                    #expect(run.status == item.status, "herald \(item.arguments.joined(separator: " ")): \(run)")
                    #expect((run.stderr + run.stdout).contains(item.says), "herald \(item.arguments.joined(separator: " ")): \(run)")
                }
                let addedByFailures = try await bed.length(keys.jobs) + bed.length(keys.urgentJobs)
                #expect(addedByFailures == 0, "a failed enqueue added nothing")
                let added = try await CLIRun(bed, ["enqueue", "--redis", bed.redis.url, "--token", token])
                #expect(added.status == 0, "\(added)")
                // An alert at APNs' default priority goes to the urgent lane.
                #expect(try await bed.length(keys.urgentJobs) == 1)
            }
        }

        /// A producer's XADD that Redis refuses (the queue's stream key holds another type) stops
        /// `enqueue --count` with Redis' own words and a failure status; nothing lands in another
        /// key, and the jobs accepted before (none here) are counted as added.
        @Test
        func aRefusedXADDStopsEnqueueWithRedisReason() async throws {
            try await withOperationsBed { bed in
                let keys = QueueKeys(queue: "typed")
                _ = try await bed.client.send(["SET", keys.jobs, "not a stream"])
                let run = try await CLIRun(bed, ["enqueue", "--redis", bed.redis.url, "--queue", "typed", "--lane", "bulk",
                                                 "--token", WorkerHarness.deviceToken(3), "--count", "5"])
                #expect(run.status != 0, "\(run)")
                #expect(run.stderr.contains("WRONGTYPE") && run.stderr.contains("refused the job"), "\(run)")
                #expect(try await bed.client.send(["GET", keys.jobs]) == .bulk(Array("not a stream".utf8)))
                #expect(try await bed.length(keys.urgentJobs) == 0)
            }
        }

        /// `herald send` against the emulator: 0 when every notification is accepted, 1 when APNs
        /// rejects one, 65 before sending an invalid one, 69 when APNs cannot be reached, 78 when
        /// it refuses the credentials or --app names no configured app; `--config` + `--app` sends
        /// as the file's app.
        @Test
        func sendExitStatusesAndApps() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator(["--unregistered-prefix", "dead", "--bundle-id", "com.example.app"])
                let good = WorkerHarness.deviceToken(1), dead = WorkerHarness.deviceToken(2, prefix: "dead")
                let target = emulator.workerArguments + ["--connections", "1"]
                let accepted = try await CLIRun(bed, ["send", "--bundle-id", "com.example.app", "--token", good, "--count", "2"] + target)
                #expect(accepted.status == 0, "\(accepted)")
                #expect(accepted.stdout.contains("sent 2, answered 2, accepted 2"), "\(accepted)")

                let rejected = try await CLIRun(bed, ["send", "--bundle-id", "com.example.app", "--tokens", "\(good),\(dead)"] + target)
                #expect(rejected.status == 1, "\(rejected)")
                #expect(rejected.stdout.contains("410 Unregistered") && rejected.stdout.contains("accepted 1"), "\(rejected)")

                let invalid = try await CLIRun(bed, ["send", "--bundle-id", "com.example.app", "--token", good, "--payload", "{"] + target)
                #expect(invalid.status == 65, "\(invalid)")

                let closedPort = try RedisServer.freePort()
                let unreachable = try await CLIRun(bed, ["send", "--bundle-id", "com.example.app", "--token", good, "--apns-host", "127.0.0.1",
                                                         "--apns-port", String(closedPort), "--ca-file", emulator.certificatePath,
                                                         "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", emulator.keyPath,
                                                         "--connections", "1", "--timeout", "60"])
                #expect(unreachable.status == 69, "\(unreachable)")
                #expect(unreachable.stderr.contains("cannot reach APNs"), "\(unreachable)")

                let otherKey = try OperationsCredentials.makeProviderKey(in: bed.directory, name: "other")
                let refused = try await CLIRun(bed, ["send", "--bundle-id", "com.example.app", "--token", good, "--apns-host", "127.0.0.1",
                                                     "--apns-port", String(emulator.port), "--ca-file", emulator.certificatePath,
                                                     "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", otherKey,
                                                     "--connections", "1", "--timeout", "60"])
                #expect(refused.status == 78, "\(refused)")
                #expect(refused.stderr.contains("refused the credentials"), "\(refused)")

                let config = bed.directory.path("apps.yaml")
                try """
                    apps:
                      shop:
                        environment: sandbox
                        apns_host: 127.0.0.1
                        apns_port: \(emulator.port)
                        ca_file: \(emulator.certificatePath)
                        team_id: TEAM000001
                        key_id: KEY0000001
                        key_file: \(emulator.keyPath)
                        bundle_id: com.example.app
                    """.write(toFile: config, atomically: true, encoding: .utf8)
                let asApp = try await CLIRun(bed, ["send", "--config", config, "--app", "shop", "--token", good])
                #expect(asApp.status == 0, "\(asApp)")
                #expect(asApp.stdout.contains("accepted 1"), "\(asApp)")
                let noSuchApp = try await CLIRun(bed, ["send", "--config", config, "--app", "nope", "--token", good])
                #expect(noSuchApp.status == 78 && noSuchApp.stderr.contains("no app nope"), "\(noSuchApp)")
                // Every notification sent is one the emulator accepted: 2 + 1 + 1.
                #expect(try await emulator.statistics().accepted == 4)
            }
        }
    }
}

/// One `herald` run to its end: exit status and output.
struct CLIRun: CustomStringConvertible {
    let status: Int32
    let stdout: String
    let stderr: String

    init(_ bed: OperationsBed, _ arguments: [String], environment: [String: String] = [:], timeout: Duration = .seconds(90)) async throws {
        let process = try bed.start(arguments, environment: environment)
        status = try await process.waitForExit(timeout: timeout)
        stdout = process.stdout
        stderr = process.stderr
    }

    var description: String { "exit \(status)\nstdout: \(stdout.suffix(2000))\nstderr: \(stderr.suffix(2000))" }
}

/// ArgumentParser's machine-readable help (`--experimental-dump-help`), flattened: each command
/// with its path and arguments.
enum CLIHelp {
    struct Argument {
        let name: String
        let aliases: [String]
        let kind: String
        let abstract: String
        let defaultValue: String?
        let allValues: [String]
        let shown: Bool
    }

    struct Command {
        let path: String
        let arguments: [Argument]
    }

    static func dump(_ bed: OperationsBed, _ command: [String]) async throws -> [Command] {
        let run = try await CLIRun(bed, command + ["--experimental-dump-help"])
        guard run.status == 0, let root = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any],
              let top = root["command"] as? [String: Any] else {
            throw WaitTimeout(description: "no help dump: \(run)")
        }
        var commands: [Command] = []
        func walk(_ node: [String: Any], path: String) {
            let arguments = (node["arguments"] as? [[String: Any]] ?? []).compactMap { argument -> Argument? in
                let names = (argument["names"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String != "short" }
                    .compactMap { $0["name"] as? String }
                guard let first = (argument["preferredName"] as? [String: Any])?["name"] as? String ?? names.first else { return nil }
                return Argument(name: first, aliases: names, kind: argument["kind"] as? String ?? "",
                                abstract: argument["abstract"] as? String ?? "", defaultValue: argument["defaultValue"] as? String,
                                allValues: argument["allValues"] as? [String] ?? [], shown: argument["shouldDisplay"] as? Bool ?? true)
            }
            let name = node["commandName"] as? String ?? "herald"
            let here = path.isEmpty ? name : path + " " + name
            commands.append(Command(path: here, arguments: arguments))
            for sub in node["subcommands"] as? [[String: Any]] ?? [] { walk(sub, path: here) }
        }
        walk(top, path: "")
        return commands
    }
}
