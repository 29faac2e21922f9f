import NIOPosix
import Queue
import Synchronization
import Transport

/// The API's way to Redis: a few `BlockingRedisClient`s, each owned by a thread of its own, so
/// the queue tools (`QueueInspector`, `DeadLetterTools`, `FeedbackReader`, `BatchEnqueue`) run
/// unchanged and Hummingbird's event loops never block on Redis.
///
/// A request takes the lane with the fewest requests queued and runs its whole Redis work there
/// (one pipeline for an enqueue batch). A client whose connection dropped or timed out
/// reconnects on its next use (asking the sentinels again, with Sentinel), so a Redis restart or
/// failover costs the requests in flight, not the process.
public final class RedisLanes: Sendable {
    private final class Lane: @unchecked Sendable {
        let pool: NIOThreadPool
        /// Touched only on `pool`'s single thread.
        var client: BlockingRedisClient?
        let queued = Atomic<Int>(0)

        init() {
            pool = NIOThreadPool(numberOfThreads: 1)
            pool.start()
        }
    }

    public let endpoint: RedisEndpoint
    public let sentinel: SentinelConfiguration?
    private let lanes: [Lane]

    public init(endpoint: RedisEndpoint, sentinel: SentinelConfiguration? = nil, connections: Int) {
        self.endpoint = endpoint
        self.sentinel = sentinel
        lanes = (0..<max(1, connections)).map { _ in Lane() }
    }

    /// Runs `body` with a client on the least busy lane's thread.
    public func run<T: Sendable>(_ body: @escaping @Sendable (any RedisCommandExecutor) throws -> T) async throws -> T {
        var lane = lanes[0]
        var fewest = Int.max
        for candidate in lanes {
            let queued = candidate.queued.load(ordering: .relaxed)
            if queued < fewest {
                fewest = queued
                lane = candidate
            }
        }
        let chosen = lane
        chosen.queued.add(1, ordering: .relaxed)
        defer { chosen.queued.subtract(1, ordering: .relaxed) }
        let endpoint = self.endpoint
        let sentinel = self.sentinel
        return try await chosen.pool.runIfActive {
            let lane = chosen
            let client: BlockingRedisClient
            if let existing = lane.client {
                if existing.isClosed { existing.reconnect() }
                client = existing
            } else {
                client = try BlockingRedisClient(endpoint: endpoint, sentinel: sentinel)
                lane.client = client
            }
            return try body(client)
        }
    }

    /// Stops the lanes' threads once their queued work is done.
    public func shutdown() async {
        for lane in lanes { try? await lane.pool.shutdownGracefully() }
    }
}
