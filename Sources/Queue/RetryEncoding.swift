/// Encodes a job's fields as the JSON array `["name","value",…]` that the retry set stores and
/// the promote script turns back into `XADD` arguments (Redis' Lua has cjson).
public enum RetryEncoding {
    public static func encode(_ fields: [(name: String, value: [UInt8])]) -> [UInt8] {
        var out: [UInt8] = [0x5B]
        out.reserveCapacity(fields.reduce(16) { $0 + $1.name.utf8.count + $1.value.count + 8 })
        for (index, field) in fields.enumerated() {
            if index > 0 { out.append(0x2C) }
            appendString(Array(field.name.utf8), to: &out)
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

/// The Lua scripts Herald runs; every key they touch shares the queue's hash tag.
public enum QueueScripts {
    /// Moves up to ARGV[2] retry-set members due by ARGV[1] (ms) back into the job stream, atomically.
    /// KEYS[1] = retry set, KEYS[2] = job stream. Returns how many moved.
    public static let promoteDueRetries = """
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        for _, member in ipairs(due) do
          local fields = cjson.decode(member)
          redis.call('XADD', KEYS[2], '*', unpack(fields))
          redis.call('ZREM', KEYS[1], member)
        end
        return #due
        """
}
