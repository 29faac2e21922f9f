import Glibc
import Testing

@testable import Transport

/// Connecting to a Redis that cannot be reached fails the attempt cleanly: the delegate hears
/// it on a later loop turn (never inside `connect()`), with a clear error, and the connection is
/// never ready. The worker reconnects with backoff from there.
@Suite struct RedisConnectFailureTests {
    final class Events: RedisConnectionDelegate {
        var ready = 0
        var closed: [RedisError] = []
        var insideConnect = false
        var closedInsideConnect = false
        /// What the worker does: on one failure, close the other connection of the pair.
        var partner: RedisConnection?

        func redisConnectionIsReady(_ connection: RedisConnection) { ready += 1 }
        func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
            if insideConnect { closedInsideConnect = true }
            closed.append(error)
            partner?.delegate = nil
            partner?.close()
        }
    }

    static func run(_ loop: EventLoop, until condition: () -> Bool) {
        for _ in 0..<2_000 where !condition() {
            loop.schedule(afterMilliseconds: 1) { loop.stop() }
            loop.run()
        }
    }

    @Test func anUnresolvableHostFailsCleanlyAndThePairCanBeDropped() throws {
        let loop = try EventLoop()
        let endpoint = RedisEndpoint(host: "no-such-host.invalid", port: 6379)
        let reader = RedisConnection(loop: loop, endpoint: endpoint)
        let writer = RedisConnection(loop: loop, endpoint: endpoint)
        let events = Events()
        events.partner = writer
        reader.delegate = events
        writer.delegate = events
        var lost: RedisError? = nil
        reader.send(["PING"]) { result in if case .failure(let error) = result { lost = error } }
        events.insideConnect = true
        // The worker's order: both connect, and a failure of the first closes the second.
        reader.connect()
        writer.connect()
        events.insideConnect = false
        RedisConnectFailureTests.run(loop) { !events.closed.isEmpty && lost != nil }
        #expect(!events.closedInsideConnect)
        #expect(events.ready == 0)
        #expect(!reader.isReady && !writer.isReady)
        let first = try #require(events.closed.first)
        guard case .connectFailed(let message) = first else {
            Issue.record("expected connectFailed, got \(first)")
            return
        }
        #expect(message.contains("no-such-host.invalid"))
        #expect(lost != nil, "a command sent meanwhile is answered with the failure")
        // Connecting again (a closed or failed connection) does nothing, never traps.
        reader.connect()
        writer.connect()
    }

    @Test func outOfRangePortsAndEmptyHostsFailCleanly() throws {
        let loop = try EventLoop()
        for endpoint in [RedisEndpoint(host: "127.0.0.1", port: 0), RedisEndpoint(host: "127.0.0.1", port: 70_000),
                         RedisEndpoint(host: "", port: 6379), RedisEndpoint(host: "bad\u{0}host", port: 6379)] {
            let connection = RedisConnection(loop: loop, endpoint: endpoint)
            let events = Events()
            connection.delegate = events
            connection.connect()
            RedisConnectFailureTests.run(loop) { !events.closed.isEmpty }
            #expect(events.ready == 0)
            guard let error = events.closed.first, case .invalidURL = error else {
                Issue.record("expected invalidURL for \(endpoint), got \(events.closed)")
                continue
            }
        }
    }
}
