/// Which master serves each of Redis Cluster's 16384 slots, as one node told it: read from
/// `CLUSTER SHARDS` (Redis 7.0 and later) or, from older servers, `CLUSTER SLOTS`.
///
/// Nodes are known by the address they announce (`endpoint`, else `ip`, and `port`). An empty or
/// `?` address means "the node you asked" (Redis' own rule for a node that does not know its
/// address), so the asked node's host is used. Credentials are never part of the map: every
/// node gets the user and password of the seed endpoint (a cluster has one ACL per node, kept
/// the same by the operator).
public struct RedisClusterMap: Sendable, Equatable {
    /// A master and the slots it serves.
    public struct Node: Sendable, Equatable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    /// The masters, in the order they were first seen.
    public private(set) var nodes: [Node] = []
    /// `owners[slot]` is an index into `nodes`, or -1 when no master serves the slot.
    private var owners = [Int16](repeating: -1, count: RedisClusterSlot.count)

    public init() {}

    /// The master serving `slot`, or nil when none does (the cluster is incomplete).
    public func owner(ofSlot slot: Int) -> Node? {
        guard (0..<RedisClusterSlot.count).contains(slot) else { return nil }
        let index = owners[slot]
        return index >= 0 ? nodes[Int(index)] : nil
    }

    /// Slots without an owner.
    public var uncoveredSlots: Int { owners.reduce(0) { $0 + ($1 < 0 ? 1 : 0) } }

    /// Records that `node` serves `slots` (a MOVED answer, or a map being read).
    public mutating func assign(_ slots: ClosedRange<Int>, to node: Node) {
        let index: Int
        if let known = nodes.firstIndex(of: node) {
            index = known
        } else {
            guard nodes.count < Int(Int16.max) else { return }
            nodes.append(node)
            index = nodes.count - 1
        }
        let clamped = slots.clamped(to: 0...(RedisClusterSlot.count - 1))
        for slot in clamped { owners[slot] = Int16(index) }
    }

    /// Reads a `CLUSTER SHARDS` reply; `askedHost` stands in for a node that announces no address.
    public static func fromShards(_ reply: RedisReply, askedHost: String) throws(RedisError) -> RedisClusterMap {
        guard case .array(let shards) = reply else { throw .protocolError("CLUSTER SHARDS answered \(brief(reply)), not a list of shards") }
        var map = RedisClusterMap()
        for shard in shards {
            let fields = pairs(shard)
            guard case .array(let bounds)? = fields["slots"], case .array(let nodes)? = fields["nodes"] else {
                throw .protocolError("a CLUSTER SHARDS entry has no slots or nodes")
            }
            // The shard's master: the node whose role is master and which is not failed.
            var master: Node? = nil
            for node in nodes {
                let nodeFields = pairs(node)
                guard nodeFields["role"]?.string == "master", nodeFields["health"]?.string != "fail" else { continue }
                master = try makeNode(endpoint: nodeFields["endpoint"]?.string, ip: nodeFields["ip"]?.string,
                                      port: nodeFields["port"]?.integer, askedHost: askedHost)
                break
            }
            guard let master, bounds.count % 2 == 0 else { continue }
            var index = 0
            while index < bounds.count {
                guard let low = bounds[index].integer, let high = bounds[index + 1].integer, low <= high else {
                    throw .protocolError("a CLUSTER SHARDS slot range is not two ordered numbers")
                }
                map.assign(Int(low)...Int(high), to: master)
                index += 2
            }
        }
        return map
    }

    /// Reads a `CLUSTER SLOTS` reply: `[[low, high, [ip, port, id, …], replicas…], …]`.
    public static func fromSlots(_ reply: RedisReply, askedHost: String) throws(RedisError) -> RedisClusterMap {
        guard case .array(let ranges) = reply else { throw .protocolError("CLUSTER SLOTS answered \(brief(reply)), not a list of slot ranges") }
        var map = RedisClusterMap()
        for range in ranges {
            guard case .array(let parts) = range, parts.count >= 3, let low = parts[0].integer, let high = parts[1].integer, low <= high,
                  case .array(let master) = parts[2], master.count >= 2 else {
                throw .protocolError("a CLUSTER SLOTS entry is not [low, high, [ip, port, …], …]")
            }
            let node = try makeNode(endpoint: master[0].string, ip: nil, port: master[1].integer, askedHost: askedHost)
            map.assign(Int(low)...Int(high), to: node)
        }
        return map
    }

    private static func makeNode(endpoint: String?, ip: String?, port: Int64?, askedHost: String) throws(RedisError) -> Node {
        guard let port, (1...65535).contains(port) else { throw .protocolError("a cluster node announces no valid port") }
        var host = endpoint ?? ip ?? ""
        if host.isEmpty || host == "?" { host = ip ?? "" }
        if host.isEmpty || host == "?" { host = askedHost }
        if let problem = RedisEndpoint.problem(withHost: host) { throw .protocolError("a cluster node announces an unusable address: \(problem)") }
        return Node(host: host, port: Int(port))
    }

    /// A RESP2 map (a flat array of name, value, …) as a dictionary; also takes a RESP3-style map
    /// already flattened the same way.
    private static func pairs(_ reply: RedisReply) -> [String: RedisReply] {
        guard case .array(let elements) = reply else { return [:] }
        var result: [String: RedisReply] = [:]
        var index = 0
        while index + 1 < elements.count {
            if let name = elements[index].string { result[name] = elements[index + 1] }
            index += 2
        }
        return result
    }

    static func brief(_ reply: RedisReply) -> String {
        switch reply {
        case .error(let message): return "an error (\(message.prefix(200)))"
        case .null: return "nil"
        case .array: return "an unexpected list"
        default: return "\(reply)".prefix(100).description
        }
    }
}

/// An error reply that tells a cluster client to look elsewhere or wait, read from its text.
///
/// - `MOVED slot host:port`: the slot lives on another master now (resharding, failover): update
///   the map and send there from now on.
/// - `ASK slot host:port`: the slot is being migrated and this key already moved: send this one
///   command to the target, preceded by `ASKING`, without changing the map.
/// - `TRYAGAIN`: a multi-key command during a migration, with the keys split between two nodes.
/// - `CLUSTERDOWN`: the cluster cannot serve the slot now (a master failed and no replica has
///   taken over yet).
/// - `READONLY`, `MASTERDOWN`, `LOADING`: the node is (now) a replica, has lost its master, or is
///   still loading: the map is stale or the node not ready.
public enum RedisClusterRedirect: Sendable, Equatable {
    case moved(slot: Int, node: RedisClusterMap.Node)
    case ask(slot: Int, node: RedisClusterMap.Node)
    case tryAgain
    case clusterDown
    case notMaster

    /// The redirect an error reply's text names, or nil for any other error.
    public init?(errorMessage message: some StringProtocol) {
        if message.hasPrefix("MOVED ") || message.hasPrefix("ASK ") {
            let parts = message.split(separator: " ")
            guard parts.count >= 3, let slot = Int(parts[1]), (0..<RedisClusterSlot.count).contains(slot),
                  let colon = parts[2].lastIndex(of: ":"), let port = Int(parts[2][parts[2].index(after: colon)...]),
                  (1...65535).contains(port) else { return nil }
            var host = String(parts[2][..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard RedisEndpoint.problem(withHost: host) == nil else { return nil }
            let node = RedisClusterMap.Node(host: host, port: port)
            self = message.hasPrefix("MOVED ") ? .moved(slot: slot, node: node) : .ask(slot: slot, node: node)
        } else if message.hasPrefix("TRYAGAIN") {
            self = .tryAgain
        } else if message.hasPrefix("CLUSTERDOWN") {
            self = .clusterDown
        } else if message.hasPrefix("READONLY") || message.hasPrefix("MASTERDOWN") || message.hasPrefix("LOADING") {
            self = .notMaster
        } else {
            return nil
        }
    }
}
