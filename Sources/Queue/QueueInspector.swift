import APNs
import Transport

/// Reads a queue's numbers for `herald stats`: two round trips per call (Redis' clock, then one
/// pipeline of XLEN, XINFO GROUPS, XPENDING, XINFO CONSUMERS, ZCARD, ZCOUNT and the side streams).
/// Read-only: it never creates the group or any key.
public final class QueueInspector {
    public let redis: any RedisCommandExecutor

    public init(redis: any RedisCommandExecutor) {
        self.redis = redis
    }

    /// Redis' clock, ms since the epoch.
    public func redisTime() throws -> Int64 {
        let reply = try redis.run(["TIME"])
        guard case .array(let parts) = reply, parts.count == 2, let seconds = parts[0].integer, let micros = parts[1].integer else {
            throw QueueToolError.unexpectedReply(command: "TIME", reply: "\(reply)")
        }
        return seconds * 1000 + micros / 1000
    }

    /// The queues that have a jobs stream under `prefix` (`SCAN MATCH prefix:{*}:jobs TYPE stream`), sorted.
    public func discoverQueues(prefix: String = QueueKeys.defaultPrefix) throws -> [String] {
        let head = prefix + ":{"
        let tail = "}:jobs"
        var cursor = "0"
        var names = Set<String>()
        repeat {
            let reply = try redis.run(["SCAN", .text(cursor), "MATCH", .text(QueueInspector.globEscaped(prefix) + ":{*}:jobs"),
                                       "COUNT", "1000", "TYPE", "stream"])
            guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let keys) = parts[1] else {
                throw QueueToolError.unexpectedReply(command: "SCAN", reply: "\(reply)")
            }
            cursor = next
            for key in keys {
                guard let text = key.string, text.hasPrefix(head), text.hasSuffix(tail), text.count > head.count + tail.count else { continue }
                names.insert(String(text.dropFirst(head.count).dropLast(tail.count)))
            }
        } while cursor != "0"
        return names.sorted()
    }

    /// The numbers of one queue.
    public func stats(keys: QueueKeys) throws -> QueueStats {
        let now = try redisTime()
        let commands: [[RedisArgument]] = [
            ["XLEN", .text(keys.jobs)],
            ["XINFO", "GROUPS", .text(keys.jobs)],
            ["XPENDING", .text(keys.jobs), .text(keys.group)],
            ["XINFO", "CONSUMERS", .text(keys.jobs), .text(keys.group)],
            ["ZCARD", .text(keys.retry)],
            ["ZCOUNT", .text(keys.retry), "-inf", .integer(now)],
            ["ZRANGE", .text(keys.retry), "0", "0", "WITHSCORES"],
            ["XLEN", .text(keys.dead)],
            ["XLEN", .text(keys.feedback)],
            // The urgent lane's stream (a missing key reads as 0 and no group).
            ["XLEN", .text(keys.urgentJobs)],
            ["XINFO", "GROUPS", .text(keys.urgentJobs)],
            ["XPENDING", .text(keys.urgentJobs), .text(keys.group)],
            ["XINFO", "CONSUMERS", .text(keys.urgentJobs), .text(keys.group)],
            ["XLEN", .text(keys.results)],
            // The scheduled set: size, due now, due within a minute and an hour, the earliest.
            ["ZCARD", .text(keys.scheduled)],
            ["ZCOUNT", .text(keys.scheduled), "-inf", .integer(now)],
            ["ZCOUNT", .text(keys.scheduled), .text("(\(now)"), .integer(now.addingSaturating(60_000))],
            ["ZCOUNT", .text(keys.scheduled), .text("(\(now)"), .integer(now.addingSaturating(3_600_000))],
            ["ZRANGE", .text(keys.scheduled), "0", "0", "WITHSCORES"],
            // The leases of both lanes (entries read and not finished, besides the pending list).
            ["HVALS", .text(keys.leases)],
            ["HVALS", .text(keys.urgentLane.leases)],
        ]
        let replies = try redis.pipeline(commands)
        let depth = Int(try RedisReplyReader.integer(replies[0], command: "XLEN \(keys.jobs)"))
        let retrySize = Int(try RedisReplyReader.integer(replies[4], command: "ZCARD \(keys.retry)"))
        let retryDue = Int(try RedisReplyReader.integer(replies[5], command: "ZCOUNT \(keys.retry)"))
        let nextRetryAt = QueueInspector.firstScore(replies[6])
        let dead = Int(try RedisReplyReader.integer(replies[7], command: "XLEN \(keys.dead)"))
        let feedback = Int(try RedisReplyReader.integer(replies[8], command: "XLEN \(keys.feedback)"))
        let group = try exactLag(of: QueueInspector.group(keys: keys, depth: depth, now: now, groups: replies[1], pending: replies[2],
                                                          consumers: replies[3], leases: replies[19]), stream: keys.jobs)
        var stats = QueueStats(keys: keys, sampledAt: now, depth: depth, group: group, retrySize: retrySize, retryDue: retryDue,
                               nextRetryAt: nextRetryAt, deadLetters: dead, feedback: feedback)
        let urgentDepth = Int(try RedisReplyReader.integer(replies[9], command: "XLEN \(keys.urgentJobs)"))
        stats.urgent = QueueStats.UrgentLane(
            depth: urgentDepth,
            group: try exactLag(of: QueueInspector.group(keys: keys.urgentLane, depth: urgentDepth, now: now, groups: replies[10],
                                                         pending: replies[11], consumers: replies[12], leases: replies[20]),
                                stream: keys.urgentJobs))
        let results = Int(try RedisReplyReader.integer(replies[13], command: "XLEN \(keys.results)"))
        stats.results = results > 0 ? results : nil
        stats.scheduledSize = Int(try RedisReplyReader.integer(replies[14], command: "ZCARD \(keys.scheduled)"))
        stats.scheduledDue = Int(try RedisReplyReader.integer(replies[15], command: "ZCOUNT \(keys.scheduled)"))
        stats.scheduledNextMinute = Int(try RedisReplyReader.integer(replies[16], command: "ZCOUNT \(keys.scheduled)"))
        stats.scheduledNextHour = Int(try RedisReplyReader.integer(replies[17], command: "ZCOUNT \(keys.scheduled)"))
        stats.nextScheduledAt = QueueInspector.firstScore(replies[18])
        return stats
    }

    /// `group` with its lag made exact where Redis reported none (6.2, or 7.0 after an entry was
    /// deleted out of order) and the group was given every entry of `stream`: then it is 0
    /// (`QueueLag.caughtUpCheck`). Otherwise, and when Redis refuses the check (a user without
    /// `+xrange`), the estimate stays; a lost connection throws, as for the other round trips.
    private func exactLag(of group: QueueStats.Group?, stream: String) throws -> QueueStats.Group? {
        guard var group, !group.lagIsExact, let lastDelivered = group.lastDeliveredID else { return group }
        let check = QueueLag.caughtUpCheck(stream: stream, lastDelivered: lastDelivered).map { RedisArgument.text($0) }
        if QueueLag.isCaughtUp(try redis.pipeline([check])[0]) {
            group.lag = 0
            group.lagIsExact = true
        }
        return group
    }

    /// The score of `ZRANGE key 0 0 WITHSCORES`' only member as ms, or nil for an empty set.
    static func firstScore(_ reply: RedisReply) -> Int64? {
        guard case .array(let first) = reply, first.count == 2, let score = first[1].string, let value = Double(score) else { return nil }
        // A score is a double anyone with ZADD can set: never convert one outside Int64.
        return Int64(exactly: value.rounded(.down)) ?? (value > 0 ? .max : .min)
    }

    /// The group's numbers from XINFO GROUPS, XPENDING (summary), XINFO CONSUMERS and the values
    /// of the stream's leases (`StreamLease`: entries read under a lease and not finished count as
    /// pending, for the group and for the lease's consumer); nil when the stream or the group does
    /// not exist yet.
    static func group(keys: QueueKeys, depth: Int, now: Int64, groups: RedisReply, pending: RedisReply, consumers: RedisReply,
                      leases: RedisReply = .array([])) throws -> QueueStats.Group? {
        if case .error(let message) = groups {
            // No jobs stream yet: nothing was ever enqueued and no worker started.
            if message.contains("no such key") { return nil }
            throw QueueToolError.server(command: "XINFO GROUPS \(keys.jobs)", message: message)
        }
        guard case .array(let list) = groups else { throw QueueToolError.unexpectedReply(command: "XINFO GROUPS", reply: "\(groups)") }
        guard let info = list.map(RedisReplyReader.map).first(where: { $0["name"]?.string == keys.group }) else { return nil }

        var pendingCount = Int(info["pending"]?.integer ?? 0)
        var oldestID: String? = nil
        if case .array(let summary) = pending, summary.count >= 2 {
            pendingCount = Int(summary[0].integer ?? Int64(pendingCount))
            oldestID = summary[1].string
        } else if case .error(let message) = pending {
            throw QueueToolError.server(command: "XPENDING \(keys.jobs) \(keys.group)", message: message)
        }
        var leased: [String: Int] = [:]
        if case .array(let values) = leases {
            for case let value? in values.map(\.string) {
                guard let lease = StreamLease.Value(value), lease.unfinished > 0 else { continue }
                leased[lease.consumer, default: 0] += lease.unfinished
            }
        } else if case .error(let message) = leases {
            throw QueueToolError.server(command: "HVALS \(keys.leases)", message: message)
        }
        let leasedCount = leased.values.reduce(0, +)
        pendingCount += leasedCount
        var oldestAge: Int64? = nil
        if let oldestID, let id = StreamEntryID(oldestID) { oldestAge = max(0, now.subtractingSaturating(Int64(clamping: id.milliseconds))) }

        let (lag, exact) = QueueLag.of(reported: info["lag"]?.integer, depth: depth, pending: pendingCount)
        var consumerList: [QueueStats.Consumer] = []
        if case .array(let rows) = consumers {
            for row in rows {
                let fields = RedisReplyReader.map(row)
                guard let name = fields["name"]?.string else { continue }
                consumerList.append(QueueStats.Consumer(
                    name: name, pending: Int(fields["pending"]?.integer ?? 0) + (leased[name] ?? 0), idle: fields["idle"]?.integer ?? 0,
                    inactive: fields["inactive"]?.integer.flatMap { $0 < 0 ? nil : $0 }))
            }
        } else if case .error(let message) = consumers {
            throw QueueToolError.server(command: "XINFO CONSUMERS \(keys.jobs) \(keys.group)", message: message)
        }
        consumerList.sort { $0.name < $1.name }
        return QueueStats.Group(
            name: keys.group, pending: pendingCount, lag: lag, lagIsExact: exact,
            lastDeliveredID: info["last-delivered-id"]?.string, entriesRead: info["entries-read"]?.integer,
            oldestPendingID: oldestID, oldestPendingAge: oldestAge, consumers: consumerList)
    }

    /// `text` with Redis glob metacharacters escaped, so a prefix matches only itself.
    static func globEscaped(_ text: String) -> String {
        var out = ""
        for character in text {
            if "*?[]\\".contains(character) { out.append("\\") }
            out.append(character)
        }
        return out
    }
}
