import Foundation
import Queue
import Testing

extension IntegrationTests {
    /// Per-token 429 backoff and the two APNs environments, end to end: a real redis-server, the
    /// emulator over TLS and HTTP/2 (two of them for the environments), and the worker in process
    /// or as `herald worker`. Every job is counted.
    @Suite
    struct TokenAndEnvironment {
        /// One device token answered 429, with APNs' habit of going on throttling a token that is
        /// not left alone (the emulator's `--throttle-window-ms`): its notifications read during
        /// the backoff wait in the retry set instead of being sent into more 429s, and all are
        /// delivered once the backoff has passed. Other tokens are not held up.
        @Test
        func aThrottledTokensLaterNotificationsWaitOutItsBackoff() async throws {
            try await withWorkerBed(emulator: {
                $0.throttlePrefix = "7e"
                $0.throttleCount = 1
                $0.throttleWindowMilliseconds = 400
            }) { bed in
                let throttledToken = WorkerHarness.deviceToken(1, prefix: "7e")
                let others = 10, later = 19
                try await bed.enqueue(1) { _ in [("token", throttledToken), ("payload", WorkerHarness.payload(0))] }
                try await bed.enqueue(others) { [("token", WorkerHarness.deviceToken($0, prefix: "00")), ("payload", WorkerHarness.payload($0))] }
                let worker = try await bed.startWorker()
                // The worker has taken APNs' 429 (the throttled job went to the retry set) ...
                try await waitFor("the first notification for the token is answered 429", timeout: .seconds(30)) {
                    try await worker.counters().retried >= 1
                }
                // ... and more notifications for the token arrive while it backs off.
                try await bed.enqueue(later) { [("token", throttledToken), ("payload", WorkerHarness.payload(100 + $0))] }
                let enqueued = 1 + others + later
                let ledger = try await bed.waitUntilSettled(enqueued: enqueued)
                let counters = try await bed.counters()

                #expect(ledger.settled && ledger.acceptedUnique == enqueued && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.deadLettered == 0 && ledger.feedback == 0, "\(ledger)")
                // Without the token's backoff each later notification would be sent within the
                // emulator's window and answered 429 too (20 of them); with it, only the first is.
                #expect(ledger.rejected["TooManyRequests", default: 0] <= 2, "429s for the throttled token: \(ledger)")
                #expect(counters.tokenBackoffDeferred >= 1, "notifications deferred by the token's backoff: \(counters)")
                #expect(counters.accepted == enqueued, "\(counters)")
            }
        }

        /// An app with both environments (config file `environment: both`), two emulators: one
        /// plays production, the other sandbox, each answering BadDeviceToken for the other's
        /// tokens. Production tokens are delivered on production; sandbox tokens on sandbox with a
        /// `wrong_environment` feedback entry naming sandbox; tokens of neither are dead
        /// (BadDeviceToken feedback). A second round for the sandbox tokens goes straight to
        /// sandbox. /metrics counts the wrong environments, and `herald feedback tail` shows the
        /// new entries. Configured by the file, and again by flags (`--environment both
        /// --apns-sandbox-host --apns-sandbox-port`).
        @Test(arguments: [false, true])
        func bothEnvironmentsDeliverATokenWhereItBelongs(byFlags: Bool) async throws {
            try await withOperationsBed { bed in
                // Both emulators present a certificate of one private CA, which the worker trusts.
                try FileManager.default.createDirectory(atPath: bed.directory.path("ca"), withIntermediateDirectories: true)
                let certificates = try TestCertificates(directory: bed.directory.path("ca"))
                let presenting = ["--cert", certificates.serverCertificate, "--key", certificates.serverKey]
                let production = try await bed.startEmulator(presenting + ["--bad-token-prefix", "5b,dd"])
                let sandbox = try await bed.startEmulator(presenting + ["--bad-token-prefix", "a0,dd"], verifying: production.keyPath)
                let bundle = certificates.caFile
                @Sendable func statistics(_ emulator: MockAPNsProcess) async throws -> EmulatorCounts {
                    guard OperationsHTTP.curlHasHTTP2 else { return try await emulator.statistics() }
                    let (status, body) = try OperationsHTTP.curl(["--http2", "--cacert", certificates.caFile,
                                                                  "https://127.0.0.1:\(emulator.port)/_herald/stats"])
                    guard status == 200 else { throw WaitTimeout(description: "GET /_herald/stats answered \(status): \(body)") }
                    return try EmulatorCounts(json: body)
                }
                let yaml = """
                    redis: \(bed.redis.url)
                    drain_timeout: 10
                    apps:
                      default:
                        bundle_id: com.example.herald
                        environment: both
                        apns_host: 127.0.0.1
                        apns_port: \(production.port)
                        apns_sandbox_host: 127.0.0.1
                        apns_sandbox_port: \(sandbox.port)
                        ca_file: \(bundle)
                        team_id: TEAM000001
                        key_id: KEY0000001
                        key_file: \(production.keyPath)
                        connections: 2
                    """
                let yamlPath = bed.directory.path("both.yaml")
                try yaml.write(toFile: yamlPath, atomically: true, encoding: .utf8)

                let keys = QueueKeys()
                let productionTokens = 30, sandboxTokens = 20, neither = 5
                let single = productionTokens + sandboxTokens + neither
                _ = try await bed.client.xadd(keys.jobs, count: single) { index in
                    let prefix = index < productionTokens ? "a0" : index < productionTokens + sandboxTokens ? "5b" : "dd"
                    return [("token", WorkerHarness.deviceToken(index, prefix: prefix)), ("payload", WorkerHarness.payload(index))]
                }
                // And one fan-out job with a token of each kind.
                let fanOut = ["a0", "5b", "dd"].map { WorkerHarness.deviceToken(999, prefix: $0) }
                _ = try await bed.client.xadd(keys.jobs, count: 1) { _ in
                    [("tokens", fanOut.joined(separator: ",")), ("payload", WorkerHarness.payload(999))]
                }
                let notifications = single + fanOut.count
                let onProduction = productionTokens + 1, onSandbox = sandboxTokens + 1, dead = neither + 1

                let flags = ["--redis", bed.redis.url, "--environment", "both", "--bundle-id", "com.example.herald",
                             "--apns-host", "127.0.0.1", "--apns-port", String(production.port),
                             "--apns-sandbox-host", "127.0.0.1", "--apns-sandbox-port", String(sandbox.port), "--ca-file", bundle,
                             "--team-id", "TEAM000001", "--key-id", "KEY0000001", "--key-file", production.keyPath, "--connections", "2"]
                let (worker, http) = try bed.startWorker(byFlags ? flags : ["--config", yamlPath])
                func drained(feedback: Int) async throws -> Bool {
                    try worker.requireRunning()
                    let retry = try await bed.client.integer("ZCARD", keys.retry)
                    let written = try await bed.length(keys.feedback)
                    let empty = try await bed.drained(keys)
                    return empty && retry == 0 && written == feedback
                }
                try await waitFor("the worker drains the queue", timeout: .seconds(60), interval: .milliseconds(100)) {
                    try await drained(feedback: onSandbox + dead)
                }
                // A second round for the sandbox tokens, after the first was answered: the worker
                // remembers the tokens sandbox accepted and sends them there straight away.
                let again = sandboxTokens
                _ = try await bed.client.xadd(keys.jobs, count: again) { index in
                    [("token", WorkerHarness.deviceToken(productionTokens + index, prefix: "5b")), ("payload", WorkerHarness.payload(2_000 + index))]
                }
                try await waitFor("the worker drains the second round", timeout: .seconds(60), interval: .milliseconds(100)) {
                    try await drained(feedback: onSandbox + dead + again)
                }
                let wrongEnvironments = onSandbox + again
                let scrape = try await http.scrape(until: "/metrics shows every notification's outcome", process: worker) { scrape in
                    // The sandbox pool's counters reach /metrics on their own schedule: waited for
                    // too (once read right after the notifications' and found still at 0, in CI).
                    scrape.count("herald_notifications_total", ["app": "default", "outcome": "accepted"]) == onProduction + wrongEnvironments
                        && scrape.count("herald_notifications_total", ["app": "default", "outcome": "dead_token"]) == dead
                        && scrape.count("herald_apns_responses_total", ["app": "default/sandbox", "status": "200"]) == wrongEnvironments
                }
                #expect(scrape.count("herald_wrong_environment_total", ["app": "default", "queue": "default"]) == wrongEnvironments,
                        "\(scrape.series("herald_wrong_environment_total"))")
                #expect(scrape.count("herald_notifications_total", ["outcome": "retried"]) == 0
                        && scrape.count("herald_notifications_total", ["outcome": "dead_lettered"]) == 0, "\(scrape.series("herald_notifications_total"))")
                // The sandbox pool's answers are labelled with the app's sandbox lane.
                #expect(scrape.count("herald_apns_responses_total", ["app": "default/sandbox", "status": "200"]) == wrongEnvironments,
                        "\(scrape.series("herald_apns_responses_total"))")

                // Each emulator delivered its own tokens, once; production refused the others, and
                // was not asked again for the second round.
                let productionCounts = try await statistics(production)
                let sandboxCounts = try await statistics(sandbox)
                #expect(productionCounts.acceptedUnique == onProduction && productionCounts.duplicates == 0, "\(productionCounts)")
                #expect(sandboxCounts.acceptedUnique == wrongEnvironments && sandboxCounts.duplicates == 0, "\(sandboxCounts)")
                #expect(productionCounts.rejected == ["BadDeviceToken": onSandbox + dead], "\(productionCounts)")
                #expect(sandboxCounts.rejected == ["BadDeviceToken": dead], "only tokens of neither reach sandbox and fail: \(sandboxCounts)")

                // The feedback stream: wrong_environment (naming sandbox) for each sandbox
                // notification, BadDeviceToken for each token of neither; nothing dead-lettered.
                let feedback = try await bed.client.entries(keys.feedback)
                let wrong = feedback.filter { $0["reason"] == "wrong_environment" }
                let badToken = feedback.filter { $0["reason"] == "BadDeviceToken" }
                #expect(feedback.count == wrongEnvironments + dead && wrong.count == wrongEnvironments && badToken.count == dead, "\(feedback)")
                #expect(wrong.allSatisfy { $0["environment"] == "sandbox" && $0["token"]?.hasPrefix("5b") == true && $0["topic"] == "com.example.herald" },
                        "\(wrong)")
                #expect(badToken.allSatisfy { $0["environment"] == nil && $0["token"]?.hasPrefix("dd") == true }, "\(badToken)")
                #expect(try await bed.length(keys.dead) == 0)
                // Every notification counted once: delivered on one environment, or a dead token.
                #expect(productionCounts.acceptedUnique + sandboxCounts.acceptedUnique + badToken.count == notifications + again)

                // `herald feedback tail` shows the environment.
                let tail = try bed.start(["feedback", "tail", "--redis", bed.redis.url, "--count", "100", "--json"])
                #expect(try await tail.waitForExit() == 0, "\(tail.outputTail())")
                let lines = tail.stdout.split(separator: "\n")
                #expect(lines.count == wrongEnvironments + dead, "\(tail.stdout)")
                #expect(lines.filter { $0.contains(#""reason":"wrong_environment""#) && $0.contains(#""environment":"sandbox""#) }.count == wrongEnvironments,
                        "\(tail.stdout)")
                let text = try bed.start(["feedback", "tail", "--redis", bed.redis.url, "--count", "100"])
                #expect(try await text.waitForExit() == 0, "\(text.outputTail())")
                #expect(text.stdout.split(separator: "\n").filter { $0.contains("wrong_environment") && $0.contains("accepted by sandbox") }.count
                        == wrongEnvironments, "\(text.stdout)")
                _ = try await worker.terminate()
            }
        }
    }
}
