import Foundation
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// What operators see of a queue over time: consumers that left are removed once idle and
    /// owning nothing (never one that owns pending entries, never the worker itself), and the
    /// worker's lag gauge estimates the lag when Redis reports it as null.
    @Suite(.serialized)
    struct RedisOperationsTests {
        /// One consumer of the group per name, with its pending count.
        static func consumers(_ bed: WorkerBed) async throws -> [String: Int] {
            guard case .array(let rows) = try await bed.client.send(["XINFO", "CONSUMERS", bed.keys.jobs, bed.keys.group]) else { return [:] }
            var result: [String: Int] = [:]
            for row in rows.map(RedisReplyReader.map) {
                if let name = row["name"]?.string { result[name] = Int(row["pending"]?.integer ?? -1) }
            }
            return result
        }

        @Test
        func idleConsumersThatOwnNothingAreRemovedButNeverOneWithPendingEntries() async throws {
            try await withWorkerBed { bed in
                let count = 200
                try await bed.enqueue(count)
                let keys = bed.keys
                // Two workers that went away: one left nothing behind, one still owns an entry.
                _ = try await bed.client.send(["XGROUP", "CREATE", keys.jobs, keys.group, "0"])
                _ = try await bed.client.send(["XGROUP", "CREATECONSUMER", keys.jobs, keys.group, "scaled-down-0"])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, "crashed-0", "COUNT", "1", "STREAMS", keys.jobs, ">"])
                #expect(try await Self.consumers(bed) == ["scaled-down-0": 0, "crashed-0": 1])

                // Removal after 1 s of idleness; the crashed one's entry is taken over only after 4 s.
                let worker = try await bed.startWorker { configuration in
                    configuration.idleConsumerTimeoutMilliseconds = 1_000
                    configuration.claimIdleMilliseconds = 4_000
                }
                let own = worker.configuration.consumer
                var atRemoval: [String: Int] = [:]
                try await waitFor("the idle consumer without entries is removed", timeout: .seconds(30)) {
                    atRemoval = try await Self.consumers(bed)
                    return atRemoval["scaled-down-0"] == nil
                }
                #expect(atRemoval["crashed-0"] == 1, "a consumer that owns a pending entry must stay: \(atRemoval)")
                #expect(atRemoval[own] != nil, "\(atRemoval)")

                // Every job is delivered, the crashed worker's entry after it was claimed; then
                // that consumer owns nothing and goes too, and the worker's own stays.
                let ledger = try await bed.waitUntilSettled(enqueued: count)
                #expect(ledger.settled && ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                var last: [String: Int] = [:]
                try await waitFor("the crashed worker's consumer is removed once it owns nothing", timeout: .seconds(30)) {
                    last = try await Self.consumers(bed)
                    return last["crashed-0"] == nil
                }
                #expect(last.keys.sorted() == [own], "only the running worker's consumer is left: \(last)")
                #expect(try await worker.consumersRemoved() == 2)
            }
        }

        @Test
        func theLagGaugeEstimatesTheLagWhenRedisReportsNull() async throws {
            // Slow answers keep most of the queue undelivered while the test looks.
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 1_500 }) { bed in
                let count = 600
                let ids = try await bed.enqueue(count)
                let worker = try await bed.startWorker(connections: 1, maxStreams: 100)
                try await waitFor("the worker holds entries", timeout: .seconds(30)) {
                    try await worker.inFlight() > 0
                }
                // An undelivered entry deleted out of order: Redis can no longer count the lag.
                let deleted = try await bed.client.integer("XDEL", bed.keys.jobs, ids[count - 1])
                #expect(deleted == 1)
                guard case .array(let groups) = try await bed.client.send(["XINFO", "GROUPS", bed.keys.jobs]),
                      let info = groups.map(RedisReplyReader.map).first else {
                    Issue.record("no group")
                    return
                }
                // Redis 7 reports the lag as null now; 6.2 never reports it. Entries lie after the
                // group's last-delivered id, so the worker estimates.
                #expect(info["lag"] == (RedisServer.isRedis7 ? .null : nil), "Redis should report no lag now: \(info)")
                let sample = try #require(try await worker.sample())
                #expect(sample.lag > 0, "\(sample)")
                #expect(sample.lag == sample.depth - sample.pending, "the estimate is depth - pending: \(sample)")

                let ledger = try await bed.waitUntilSettled(enqueued: count - 1, timeout: .seconds(120))
                #expect(ledger.settled && ledger.acceptedUnique == count - 1 && ledger.duplicates == 0, "\(ledger)")
            }
        }
    }
}
