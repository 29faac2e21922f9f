/// Several queues for one worker, and which shard a device token belongs to.
///
/// `--queues a,b,c` names queues outright; `--shards N` names `NAME-0` … `NAME-(N-1)` after the
/// queue name (`--queue`, default `default`). Producers pick a job's shard from its device token
/// with `QueueShards.shard(token:shards:)`, which every producer language can compute in a few
/// lines (docs/job-format.md): CRC-32 (IEEE 802.3, the checksum of zlib, gzip, PNG, Python's
/// `zlib.crc32`, Go's `crc32.ChecksumIEEE`, Ruby's `Zlib.crc32`) of the token as lowercase hex
/// text, modulo N.
public enum QueueShards {
    /// Most queues one worker reads: each costs two Redis connections per event loop.
    public static let maxQueues = 256

    /// The queue names `--shards shards` makes from `base`: `base-0` … `base-(shards-1)`.
    public static func names(base: String, shards: Int) -> [String] {
        (0..<shards).map { "\(base)-\($0)" }
    }

    /// The queue names of `--queue`, `--queues` and `--shards` (nil when not given), checked:
    /// `--queues` excludes the other two; `--shards` uses `--queue` as the base name. Errors say
    /// what to change.
    public static func resolve(queue: String?, queues: String?, shards: Int?) -> Result<[String], QueueSelectionError> {
        if let queues {
            if shards != nil { return .failure(QueueSelectionError("--queues and --shards exclude each other: name the queues, or give a count")) }
            if queue != nil { return .failure(QueueSelectionError("--queues and --queue exclude each other: put every queue in --queues")) }
            let names = queues.split(separator: ",", omittingEmptySubsequences: false).map { String($0).trimmingSpaces }
            if let problem = problem(names) { return .failure(problem) }
            return .success(names)
        }
        let base = queue ?? QueueKeys.defaultQueue
        if let problem = problem([base]) { return .failure(problem) }
        guard let shards else { return .success([base]) }
        guard (1...maxQueues).contains(shards) else {
            return .failure(QueueSelectionError("--shards must be 1 to \(maxQueues), not \(shards)"))
        }
        return .success(names(base: base, shards: shards))
    }

    private static func problem(_ names: [String]) -> QueueSelectionError? {
        if names.isEmpty { return QueueSelectionError("no queue named") }
        if names.count > maxQueues { return QueueSelectionError("at most \(maxQueues) queues per worker, not \(names.count)") }
        var seen = Set<String>()
        for name in names {
            if name.isEmpty { return QueueSelectionError("an empty queue name (check the commas in --queues)") }
            if name.utf8.contains(where: { $0 == UInt8(ascii: "{") || $0 == UInt8(ascii: "}") || $0 <= 0x20 || $0 == 0x7F }) {
                return QueueSelectionError("queue name \"\(name)\" holds a brace, a space or a control character; Herald puts the name inside the {…} hash tag of its keys")
            }
            if !seen.insert(name).inserted { return QueueSelectionError("queue \"\(name)\" is named twice") }
        }
        return nil
    }

    /// The shard (0 ..< `shards`) of a device token: CRC-32 (IEEE) of the token's lowercase hex
    /// text as ASCII bytes, modulo `shards`. Upper-case letters in `token` are lowered first, so a
    /// producer that sends upper-case hex lands where Herald's own `enqueue` would.
    public static func shard(token: String, shards: Int) -> Int {
        precondition(shards > 0, "a shard count is at least 1")
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in token.utf8 {
            let lowered = (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte | 0x20 : byte
            crc = crc32Table[Int((crc ^ UInt32(lowered)) & 0xFF)] ^ (crc >> 8)
        }
        return Int((crc ^ 0xFFFF_FFFF) % UInt32(shards))
    }

    /// CRC-32 of `bytes` (IEEE 802.3, reflected, polynomial 0xEDB88320): zlib's `crc32`.
    public static func crc32<Bytes: Sequence>(_ bytes: Bytes) -> UInt32 where Bytes.Element == UInt8 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = crc32Table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }

    private static let crc32Table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 != 0 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }
}

/// A queue selection that cannot work (`--queues`, `--shards`), with what to change.
public struct QueueSelectionError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var view = Substring(self)
        while view.first == " " { view.removeFirst() }
        while view.last == " " { view.removeLast() }
        return String(view)
    }
}
