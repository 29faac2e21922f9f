import Transport

/// Leases: how a worker records which entries it read without the consumer group's pending list.
///
/// Why: redis-server spends most of its time per job on the pending list. An `XREADGROUP` that
/// records its entries there creates a record per entry, inserts it in two radix trees and builds
/// an `XCLAIM` for replication, and each `XACK` takes it out again: measured on redis-server 7.0,
/// 1.2–1.3 µs of its CPU per entry, against 0.5 µs for the same read with `NOACK`
/// (`Benchmarks/tools/redis_read_costs.py`). A lease records one read as one hash field instead.
///
/// The read. In one `MULTI`/`EXEC`, `leaseRead` looks up the group's last-delivered id `after` and
/// how many entries lie beyond it (the group's lag; the stream's last id `top` when Redis does not
/// know the lag), writes the lease, and `XREADGROUP … NOACK` reads those entries. Nothing runs in
/// between, so the lease names exactly the entries read: the first `count` entries of the stream
/// after `after` (and at most `top`). Entries are never removed from inside a lease's range while
/// it stands (the trim stops below the oldest lease), so `XRANGE (after top COUNT count` gives
/// them back at any later time, in the order of the read: entry k of the read is position k.
///
/// The value of field `<instance>-<n>` in `<jobs>:leases`:
/// `<after> <top> <count> <deliveries> <leased-at ms> <mask> <consumer>` (times are Redis's clock,
/// `TIME`, like the pending list's idle times: a worker's wrong clock cannot age a lease), where `mask` is
/// hexadecimal, position p being bit `p % 4` of digit `p / 4` (`-` when no bit is set yet), and a
/// set bit means that entry's outcome is written (or the entry was moved to the pending list).
///
/// Finishing. An outcome batch sets its entries' bits with `leaseFinish`, in the same `MULTI` as
/// its writes, so no entry is finished without its writes; the script never recreates a lease
/// that is gone. Once Redis confirmed every position the worker asks `leaseDelete` to remove the
/// lease, which it does only if every bit is set there too (a failover may have lost some).
///
/// Crashes. A lease whose worker died stays in the hash. Every worker runs `leaseRelease` with
/// its claims: a lease of another instance leased longer ago than `--claim-idle` (or of the same
/// consumer name but an earlier process, at once) becomes ordinary pending entries of the lease's
/// consumer (`XCLAIM … FORCE`, with the lease's idle time and delivery count), only for the
/// positions not set, and `XAUTOCLAIM` takes them over as before. So the pending list holds only
/// what crashed (or was moved there on purpose), and everything built on it (claims, delivery
/// counts, `--max-deliveries`, the pending-list read after a restart) stays as it was.
///
/// Lost answers. A lease of the worker's own instance that it no longer knows (a read Redis ran
/// whose answer went with the connection, or a lease whose last acknowledgement or deletion a
/// failover or restart lost) is released at once, at its next reconnect or claim tick, and the
/// worker reads it back from its pending list.
public enum StreamLease {
    /// Hex digits of a mask covering positions `0..<count`.
    public static func maskDigits(count: Int) -> Int { (count + 3) / 4 }

    /// Sets position `position` in `mask` (hex digits as ASCII bytes, grown with zeros as needed).
    public static func set(_ position: Int, in mask: inout [UInt8]) {
        let digit = position >> 2
        while mask.count <= digit { mask.append(UInt8(ascii: "0")) }
        let value = hexValue(mask[digit]) | (1 << (position & 3))
        mask[digit] = hexDigits[Int(value)]
    }

    /// Whether `position` is set in `mask` (hex digits as ASCII bytes).
    public static func isSet(_ position: Int, in mask: [UInt8]) -> Bool {
        let digit = position >> 2
        return digit < mask.count && hexValue(mask[digit]) & (1 << (position & 3)) != 0
    }

    /// The parts of a lease value; nil for a value not in Herald's format.
    public struct Value: Equatable, Sendable {
        public var after: String
        public var top: String
        public var count: Int
        public var deliveries: Int
        public var leasedAt: Int64
        public var mask: Substring
        public var consumer: String

        public init?(_ text: String) {
            let parts = text.split(separator: " ", maxSplits: 6, omittingEmptySubsequences: false)
            guard parts.count == 7, let count = Int(parts[2]), let deliveries = Int(parts[3]),
                  let leasedAt = Int64(parts[4]) else { return nil }
            after = String(parts[0])
            top = String(parts[1])
            self.count = count
            self.deliveries = deliveries
            self.leasedAt = leasedAt
            mask = parts[5]
            consumer = String(parts[6])
        }

        /// Positions of the lease not finished yet (`count` is an upper bound until the first
        /// outcome of a read that found fewer entries than it asked for).
        public var unfinished: Int {
            var set = 0
            for byte in mask.utf8 where byte != UInt8(ascii: "-") { set += hexValue(byte).nonzeroBitCount }
            return max(0, count - set)
        }
    }

    /// Entries held under the leases `values` (the hash's values) and not finished yet.
    public static func unfinished(values: [String]) -> Int {
        values.reduce(0) { $0 + (Value($1)?.unfinished ?? 0) }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func hexValue(_ byte: UInt8) -> UInt8 {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        default: return 0
        }
    }
}

extension QueueScripts {
    /// `EVAL leaseFinish 1 <leases> (<field> <read> <last> <mask>)…` for `leases` (see `leaseFinish`).
    public static func leaseFinishCommand(leases key: String,
                                          _ leases: [OutcomeBatch.LeasePositions]) -> [String] {
        var arguments = ["EVAL", leaseFinish, "1", key]
        arguments.reserveCapacity(4 + 4 * leases.count)
        for lease in leases {
            arguments += [lease.field, String(lease.read), lease.last.description, String(decoding: lease.mask, as: UTF8.self)]
        }
        return arguments
    }
}

extension QueueKeys {
    /// The hash of the leases of `jobs` (see `StreamLease`): one field per read in progress.
    public var leases: String { jobs + ":leases" }
}

extension QueueScripts {
    /// `EVAL leaseRead 2 <jobs> <leases> <group> <field> <count> <consumer>`, queued right
    /// before `XREADGROUP GROUP <group> <consumer> COUNT <count> NOACK STREAMS <jobs> >` in one
    /// MULTI (after a placeholder `HSET` of the field, which it removes first, so that no
    /// placeholder outlives it, whatever it answers). Writes the lease of the entries that read
    /// will return and returns
    /// `{after, entries}` (`entries` 0: nothing to read, no lease written; `after` is then where a
    /// blocking wait starts). Without the lag, `entries` is the count asked for, an upper bound
    /// (the lease's `top` bounds its range). An error when the group does not exist (the read
    /// fails the same way).
    public static let leaseRead = """
        redis.call('HDEL', KEYS[2], ARGV[2])
        local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
        local after, lag
        for _, group in ipairs(groups) do
          local name, last, behind
          for i = 1, #group, 2 do
            if group[i] == 'name' then name = group[i + 1]
            elseif group[i] == 'last-delivered-id' then last = group[i + 1]
            elseif group[i] == 'lag' then behind = group[i + 1] end
          end
          if name == ARGV[1] then after = last; lag = behind end
        end
        if not after then return redis.error_reply('NOGROUP no consumer group ' .. ARGV[1] .. ' on ' .. KEYS[1]) end
        local count = tonumber(ARGV[3])
        local top = '+'
        if type(lag) == 'number' then
          if lag < count then count = lag end
        else
          local info = redis.call('XINFO', 'STREAM', KEYS[1])
          for i = 1, #info, 2 do
            if info[i] == 'last-generated-id' then top = info[i + 1] end
          end
          if top == after or #redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', 1) == 0 then count = 0 end
        end
        if count <= 0 then return {after, 0} end
        local time = redis.call('TIME')
        local now = string.format('%.0f', tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
        redis.call('HSET', KEYS[2], ARGV[2], after .. ' ' .. top .. ' ' .. count .. ' 1 ' .. now .. ' - ' .. ARGV[4])
        return {after, count}
        """

    /// `EVAL leaseFinish 1 <leases> (<field> <entries read> <last id read> <mask>)…`: sets the bits
    /// of `mask` (hex) in each lease, and makes its range exact: its count becomes the entries its
    /// read returned and its `top` the last id read (so a release later sees a gap, an entry
    /// deleted inside the range, instead of pairing bits with the wrong entries). Returns one
    /// integer per lease: 0 done, -1 gone already (released to the pending list by another
    /// worker). A lease that is gone is never written again. The masks are merged 32 bits at a
    /// time: per-digit Lua cost redis-server 60 µs per call on a lease of 256.
    public static let leaseFinish = """
        local result = {}
        for i = 1, #ARGV, 4 do
          local field, read, last, mask = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
          local value = redis.call('HGET', KEYS[1], field)
          local after, count, middle, old, tail
          if value then
            after, count, middle, old, tail = string.match(value, '^(%S+ )%S+ (%d+)( %d+ %d+ )(%S+)( .*)$')
          end
          if not after or not read then
            result[#result + 1] = -1
          else
            if old == '-' then old = '' end
            if read < tonumber(count) then count = read end
            local parts = {}
            for j = 1, math.max(#old, #mask), 8 do
              local a, b = string.sub(old, j, j + 7), string.sub(mask, j, j + 7)
              a = tonumber(a .. string.rep('0', 8 - #a), 16) or 0
              b = tonumber(b .. string.rep('0', 8 - #b), 16) or 0
              parts[#parts + 1] = bit.tohex(bit.bor(a, b), 8)
            end
            redis.call('HSET', KEYS[1], field, after .. last .. ' ' .. count .. middle .. table.concat(parts) .. tail)
            result[#result + 1] = 0
          end
        end
        return result
        """

    /// `EVAL leaseDelete 1 <leases> <field>…`: deletes each lease whose every position is set;
    /// one with a position not set stays (after a failover the new master may lack bits the old
    /// one confirmed: that lease's unfinished entries are released to the pending list later,
    /// never dropped). Returns how many were deleted.
    public static let leaseDelete = """
        local bits = {[0] = 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4}
        local deleted = 0
        for i = 1, #ARGV do
          local value = redis.call('HGET', KEYS[1], ARGV[i])
          local count, mask
          if value then count, mask = string.match(value, '^%S+ %S+ (%d+) %d+ %d+ (%S+) ') end
          if count then
            local set = 0
            for j = 1, #mask do set = set + (bits[tonumber(string.sub(mask, j, j), 16) or 0] or 0) end
            if set >= tonumber(count) then
              deleted = deleted + redis.call('HDEL', KEYS[1], ARGV[i])
            end
          end
        end
        return deleted
        """

    /// `EVAL leaseRelease 2 <jobs> <leases> <group> <idle ms> <own instance> <own consumer> <most> <top> <live>…`:
    /// turns leases nobody works on any more into pending entries, at most `<most>` leases:
    /// - of another instance: once its lease time is at least `<idle ms>` old, or at once when its
    ///   consumer is `<own consumer>` (an earlier process of this consumer);
    /// - of `<own instance>`: at once when numbered below `<top>` and not among `<live>` (the
    ///   caller's leases and its read in flight are never touched). Such a lease is one the caller
    ///   no longer knows: a read Redis ran whose answer the connection lost, or a lease whose last
    ///   acknowledgement or deletion Redis lost (a failover, a restart).
    ///
    /// The entries of positions not set become pending entries of the lease's consumer, with the
    /// lease's idle time and delivery count (`XCLAIM … FORCE JUSTID`), so `XAUTOCLAIM` and the
    /// pending-list read take them as if the worker had read them with the pending list. A value
    /// not in Herald's format, or whose range Redis refuses, is left alone. Returns
    /// `{leases released, entries, entries of own leases}`.
    public static let leaseRelease = """
        local all = redis.call('HGETALL', KEYS[2])
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local idle, most = tonumber(ARGV[2]), tonumber(ARGV[5])
        local prefix = ARGV[3] .. '-'
        local below, live = tonumber(ARGV[6] or ''), {}
        for i = 7, #ARGV do live[ARGV[i]] = true end
        local released, moved, ownMoved = 0, 0, 0
        for i = 1, #all, 2 do
          if released >= most then break end
          local field = all[i]
          local after, top, count, deliveries, at, mask, consumer =
            string.match(all[i + 1], '^(%S+) (%S+) (%d+) (%d+) (%d+) (%S+) (.*)$')
          local own = string.sub(field, 1, #prefix) == prefix
          if own then
            local suffix = string.sub(field, #prefix + 1)
            local number = tonumber(suffix)
            if not number or not below or number >= below or live[suffix] then after = nil end
          end
          if after then
            local age = now - tonumber(at)
            if own or age >= idle or consumer == ARGV[4] then
              if mask == '-' then mask = '' end
              -- A value only shaped like a lease (an operator's) may hold ids or counts Redis refuses:
              -- pcall, and such a lease is left alone.
              local rows = redis.pcall('XRANGE', KEYS[1], '(' .. after, top, 'COUNT', count)
              if type(rows) ~= 'table' or rows.err then rows = nil end
              local ids = {}
              -- Fewer entries than the lease counts: one was deleted inside its range, so bits and
              -- entries no longer pair up: every entry is released (sent twice rather than lost).
              local gap = rows and #rows < tonumber(count)
              for p = 0, (rows and #rows or 0) - 1 do
                local digit = tonumber(string.sub(mask, math.floor(p / 4) + 1, math.floor(p / 4) + 1), 16) or 0
                if gap or bit.band(digit, bit.lshift(1, p % 4)) == 0 then ids[#ids + 1] = rows[p + 1][1] end
              end
              if age < 0 then age = 0 end
              for first = 1, #ids, 100 do
                local chunk = {}
                for k = first, math.min(first + 99, #ids) do chunk[#chunk + 1] = ids[k] end
                chunk[#chunk + 1] = 'IDLE'
                chunk[#chunk + 1] = age
                chunk[#chunk + 1] = 'RETRYCOUNT'
                chunk[#chunk + 1] = deliveries
                chunk[#chunk + 1] = 'FORCE'
                chunk[#chunk + 1] = 'JUSTID'
                redis.call('XCLAIM', KEYS[1], ARGV[1], consumer, 0, unpack(chunk))
              end
              if rows then
                redis.call('HDEL', KEYS[2], field)
                released = released + 1
                moved = moved + #ids
                if own then ownMoved = ownMoved + #ids end
              end
            end
          end
        end
        return {released, moved, ownMoved}
        """

    /// `EVAL leaseFinished 2 <jobs> <leases> <group> (<field> <position> <id>)…`: for each entry,
    /// 1 when its outcome is written (its bit is set, or its lease is gone and the entry is not
    /// pending), 0 otherwise. Only after a reconnect, for the outcome batches Redis never confirmed.
    public static let leaseFinished = """
        local result = {}
        for i = 2, #ARGV, 3 do
          local p = tonumber(ARGV[i + 1])
          local value = redis.call('HGET', KEYS[2], ARGV[i])
          local done
          if value then
            local mask = string.match(value, '^%S+ %S+ %d+ %d+ %d+ (%S+) ') or ''
            local digit = tonumber(string.sub(mask, math.floor(p / 4) + 1, math.floor(p / 4) + 1), 16) or 0
            done = bit.band(digit, bit.lshift(1, p % 4)) ~= 0
          else
            done = #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i + 2], ARGV[i + 2], 1) == 0
          end
          result[#result + 1] = done and 1 or 0
        end
        return result
        """
}
