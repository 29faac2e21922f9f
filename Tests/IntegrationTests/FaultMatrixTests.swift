import Foundation
import Glibc
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// The fault matrix: each cell runs the real `herald worker` binary against a real
    /// `redis-server` and the real `herald mock-apns`, enqueues a known number of jobs, injects one
    /// fault, and checks that the worker is alive at the end (unless the cell kills it), that every
    /// job is counted (enqueued = accepted + dead-lettered + dead tokens + superseded, plus the
    /// retry set where a cell parks jobs on purpose), that duplicates stay within the crash window,
    /// and that the worker's RSS stays under 150 MiB. Each cell prints one line of figures
    /// (`fault-matrix | …`); `docs/reliability.md` keeps the last run's table.
    ///
    /// `make test` runs the fast cells; `HERALD_MATRIX=full` (`make matrix`) adds the slow ones:
    /// Redis stalled for 10 s, every other 403 reason, and a halted app that recovers by itself.
    @Suite(.serialized)
    struct FaultMatrix {
        /// A small pool and 50 ms answers keep ~100 notifications in flight, so a fault switched on
        /// after the first few hundred lands mid-run.
        static let pool = ["--connections", "2", "--max-streams", "50"]
        static let count = 3_000

        /// Starts the emulator (`emulator` flags), enqueues `count` jobs and 10 collapse pairs, starts
        /// one worker, runs `midRun` once a few hundred are accepted, and waits until all settle.
        static func apnsCell(_ name: String, emulator flags: [String], worker extra: [String] = [],
                             count: Int = FaultMatrix.count, timeout: Duration = .seconds(60),
                             midRun: ((MatrixBed) async throws -> Void)? = nil,
                             check: (MatrixBed, MatrixLedger, [String: Any]) throws -> Void = { _, _, _ in }) async throws {
            try await withMatrixBed(name) { bed in
                try await bed.startEmulator(["--latency-ms", "50"] + flags)
                try await bed.enqueue(count, collapsePairs: 10)
                let worker = try bed.startWorker(pool + extra)
                if let midRun {
                    try await waitFor("\(name): a few hundred accepted", timeout: .seconds(30)) {
                        try worker.process.requireRunning()
                        return (try bed.emulatorCounts()["accepted"] as? Int ?? 0) >= 300
                    }
                    try await midRun(bed)
                }
                let ledger = try await bed.waitUntilSettled(timeout: timeout)
                let counts = try bed.emulatorCounts()
                bed.expectCounted(ledger)
                #expect(ledger.accepted < count, "\(name): sanity: \(ledger)")
                try check(bed, ledger, counts)
                bed.report(ledger, note: note(counts))
            }
        }

        /// The emulator's fault counters worth a mention in a cell's line.
        static func note(_ counts: [String: Any]) -> String {
            let names = ["goaways_sent", "streams_stalled", "streams_reset", "garbage_bodies", "pings_ignored", "tokens_rejected",
                         "settings_sent", "connections"]
            var parts = names.compactMap { name in (counts[name] as? Int).flatMap { $0 > 0 ? "\(name)=\($0)" : nil } }
            if let rejected = counts["rejected"] as? [String: Int], !rejected.isEmpty {
                parts.append("rejected " + rejected.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))
            }
            return parts.joined(separator: " ")
        }

        /// Every string in a Redis reply, depth first.
        static func strings(_ reply: RedisReply) -> [String] {
            if case .array(let items) = reply { return items.flatMap { strings($0) } }
            return reply.string.map { [$0] } ?? []
        }

        static func int(_ counts: [String: Any], _ name: String) -> Int { counts[name] as? Int ?? -1 }

        // MARK: APNs

        @Test func apns429TooManyRequests() async throws {
            try await FaultMatrix.apnsCell("APNs 429 TooManyRequests 10 %", emulator: ["--error", "429:TooManyRequests:0.1"], check: { _, _, counts in
                #expect((counts["rejected"] as? [String: Int])?["TooManyRequests"] ?? 0 > 100, "\(counts)")
            })
        }

        @Test func apns500And503AtFivePercent() async throws {
            try await FaultMatrix.apnsCell("APNs 500 + 503 at 5 % each",
                                           emulator: ["--error", "500:InternalServerError:0.05", "--error", "503:ServiceUnavailable:0.05"], check: { _, _, counts in
                let rejected = counts["rejected"] as? [String: Int] ?? [:]
                #expect((rejected["InternalServerError"] ?? 0) > 50 && (rejected["ServiceUnavailable"] ?? 0) > 50, "\(counts)")
            })
        }

        @Test func apnsResetStreams() async throws {
            try await FaultMatrix.apnsCell("APNs RST_STREAM INTERNAL_ERROR 5 %", emulator: [], midRun: { bed in
                try bed.control("reset-streams/INTERNAL_ERROR:0.05")
            }, check: { _, _, counts in
                #expect(FaultMatrix.int(counts, "streams_reset") > 20, "\(counts)")
            })
        }

        @Test func apnsGoAwayAfter400Streams() async throws {
            try await FaultMatrix.apnsCell("APNs GOAWAY after 400 streams", emulator: ["--goaway-after", "400"], check: { _, _, counts in
                #expect(FaultMatrix.int(counts, "goaways_sent") >= 5, "\(counts)")
            })
        }

        @Test func apnsStreamsNeverAnswered() async throws {
            try await FaultMatrix.apnsCell("APNs 5 streams never answered (--response-timeout 2)", emulator: [],
                                           worker: ["--response-timeout", "2"], midRun: { bed in
                try bed.control("stall-next/5")
            }, check: { _, _, counts in
                #expect(FaultMatrix.int(counts, "streams_stalled") == 5, "\(counts)")
            })
        }

        @Test(arguments: ["oversized", "text", "binary", "long-reason", "unknown-reason"])
        func apnsGarbageErrorBodies(kind: String) async throws {
            // The slow set adds the other kinds; `oversized` (1 MiB bodies) is the one for memory.
            guard kind == "oversized" || FaultMatrixMode.full else { return }
            try await FaultMatrix.apnsCell("APNs garbage error bodies (\(kind)), 503 at 5 %",
                                           emulator: ["--error", "503:ServiceUnavailable:0.05"], midRun: { bed in
                try bed.control("garbage-body/\(kind)")
            }, check: { _, _, counts in
                #expect(FaultMatrix.int(counts, "garbage_bodies") > 20, "\(counts)")
            })
        }

        @Test func apnsMaxConcurrentStreamsLoweredToOne() async throws {
            try await FaultMatrix.apnsCell("APNs MAX_CONCURRENT_STREAMS lowered to 1 mid-run", emulator: [], midRun: { bed in
                try bed.control("max-streams/1")
                // One stream per connection at 50 ms would take minutes: answers at once from here.
                try bed.control("latency/0")
            }, check: { _, _, counts in
                #expect(FaultMatrix.int(counts, "settings_sent") >= 2, "\(counts)")
            })
        }

        @Test func apnsPingsUnanswered() async throws {
            // The server goes silent: it answers neither streams nor PINGs for 4 s. With
            // --ping-interval 1 the worker PINGs its quiet connections, gives up on them after 1 s
            // more and opens new ones; what was in flight on them is retried. Every job is counted.
            try await FaultMatrix.apnsCell("APNs silent, PINGs unanswered (4 s)", emulator: [], worker: ["--ping-interval", "1"], midRun: { bed in
                try bed.control("ignore-ping/on")
                try bed.control("stall/1")
                try await Task.sleep(for: .seconds(4))
                try bed.control("stall/0")
                try bed.control("ignore-ping/off")
            }, check: { _, _, counts in
                #expect(FaultMatrix.int(counts, "pings_ignored") >= 1, "the worker PINGed the silent connections: \(counts)")
                #expect(FaultMatrix.int(counts, "connections") > 2, "and replaced them: \(counts)")
            })
        }

        // MARK: APNs credentials

        /// The 403 reasons that blame the app's credentials (every 403 but ExpiredProviderToken).
        static let credentialReasons = ["InvalidProviderToken", "MissingProviderToken", "UnrelatedKeyIdInToken",
                                        "BadEnvironmentKeyIdInToken", "BadCertificate", "BadCertificateEnvironment", "Forbidden"]

        /// Every answer is 403 REASON: the app halts (a fresh connection with a fresh token is refused
        /// too); the jobs it had read are parked in the retry set with no attempt spent, the rest wait
        /// unread in the stream (a halted app reads nothing), none is dead-lettered.
        @Test(arguments: FaultMatrix.credentialReasons)
        func apns403ParksJobs(reason: String) async throws {
            guard reason == "InvalidProviderToken" || FaultMatrixMode.full else { return }
            try await withMatrixBed("APNs 403 \(reason) (every answer)") { bed in
                try await bed.startEmulator(["--error", "403:\(reason):1"])
                try await bed.enqueue(1_000)
                let worker = try bed.startWorker(FaultMatrix.pool)
                var ledger = MatrixLedger()
                try await waitFor("the app halted and every job is parked", timeout: .seconds(30), interval: .milliseconds(200)) {
                    try worker.process.requireRunning()
                    ledger = try await bed.ledger()
                    return ledger.pending == 0 && ledger.retry > 0 && ledger.outcomes + ledger.retry + ledger.jobsLength == ledger.enqueued
                }
                // The gauge is published once a second.
                _ = try await worker.http.scrape(until: "the app is reported halted", timeout: .seconds(5), process: worker.process) {
                    $0.count("herald_credentials_rejected") == 1
                }
                ledger = try await bed.ledger()
                // The emulator judges a dead token before the injected 403: those few are reported.
                #expect(ledger.accepted == 0, "\(ledger)")
                #expect(Set(ledger.deadByReason.keys).isSubset(of: ["bad_priority"]), "no job dead-lettered for a credentials fault: \(ledger)")
                // Parked with their attempts untouched: the retry members say attempts 0.
                let members = try await bed.client.send(["ZRANGE", bed.keys.retry, "0", "-1"])
                var spent = 0
                if case .array(let rows) = members {
                    for row in rows {
                        let text = row.string ?? ""
                        if !text.contains(#""attempts","0""#) { spent += 1 }
                    }
                }
                #expect(spent == 0, "\(spent) parked jobs had an attempt counted")
                let readyz = try worker.http.status("/readyz")
                bed.expectCounted(ledger, parked: true)
                bed.report(ledger, note: "parked: \(ledger.retry) in the retry set, \(ledger.jobsLength) unread in the stream, attempts spent \(spent), /readyz \(readyz); " + FaultMatrix.note(try bed.emulatorCounts()))
            }
        }

        /// `reject-tokens` on for a while, then off: the app halts, parks its jobs, and its first probe
        /// (15 s after the halt) resumes sending without a restart; the parked jobs come back when due.
        @Test(.enabled(if: FaultMatrixMode.full, "slow: waits for the first probe and the parked jobs' due time"))
        func apnsRejectTokensThenRecovers() async throws {
            try await withMatrixBed("APNs reject-tokens on, off: recovers by itself") { bed in
                try await bed.startEmulator(["--reject-tokens"])
                try await bed.enqueue(1_000)
                let worker = try bed.startWorker(FaultMatrix.pool)
                try await waitFor("the app halted and every job is parked", timeout: .seconds(30), interval: .milliseconds(200)) {
                    try worker.process.requireRunning()
                    let ledger = try await bed.ledger()
                    return ledger.pending == 0 && ledger.retry > 0 && ledger.outcomes + ledger.retry + ledger.jobsLength == ledger.enqueued
                }
                let halted = ContinuousClock.now
                try bed.control("reject-tokens/off")
                try await bed.enqueue(1_000, collapsePairs: 10)
                let ledger = try await bed.waitUntilSettled(timeout: .seconds(120))
                let recovered = ContinuousClock.now - halted
                bed.expectCounted(ledger)
                bed.report(ledger, note: "settled \(recovered.components.seconds) s after the halt; " + FaultMatrix.note(try bed.emulatorCounts()))
            }
        }

        // MARK: Redis

        @Test func redisKilledAndRestartedWithAOF() async throws {
            try await withMatrixBed("Redis kill -9, restart with AOF", appendOnly: true) { bed in
                try await bed.startEmulator(["--latency-ms", "50"])
                try await bed.enqueue(FaultMatrix.count, collapsePairs: 10)
                let worker = try bed.startWorker(FaultMatrix.pool)
                try await waitFor("a few hundred accepted", timeout: .seconds(30)) {
                    try worker.process.requireRunning()
                    return (try bed.emulatorCounts()["accepted"] as? Int ?? 0) >= 500
                }
                try bed.redis.restart()
                let ledger = try await bed.waitUntilSettled()
                #expect(ledger.accepted < FaultMatrix.count)
                bed.expectCounted(ledger, duplicateBound: 100)
                let errors = try worker.http.scrape().count("herald_redis_errors_total")
                #expect(errors >= 1, "the worker saw Redis go away")
                bed.report(ledger, note: "redis errors \(errors)")
            }
        }

        @Test func redisRestartedEmpty() async throws {
            try await withMatrixBed("Redis restarted empty (group gone)") { bed in
                try await bed.startEmulator()
                try await bed.enqueue(1_000)
                let worker = try bed.startWorker(FaultMatrix.pool)
                try await bed.waitUntilSettled()
                try bed.redis.restart()
                try bed.startOver()
                // The group went with the data; the worker makes it again, and jobs added now count.
                try await bed.enqueue(1_000, collapsePairs: 10)
                let ledger = try await bed.waitUntilSettled()
                let groups = try await bed.client.send(["XINFO", "GROUPS", bed.keys.jobs])
                #expect(FaultMatrix.strings(groups).contains("herald"), "the worker recreated its group: \(FaultMatrix.strings(groups))")
                bed.expectCounted(ledger)
                _ = worker
                bed.report(ledger, note: "counted after the restart only")
            }
        }

        @Test func redisHostDoesNotResolve() async throws {
            try await withMatrixBed("Redis host does not resolve") { bed in
                try await bed.startEmulator()
                let worker = try bed.startWorker(FaultMatrix.pool, redisURL: "redis://no-such-host.invalid:6379")
                try await Task.sleep(for: .seconds(4))
                try worker.process.requireRunning()
                #expect(try worker.http.status("/readyz") == 503, "not ready without Redis")
                #expect(try worker.http.status("/healthz") == 200, "alive: the loop turns")
                let lines = worker.process.stderr.split(separator: "\n").filter { $0.contains("Redis connection down") }
                #expect(lines.count == 1 && lines.allSatisfy { $0.contains("no-such-host.invalid") }, "one clear line, retries at debug: \(lines)")
                #expect(!worker.process.stderr.contains("Fatal error"), "\(worker.process.stderr)")
                let ledger = MatrixLedger()
                bed.expectCounted(ledger)
                bed.report(ledger, note: "alive, /readyz 503, \(lines.count) log lines in 4 s: \(lines.first.map(String.init) ?? "-")")
            }
        }

        @Test func redisRefusesThePassword() async throws {
            let redis = try PasswordRedisServer(password: "matrix-right")
            defer { redis.stop() }
            try await redis.waitUntilUp()
            try await withMatrixBed("Redis WRONGPASS") { bed in
                try await bed.startEmulator()
                // Jobs the worker can never reach: all still waiting at the end.
                let producer = try RedisClient(endpoint: redis.endpoint(password: "matrix-right"))
                defer { producer.shutdown() }
                let count = 500
                _ = try await producer.xadd(bed.keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                // Retries after the first refusal log at debug: read them there.
                let worker = try bed.startWorker(FaultMatrix.pool, redisURL: redis.url,
                                                 environment: ["HERALD_REDIS_PASSWORD": "matrix-wrong", "HERALD_LOG_LEVEL": "debug"])
                var delays: [Int] = []
                try await waitFor("three refused logins", timeout: .seconds(15), interval: .milliseconds(100)) {
                    try worker.process.requireRunning()
                    delays = worker.process.stderr.split(separator: "\n").filter { $0.contains("WRONGPASS") }.compactMap { line in
                        line.split(separator: " ").first { $0.hasPrefix("reconnect_ms=") }.flatMap { Int($0.dropFirst("reconnect_ms=".count)) }
                    }
                    return delays.count >= 3
                }
                #expect(delays[1] > delays[0] && delays[2] > delays[1], "backoff grows: \(delays)")
                #expect(try worker.http.status("/readyz") == 503)
                #expect(!worker.process.stderr.contains("matrix-wrong"), "the password never appears in the log")
                var ledger = MatrixLedger(enqueued: count)
                ledger.jobsLength = try await producer.integer("XLEN", bed.keys.jobs)
                #expect(ledger.jobsLength == count, "every job still waits: \(ledger)")
                #expect(worker.process.isRunning && MatrixBed.rssMiB(worker.process) < 150)
                bed.report(ledger, note: "alive, /readyz 503, reconnect_ms \(delays.prefix(3).map(String.init).joined(separator: ", ")); all \(count) jobs still in the stream")
            }
        }

        @Test(.enabled(if: FaultMatrixMode.full, "slow: Redis is stopped for 10 s"))
        func redisStalledForTenSeconds() async throws {
            try await withMatrixBed("Redis stalled 10 s (SIGSTOP, SIGCONT)") { bed in
                try await bed.startEmulator(["--latency-ms", "50"])
                try await bed.enqueue(FaultMatrix.count, collapsePairs: 10)
                let worker = try bed.startWorker(FaultMatrix.pool)
                try await waitFor("a few hundred accepted", timeout: .seconds(30)) {
                    try worker.process.requireRunning()
                    return (try bed.emulatorCounts()["accepted"] as? Int ?? 0) >= 500
                }
                let pid = try #require(bed.redis.pid)
                kill(pid, SIGSTOP)
                try await Task.sleep(for: .seconds(10))
                let healthz = try worker.http.status("/healthz")
                kill(pid, SIGCONT)
                #expect(healthz == 200, "the worker's loop kept turning while Redis was stopped")
                let ledger = try await bed.waitUntilSettled()
                bed.expectCounted(ledger, duplicateBound: 100)
                bed.report(ledger, note: "redis errors \(try worker.http.scrape().count("herald_redis_errors_total"))")
            }
        }

        // MARK: the worker

        @Test func workerKilledMidDrain() async throws {
            try await withMatrixBed("worker SIGKILL mid-drain, a second takes over") { bed in
                try await bed.startEmulator(["--latency-ms", "100"])
                try await bed.enqueue(FaultMatrix.count)
                let first = try bed.startWorker(FaultMatrix.pool + ["--claim-idle", "2"])
                try await waitFor("a few hundred accepted", timeout: .seconds(30)) {
                    try first.process.requireRunning()
                    return (try bed.emulatorCounts()["accepted"] as? Int ?? 0) >= 500
                }
                first.process.signal(SIGKILL)
                #expect(try await first.process.waitForExit(timeout: .seconds(10)) == 128 + SIGKILL)
                let pendingAtKill = try await bed.client.pendingCount(bed.keys.jobs, group: bed.keys.group)
                #expect(pendingAtKill > 0, "the kill left entries pending")
                let second = try bed.startWorker(FaultMatrix.pool + ["--claim-idle", "2"])
                let ledger = try await bed.waitUntilSettled(running: [second.process])
                // Metrics are published once a second.
                let reclaimed = try await second.http.scrape(until: "the reclaim is published", timeout: .seconds(5), process: second.process) {
                    $0.count("herald_jobs_reclaimed_total") > 0
                }.count("herald_jobs_reclaimed_total")
                // In flight at the kill: at most 2 connections x 50 streams.
                bed.expectCounted(ledger, duplicateBound: 100, alive: [second.process])
                bed.report(ledger, note: "pending at the kill \(pendingAtKill), reclaimed \(reclaimed), duplicate bound 100 (2 x 50 streams)")
            }
        }

        @Test func workerSigtermUnderLoad() async throws {
            try await withMatrixBed("worker SIGTERM under load, restarted") { bed in
                try await bed.startEmulator(["--latency-ms", "100"])
                try await bed.enqueue(FaultMatrix.count)
                let first = try bed.startWorker(FaultMatrix.pool + ["--drain-timeout", "10"])
                try await waitFor("a few hundred accepted", timeout: .seconds(30)) {
                    try first.process.requireRunning()
                    return (try bed.emulatorCounts()["accepted"] as? Int ?? 0) >= 500
                }
                let rss = MatrixBed.rssMiB(first.process)
                let status = try await first.process.terminate(timeout: .seconds(15))
                #expect(status == 0, "a drain exits 0: \(first.process.outputTail())")
                let afterExit = try await bed.ledger()
                #expect(afterExit.pending == 0, "a clean drain leaves nothing pending: \(afterExit)")
                #expect(afterExit.accepted < FaultMatrix.count, "SIGTERM landed mid-run: \(afterExit)")
                let second = try bed.startWorker(FaultMatrix.pool)
                let ledger = try await bed.waitUntilSettled(running: [second.process])
                bed.expectCounted(ledger, alive: [second.process])
                bed.report(ledger, rss: rss, note: "exit \(status); after the drain: accepted \(afterExit.accepted), stream \(afterExit.jobsLength), retry set \(afterExit.retry), pending \(afterExit.pending)")
            }
        }
    }
}
