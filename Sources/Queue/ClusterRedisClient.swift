import Glibc
import Transport

/// The operator tools' Redis client for a Redis Cluster (`herald stats`, `dead-letters`,
/// `feedback`, and `enqueue`'s routing): each command goes to the master serving its key's
/// slot, on one private `EventLoop` with one connection per node, turned by the calling thread.
///
/// - The slot map is read at the first command (`CLUSTER SHARDS`, or `CLUSTER SLOTS` before
///   Redis 7), asking the seeds in turn.
/// - `MOVED` updates the map and sends the command again to the named node; `ASK` sends it once
///   to the named node preceded by `ASKING` (a slot being migrated), without changing the map;
///   `TRYAGAIN` and `CLUSTERDOWN` wait 100 ms (doubling) and read the map again. A command that
///   got one of these answers was not executed, so sending it again cannot apply it twice. After
///   8 rounds the last answer is returned as the command's reply.
/// - `SCAN` (a queue listing) is run to its end on every master and answered as one reply with
///   cursor `0`: a cluster's keys are spread over the masters.
/// - Keyless commands (`TIME`, `PING`) go to any master. A tool pipeline never holds MULTI.
///
/// Not for the worker (it blocks its thread). Not thread-safe: one thread uses it.
public final class ClusterRedisClient: QueueToolRedis, RedisConnectionDelegate {
    public let seeds: RedisClusterSeeds
    private let loop: EventLoop
    private var map: RedisClusterMap?
    private var connections: [RedisClusterMap.Node: RedisConnection] = [:]
    private var signals: SignalWatcher?
    public private(set) var interrupted = false

    public init(seeds: RedisClusterSeeds) throws {
        self.seeds = seeds
        do {
            loop = try EventLoop()
        } catch {
            throw QueueToolError.invalidArgument("cannot create an event loop: \(error)")
        }
    }

    deinit {
        for connection in connections.values {
            connection.delegate = nil
            connection.close()
        }
    }

    public var targetDescription: String { seeds.description }

    public func stopOnSignals() throws {
        guard signals == nil else { return }
        do {
            signals = try SignalWatcher(loop: loop) { [weak self] _ in
                guard let self else { return }
                self.interrupted = true
                self.loop.stop()
            }
        } catch {
            throw QueueToolError.invalidArgument("cannot watch signals: \(error)")
        }
    }

    /// Drops every connection and the map: the next command reads the map again (after a failover).
    public func reconnect() {
        for connection in connections.values {
            connection.delegate = nil
            connection.close()
        }
        connections.removeAll()
        map = nil
    }

    public func idle(milliseconds: Int64) throws {
        var done = false
        let loop = self.loop
        let timer = loop.schedule(afterMilliseconds: milliseconds) {
            done = true
            loop.stop()
        }
        while !done && !interrupted { loop.run() }
        loop.cancel(timer)
        if interrupted { throw QueueToolError.interrupted }
    }

    public func redisConnectionIsReady(_ connection: RedisConnection) {}

    public func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        // Forget it; the next command to that node opens a new connection.
        for (node, known) in connections where known === connection { connections[node] = nil }
    }

    // MARK: routing

    /// The master serving `slot`, reading the map when there is none.
    public func owner(ofSlot slot: Int, timeoutMilliseconds: Int64 = ClusterRedisClient.defaultTimeoutMilliseconds) throws -> RedisClusterMap.Node {
        if map == nil { try readMap(timeoutMilliseconds: timeoutMilliseconds) }
        if let node = map?.owner(ofSlot: slot) { return node }
        try readMap(timeoutMilliseconds: timeoutMilliseconds)
        guard let node = map?.owner(ofSlot: slot) else {
            throw QueueToolError.unreachable(endpoint: seeds.description, cause: "no master serves slot \(slot) (the cluster is failing over, or incomplete: check CLUSTER INFO)")
        }
        return node
    }

    /// The endpoint of the master holding `queue` (for a caller that opens its own connection).
    public func endpoint(forQueue queue: String) throws -> RedisEndpoint {
        seeds.endpoint(for: try owner(ofSlot: RedisClusterSlot.of(queue: queue)))
    }

    /// The masters, as the map says.
    public func masters(timeoutMilliseconds: Int64 = ClusterRedisClient.defaultTimeoutMilliseconds) throws -> [RedisClusterMap.Node] {
        if map == nil { try readMap(timeoutMilliseconds: timeoutMilliseconds) }
        return map?.nodes ?? []
    }

    private func readMap(timeoutMilliseconds: Int64) throws {
        var causes: [String] = []
        var candidates = (map?.nodes ?? []) + seeds.endpoints.map { RedisClusterMap.Node(host: $0.host, port: $0.port) }
        var seen = Set<RedisClusterMap.Node>()
        candidates = candidates.filter { seen.insert($0).inserted }
        for node in candidates {
            do {
                var reply = try send([["CLUSTER", "SHARDS"]], to: node, timeoutMilliseconds: timeoutMilliseconds)[0]
                var useSlots = false
                if case .error(let message) = reply, message.lowercased().contains("unknown subcommand") {
                    reply = try send([["CLUSTER", "SLOTS"]], to: node, timeoutMilliseconds: timeoutMilliseconds)[0]
                    useSlots = true
                }
                if case .error(let message) = reply {
                    if message.hasPrefix("ERR This instance has cluster support disabled") {
                        throw QueueToolError.invalidArgument("\(seeds.endpoint(for: node)) is not a Redis Cluster node (cluster support disabled): use a plain redis:// URL without --redis-cluster")
                    }
                    causes.append("\(node): \(message)")
                    continue
                }
                let read = try useSlots ? RedisClusterMap.fromSlots(reply, askedHost: node.host) : RedisClusterMap.fromShards(reply, askedHost: node.host)
                guard !read.nodes.isEmpty else {
                    causes.append("\(node): knows no master serving a slot (cluster not created yet?)")
                    continue
                }
                map = read
                return
            } catch let error as QueueToolError {
                if case .invalidArgument = error { throw error }
                if case .interrupted = error { throw error }
                causes.append("\(node): \(error)")
            } catch {
                causes.append("\(node): \(error)")
            }
        }
        throw QueueToolError.unreachable(endpoint: seeds.description, cause: "no node answered with the slot map (\(causes.joined(separator: "; ")))")
    }

    /// The slot a command's key names, or nil for a keyless command.
    static func slot(of command: [RedisArgument]) -> Int? {
        guard let verb = ClusterRedisClient.text(command.first)?.uppercased() else { return nil }
        var keyIndex: Int? = 1
        switch verb {
        case "EVAL", "EVALSHA":
            keyIndex = command.count > 3 && ClusterRedisClient.text(command[2]) != "0" ? 3 : nil
        case "XREAD", "XREADGROUP":
            keyIndex = command.firstIndex { ClusterRedisClient.text($0)?.uppercased() == "STREAMS" }.map { $0 + 1 }
        case "XINFO", "XGROUP", "OBJECT", "MEMORY":
            keyIndex = 2  // a subcommand, then the key
        case "SCAN", "TIME", "PING", "CLUSTER", "INFO", "MULTI", "EXEC", "ASKING":
            keyIndex = nil
        default:
            break
        }
        guard let keyIndex, keyIndex < command.count else { return nil }
        switch command[keyIndex] {
        case .text(let key): return RedisClusterSlot.of(key: key)
        case .bytes(let bytes): return bytes.withUnsafeBytes { RedisClusterSlot.of(keyBytes: $0) }
        case .integer(let value): return RedisClusterSlot.of(key: String(value))
        }
    }

    private static func text(_ argument: RedisArgument?) -> String? {
        switch argument {
        case .text(let text)?: return text
        case .bytes(let bytes)?: return String(decoding: bytes, as: UTF8.self)
        default: return nil
        }
    }

    // MARK: running commands

    public func pipeline(_ commands: [[RedisArgument]], timeoutMilliseconds: Int64) throws -> [RedisReply] {
        guard !commands.isEmpty else { return [] }
        if interrupted { throw QueueToolError.interrupted }
        var replies = [RedisReply?](repeating: nil, count: commands.count)
        // SCAN: every master, to the end.
        for (index, command) in commands.enumerated() where ClusterRedisClient.text(command.first)?.uppercased() == "SCAN" {
            replies[index] = try scanAll(command, timeoutMilliseconds: timeoutMilliseconds)
        }
        var todo = replies.indices.filter { replies[$0] == nil }
        var asked: [Int: RedisClusterMap.Node] = [:]
        var round = 0
        while !todo.isEmpty {
            round += 1
            // Group by node, keeping each node's commands in order.
            var byNode: [RedisClusterMap.Node: [Int]] = [:]
            var order: [RedisClusterMap.Node] = []
            for index in todo {
                let node: RedisClusterMap.Node
                if let target = asked[index] {
                    node = target
                } else if let slot = ClusterRedisClient.slot(of: commands[index]) {
                    node = try owner(ofSlot: slot, timeoutMilliseconds: timeoutMilliseconds)
                } else {
                    guard let any = try masters(timeoutMilliseconds: timeoutMilliseconds).first else {
                        throw QueueToolError.unreachable(endpoint: seeds.description, cause: "the cluster has no master")
                    }
                    node = any
                }
                if byNode[node] == nil { order.append(node) }
                byNode[node, default: []].append(index)
            }
            var again: [Int] = []
            var wait = false
            for node in order {
                let indices = byNode[node]!
                // An ASK target gets ASKING right before the command it is for.
                var batch: [[RedisArgument]] = []
                var positions: [Int] = []
                for index in indices {
                    if asked[index] != nil { batch.append(["ASKING"]) }
                    positions.append(batch.count)
                    batch.append(commands[index])
                }
                let answers = try send(batch, to: node, timeoutMilliseconds: timeoutMilliseconds)
                for (position, index) in zip(positions, indices) {
                    let reply = answers[position]
                    asked[index] = nil
                    if case .error(let message) = reply, round < 8, let redirect = RedisClusterRedirect(errorMessage: message) {
                        switch redirect {
                        case .moved(let slot, let target):
                            if map == nil { map = RedisClusterMap() }
                            map?.assign(slot...slot, to: target)
                        case .ask(_, let target):
                            asked[index] = target
                        case .tryAgain, .clusterDown, .notMaster:
                            map = nil
                            wait = true
                        }
                        again.append(index)
                    } else {
                        replies[index] = reply
                    }
                }
            }
            if wait { try idle(milliseconds: min(2_000, 100 << Int64(round - 1))) }
            todo = again
        }
        return replies.map { $0 ?? .null }
    }

    /// `SCAN 0 …` to the end on every master; one reply `[0, keys]`.
    private func scanAll(_ command: [RedisArgument], timeoutMilliseconds: Int64) throws -> RedisReply {
        var keys: [RedisReply] = []
        for node in try masters(timeoutMilliseconds: timeoutMilliseconds) {
            var cursor = "0"
            repeat {
                var step = command
                step[1] = .text(cursor)
                let reply = try send([step], to: node, timeoutMilliseconds: timeoutMilliseconds)[0]
                guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let found) = parts[1] else {
                    return reply
                }
                keys += found
                cursor = next
            } while cursor != "0"
        }
        return .array([.bulk(Array("0".utf8)), .array(keys)])
    }

    private final class Wait {
        var replies: [RedisReply?]
        var remaining: Int
        var failure: RedisError?
        var timedOut = false
        init(count: Int) {
            replies = Array(repeating: nil, count: count)
            remaining = count
        }
    }

    /// Sends `commands` pipelined to `node` and waits for every reply.
    private func send(_ commands: [[RedisArgument]], to node: RedisClusterMap.Node, timeoutMilliseconds: Int64) throws -> [RedisReply] {
        let endpoint = seeds.endpoint(for: node)
        let connection: RedisConnection
        if let known = connections[node] {
            connection = known
        } else {
            connection = RedisConnection(loop: loop, endpoint: endpoint)
            connection.delegate = self
            connections[node] = connection
            connection.connect()
        }
        let wait = Wait(count: commands.count)
        let loop = self.loop
        for (index, command) in commands.enumerated() {
            connection.send(command) { result in
                switch result {
                case .success(let reply): wait.replies[index] = reply
                case .failure(let error): if wait.failure == nil { wait.failure = error }
                }
                wait.remaining -= 1
                if wait.remaining == 0 { loop.stop() }
            }
        }
        let timer = loop.schedule(afterMilliseconds: timeoutMilliseconds) {
            guard wait.remaining > 0 else { return }
            wait.timedOut = true
            connection.close()
            loop.stop()
        }
        while wait.remaining > 0 && !wait.timedOut && !interrupted { loop.run() }
        loop.cancel(timer)
        if wait.timedOut {
            throw QueueToolError.timedOut(endpoint: endpoint.description, command: RedisCommandText.name(commands[0]),
                                          seconds: Int((timeoutMilliseconds + 999) / 1000))
        }
        if interrupted && wait.remaining > 0 {
            connections[node] = nil
            connection.delegate = nil
            connection.close()
            throw QueueToolError.interrupted
        }
        if let failure = wait.failure {
            connections[node] = nil
            if case .authenticationFailed(let message) = failure {
                throw QueueToolError.authenticationFailed(endpoint: endpoint.description, message: message)
            }
            throw QueueToolError.connectionLost(endpoint: endpoint.description, cause: QueueToolErrorText.cause(of: failure, endpoint: endpoint))
        }
        return wait.replies.map { $0 ?? .null }
    }
}

/// What the queue tools need from a Redis client: commands, and for `feedback tail --follow`
/// signals, pauses and reconnects. `BlockingRedisClient` (one Redis) and `ClusterRedisClient`.
public protocol QueueToolRedis: RedisCommandExecutor {
    /// Where the commands go, password hidden: for messages.
    var targetDescription: String { get }
    var interrupted: Bool { get }
    func stopOnSignals() throws
    func reconnect()
    func idle(milliseconds: Int64) throws
}

extension BlockingRedisClient: QueueToolRedis {
    public var targetDescription: String { endpoint.description }
}

extension ClusterRedisClient {
    public static var defaultTimeoutMilliseconds: Int64 { 15_000 }
}
