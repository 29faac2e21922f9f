import Transport

/// Removing finished entries from a job stream: one `XTRIM MINID` now and then instead of an
/// `XDEL` of every entry in its outcome batch.
///
/// Why: deleting each acknowledged entry cost redis-server more than acknowledging it (an `XDEL`
/// looks every id up in the stream's radix tree and rewrites its listpack node), while trimming
/// the stream's head drops whole nodes at once. What may be trimmed: an entry of the stream that
/// is below every group's last-delivered id was delivered to every group; if it is also below
/// every group's oldest pending entry, every group acknowledged it. Entries not yet delivered are
/// above the last-delivered id and pending entries are at or above the oldest pending one, so
/// neither is ever trimmed, whatever the number of consumers or workers, and whether or not their
/// consumer is still alive. The bound is computed and applied inside one script (atomic: no read
/// or acknowledgement can come between), on one key, so it runs as is on Redis Cluster.
public enum StreamTrim {
    /// `EVAL <trimFinished> 2 <stream> <stream>:leases`: trims `stream` below what every group
    /// of it finished and below every lease (`StreamLease`); the reply is the number of entries removed.
    public static func command(stream: String) -> [String] {
        ["EVAL", QueueScripts.trimFinished, "2", stream, stream + ":leases"]
    }
}

extension QueueScripts {
    /// Trims KEYS[1] (a stream) to MINID = the smallest, over its consumer groups, of the group's
    /// oldest pending id and the id right after its last-delivered id, and of the `after` id of
    /// every lease in KEYS[2] (a lease's entries lie above it). Returns the number of
    /// entries removed (0 when the stream or every group is missing). Ids are compared as the
    /// decimal strings Redis returns (length first), so no part of an id goes through a double.
    public static let trimFinished = """
        local function below(a, b)
          local am, as = string.match(a, '^(%d+)-(%d+)$')
          local bm, bs = string.match(b, '^(%d+)-(%d+)$')
          if #am ~= #bm then return #am < #bm end
          if am ~= bm then return am < bm end
          if #as ~= #bs then return #as < #bs end
          return as < bs
        end
        local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
        if type(groups) ~= 'table' or groups.err or #groups == 0 then return 0 end
        local bound = nil
        for _, group in ipairs(groups) do
          local name, last
          for i = 1, #group, 2 do
            if group[i] == 'name' then name = group[i + 1]
            elseif group[i] == 'last-delivered-id' then last = group[i + 1] end
          end
          if not name or not last then return 0 end
          local ms, seq = string.match(last, '^(%d+)-(%d+)$')
          if not ms then return 0 end
          -- Right after the last delivered id; a sequence too long for exact Lua arithmetic keeps it.
          local limit = last
          if #seq < 15 then limit = ms .. '-' .. string.format('%d', tonumber(seq) + 1) end
          local pending = redis.call('XPENDING', KEYS[1], name)
          if pending[1] > 0 and below(pending[2], limit) then limit = pending[2] end
          if bound == nil or below(limit, bound) then bound = limit end
        end
        for _, lease in ipairs(redis.call('HVALS', KEYS[2])) do
          local after = string.match(lease, '^(%d+%-%d+) %S+ %d+ %d+ %d+ %S+ ')
          if after and below(after, bound) then bound = after end
        end
        return redis.call('XTRIM', KEYS[1], 'MINID', bound)
        """
}
