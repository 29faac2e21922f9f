import Transport

/// Encodes a job's fields as the JSON array `["name","value",…]` that the retry set stores and
/// the promote script turns back into `XADD` arguments (Redis' Lua has cjson).
public enum RetryEncoding {
    public static func encode(_ fields: [(name: String, value: [UInt8])]) -> [UInt8] {
        var out: [UInt8] = [0x5B]
        out.reserveCapacity(fields.reduce(16) { $0 + $1.name.utf8.count + $1.value.count + 8 })
        for (index, field) in fields.enumerated() {
            if index > 0 { out.append(0x2C) }
            appendString(FieldName.bytes(field.name), to: &out)
            out.append(0x2C)
            appendString(field.value, to: &out)
        }
        out.append(0x5D)
        return out
    }

    static func appendString(_ bytes: [UInt8], to out: inout [UInt8]) {
        out.append(0x22)
        for byte in bytes {
            switch byte {
            case 0x22: out.append(0x5C); out.append(0x22)
            case 0x5C: out.append(0x5C); out.append(0x5C)
            case 0x0A: out.append(0x5C); out.append(0x6E)
            case 0x0D: out.append(0x5C); out.append(0x72)
            case 0x09: out.append(0x5C); out.append(0x74)
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(0x22)
    }
}

/// A job's tokens on their way to the retry set: the job's fields as they go back to the stream
/// (the remaining tokens, Herald's bookkeeping replaced), scored by when they are due.
/// `DeliveryRules` makes one per job; `command` spells the ZADD the promote script reads back.
public struct RetryEntry: Sendable {
    /// The fields `QueueScripts.promoteDueRetries` XADDs back, in order.
    public let fields: [(name: String, value: [UInt8])]
    public let tokens: [String]
    /// Attempts spent so far (the `attempts` field).
    public let attempts: Int
    /// When the retry is due, ms since the epoch (the member's score).
    public let dueAt: Int64
    /// A job held for its `deliver_at`: written to the scheduled set (`QueueKeys.scheduled`), not
    /// the retry set, and marked `scheduled` so it is sent when promoted (see `JobField.scheduled`).
    public let scheduled: Bool

    /// The retry entry of `tokens` of `job`, with `attempts` spent; `retryID` makes the member unique.
    /// `lane` (a job read from the urgent stream) is written as the `lane` field, so the promote
    /// script puts the retry back into that lane's stream.
    public init(job: Job, tokens: [String], attempts: Int, retryID: String, dueAt: Int64, lane: JobLane? = nil, scheduled: Bool = false) {
        var fields = job.fields.filter { $0.name != JobField.token && $0.name != JobField.tokens && !JobField.herald.contains($0.name) }
        if let lane {
            fields.removeAll { $0.name == JobLane.field }
            fields.append((JobLane.field, Array(lane.rawValue.utf8)))
        }
        if job.template.isBroadcast {
            // A broadcast's one "token" is its channel, which its `channel_id` field still names.
        } else if tokens.count == 1 {
            fields.append((JobField.token, Array(tokens[0].utf8)))
        } else {
            fields.append((JobField.tokens, Array(tokens.joined(separator: ",").utf8)))
        }
        fields.append((JobField.attempts, Array(String(attempts).utf8)))
        fields.append((JobField.origin, Array(job.origin.utf8)))
        if job.explicitAPNsID == nil, job.apnsIDBase != job.origin {
            // A fan-out job's id: its retries derive the same apns-ids, whatever tokens remain.
            fields.removeAll { $0.name == JobField.id }
            fields.append((JobField.idBase, Array(job.apnsIDBase.utf8)))
        }
        fields.append((JobField.enqueuedAt, Array(String(job.enqueuedAt).utf8)))
        fields.append((JobField.retryID, Array(retryID.utf8)))
        if scheduled { fields.append((JobField.scheduled, Array(String(dueAt).utf8))) }
        self.fields = fields
        self.scheduled = scheduled
        self.tokens = tokens
        self.attempts = attempts
        self.dueAt = dueAt
    }

    /// `ZADD <retry> <dueAt> <fields as a JSON array>`.
    public func command(key: String) -> [RedisArgument] {
        ["ZADD", .text(key), .integer(dueAt), .bytes(RetryEncoding.encode(fields))]
    }
}

/// The Lua scripts Herald runs; every key they touch shares the queue's hash tag.
public enum QueueScripts {
    /// Removes the group's consumers that own no pending entry and were idle at least ARGV[3] ms,
    /// except ARGV[2] (the caller itself). KEYS[1] = job stream, ARGV[1] = group. Returns the
    /// removed names. One script, so a consumer that comes back (and reads) between the check
    /// and the removal cannot lose its pending entries: XGROUP DELCONSUMER drops them with it.
    public static let removeIdleConsumers = """
        local removed = {}
        local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
        local limit = tonumber(ARGV[3])
        for _, consumer in ipairs(consumers) do
          local name, pending, idle
          for i = 1, #consumer, 2 do
            local field = consumer[i]
            if field == 'name' then name = consumer[i + 1]
            elseif field == 'pending' then pending = consumer[i + 1]
            elseif field == 'idle' then idle = consumer[i + 1] end
          end
          if name and name ~= ARGV[2] and pending == 0 and idle and idle >= limit then
            redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
            removed[#removed + 1] = name
          end
        end
        return removed
        """

    /// Moves up to ARGV[2] members due by ARGV[1] (ms) of a sorted set (the retry set, or the
    /// scheduled set of jobs held for `deliver_at`) back into the job stream, atomically.
    /// KEYS[1] = the set, KEYS[2] = job stream (the bulk lane), KEYS[3] (optional) = the queue's
    /// urgent stream: a member whose fields hold `lane` = `urgent` goes there, so a retry or a
    /// scheduled job returns to the lane it was read from. Returns how many moved.
    ///
    /// ARGV[3] (optional, 0 = none) bounds the stream's backlog: only while XLEN is below it, and
    /// never past it, so a million members due at once stay in the set (the cheap backlog) and
    /// enter the stream as fast as workers send them. A full batch (the reply equals ARGV[2])
    /// tells the caller to call again at once; each call is one short atomic step, so several
    /// workers may promote the same set concurrently and Redis is never blocked for long.
    /// The members taken are the lowest-ranked ones, so one ZREMRANGEBYRANK removes those moved.
    ///
    /// A member that is not a field list Herald wrote (not JSON, not an even list of strings, too
    /// long to unpack: someone else's ZADD) goes to the stream as one field `malformed_member`
    /// holding its text, which the worker dead-letters (`missing_payload`) with that text kept:
    /// never lost, and never an error that would stop every later member behind it. Each XADD is
    /// checked, so a script that stops (Redis out of memory) removes only what it moved: nothing
    /// is left both in the set and in the stream.
    public static let promoteDueRetries = """
        local limit = tonumber(ARGV[2])
        local backlog = tonumber(ARGV[3] or '0')
        if backlog > 0 then
          local room = backlog - redis.call('XLEN', KEYS[2])
          if room <= 0 then return 0 end
          if room < limit then limit = room end
        end
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, limit)
        local moved, failure = 0, nil
        for _, member in ipairs(due) do
          local decoded, fields = pcall(cjson.decode, member)
          local stream = KEYS[2]
          if KEYS[3] and decoded and type(fields) == 'table' then
            for i = 1, #fields - 1, 2 do
              if fields[i] == 'lane' and fields[i + 1] == 'urgent' then stream = KEYS[3] end
            end
          end
          local ok = decoded and type(fields) == 'table' and #fields >= 2 and #fields % 2 == 0
            and pcall(function() redis.call('XADD', stream, '*', unpack(fields)) end)
          if not ok then
            ok, failure = pcall(function() redis.call('XADD', KEYS[2], '*', 'malformed_member', member) end)
            if not ok then break end
          end
          moved = moved + 1
        end
        if moved > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, moved - 1) end
        if moved == 0 and failure then
          return redis.error_reply(type(failure) == 'table' and tostring(failure.err) or tostring(failure))
        end
        return moved
        """
}
