import Transport

/// Which dead letters an operator means: by reason, by id, by age. Every criterion given must hold.
public struct DeadLetterFilter: Sendable {
    /// Reasons to keep (any of them); nil keeps every reason.
    public var reasons: Set<String>?
    /// Entry ids to keep; nil keeps every id. With ids, only those entries are read.
    public var ids: [StreamEntryID]?
    /// Keep only entries dead-lettered before this time (ms since the epoch).
    public var failedBefore: Int64?
    /// Start the scan after this entry id (exclusive): the cursor of a paged listing (`herald api`).
    /// Ignored with `ids`.
    public var after: StreamEntryID?

    public init(reasons: Set<String>? = nil, ids: [StreamEntryID]? = nil, failedBefore: Int64? = nil, after: StreamEntryID? = nil) {
        self.reasons = reasons
        self.ids = ids
        self.failedBefore = failedBefore
        self.after = after
    }

    public func matches(_ letter: DeadLetter) -> Bool {
        if let reasons, !reasons.contains(letter.reason) { return false }
        if let failedBefore, letter.failedAt >= failedBefore { return false }
        return true
    }
}

/// Lists, requeues and purges a queue's dead letters (`herald dead-letters`).
public final class DeadLetterTools {
    public let redis: any RedisCommandExecutor
    public let keys: QueueKeys
    /// Entries read per XRANGE page.
    public var pageSize = 500

    public init(redis: any RedisCommandExecutor, keys: QueueKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// What a scan found.
    public struct Selection: Sendable {
        /// Matching entries, oldest first, at most `limit`.
        public var letters: [DeadLetter]
        /// True when more entries match than `limit` allowed.
        public var more: Bool
        /// Ids asked for with `filter.ids` that are not in the stream.
        public var missing: [StreamEntryID]
        /// Matching entries by reason (over all that were read, including those past `limit`
        /// when `countAll` was asked for).
        public var byReason: [String: Int]
    }

    /// The dead letters matching `filter`, oldest first, at most `limit`. With `countAll`, the
    /// whole stream is read so `byReason` counts every match (not only the first `limit`).
    public func select(_ filter: DeadLetterFilter, limit: Int? = nil, countAll: Bool = false) throws -> Selection {
        var selection = Selection(letters: [], more: false, missing: [], byReason: [:])
        selection.missing = try forEach(filter) { letter in
            selection.byReason[letter.reason, default: 0] += 1
            if let limit, selection.letters.count >= limit {
                selection.more = true
                return countAll
            }
            selection.letters.append(letter)
            return true
        }
        return selection
    }

    /// Calls `body` with each dead letter matching `filter`, oldest first (or in `filter.ids`
    /// order), a page at a time, until it returns false. Returns the ids of `filter.ids` that are
    /// not in the stream.
    @discardableResult
    public func forEach(_ filter: DeadLetterFilter, _ body: (DeadLetter) throws -> Bool) throws -> [StreamEntryID] {
        if let ids = filter.ids {
            var unique: [StreamEntryID] = []
            var seen = Set<StreamEntryID>()
            for id in ids where seen.insert(id).inserted { unique.append(id) }
            let replies = try redis.pipeline(unique.map { ["XRANGE", .text(keys.dead), .text($0.description), .text($0.description)] })
            var missing: [StreamEntryID] = []
            var going = true
            for (id, reply) in zip(unique, replies) {
                if case .error(let message) = reply { throw QueueToolError.server(command: "XRANGE \(keys.dead)", message: message) }
                guard let record = RedisReplyReader.entries(reply).first else {
                    missing.append(id)
                    continue
                }
                let letter = DeadLetter(record)
                if going, filter.matches(letter) { going = try body(letter) }
            }
            return missing
        }
        // Scan up to the newest letter as of now: a requeued job that fails again comes back as a
        // newer letter, and must not be met (and requeued) again by the same scan.
        let newest = RedisReplyReader.entries(try redis.run(["XREVRANGE", .text(keys.dead), "+", "-", "COUNT", "1"])).first
        guard let end = newest?.id.description else { return [] }
        var start = filter.after.map { "(" + $0.description } ?? "-"
        while true {
            let reply = try redis.run(["XRANGE", .text(keys.dead), .text(start), .text(end), "COUNT", .integer(Int64(pageSize))])
            let records = RedisReplyReader.entries(reply)
            for record in records {
                let letter = DeadLetter(record)
                if filter.matches(letter), try !body(letter) { return [] }
            }
            guard records.count == pageSize, let last = records.last else { return [] }
            start = "(" + last.id.description
        }
    }

    /// Moves each dead letter back to the jobs stream in one atomic step (a Lua script: check it
    /// is still there, XADD its job fields, XDEL it), so two operators requeueing at once cannot
    /// both add it. Returns, per letter, the new job's entry id, or nil when it was already gone.
    public func requeue(_ letters: [DeadLetter]) throws -> [String?] {
        var results: [String?] = []
        results.reserveCapacity(letters.count)
        var start = 0
        while start < letters.count {
            let batch = letters[start..<min(letters.count, start + 100)]
            start += batch.count
            var commands: [[RedisArgument]] = []
            for letter in batch {
                var command: [RedisArgument] = ["EVAL", .text(DeadLetterTools.requeueScript), "2", .text(keys.dead), .text(keys.jobs),
                                                .text(letter.id.description)]
                for field in letter.jobFields { command += [FieldName.argument(field.name), .bytes(field.value)] }
                commands.append(command)
            }
            let replies = try redis.pipeline(commands)
            for reply in replies {
                switch reply {
                case .error(let message): throw QueueToolError.server(command: "EVAL (requeue) \(keys.dead)", message: message)
                case .null: results.append(nil)
                default: results.append(reply.string)
                }
            }
        }
        return results
    }

    /// Deletes the given dead letters; returns how many were deleted (XDEL counts what existed).
    public func purge(_ ids: [StreamEntryID]) throws -> Int {
        var deleted = 0
        var start = 0
        while start < ids.count {
            let batch = ids[start..<min(ids.count, start + 500)]
            start += batch.count
            let reply = try redis.run([.text("XDEL"), .text(keys.dead)] + batch.map { .text($0.description) })
            deleted += Int(reply.integer ?? 0)
        }
        return deleted
    }

    /// Entries in the dead-letter stream.
    public func count() throws -> Int {
        Int(try RedisReplyReader.integer(try redis.run(["XLEN", .text(keys.dead)]), command: "XLEN \(keys.dead)"))
    }

    /// KEYS[1] dead stream, KEYS[2] jobs stream; ARGV[1] dead-letter id, ARGV[2…] the job's fields.
    /// Returns the new job's entry id, or false (nil) when the dead letter is gone.
    public static let requeueScript = """
        if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
        local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
        redis.call('XDEL', KEYS[1], ARGV[1])
        return id
        """
}
