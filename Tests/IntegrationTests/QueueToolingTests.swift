import APNs
import Foundation
import Glibc
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// The operator's queue tools (`herald stats`, `dead-letters`, `feedback tail`) run as the real
    /// binary against a private redis-server holding entries shaped as the worker writes them.
    @Suite
    struct QueueTooling {
        static let tokenA = "aabbccdd" + String(repeating: "01", count: 28)
        static let tokenB = "bbccddee" + String(repeating: "23", count: 28)
        static let tokenC = "ccddeeff" + String(repeating: "45", count: 28)
        static let topic = "com.example.herald"

        /// A malformed job dead-lettered whole (bad priority), a retried fan-out job whose two
        /// tokens gave up (max_attempts, with Herald's retry fields), and a PayloadTooLarge one.
        struct Letters {
            let badPriority: String
            let maxAttempts: String
            let tooLarge: String
            let retriedJob: [(String, String)]
        }

        static func addLetters(_ harness: QueueToolingHarness) throws -> Letters {
            let badPriority = try harness.addDeadLetter(
                job: [("token", tokenA), ("payload", #"{"aps":{"alert":"Hi"}}"#), ("priority", "7"), ("topic", topic)],
                reason: "bad_priority", message: #"The priority "7" is not 10, 5 or 1."#)
            let retriedJob: [(String, String)] = [
                ("tokens", "\(tokenA),\(tokenB),\(tokenC)"), ("payload", #"{"aps":{"alert":"Sale"}}"#), ("topic", topic),
                ("collapse_id", "sale"), ("attempts", "7"), ("origin", "1700000000000-3"), ("enqueued_at", "1700000000000"),
                ("retry_id", "1700000000500-0/7/12345"),
            ]
            let maxAttempts = try harness.addDeadLetter(
                job: retriedJob, tokens: [tokenB, tokenC], reason: "max_attempts",
                message: "Gave up after 8 attempts (--max-attempts 8); the last answer was 503 ServiceUnavailable.", status: 503, attempts: 8)
            let tooLarge = try harness.addDeadLetter(
                job: [("token", tokenC), ("payload", #"{"aps":{"alert":"big"}}"#), ("topic", topic)], tokens: [tokenC],
                reason: "PayloadTooLarge", message: "APNs refused the payload as too large.", status: 413, attempts: 1)
            return Letters(badPriority: badPriority, maxAttempts: maxAttempts, tooLarge: tooLarge, retriedJob: retriedJob)
        }

        @Test
        func listFiltersByReasonAndRedactsTokens() throws {
            let harness = try QueueToolingHarness()
            let letters = try Self.addLetters(harness)

            let all = try harness.herald("dead-letters", "list", "--queue", "tooling", "--json")
            #expect(all.status == 0, "\(all.stderr)")
            let document = try all.json()
            let entries = try #require(document["dead_letters"] as? [[String: Any]])
            #expect(entries.map { $0["id"] as? String } == [letters.badPriority, letters.maxAttempts, letters.tooLarge])
            #expect(document["total"] as? Int == 3)
            #expect(!all.stdout.contains(Self.tokenA) && !all.stdout.contains(Self.tokenB), "tokens must be redacted")

            let filtered = try harness.herald("dead-letters", "list", "--queue", "tooling", "--reason", "max_attempts", "--json")
            let only = try #require(filtered.json()["dead_letters"] as? [[String: Any]])
            #expect(only.count == 1)
            let entry = try #require(only.first)
            #expect(entry["id"] as? String == letters.maxAttempts)
            #expect(entry["reason"] as? String == "max_attempts")
            #expect(entry["status"] as? Int == 503)
            #expect(entry["attempts"] as? Int == 8, "the dead letter's own attempts, not the job's 7")
            #expect(entry["topic"] as? String == Self.topic)
            #expect(entry["tokens"] as? [String] == ["bbccddee…", "ccddeeff…"])
            #expect((entry["failed_at"] as? String)?.hasSuffix("Z") == true)

            // Several reasons, a table for people, every field with --full, tokens only when asked.
            let table = try harness.herald("dead-letters", "list", "--queue", "tooling", "--reason", "bad_priority,PayloadTooLarge")
            #expect(table.status == 0)
            #expect(table.stdout.contains("ID") && table.stdout.contains("REASON") && table.stdout.contains("FAILED AT"))
            #expect(table.stdout.contains(letters.badPriority) && table.stdout.contains(letters.tooLarge))
            #expect(!table.stdout.contains(letters.maxAttempts))
            #expect(table.stdout.contains("aabbccdd…") && !table.stdout.contains(Self.tokenA))
            #expect(table.stdout.contains("UTC"))
            let full = try harness.herald("dead-letters", "list", "--queue", "tooling", "--full", "--reason", "max_attempts")
            #expect(full.stdout.contains("collapse_id") && full.stdout.contains("retry_id") && full.stdout.contains(#"{"aps":{"alert":"Sale"}}"#))
            #expect(!full.stdout.contains(Self.tokenB))
            let shown = try harness.herald("dead-letters", "list", "--queue", "tooling", "--full", "--show-tokens", "--reason", "max_attempts")
            #expect(shown.stdout.contains(Self.tokenB) && shown.stdout.contains(Self.tokenC))

            let limited = try harness.herald("dead-letters", "list", "--queue", "tooling", "--limit", "2", "--json")
            let limitedDocument = try limited.json()
            #expect((limitedDocument["dead_letters"] as? [Any])?.count == 2)
            #expect(limitedDocument["more"] as? Bool == true)
        }

        @Test
        func requeueDryRunChangesNothingThenMovesExactlyTheMatching() throws {
            let harness = try QueueToolingHarness()
            let letters = try Self.addLetters(harness)
            let deadBefore = try harness.entries(harness.keys.dead).map { queueToolingFieldTexts($0.fields) }

            let dry = try harness.herald("dead-letters", "requeue", "--queue", "tooling", "--reason", "max_attempts,bad_priority", "--dry-run")
            #expect(dry.status == 0, "\(dry.stderr)")
            #expect(dry.stdout.contains("would requeue 2 dead letters"))
            #expect(dry.stdout.contains("still invalid (bad_priority)"), "a job that will fail again is named")
            #expect(!dry.stdout.contains(Self.tokenB))
            #expect(try harness.length(harness.keys.jobs) == 0)
            #expect(try harness.entries(harness.keys.dead).map { queueToolingFieldTexts($0.fields) } == deadBefore)

            let run = try harness.herald("dead-letters", "requeue", "--queue", "tooling", "--reason", "max_attempts")
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("requeued 1 dead letter to herald:{tooling}:jobs"))
            // Exactly the matching entry left :dead; the others stay untouched.
            #expect(try harness.entries(harness.keys.dead).map(\.id.description) == [letters.badPriority, letters.tooLarge])
            let jobs = try harness.entries(harness.keys.jobs)
            try #require(jobs.count == 1)
            let job = jobs[0]
            #expect(run.stdout.contains(job.id.description), "the new entry id is printed")
            // The job's own fields in order, narrowed to the failed tokens; origin and enqueued_at kept;
            // the dead-letter fields and Herald's retry bookkeeping gone.
            #expect(queueToolingFieldTexts(job.fields) == [
                "payload={\"aps\":{\"alert\":\"Sale\"}}", "topic=\(Self.topic)", "collapse_id=sale",
                "origin=1700000000000-3", "enqueued_at=1700000000000", "tokens=\(Self.tokenB),\(Self.tokenC)",
            ])
            // It decodes as a valid job whose apns-ids are those of the first enqueue.
            let decoded = JobDecoder.decode(entryID: job.id, fields: job.fields, defaults: JobDefaults())
            let valid = try decoded.get()
            #expect(valid.tokens == [Self.tokenB, Self.tokenC])
            #expect(valid.attempts == 0)
            #expect(valid.origin == "1700000000000-3")
            #expect(valid.notification(forToken: Self.tokenB).apnsID == StableID.apnsID(origin: "1700000000000-3", token: Self.tokenB))

            // By id, limited: only the first of the two named moves; a missing id is reported.
            let byID = try harness.herald("dead-letters", "requeue", "--queue", "tooling",
                                          "--ids", "\(letters.tooLarge),\(letters.badPriority),1-1", "--limit", "1")
            #expect(byID.status == 0, "\(byID.stderr)")
            #expect(byID.stderr.contains("not found in herald:{tooling}:dead: 1-1"))
            #expect(byID.stdout.contains("requeued 1 dead letter"))
            #expect(try harness.entries(harness.keys.dead).map(\.id.description) == [letters.badPriority])
            let second = try #require(try harness.entries(harness.keys.jobs).last)
            // The worker narrowed `token` to the failed one, so it comes after the job's other fields.
            #expect(queueToolingFieldTexts(second.fields) == ["payload={\"aps\":{\"alert\":\"big\"}}", "topic=\(Self.topic)", "token=\(Self.tokenC)"])
            #expect(throws: Never.self) { try JobDecoder.decode(entryID: second.id, fields: second.fields, defaults: JobDefaults()).get() }
        }

        @Test
        func requeueIsAtomicPerEntry() throws {
            // In process: a dead letter that vanishes between listing and requeueing is skipped,
            // never added to the jobs stream twice or half.
            let harness = try QueueToolingHarness()
            let letters = try Self.addLetters(harness)
            let tools = DeadLetterTools(redis: harness.redis, keys: harness.keys)
            let selection = try tools.select(DeadLetterFilter())
            #expect(selection.letters.count == 3)
            try harness.command("XDEL", harness.keys.dead, letters.maxAttempts)
            let results = try tools.requeue(selection.letters)
            #expect(results.map { $0 != nil } == [true, false, true])
            #expect(try harness.length(harness.keys.jobs) == 2)
            #expect(try harness.length(harness.keys.dead) == 0)
            // Again: everything is gone, nothing moves.
            #expect(try tools.requeue(selection.letters).allSatisfy { $0 == nil })
            #expect(try harness.length(harness.keys.jobs) == 2)
        }

        @Test
        func purgeNeedsYesAndRemovesOnlyTheMatching() throws {
            let harness = try QueueToolingHarness()
            let now = HumanTime.nowMilliseconds()
            let tenDaysAgo = now - 10 * 86_400_000
            let oldA = try harness.addDeadLetter(id: "\(tenDaysAgo)-0", job: [("token", Self.tokenA), ("payload", "{}")],
                                                  reason: "expired", message: "expired")
            let oldB = try harness.addDeadLetter(id: "\(tenDaysAgo + 1)-0", job: [("token", Self.tokenB), ("payload", "{}")],
                                                  reason: "bad_priority", message: "bad")
            let recent = try harness.addDeadLetter(job: [("token", Self.tokenC), ("payload", "{}")], reason: "expired", message: "expired")

            let refused = try harness.herald("dead-letters", "purge", "--queue", "tooling", "--older-than", "7d")
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("--yes") && refused.stderr.contains("2 dead letters"), "\(refused.stderr)")
            #expect(try harness.length(harness.keys.dead) == 3)

            let dry = try harness.herald("dead-letters", "purge", "--queue", "tooling", "--older-than", "7d", "--dry-run")
            #expect(dry.status == 0, "\(dry.stderr)")
            #expect(dry.stdout.contains("would delete 2 dead letters") && dry.stdout.contains(oldA) && dry.stdout.contains(oldB))
            #expect(try harness.length(harness.keys.dead) == 3)

            let bad = try harness.herald("dead-letters", "purge", "--queue", "tooling", "--older-than", "7 days", "--yes")
            #expect(bad.status != 0 && bad.stderr.contains("--older-than"))

            let byReason = try harness.herald("dead-letters", "purge", "--queue", "tooling", "--older-than", "1d12h",
                                              "--reason", "expired", "--yes")
            #expect(byReason.status == 0, "\(byReason.stderr)")
            #expect(byReason.stdout.contains("purged 1 dead letter (expired 1)"))
            #expect(try harness.entries(harness.keys.dead).map(\.id.description) == [oldB, recent])

            let rest = try harness.herald("dead-letters", "purge", "--queue", "tooling", "--yes")
            #expect(rest.stdout.contains("purged 2 dead letters"))
            #expect(try harness.length(harness.keys.dead) == 0)
        }

        @Test
        func statsMatchWhatTheTestCreated() throws {
            let harness = try QueueToolingHarness()
            let keys = harness.keys
            for index in 0..<5 {
                try harness.command("XADD", keys.jobs, "*", "token", Self.tokenA, "payload", #"{"aps":{"alert":"\#(index)"}}"#)
            }
            try harness.command("XGROUP", "CREATE", keys.jobs, keys.group, "0")
            // A worker took two and has not acknowledged them.
            try harness.command("XREADGROUP", "GROUP", keys.group, "host-1-0", "COUNT", "2", "STREAMS", keys.jobs, ">")
            let now = HumanTime.nowMilliseconds()
            try harness.command("ZADD", keys.retry, String(now - 5_000), #"["token","a"]"#, String(now - 1_000), #"["token","b"]"#,
                                String(now + 3_600_000), #"["token","c"]"#)
            try harness.addDeadLetter(job: [("token", Self.tokenA), ("payload", "{}")], reason: "missing_topic", message: "no topic")
            try harness.addDeadLetter(job: [("payload", "{}")], reason: "missing_token", message: "no token")
            for token in [Self.tokenA, Self.tokenB, Self.tokenC] { try harness.addFeedback(token: token, reason: "Unregistered") }
            // A second queue, found only by --all-queues.
            let other = QueueKeys(queue: "other")
            try harness.command("XADD", other.jobs, "*", "token", Self.tokenB, "payload", "{}")

            let run = try harness.herald("stats", "--queue", "tooling", "--json")
            #expect(run.status == 0, "\(run.stderr)")
            let queues = try #require(try run.json()["queues"] as? [[String: Any]])
            try #require(queues.count == 1)
            let stats = queues[0]
            #expect(stats["queue"] as? String == "tooling")
            #expect(stats["depth"] as? Int == 5)
            #expect(stats["pending"] as? Int == 2)
            #expect(stats["lag"] as? Int == 3)
            // Redis 6.2 reports no lag: stats estimates it (depth - pending) and says so.
            #expect(stats["lag_exact"] as? Bool == RedisServer.isRedis7)
            #expect(stats["retry_size"] as? Int == 3)
            #expect(stats["retry_due"] as? Int == 2)
            #expect(stats["dead_letters"] as? Int == 2)
            #expect(stats["feedback"] as? Int == 3)
            let consumers = try #require(stats["consumers"] as? [[String: Any]])
            #expect(consumers.count == 1)
            #expect(consumers.first?["name"] as? String == "host-1-0")
            #expect(consumers.first?["pending"] as? Int == 2)
            #expect((consumers.first?["idle_ms"] as? Int).map { $0 >= 0 && $0 < 60_000 } == true)

            let table = try harness.herald("stats", "--queue", "tooling")
            #expect(table.status == 0)
            let lines = table.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first?.hasPrefix("QUEUE") == true)
            let row = try #require(lines.first { $0.hasPrefix("tooling") }).split(separator: " ").map(String.init)
            // QUEUE DEPTH PENDING LAG OLDEST-PENDING RETRY DUE NEXT-RETRY DEAD FEEDBACK CONSUMERS
            #expect(row[0...3] == ["tooling", "5", "2", RedisServer.isRedis7 ? "3" : "~3"])
            #expect(row.suffix(3) == ["2", "3", "1"])
            #expect(table.stdout.contains("host-1-0"))

            // An undelivered entry deleted out of order: Redis cannot count the lag any more, and
            // stats estimates it as depth - pending (Herald deletes only what it acknowledged).
            let undelivered = try harness.entries(keys.jobs)[3].id.description
            try harness.command("XDEL", keys.jobs, undelivered)
            let gappy = try #require(try harness.herald("stats", "--queue", "tooling", "--json").json()["queues"] as? [[String: Any]]).first
            #expect(gappy?["depth"] as? Int == 4)
            #expect(gappy?["lag"] as? Int == 2)
            #expect(gappy?["lag_exact"] as? Bool == false)
            #expect(try harness.herald("stats", "--queue", "tooling").stdout.contains("~2"))

            let everything = try harness.herald("stats", "--all-queues", "--json")
            let all = try #require(try everything.json()["queues"] as? [[String: Any]])
            #expect(all.map { $0["queue"] as? String } == ["other", "tooling"])
            let otherStats = try #require(all.first)
            #expect(otherStats["depth"] as? Int == 1)
            #expect(otherStats["pending"] is NSNull, "no group yet: pending is unknown, not 0")

            let both = try harness.herald("stats", "--all-queues", "--queue", "x")
            #expect(both.status != 0)
        }

        @Test
        func feedbackTailPrintsRedactedAndFollowsUntilSIGINT() throws {
            let harness = try QueueToolingHarness()
            let first = try harness.addFeedback(token: Self.tokenA, reason: "Unregistered", timestamp: 1_700_000_000_000, job: "1700000000000-0")
            let second = try harness.addFeedback(token: Self.tokenB, reason: "BadDeviceToken")
            let third = try harness.addFeedback(token: Self.tokenC, reason: "DeviceTokenNotForTopic")

            let last2 = try harness.herald("feedback", "tail", "--queue", "tooling", "--count", "2", "--json")
            #expect(last2.status == 0, "\(last2.stderr)")
            let lines = try last2.stdout.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(lines.map { $0["id"] as? String } == [second, third])
            #expect(lines.map { $0["token"] as? String } == ["bbccddee…", "ccddeeff…"])
            #expect(lines.first?["reason"] as? String == "BadDeviceToken")

            let fromFirst = try harness.herald("feedback", "tail", "--queue", "tooling", "--from", first, "--show-tokens")
            #expect(fromFirst.stdout.contains(Self.tokenB) && fromFirst.stdout.contains(Self.tokenC))
            #expect(!fromFirst.stdout.contains(Self.tokenA), "--from is exclusive")
            let text = try harness.herald("feedback", "tail", "--queue", "tooling", "--from", "0")
            #expect(text.stdout.contains("invalid since 2023-11-14 22:13:20 UTC") && text.stdout.contains("job 1700000000000-0"))
            #expect(!text.stdout.contains(Self.tokenA))

            // --follow from now on: blocks in XREAD, prints what arrives, ends cleanly on SIGINT.
            let (process, out, _) = try harness.start(["feedback", "tail", "--queue", "tooling", "--follow", "--from", "$", "--json"])
            defer { if process.isRunning { process.terminate() } }
            let blocked = try harness.waitUntil {
                (try harness.command("CLIENT", "LIST").string ?? "").contains("cmd=xread")
            }
            #expect(blocked, "the follower never blocked in XREAD")
            let fresh = try harness.addFeedback(token: Self.tokenA, reason: "Unregistered")
            let printed = harness.waitUntil { ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains(fresh) }
            #expect(printed, "the new entry was not printed")
            let output = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            #expect(!output.contains(third), "--from $ skips what was there")
            kill(process.processIdentifier, SIGINT)
            let ended = harness.waitUntil(seconds: 5) { !process.isRunning }
            #expect(ended, "SIGINT did not end --follow")
            if ended { #expect(process.terminationStatus == 0) }
        }

        @Test
        func unreachableRedisNamesTheURLWithoutPassword() throws {
            let harness = try QueueToolingHarness()
            let port = try RedisServer.freePort()
            let run = try harness.herald(["stats", "--redis", "redis://:hunter2@127.0.0.1:\(port)"])
            #expect(run.status != 0)
            #expect(run.stderr.contains("cannot reach Redis at redis://:***@127.0.0.1:\(port)/0"), "\(run.stderr)")
            #expect(run.stderr.contains("--redis") && run.stderr.contains("HERALD_REDIS"))
            #expect(!run.stderr.contains("hunter2"))
            let list = try harness.herald(["dead-letters", "list"], environment: ["HERALD_REDIS": "redis://127.0.0.1:\(port)"])
            #expect(list.status != 0 && list.stderr.contains("cannot reach Redis at redis://127.0.0.1:\(port)/0"))
        }

        @Test
        func durationsAndRequeueFieldsArePure() {
            let day: Int64 = 86_400_000
            #expect(DurationText.milliseconds("7d") == Optional(7 * day))
            #expect(DurationText.milliseconds("1d12h") == Optional(day + day / 2))
            #expect(DurationText.milliseconds("90s") == Optional(Int64(90_000)))
            #expect(DurationText.milliseconds("2w") == Optional(14 * day))
            for bad in ["", "7", "d", "7x", "7 d", "-1d"] { #expect(DurationText.milliseconds(bad) == nil, "\(bad)") }
            let record = StreamRecord(id: StreamEntryID(milliseconds: 5, sequence: 0), fields: [
                ("token", Array("ab".utf8)), ("attempts", Array("2".utf8)), ("origin", Array("1-0".utf8)),
                ("retry_id", Array("x".utf8)), ("reason", Array("r".utf8)), ("message", Array("m".utf8)),
                ("status", Array("0".utf8)), ("attempts", Array("3".utf8)), ("failed_at", Array("9".utf8)),
            ])
            let letter = DeadLetter(record)
            #expect(queueToolingFieldTexts(letter.jobFields) == ["token=ab", "origin=1-0"])
            #expect(letter.attempts == 3)
            #expect(letter.failedAt == 9)
            #expect(HumanTime.utc(1_700_000_000_000) == "2023-11-14 22:13:20 UTC")
            #expect(HumanTime.iso8601(1_700_000_000_123) == "2023-11-14T22:13:20.123Z")
        }
    }
}
