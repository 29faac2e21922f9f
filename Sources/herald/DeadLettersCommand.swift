import APNs
import ArgumentParser
import Queue

struct DeadLettersCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dead-letters",
        abstract: "List, requeue or purge the jobs a queue could not deliver (herald:{QUEUE}:dead).",
        discussion: """
            Each dead letter is the job's own fields (token or tokens narrowed to those that failed) \
            plus reason, message, status, attempts and failed_at. Fix the cause (a bad payload, a \
            wrong topic, an APNs outage), then requeue: the job goes back to :jobs with its original \
            fields (and origin, so apns-ids stay the same) and leaves :dead in one atomic step.
            """,
        subcommands: [List.self, Requeue.self, Purge.self])
}

/// Which dead letters: by reason and by id.
struct DeadLetterSelectionOptions: ParsableArguments {
    @Option(name: .customLong("reason"), help: "Only dead letters with this reason (repeat or comma-separate for several), e.g. bad_priority, max_attempts (default: every reason).")
    var reasons: [String] = []
    @Option(help: "Only these entry ids of :dead, comma-separated (default: every entry).") var ids: String?

    func validate() throws { _ = try filter() }

    func filter() throws -> DeadLetterFilter {
        var filter = DeadLetterFilter()
        let reasonList = reasons.flatMap { $0.split(separator: ",") }.map(String.init).filter { !$0.isEmpty }
        if !reasonList.isEmpty { filter.reasons = Set(reasonList) }
        if let ids {
            var parsed: [StreamEntryID] = []
            for part in ids.split(separator: ",") where !part.isEmpty {
                guard let id = StreamEntryID(part.filter { $0 != " " }) else {
                    throw ValidationError("--ids: \(part) is not a stream entry id (like 1718000000000-0)")
                }
                parsed.append(id)
            }
            guard !parsed.isEmpty else { throw ValidationError("--ids is empty") }
            filter.ids = parsed
        }
        return filter
    }
}

extension DeadLettersCommand {
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "Show dead letters, oldest first: id, reason, message, status, attempts, failed_at, token (redacted), topic.")

        @OptionGroup var queueOptions: QueueOptions
        @OptionGroup var selection: DeadLetterSelectionOptions
        @Option(help: "Show at most this many.") var limit = 50
        @Flag(help: "Show every field of each entry (payload included).") var full = false
        @Flag(name: .customLong("show-tokens"), help: "Show device tokens in full instead of their first 8 digits.") var showTokens = false
        @Flag(help: "Print JSON for machines instead of a table.") var json = false

        func validate() throws {
            guard limit >= 1 else { throw ValidationError("--limit must be at least 1") }
        }

        func run() throws {
            let queues = try queueOptions.queueKeys()
            if json && queues.count > 1 { throw ValidationError("--json lists one queue at a time: give --queue NAME") }
            let redis = try queueOptions.blockingClient()
            for (index, keys) in queues.enumerated() {
                if queues.count > 1 { print((index > 0 ? "\n" : "") + "== \(keys.queue) (\(keys.dead))") }
                try list(keys: keys, redis: redis)
            }
        }

        /// One queue's dead letters (with several queues, `--limit` applies to each).
        private func list(keys: QueueKeys, redis: any QueueToolRedis) throws {
            let tools = DeadLetterTools(redis: redis, keys: keys)
            let found = try tools.select(try selection.filter(), limit: limit)
            let total = try tools.count()
            let now = try QueueInspector(redis: redis).redisTime()
            let report = DeadLetterReport(keys: keys, now: now, showTokens: showTokens)
            if json {
                print(report.json(found, total: total, full: full).rendered())
                return
            }
            for id in found.missing { QueueToolOutput.note("not found in \(keys.dead): \(id)") }
            if found.letters.isEmpty {
                print("no matching dead letters in \(keys.dead) (\(total) in all)")
                return
            }
            print(full ? report.fullText(found.letters) : report.table(found.letters))
            print("")
            print(report.summary(found, total: total))
        }
    }

    struct Requeue: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "requeue",
            abstract: "Move dead letters back to the jobs stream (original fields, same apns-ids), atomically per entry.",
            discussion: """
                Drops the dead-letter fields (reason, message, status, attempts, failed_at) and Herald's \
                retry bookkeeping (attempts, retry_id); keeps origin. With no filter every dead letter \
                goes back. Jobs that would fail validation again are named first.
                """)

        @OptionGroup var queueOptions: QueueOptions
        @OptionGroup var selection: DeadLetterSelectionOptions
        @Option(help: "Requeue at most this many, oldest first (default: no limit).") var limit: Int?
        @Flag(name: .customLong("dry-run"), help: "Show what would be requeued; change nothing.") var dryRun = false
        @Flag(name: .customLong("show-tokens"), help: "Show device tokens in full instead of their first 8 digits.") var showTokens = false

        func validate() throws {
            if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
        }

        func run() throws {
            let redis = try queueOptions.blockingClient()
            for keys in try queueOptions.queueKeys() { try requeue(keys: keys, redis: redis) }
        }

        /// One queue's dead letters back to that queue's jobs stream (with several queues,
        /// `--limit` applies to each).
        private func requeue(keys: QueueKeys, redis: any QueueToolRedis) throws {
            let tools = DeadLetterTools(redis: redis, keys: keys)
            let report = DeadLetterReport(keys: keys, now: 0, showTokens: showTokens)
            // Streamed a hundred at a time: a requeue may cover the whole (million-entry) stream.
            var batch: [DeadLetter] = []
            var matched = 0
            var moved = 0
            var more = false
            func flush() throws {
                guard !batch.isEmpty else { return }
                if dryRun {
                    for letter in batch {
                        print("would requeue \(letter.id) [\(letter.reason)] to \(keys.jobs): \(report.fieldSummary(letter.jobFields))")
                        if let problem = DeadLetterReport.validationProblem(letter) { print("  note: \(problem)") }
                        moved += 1
                    }
                } else {
                    for (letter, newID) in zip(batch, try tools.requeue(batch)) {
                        if let newID {
                            moved += 1
                            print("requeued \(letter.id) [\(letter.reason)] -> \(keys.jobs) \(newID) (\(report.tokenSummary(letter)))")
                            if let problem = DeadLetterReport.validationProblem(letter) { print("  note: \(problem)") }
                        } else {
                            print("skipped \(letter.id): no longer in \(keys.dead) (requeued or purged meanwhile)")
                        }
                    }
                }
                batch.removeAll(keepingCapacity: true)
            }
            let missing = try tools.forEach(try selection.filter()) { letter in
                if let limit, matched >= limit {
                    more = true
                    return false
                }
                matched += 1
                guard !letter.jobFields.isEmpty else {
                    QueueToolOutput.note("skipped \(letter.id): it holds no job fields to requeue")
                    return true
                }
                batch.append(letter)
                if batch.count >= 100 { try flush() }
                return true
            }
            try flush()
            for id in missing { QueueToolOutput.note("not found in \(keys.dead): \(id)") }
            let plural = moved == 1 ? "" : "s"
            if matched == 0 {
                print("no matching dead letters in \(keys.dead); nothing to requeue")
            } else if dryRun {
                print("dry run: would requeue \(moved) dead letter\(plural) to \(keys.jobs)"
                      + (more ? " (more match beyond --limit)" : "") + "; nothing changed")
            } else {
                print("requeued \(moved) dead letter\(plural) to \(keys.jobs)" + (more ? "; more match beyond --limit" : ""))
            }
        }
    }

    struct Purge: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "purge",
            abstract: "Delete dead letters for good (needs --yes, or --dry-run to see which).")

        @OptionGroup var queueOptions: QueueOptions
        @OptionGroup var selection: DeadLetterSelectionOptions
        @Option(name: .customLong("older-than"), help: "Only dead letters that failed longer ago than this, e.g. 7d, 12h, 90m, 1d12h (default: any age).")
        var olderThan: String?
        @Flag(name: .customLong("dry-run"), help: "Show what would be deleted; change nothing.") var dryRun = false
        @Flag(help: "Really delete.") var yes = false

        func validate() throws {
            if let olderThan, DurationText.milliseconds(olderThan) == nil {
                throw ValidationError("--older-than \(olderThan): give a number and a unit, s, m, h, d or w (e.g. 7d, 12h, 1d12h)")
            }
        }

        func run() throws {
            let redis = try queueOptions.blockingClient()
            for keys in try queueOptions.queueKeys() { try purge(keys: keys, redis: redis) }
        }

        /// One queue's purge; without --yes the first queue with matches stops the command before
        /// anything is deleted.
        private func purge(keys: QueueKeys, redis: any QueueToolRedis) throws {
            var filter = try selection.filter()
            if let olderThan, let age = DurationText.milliseconds(olderThan) {
                filter.failedBefore = try QueueInspector(redis: redis).redisTime() - age
            }
            let tools = DeadLetterTools(redis: redis, keys: keys)
            // Only ids and reasons are kept: a purge may cover the whole (million-entry) stream.
            var ids: [StreamEntryID] = []
            var byReason: [String: Int] = [:]
            var sample: [DeadLetter] = []
            let missing = try tools.forEach(filter) { letter in
                ids.append(letter.id)
                byReason[letter.reason, default: 0] += 1
                if dryRun && sample.count < 20 { sample.append(letter) }
                return true
            }
            for id in missing { QueueToolOutput.note("not found in \(keys.dead): \(id)") }
            let breakdown = DeadLetterReport.breakdown(byReason)
            if ids.isEmpty {
                print("no matching dead letters in \(keys.dead); nothing to purge")
                return
            }
            let plural = ids.count == 1 ? "" : "s"
            if dryRun {
                let report = DeadLetterReport(keys: keys, now: try QueueInspector(redis: redis).redisTime(), showTokens: false)
                print(report.table(sample))
                if ids.count > sample.count { print("… and \(ids.count - sample.count) more") }
                print("dry run: would delete \(ids.count) dead letter\(plural) (\(breakdown)) from \(keys.dead); nothing changed")
                return
            }
            guard yes else {
                throw QueueToolError.invalidArgument("purge would delete \(ids.count) dead letter\(plural) (\(breakdown)) from \(keys.dead) for good: "
                                      + "add --yes to delete them, or --dry-run to see which")
            }
            let deleted = try tools.purge(ids)
            print("purged \(deleted) dead letter\(deleted == 1 ? "" : "s") (\(breakdown)) from \(keys.dead)")
        }
    }
}

/// How dead letters are printed.
struct DeadLetterReport {
    let keys: QueueKeys
    let now: Int64
    let showTokens: Bool

    func table(_ letters: [DeadLetter]) -> String {
        let rows = letters.map { letter -> [String] in
            [letter.id.description, QueueToolOutput.time(letter.failedAt, now: now), letter.reason,
             letter.status.map { $0 == 0 ? "-" : String($0) } ?? "-", letter.attempts.map(String.init) ?? "-",
             tokenSummary(letter), letter.topic ?? "-", QueueToolOutput.printable(Array(letter.message.utf8), limit: 120)]
        }
        return QueueToolOutput.table(["ID", "FAILED AT", "REASON", "STATUS", "ATTEMPTS", "TOKEN", "TOPIC", "MESSAGE"], rows)
    }

    func fullText(_ letters: [DeadLetter]) -> String {
        letters.map { letter in
            let width = letter.fields.map(\.name.count).max() ?? 0
            var lines = ["\(letter.id)  \(letter.reason)  failed \(QueueToolOutput.time(letter.failedAt, now: now))"]
            for field in letter.fields {
                var value = QueueToolOutput.fieldValue(name: field.name, value: field.value, showTokens: showTokens)
                if field.name == DeadLetter.Field.failedAt, let ms = Int64(value) { value += " (\(HumanTime.utc(ms)))" }
                lines.append("  " + field.name + String(repeating: " ", count: width - field.name.count + 2) + value)
            }
            return lines.joined(separator: "\n")
        }.joined(separator: "\n\n")
    }

    /// "a1b2c3d4…" or "a1b2c3d4… +2" (fan-out jobs).
    func tokenSummary(_ letter: DeadLetter) -> String {
        let tokens = letter.tokens
        guard let first = tokens.first else { return "-" }
        let head = QueueToolOutput.token(first, show: showTokens)
        return tokens.count == 1 ? head : "\(head) +\(tokens.count - 1)"
    }

    /// `name=value` pairs on one line, tokens redacted, long values cut.
    func fieldSummary(_ fields: [(name: String, value: [UInt8])]) -> String {
        fields.map { "\($0.name)=" + QueueToolOutput.fieldValue(name: $0.name, value: $0.value, showTokens: showTokens, limit: 60) }
            .joined(separator: " ")
    }

    func summary(_ found: DeadLetterTools.Selection, total: Int) -> String {
        var text = "\(found.letters.count) shown of \(total) in \(keys.dead)"
        if found.more { text += "; more match: raise --limit or narrow with --reason" }
        return text
    }

    static func breakdown(_ byReason: [String: Int]) -> String {
        byReason.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
            .map { "\($0.key.isEmpty ? "(no reason)" : $0.key) \($0.value)" }.joined(separator: ", ")
    }

    /// Why the requeued job would be dead-lettered again, if it would (checked as `herald enqueue`
    /// checks: a missing topic is the worker's to fill in from its bundle id).
    static func validationProblem(_ letter: DeadLetter) -> String? {
        let fields = letter.jobFields
        let hasTopic = fields.contains { $0.name == JobField.topic && !$0.value.isEmpty }
        let defaults = JobDefaults(bundleID: hasTopic ? nil : "com.example.validation")
        switch JobDecoder.decode(entryID: letter.id, fields: fields, defaults: defaults) {
        case .failure(let error):
            return "still invalid (\(error.code)): \(error.description) The worker will dead-letter it again."
        case .success(let job):
            guard let bad = job.invalidTokens.first else { return nil }
            return "\(job.invalidTokens.count) token(s) still invalid (\(bad.error.code)); the worker will dead-letter those again."
        }
    }

    func json(_ found: DeadLetterTools.Selection, total: Int, full: Bool) -> JSONValue {
        .object([
            ("stream", .string(keys.dead)),
            ("total", .int(total)),
            ("shown", .int(found.letters.count)),
            ("more", .bool(found.more)),
            ("missing", .array(found.missing.map { .string($0.description) })),
            ("dead_letters", .array(found.letters.map { letter in
                var members: [(String, JSONValue)] = [
                    ("id", .string(letter.id.description)),
                    ("reason", .string(letter.reason)),
                    ("message", .string(letter.message)),
                    ("status", letter.status.map { .int($0) } ?? .null),
                    ("attempts", letter.attempts.map { .int($0) } ?? .null),
                    ("failed_at_ms", .integer(letter.failedAt)),
                    ("failed_at", .string(HumanTime.iso8601(letter.failedAt))),
                    ("token", letter.tokens.first.map { .string(QueueToolOutput.token($0, show: showTokens)) } ?? .null),
                    ("tokens", .array(letter.tokens.map { .string(QueueToolOutput.token($0, show: showTokens)) })),
                    ("topic", .optional(letter.topic)),
                ]
                if full {
                    members.append(("fields", .array(letter.fields.map { field in
                        .array([.string(field.name), .string(field.name == JobField.token || field.name == JobField.tokens
                            ? QueueToolOutput.fieldValue(name: field.name, value: field.value, showTokens: showTokens)
                            : String(decoding: field.value, as: UTF8.self))])
                    })))
                }
                return .object(members)
            })),
        ])
    }
}
