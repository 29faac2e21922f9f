import Logging

/// Knows which Redis Cluster master serves which slot, for the connections of one event loop.
///
/// The worker asks it for the endpoint of a queue's slot each time it (re)connects that queue's
/// connections; the router answers from its map, reading the map first when it has none or was
/// told it is stale. It never sits on the per-command path: commands go straight to the
/// connection of the node that owns the queue, and only an error reply that names a redirect
/// (`RedisClusterRedirect`) or a lost connection sends the worker back here.
///
/// - A `MOVED` answer updates the slot at once (`moved(slot:to:)`) and refreshes the whole map in
///   the background: after a failover or a resharding more slots than this one usually moved.
/// - A lost connection, `CLUSTERDOWN` or a `READONLY` node marks the map stale (`invalidate()`):
///   the next request reads it again, asking the known masters and the seeds in turn, so a dead
///   node is skipped and a promoted replica is found.
///
/// The map is read with `CLUSTER SHARDS` (Redis 7.0+), falling back to `CLUSTER SLOTS` when the
/// server does not know the subcommand. One read at a time; callers that arrive meanwhile wait
/// for it. Loop-confined.
public final class RedisClusterRouter: RedisConnectionDelegate {
    public typealias Completion = (Result<RedisEndpoint, RedisError>) -> Void

    public let loop: EventLoop
    public let seeds: RedisClusterSeeds
    private var logger: Logger
    public private(set) var map: RedisClusterMap?
    /// True when the map must be read again before it is trusted.
    private var stale = true
    private var waiting: [(slot: Int, completion: Completion)] = []
    private var refreshing: RedisConnection?
    private var refreshTimer: EventLoop.TimerID?
    private var candidates: [RedisEndpoint] = []
    private var lastError: RedisError?
    /// Whether the server answered CLUSTER SHARDS with an unknown-subcommand error (Redis < 7).
    private var useSlotsCommand = false
    /// Maps read so far (a test and a metric can tell a refresh happened).
    public private(set) var refreshes = 0
    /// How long one node may take to answer the map request.
    public var requestTimeoutMilliseconds: Int64 = 2_000

    public init(loop: EventLoop, seeds: RedisClusterSeeds, logger: Logger) {
        self.loop = loop
        self.seeds = seeds
        self.logger = logger
    }

    /// The endpoint of the master serving `slot`, reading the map first when needed. Fails when
    /// no node answered, or no master serves the slot (the cluster is failing over): the caller
    /// backs off and asks again.
    public func endpoint(forSlot slot: Int, _ completion: @escaping Completion) {
        if !stale, let node = map?.owner(ofSlot: slot) {
            completion(.success(seeds.endpoint(for: node)))
            return
        }
        waiting.append((slot, completion))
        refresh()
    }

    /// A `MOVED` answer: the slot is served by `node` from now on; the rest of the map is read
    /// again in the background.
    public func moved(slot: Int, to node: RedisClusterMap.Node) {
        if map == nil { map = RedisClusterMap() }
        map?.assign(slot...slot, to: node)
        refreshInBackground()
    }

    /// The map may be wrong (a node went away, said CLUSTERDOWN or is now a replica): read it
    /// again before the next answer.
    public func invalidate() {
        stale = true
    }

    /// Reads the map again without making anyone wait for it.
    public func refreshInBackground() {
        // Callers keep using the current map meanwhile (unless it was already stale).
        refresh()
    }

    private func refresh() {
        guard refreshing == nil else { return }
        // Known masters first (the map is usually only partly wrong), then the seeds.
        var seen = Set<RedisClusterMap.Node>()
        candidates = []
        for node in (map?.nodes ?? []) + seeds.endpoints.map({ RedisClusterMap.Node(host: $0.host, port: $0.port) })
        where seen.insert(node).inserted {
            candidates.append(seeds.endpoint(for: node))
        }
        // Start with a different node each time, so one that hangs is not always asked first.
        if candidates.count > 1 {
            let shift = refreshes % candidates.count
            candidates = Array(candidates[shift...] + candidates[..<shift])
        }
        lastError = nil
        askNext()
    }

    private func askNext() {
        guard !candidates.isEmpty else {
            finish(.failure(lastError ?? .connectFailed("no Redis Cluster node answered")))
            return
        }
        let endpoint = candidates.removeFirst()
        let connection = RedisConnection(loop: loop, endpoint: endpoint)
        connection.connectTimeoutMilliseconds = requestTimeoutMilliseconds
        connection.delegate = self
        refreshing = connection
        let command = useSlotsCommand ? ["CLUSTER", "SLOTS"] : ["CLUSTER", "SHARDS"]
        connection.send(command) { [weak self, weak connection] result in
            guard let self, let connection, connection === self.refreshing else { return }
            self.answered(result, from: connection)
        }
        refreshTimer = loop.schedule(afterMilliseconds: requestTimeoutMilliseconds * 2) { [weak self, weak connection] in
            guard let self, let connection, connection === self.refreshing else { return }
            self.lastError = .connectionLost("\(endpoint): no answer to CLUSTER \(self.useSlotsCommand ? "SLOTS" : "SHARDS") within \(self.requestTimeoutMilliseconds * 2) ms")
            self.dropRefreshConnection()
            self.askNext()
        }
        connection.connect()
    }

    private func answered(_ result: Result<RedisReply, RedisError>, from connection: RedisConnection) {
        let endpoint = connection.endpoint
        dropRefreshConnection()
        switch result {
        case .failure(let error):
            lastError = error
            askNext()
        case .success(.error(let message)):
            if !useSlotsCommand && (message.contains("unknown subcommand") || message.contains("Unknown subcommand")) {
                // Redis before 7.0: ask the same node the older way.
                useSlotsCommand = true
                candidates.insert(endpoint, at: 0)
            } else if message.hasPrefix("ERR This instance has cluster support disabled") {
                lastError = .server("\(endpoint) is not a cluster node (cluster support disabled): use a plain redis:// URL without --redis-cluster")
            } else {
                lastError = .server("\(endpoint) answered the slot map request with: \(message)")
            }
            askNext()
        case .success(let reply):
            do throws(RedisError) {
                let read = useSlotsCommand
                    ? try RedisClusterMap.fromSlots(reply, askedHost: endpoint.host)
                    : try RedisClusterMap.fromShards(reply, askedHost: endpoint.host)
                if read.nodes.isEmpty {
                    lastError = .server("\(endpoint) knows no master serving any slot (cluster not created yet?)")
                    askNext()
                    return
                }
                if map != read {
                    logger.info("Redis Cluster slot map read", metadata: [
                        "node": "\(endpoint.host):\(endpoint.port)", "masters": "\(read.nodes.map(\.description).joined(separator: ","))",
                        "uncovered_slots": "\(read.uncoveredSlots)",
                    ])
                }
                map = read
                refreshes += 1
                finish(.success(()))
            } catch {
                lastError = error
                askNext()
            }
        }
    }

    private func dropRefreshConnection() {
        if let refreshTimer { loop.cancel(refreshTimer) }
        refreshTimer = nil
        // Forgotten before closing: the close fails the pending request, whose completion must
        // not take it for the current one.
        let connection = refreshing
        refreshing = nil
        connection?.delegate = nil
        connection?.close()
    }

    private func finish(_ result: Result<Void, RedisError>) {
        if case .success = result { stale = false }
        let answering = waiting
        waiting.removeAll()
        for (slot, completion) in answering {
            switch result {
            case .failure(let error):
                completion(.failure(error))
            case .success:
                if let node = map?.owner(ofSlot: slot) {
                    completion(.success(seeds.endpoint(for: node)))
                } else {
                    // A master failed and no replica has taken its slots over yet.
                    stale = true
                    completion(.failure(.connectFailed("no Redis Cluster master serves slot \(slot) yet (failover in progress?)")))
                }
            }
        }
    }

    public func redisConnectionIsReady(_ connection: RedisConnection) {}

    public func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        guard connection === refreshing else { return }
        lastError = error
        dropRefreshConnection()
        askNext()
    }
}
