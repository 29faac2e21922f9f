import Transport

/// One stream entry as the operator tools see it: its id and its fields in order (a field name
/// may repeat: a dead letter of a retried job carries the job's `attempts` and its own).
public struct StreamRecord: Sendable {
    public let id: StreamEntryID
    /// The fields, packed (see `StreamFields`): what the worker reads.
    public let packed: StreamFields
    /// Values (or the field list) the reply reader cut because they were outsized: such an entry
    /// is dead-lettered whole, never sent. Empty for every ordinary entry.
    public let truncated: [TruncatedValue]

    public init(id: StreamEntryID, fields: [(name: String, value: [UInt8])], truncated: [TruncatedValue] = []) {
        self.init(id: id, packed: StreamFields(fields), truncated: truncated)
    }

    public init(id: StreamEntryID, packed: StreamFields, truncated: [TruncatedValue] = []) {
        self.id = id
        self.packed = packed
        self.truncated = truncated
    }

    /// The fields as (name, value) pairs, in order (copies: for the tools and the rare paths).
    public var fields: [(name: String, value: [UInt8])] { packed.pairs }

    /// The last value of field `name` (the one Herald appended last), as bytes.
    public func lastValue(_ name: String) -> [UInt8]? {
        packed.lastValue(name).map { Array($0) }
    }

    /// The last value of field `name`, as text.
    public func text(_ name: String) -> String? {
        packed.lastValue(name).map { String(decoding: $0, as: UTF8.self) }
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
                        fields.append((FieldName.decode(name), value))
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

    /// The entries of an XREAD/XREADGROUP reply straight from a connection's tape: one
    /// allocation per entry (its packed fields), none for the reply's structure. An entry deleted
    /// while pending comes back with no fields. An error reply comes back as `.failure` with
    /// Redis' message.
    public static func readEntries(tape: RedisReplyTape) -> Result<[StreamRecord], RedisError> {
        readEntries(tape: tape, at: 0)
    }

    /// `readEntries(tape:)` for the reply at node `rootIndex` (an element of an EXEC reply).
    static func readEntries(tape: RedisReplyTape, at rootIndex: Int) -> Result<[StreamRecord], RedisError> {
        let nodes = tape.nodes
        guard rootIndex < nodes.count else { return .success([]) }
        let root = nodes[rootIndex]
        switch root.kind {
        case .error: return .failure(.server(tape.withBytes(of: rootIndex) { String(decoding: $0, as: UTF8.self) }))
        case .array: break
        default: return .success([])
        }
        var records: [StreamRecord] = []
        var index = rootIndex + 1
        for _ in 0..<root.value {
            // [key, entries]
            guard nodes[index].kind == .array, nodes[index].value == 2 else { index = tape.skip(index); continue }
            index += 2  // the pair, then the key
            guard nodes[index - 1].kind == .string, nodes[index].kind == .array else { index = tape.skip(index); continue }
            let entryCount = Int(nodes[index].value)
            index += 1
            records.reserveCapacity(records.count + entryCount)
            let truncated = !tape.truncations.isEmpty
            for _ in 0..<entryCount { index = entry(tape, nodes: nodes, truncated: truncated, at: index, into: &records) }
        }
        return .success(records)
    }

    /// The cut nodes of one entry's field list (its nodes are `nodes`, the list itself first).
    private static func truncations(_ tape: RedisReplyTape, in nodes: Range<Int>, fields: StreamFields) -> [TruncatedValue] {
        let fieldList = nodes.lowerBound
        var found: [TruncatedValue] = []
        for truncation in tape.truncations where nodes.contains(truncation.node) {
            if truncation.node == fieldList {
                found.append(TruncatedValue(field: nil, length: truncation.fullLength, sha256: nil, byBudget: false))
            } else {
                // A value at node fieldList + 2k + 2 belongs to field k (names and values alternate).
                let position = truncation.node - fieldList - 1
                let field = position / 2 < fields.count ? fields.name(at: position / 2) : nil
                found.append(TruncatedValue(field: field, length: truncation.fullLength,
                                            sha256: truncation.sha256.isEmpty ? nil : hex(truncation.sha256), byBudget: truncation.byBudget))
            }
        }
        return found
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes { text.append(digits[Int(byte >> 4)]); text.append(digits[Int(byte & 15)]) }
        return String(decoding: text, as: UTF8.self)
    }

    /// What a leased read answered (see `StreamLease`): the EXEC reply `[placeholder HSET's reply,
    /// leaseRead's reply, XREADGROUP's reply]` straight from the tape (the last two are read).
    public struct LeasedRead {
        /// Entries the lease covers (0: no lease was written).
        public var leased: Int
        /// The script's error reply, if it failed (the read ran anyway: its entries have no lease).
        public var scriptError: String?
        public var entries: [StreamRecord]
    }

    /// Reads the EXEC reply of a leased read. `.failure` for an error reply to EXEC (EXECABORT)
    /// or to the read itself (NOGROUP), with Redis' message.
    public static func leasedRead(tape: RedisReplyTape) -> Result<LeasedRead, RedisError> {
        let nodes = tape.nodes
        guard let root = nodes.first else { return .failure(.protocolError("an empty reply to a leased read")) }
        if root.kind == .error { return .failure(.server(tape.withBytes(of: 0) { String(decoding: $0, as: UTF8.self) })) }
        guard root.kind == .array, root.value >= 2, nodes.count > 2 else {
            return .failure(.protocolError("a reply of another shape to a leased read"))
        }
        var script = 1
        for _ in 0..<(root.value - 2) { script = tape.skip(script) }
        var read = LeasedRead(leased: 0, scriptError: nil, entries: [])
        switch nodes[script].kind {
        case .error:
            read.scriptError = tape.withBytes(of: script) { String(decoding: $0, as: UTF8.self) }
        case .array where nodes[script].value == 2 && nodes.count > script + 2 && nodes[script + 1].kind == .string
                       && nodes[script + 2].kind == .integer:
            read.leased = Int(clamping: nodes[script + 2].value)
        default:
            read.scriptError = "an answer of another shape from the lease script"
        }
        switch readEntries(tape: tape, at: tape.skip(script)) {
        case .failure(let error): return .failure(error)
        case .success(let entries): read.entries = entries
        }
        return .success(read)
    }

    /// An XAUTOCLAIM reply `[cursor, [entry, …], …]` straight from a connection's tape, with the
    /// same entries (and cut values) as `readEntries(tape:)`. nil for an error or another shape.
    public static func claimedEntries(tape: RedisReplyTape) -> (cursor: String, entries: [StreamRecord])? {
        let nodes = tape.nodes
        guard nodes.count >= 3, nodes[0].kind == .array, nodes[0].value >= 2, nodes[1].kind == .string,
              nodes[2].kind == .array else { return nil }
        let cursor = tape.withBytes(of: 1) { String(decoding: $0, as: UTF8.self) }
        var records: [StreamRecord] = []
        var index = 3
        let truncated = !tape.truncations.isEmpty
        for _ in 0..<nodes[2].value { index = entry(tape, nodes: nodes, truncated: truncated, at: index, into: &records) }
        return (cursor, records)
    }

    /// Reads the entry `[id, [field, value, …] | nil]` at `index`; returns the index after it.
    /// The usual field list (strings only, names and values paired) is copied into its packed
    /// buffer in one piece: its bytes lie back to back on the tape. `nodes` is `tape.nodes` and
    /// `truncated` whether the reply has cuts, both read once per reply rather than per entry
    /// (each read retained and released an array).
    private static func entry(_ tape: RedisReplyTape, nodes: [RedisReplyTape.Node], truncated: Bool, at index: Int,
                              into records: inout [StreamRecord]) -> Int {
        guard nodes[index].kind == .array, nodes[index].value == 2, nodes[index + 1].kind == .string else {
            return tape.skip(index)
        }
        let id = tape.withBytes(of: index + 1) { StreamEntryID(bytes: $0) }
        var next = index + 2
        let fieldList = next
        var fields = StreamFields.empty
        if nodes[next].kind == .array {
            let count = Int(nodes[next].value)
            next += 1
            let first = next
            if count % 2 == 0, first + count <= nodes.count, backToBack(nodes, first..<first + count) {
                next = first + count
                fields = packed(tape, nodes: nodes, first: first, pairs: count / 2)
            } else {
                // Not the shape Redis gives a stream entry (an odd count, a nested value): the
                // string pairs are kept, the rest skipped.
                var pairs: [(name: String, value: [UInt8])] = []
                var pair = 0
                while pair + 1 < count {
                    if nodes[next].kind == .string && nodes[next + 1].kind == .string {
                        let name = tape.withBytes(of: next) { FieldName.decode($0) }
                        pairs.append((name, tape.byteArray(of: next + 1)))
                    }
                    next = tape.skip(tape.skip(next))
                    pair += 2
                }
                if pair < count { next = tape.skip(next) }
                fields = StreamFields(pairs)
            }
        } else {
            next = tape.skip(next)
        }
        if let id {
            // Only an outsized reply has truncations: the usual entry pays one isEmpty test.
            let cuts = truncated ? truncations(tape, in: fieldList..<next, fields: fields) : []
            records.append(StreamRecord(id: id, packed: fields, truncated: cuts))
        }
        return next
    }

    /// Whether `range` holds only string nodes whose bytes follow one another on the tape.
    private static func backToBack(_ nodes: [RedisReplyTape.Node], _ range: Range<Int>) -> Bool {
        var expected = range.isEmpty ? 0 : nodes[range.lowerBound].start
        for node in range {
            guard nodes[node].kind == .string, nodes[node].start == expected else { return false }
            expected = nodes[node].start + nodes[node].length
        }
        return true
    }

    /// The `2 × pairs` string nodes from `first` on, packed: their bytes are one run on the tape.
    private static func packed(_ tape: RedisReplyTape, nodes: [RedisReplyTape.Node], first: Int, pairs: Int) -> StreamFields {
        guard pairs > 0 else { return .empty }
        let start = Int(nodes[first].start)
        let last = nodes[first + 2 * pairs - 1]
        let end = Int(last.start) + Int(last.length)
        return tape.withAllBytes { bytes in
            StreamFields.build(count: pairs, byteCount: end - start) { boundaries, destination in
                for node in 0..<2 * pairs { boundaries[node] = UInt32(Int(nodes[first + node].start) - start) }
                boundaries[2 * pairs] = UInt32(end - start)
                if end > start { destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[start..<end])) }
            }
        }
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

/// A stream value the reply reader did not keep whole (see `RESPReader`): which field, its full
/// length, and the SHA-256 (hex) of all its bytes; `field` nil for a field list cut for having too
/// many fields.
public struct TruncatedValue: Sendable, Equatable {
    public let field: String?
    public let length: Int
    public let sha256: String?
    /// Cut only because its reply as a whole outgrew the reader's byte budget: the value itself
    /// may be fine, and the entry is read again on its own.
    public let byBudget: Bool
}
