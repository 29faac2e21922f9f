import ArgumentParser
import Queue

struct StatsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Show a queue's depth, pending entries, lag, retries, dead letters, feedback and consumers.",
        discussion: """
            Per queue: depth (entries in :jobs: waiting, in flight, or finished and not yet trimmed), pending (delivered to a worker, \
            not yet acknowledged), lag (not yet delivered to any worker; "~" when Redis cannot count it \
            and Herald estimates depth - pending), the retry set's size and how many are due now, the \
            :dead and :feedback stream lengths, and each consumer with its pending count and idle time. \
            When jobs wait for their deliver_at, a second table shows the scheduled set: how many, how \
            many are due now, within the next minute and hour, and when the next one is due. \
            Read-only. --queues a,b,c or --shards N (with --queue as the base name) show several queues \
            with a total row; --all-queues finds every queue with SCAN MATCH herald:{*}:jobs. A queue \
            whose urgent lane (:jobs:urgent) exists gets a row in a second table with that stream's depth, \
            pending entries, lag and consumers; --json adds them as "urgent".
            """)

    @OptionGroup var queueOptions: QueueOptions
    @Flag(name: .customLong("all-queues"), help: "Every queue in this Redis (SCAN MATCH herald:{*}:jobs), not only --queue.")
    var allQueues = false
    @Flag(help: "Print JSON for machines instead of tables.") var json = false

    func validate() throws {
        if allQueues && (queueOptions.queue != nil || queueOptions.queues != nil || queueOptions.shards != nil) {
            throw ValidationError("--all-queues finds every queue itself: leave out --queue, --queues and --shards")
        }
    }

    func run() throws {
        let redis = try queueOptions.blockingClient()
        let inspector = QueueInspector(redis: redis)
        let names = allQueues ? try inspector.discoverQueues() : try queueOptions.queueKeys().map(\.queue)
        let stats = try names.map { try inspector.stats(keys: QueueKeys(queue: $0)) }
        if json {
            print(StatsCommand.json(stats, redis: redis.targetDescription).rendered())
        } else if stats.isEmpty {
            print("no queues in \(redis.targetDescription): no key matches \(QueueKeys.defaultPrefix):{*}:jobs")
        } else {
            print(StatsCommand.text(stats))
        }
    }

    static func text(_ stats: [QueueStats]) -> String {
        let rows = stats.map { queue -> [String] in
            let group = queue.group
            return [
                queue.keys.queue, String(queue.depth),
                group.map { String($0.pending) } ?? "-",
                group.map { ($0.lagIsExact ? "" : "~") + String($0.lag) } ?? "-",
                group?.oldestPendingAge.map(HumanTime.duration) ?? "-",
                String(queue.retrySize), String(queue.retryDue),
                queue.nextRetryAt.map { StatsCommand.nextRetry($0, now: queue.sampledAt) } ?? "-",
                String(queue.deadLetters), String(queue.feedback),
                group.map { String($0.consumers.count) } ?? "-",
            ]
        }
        var allRows = rows
        if stats.count > 1 {
            // The total of several queues: sums, the oldest pending entry, the soonest retry.
            let total = QueueStatsTotal(stats)
            allRows.append([
                "TOTAL", String(total.depth), total.anyGroup ? String(total.pending) : "-",
                total.anyGroup ? (total.lagIsExact ? "" : "~") + String(total.lag) : "-",
                total.oldestPendingAge.map(HumanTime.duration) ?? "-", String(total.retrySize), String(total.retryDue),
                total.nextRetryAt.map { StatsCommand.nextRetry($0, now: total.sampledAt) } ?? "-",
                String(total.deadLetters), String(total.feedback), total.anyGroup ? String(total.consumers) : "-",
            ])
        }
        var sections = [QueueToolOutput.table(
            ["QUEUE", "DEPTH", "PENDING", "LAG", "OLDEST PENDING", "RETRY", "DUE", "NEXT RETRY", "DEAD", "FEEDBACK", "CONSUMERS"], allRows)]
        if stats.contains(where: { $0.scheduledSize > 0 }) {
            sections.append("scheduled sends (held for deliver_at):\n" + QueueToolOutput.table(
                ["QUEUE", "SCHEDULED", "DUE NOW", "NEXT MINUTE", "NEXT HOUR", "NEXT DUE"],
                stats.map { queue in
                    [queue.keys.queue, String(queue.scheduledSize), String(queue.scheduledDue), String(queue.scheduledNextMinute),
                     String(queue.scheduledNextHour),
                     queue.nextScheduledAt.map { HumanTime.iso8601($0) + " (" + StatsCommand.nextRetry($0, now: queue.sampledAt) + ")" } ?? "-"]
                }, indent: "  "))
        }
        for queue in stats {
            guard let group = queue.group else {
                sections.append("\(queue.keys.queue): no consumer group \"\(queue.keys.group)\" on \(queue.keys.jobs) yet (no worker has started on this queue)")
                continue
            }
            if group.consumers.isEmpty {
                sections.append("\(queue.keys.queue): group \"\(group.name)\" has no consumers")
                continue
            }
            let consumerRows = group.consumers.map { consumer in
                [consumer.name, String(consumer.pending), HumanTime.duration(consumer.idle), consumer.inactive.map(HumanTime.duration) ?? "-"]
            }
            sections.append("consumers of \(queue.keys.queue) (group \(group.name), \(queue.keys.jobs)):\n"
                + QueueToolOutput.table(["CONSUMER", "PENDING", "IDLE", "INACTIVE"], consumerRows, indent: "  "))
        }
        // The urgent lanes (herald:{queue}:jobs:urgent) of the queues that have one.
        let urgentRows = stats.compactMap { queue -> [String]? in
            guard let urgent = queue.urgent, urgent.depth > 0 || urgent.group != nil else { return nil }
            let group = urgent.group
            return [queue.keys.queue, String(urgent.depth), group.map { String($0.pending) } ?? "-",
                    group.map { ($0.lagIsExact ? "" : "~") + String($0.lag) } ?? "-",
                    group?.oldestPendingAge.map(HumanTime.duration) ?? "-", group.map { String($0.consumers.count) } ?? "-"]
        }
        if !urgentRows.isEmpty {
            sections.append("urgent lanes (herald:{QUEUE}:jobs:urgent, read first; retries, dead letters and feedback are the queue's):\n"
                + QueueToolOutput.table(["QUEUE", "DEPTH", "PENDING", "LAG", "OLDEST PENDING", "CONSUMERS"], urgentRows, indent: "  "))
        }
        let withResults = stats.filter { $0.results != nil }
        if !withResults.isEmpty {
            sections.append(withResults.map { "\($0.keys.queue): \($0.results ?? 0) results in \($0.keys.results) (herald results tail)" }
                .joined(separator: "\n"))
        }
        if stats.contains(where: { $0.group?.lagIsExact == false || $0.urgent?.group?.lagIsExact == false }) {
            sections.append("~: Redis cannot count the lag (entries were deleted out of order, or Redis is older than 7.0); estimated as depth - pending.")
        }
        return sections.joined(separator: "\n\n")
    }

    /// "in 3s", "now", or "overdue 5m" (no worker is promoting retries).
    static func nextRetry(_ due: Int64, now: Int64) -> String {
        if due > now { return "in " + HumanTime.duration(due - now) }
        if now - due <= 2_000 { return "now" }
        return "overdue " + HumanTime.duration(now - due)
    }

    static func json(_ stats: [QueueStats], redis: String) -> JSONValue {
        let total = QueueStatsTotal(stats)
        return .object([
            ("redis", .string(redis)),
            ("sampled_at", stats.first.map { .string(HumanTime.iso8601($0.sampledAt)) } ?? .null),
            ("queues", .array(stats.map { $0.json() })),
            ("total", .object([
                ("queues", .int(stats.count)),
                ("depth", .int(total.depth)), ("pending", .int(total.pending)), ("lag", .int(total.lag)),
                ("lag_exact", .bool(total.lagIsExact)), ("oldest_pending_age_ms", .optional(total.oldestPendingAge)),
                ("retry_size", .int(total.retrySize)), ("retry_due", .int(total.retryDue)),
                ("next_retry_at_ms", .optional(total.nextRetryAt)),
                ("scheduled", .int(stats.reduce(0) { $0 + $1.scheduledSize })),
                ("scheduled_due", .int(stats.reduce(0) { $0 + $1.scheduledDue })),
                ("scheduled_next_minute", .int(stats.reduce(0) { $0 + $1.scheduledNextMinute })),
                ("scheduled_next_hour", .int(stats.reduce(0) { $0 + $1.scheduledNextHour })),
                ("next_scheduled_at_ms", .optional(stats.compactMap(\.nextScheduledAt).min())),
                ("dead_letters", .int(total.deadLetters)), ("feedback", .int(total.feedback)), ("consumers", .int(total.consumers)),
            ])),
        ])
    }

}

/// Several queues' figures added up: `herald stats`' TOTAL row and `total` object. Queues without a
/// consumer group add nothing to pending, lag or consumers (their depth counts).
struct QueueStatsTotal {
    var depth = 0, pending = 0, lag = 0, retrySize = 0, retryDue = 0, deadLetters = 0, feedback = 0, consumers = 0
    var lagIsExact = true
    /// Some queue has the consumer group (else pending, lag and consumers are unknown, not 0).
    var anyGroup = false
    var oldestPendingAge: Int64?
    var nextRetryAt: Int64?
    var sampledAt: Int64 = 0

    init(_ stats: [QueueStats]) {
        for queue in stats {
            depth += queue.depth
            retrySize += queue.retrySize
            retryDue += queue.retryDue
            deadLetters += queue.deadLetters
            feedback += queue.feedback
            sampledAt = max(sampledAt, queue.sampledAt)
            if let next = queue.nextRetryAt { nextRetryAt = min(nextRetryAt ?? next, next) }
            guard let group = queue.group else { continue }
            anyGroup = true
            pending += group.pending
            lag += group.lag
            lagIsExact = lagIsExact && group.lagIsExact
            consumers += group.consumers.count
            if let age = group.oldestPendingAge { oldestPendingAge = max(oldestPendingAge ?? age, age) }
        }
    }
}
