import Transport

/// Adds a batch of jobs to a queue's stream in one atomic step, optionally under an
/// idempotency key (`herald api`'s POST /v1/notifications).
///
/// One Lua script per batch: every XADD of the batch, and the key recording what they returned,
/// happen together or not at all, and a retried request with the same key gets the first
/// request's entry ids back instead of adding the jobs again. Every key it touches carries the
/// queue's hash tag, so it runs in one slot. Run through any `RedisCommandExecutor`.
public enum BatchEnqueue {
    public typealias Fields = [(name: String, value: [UInt8])]

    /// What the script did.
    public enum Outcome: Equatable, Sendable {
        /// The jobs were added: their entry ids, in order.
        case added([String])
        /// The key was used before for the same jobs: the ids that request got; nothing added.
        case replayed([String])
        /// The key was used before for other jobs (their fingerprint differs); nothing added.
        case conflict
    }

    /// An idempotency key as the script needs it.
    public struct Idempotency: Sendable {
        /// The Redis key (`BatchEnqueue.key`).
        public var key: String
        /// The digest of the request's jobs (`BatchEnqueue.fingerprint`).
        public var fingerprint: String
        /// How long the key is remembered.
        public var ttlMilliseconds: Int64

        public init(key: String, fingerprint: String, ttlMilliseconds: Int64) {
            self.key = key
            self.fingerprint = fingerprint
            self.ttlMilliseconds = ttlMilliseconds
        }
    }

    /// `<prefix>:{<queue>}:idempotency:<client's key>`: in the queue's slot.
    public static func key(_ keys: QueueKeys, idempotencyKey: String) -> String {
        "\(keys.prefix):{\(keys.queue)}:idempotency:\(idempotencyKey)"
    }

    /// SHA-256 over the queue and every job's fields, length-prefixed (no two batches share a text).
    public static func fingerprint(queue: String, jobs: [Fields]) -> String {
        let digest = SHA256Digest()
        digest.update("\(queue.utf8.count):\(queue);\(jobs.count);")
        for job in jobs {
            digest.update("\(job.count);")
            for field in job {
                digest.update("\(field.name.utf8.count):\(field.name)\(field.value.count):")
                digest.update(field.value)
            }
        }
        return digest.finishHex()
    }

    /// The EVAL command for `jobs`.
    public static func command(keys: QueueKeys, jobs: [Fields], idempotency: Idempotency?) -> [RedisArgument] {
        var command: [RedisArgument] = ["EVAL", .text(script)]
        if let idempotency {
            command += ["2", .text(keys.jobs), .text(idempotency.key), .integer(idempotency.ttlMilliseconds), .text(idempotency.fingerprint)]
        } else {
            command += ["1", .text(keys.jobs), "0", ""]
        }
        command.reserveCapacity(command.count + 1 + jobs.count * 13)
        command.append(.integer(Int64(jobs.count)))
        for job in jobs {
            command.append(.integer(Int64(job.count)))
            for field in job {
                command.append(.text(field.name))
                command.append(.bytes(field.value))
            }
        }
        return command
    }

    /// Runs the script for `jobs` (at least one).
    public static func run(redis: any RedisCommandExecutor, keys: QueueKeys, jobs: [Fields], idempotency: Idempotency?,
                           timeoutMilliseconds: Int64 = 15_000) throws -> Outcome {
        let reply = try redis.pipeline([command(keys: keys, jobs: jobs, idempotency: idempotency)],
                                       timeoutMilliseconds: timeoutMilliseconds)[0]
        return try outcome(of: reply, fingerprint: idempotency?.fingerprint, keys: keys)
    }

    static func outcome(of reply: RedisReply, fingerprint: String?, keys: QueueKeys) throws -> Outcome {
        if case .error(let message) = reply { throw QueueToolError.server(command: "EVAL (enqueue) \(keys.jobs)", message: message) }
        guard case .array(let parts) = reply, let flag = parts.first?.integer else {
            throw QueueToolError.unexpectedReply(command: "EVAL (enqueue) \(keys.jobs)", reply: "\(reply)")
        }
        if flag == 1 { return .added(parts.dropFirst().compactMap(\.string)) }
        // A replay: "<fingerprint> <id>,<id>,…" as the first request stored it.
        guard parts.count == 2, let stored = parts[1].string, let space = stored.firstIndex(of: " ") else {
            throw QueueToolError.unexpectedReply(command: "EVAL (enqueue) \(keys.jobs)", reply: "\(reply)")
        }
        guard stored[..<space] == fingerprint ?? "" else { return .conflict }
        // Runs "<ms>-<seq>+<n>": n consecutive ids from the first, comma-separated.
        var ids: [String] = []
        for run in stored[stored.index(after: space)...].split(separator: ",") {
            let parts = run.split(separator: "+")
            guard parts.count == 2, let first = StreamEntryID(String(parts[0])), let count = Int(parts[1]), count > 0, count <= 1_000_000,
                  first.sequence <= UInt64.max - UInt64(count) else {
                throw QueueToolError.unexpectedReply(command: "EVAL (enqueue) \(keys.jobs)", reply: "\(reply)")
            }
            for offset in 0..<count {
                ids.append(StreamEntryID(milliseconds: first.milliseconds, sequence: first.sequence + UInt64(offset)).description)
            }
        }
        return .replayed(ids)
    }

    /// KEYS[1] jobs stream, KEYS[2] (optional) idempotency key; ARGV[1] its time to live (ms),
    /// ARGV[2] the fingerprint, ARGV[3] the number of jobs, then per job its field count n and n
    /// name/value pairs. Returns {1, id…} when it added the jobs, {0, stored} when the key was
    /// there; the key holds "<fingerprint> <first id>+<n>,…", one run of consecutive ids per
    /// millisecond the script took: about 100 bytes for a batch added within a millisecond or two. The stream's type is checked first, so no XADD can fail half-way through a batch.
    public static let script = """
        local kind = redis.call('TYPE', KEYS[1])['ok']
        if kind ~= 'stream' and kind ~= 'none' then
          return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind .. ', not a stream')
        end
        if KEYS[2] then
          local stored = redis.call('GET', KEYS[2])
          if stored then return {0, stored} end
        end
        local out = {1}
        local i = 4
        for j = 1, tonumber(ARGV[3]) do
          local n = tonumber(ARGV[i])
          out[j + 1] = redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 1, i + 2 * n))
          i = i + 1 + 2 * n
        end
        if KEYS[2] then
          -- Ids added in one script are runs of consecutive sequence numbers within a
          -- millisecond: each run is stored as "<first id>+<length>", not id by id.
          local runs = {}
          local first, runMs, runSeq, length = nil, nil, nil, 0
          for j = 2, #out do
            local ms, seq = string.match(out[j], '^(%d+)-(%d+)$')
            local number = (#seq < 15) and tonumber(seq) or nil
            if first and ms == runMs and number and runSeq and number == runSeq + length then
              length = length + 1
            else
              if first then runs[#runs + 1] = first .. '+' .. length end
              first, runMs, runSeq, length = out[j], ms, number, 1
            end
          end
          runs[#runs + 1] = first .. '+' .. length
          local ids = table.concat(runs, ',')
          redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ids, 'PX', ARGV[1])
        end
        return out
        """
}
