import Transport

/// One stream entry as the operator tools see it: its id and its fields in order (a field name
/// may repeat: a dead letter of a retried job carries the job's `attempts` and its own).
public struct StreamRecord: Sendable {
    public let id: StreamEntryID
    public let fields: [(name: String, value: [UInt8])]

    public init(id: StreamEntryID, fields: [(name: String, value: [UInt8])]) {
        self.id = id
        self.fields = fields
    }

    /// The last value of field `name` (the one Herald appended last), as bytes.
    public func lastValue(_ name: String) -> [UInt8]? {
        fields.last { $0.name == name }?.value
    }

    /// The last value of field `name`, as text.
    public func text(_ name: String) -> String? {
        lastValue(name).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// Reads the reply shapes the operator tools ask for (RESP2, as hiredis hands them over).
public enum RedisReplyReader {
    /// The entries of an XRANGE/XREVRANGE reply: `[[id, [field, value, …]], …]`.
    public static func entries(_ reply: RedisReply) -> [StreamRecord] {
        guard case .array(let items) = reply else { return [] }
        var records: [StreamRecord] = []
        records.reserveCapacity(items.count)
        for item in items {
            guard case .array(let parts) = item, parts.count == 2, case .bulk(let idBytes) = parts[0],
                  let id = StreamEntryID(bytes: idBytes) else { continue }
            var fields: [(name: String, value: [UInt8])] = []
            if case .array(let flat) = parts[1] {
                fields.reserveCapacity(flat.count / 2)
                var index = 0
                while index + 1 < flat.count {
                    if case .bulk(let name) = flat[index], case .bulk(let value) = flat[index + 1] {
                        fields.append((String(decoding: name, as: UTF8.self), value))
                    }
                    index += 2
                }
            }
            records.append(StreamRecord(id: id, fields: fields))
        }
        return records
    }

    /// The entries of an XREAD reply for one stream (`[[key, entries]]`), or none (a null reply: timeout).
    public static func readEntries(_ reply: RedisReply) -> [StreamRecord] {
        guard case .array(let streams) = reply else { return [] }
        var records: [StreamRecord] = []
        for stream in streams {
            guard case .array(let pair) = stream, pair.count == 2 else { continue }
            records += entries(pair[1])
        }
        return records
    }

    /// A flat `[key, value, key, value, …]` reply (XINFO) as a dictionary.
    public static func map(_ reply: RedisReply) -> [String: RedisReply] {
        guard case .array(let flat) = reply else { return [:] }
        var result: [String: RedisReply] = [:]
        var index = 0
        while index + 1 < flat.count {
            if let key = flat[index].string { result[key] = flat[index + 1] }
            index += 2
        }
        return result
    }

    /// A reply that must be an integer (or its decimal text).
    public static func integer(_ reply: RedisReply, command: String) throws -> Int64 {
        if case .error(let message) = reply { throw QueueToolError.server(command: command, message: message) }
        guard let value = reply.integer else { throw QueueToolError.unexpectedReply(command: command, reply: "\(reply)") }
        return value
    }
}
