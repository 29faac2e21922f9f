import Foundation
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// The worker removes finished entries by trimming its jobs stream (`StreamTrim`) instead of
    /// deleting each: what every consumer finished goes, what a consumer still holds (alive or
    /// crashed) and what no consumer was given yet never does, and `herald stats` stays right.
    @Suite(.serialized)
    struct StreamTrimTests {
        /// The ids left in `stream`, in order.
        static func ids(_ bed: WorkerBed, _ stream: String) async throws -> [String] {
            try await bed.client.entries(stream).map(\.id)
        }

        @Test
        func theTrimScriptRemovesOnlyWhatEveryGroupFinished() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let trim = StreamTrim.command(stream: keys.jobs)
                // No stream, then a stream without a group: nothing to do, no error.
                #expect(try await bed.client.send(trim) == .integer(0))
                let ids = try await bed.enqueue(20)
                #expect(try await bed.client.send(trim) == .integer(0), "no group: nothing was delivered")

                // Group A: consumer a1 takes 0–4 and finishes 0, 1, 3; a2 takes 5–9 and finishes them all.
                _ = try await bed.client.send(["XGROUP", "CREATE", keys.jobs, "A", "0"])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", "A", "a1", "COUNT", "5", "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", "A", "a2", "COUNT", "5", "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["XACK", keys.jobs, "A", ids[0], ids[1], ids[3]] + Array(ids[5..<10]))
                #expect(try await bed.client.send(trim) == .integer(2), "0 and 1 are finished; 2 is pending")
                #expect(try await Self.ids(bed, keys.jobs) == Array(ids[2...]))

                _ = try await bed.client.send(["XACK", keys.jobs, "A", ids[2], ids[4]])
                #expect(try await bed.client.send(trim) == .integer(8), "2 to 9 are finished; 10 was never delivered")
                #expect(try await Self.ids(bed, keys.jobs) == Array(ids[10...]))

                // Group B starts at entry 12 and holds 13: A's progress alone must not trim past it.
                _ = try await bed.client.send(["XGROUP", "CREATE", keys.jobs, "B", ids[12]])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", "B", "b1", "COUNT", "1", "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", "A", "a1", "COUNT", "10", "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["XACK", keys.jobs, "A"] + Array(ids[10..<20]))
                #expect(try await bed.client.send(trim) == .integer(3), "A finished everything; B holds 13")
                #expect(try await Self.ids(bed, keys.jobs) == Array(ids[13...]))
                _ = try await bed.client.send(["XACK", keys.jobs, "B", ids[13]])
                #expect(try await bed.client.send(trim) == .integer(1), "B has not been given 14 to 19")
                #expect(try await Self.ids(bed, keys.jobs) == Array(ids[14...]))

                // The lag of a group given every entry stays exact after trims: Redis 7 counts it;
                // on 6.2, which reports none, herald stats finds nothing after its last-delivered id.
                let stats = try QueueInspector(redis: try BlockingRedisClient(endpoint: bed.redis.endpoint))
                    .stats(keys: QueueKeys(queue: keys.queue, group: "A"))
                #expect(stats.depth == 6 && stats.group?.lag == 0 && stats.group?.lagIsExact == true && stats.group?.pending == 0,
                        "\(String(describing: stats.group))")
            }
        }

        @Test
        func workersTrimWhatTheyFinishedButNeverEntriesACrashedConsumerHolds() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let count = 400
                let ids = try await bed.enqueue(count)
                // A consumer that finished 0–4 by itself and then crashed holding 5–9.
                _ = try await bed.client.send(["XGROUP", "CREATE", keys.jobs, keys.group, "0"])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, "crashed-0", "COUNT", "10", "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["XACK", keys.jobs, keys.group] + Array(ids[0..<5]))

                // Two workers; the crashed consumer's entries are taken over only after 6 s.
                for _ in 0..<2 {
                    try await bed.startWorker(connections: 2, maxStreams: 50) { $0.claimIdleMilliseconds = 6_000 }
                }
                try await waitFor("the workers deliver everything not held", timeout: .seconds(60)) {
                    try await bed.emulator.statistics().acceptedUnique == count - 10
                }
                // Trimmed up to the oldest entry the crashed consumer holds, and not beyond it.
                try await waitFor("the finished head of the stream is trimmed", timeout: .seconds(30)) {
                    try await Self.ids(bed, keys.jobs).first == ids[5]
                }
                #expect(try await bed.emulator.statistics().acceptedUnique == count - 10, "not yet claimed")
                let held = try await Self.ids(bed, keys.jobs)
                #expect(held.count == count - 5 && Array(held.prefix(5)) == Array(ids[5..<10]), "\(held.prefix(6))")
                let stats = try QueueInspector(redis: try BlockingRedisClient(endpoint: bed.redis.endpoint)).stats(keys: keys)
                // (Exact on 6.2 too: the group was given every entry, see `QueueLag`.)
                #expect(stats.group?.pending == 5 && stats.group?.lag == 0 && stats.group?.lagIsExact == true,
                        "pending and lag stay right while finished entries wait behind a held one: \(String(describing: stats.group))")

                // Claimed and delivered: then everything is finished and the stream is empty.
                let ledger = try await bed.waitUntilSettled(enqueued: count - 5)
                #expect(ledger.settled && ledger.acceptedUnique == count - 5 && ledger.duplicates == 0,
                        "all but the 5 the crashed consumer finished itself: \(ledger)")
                #expect(try await bed.client.integer("XLEN", keys.jobs) == 0)
            }
        }

        @Test
        func aDrainedWorkerLeavesNoFinishedEntryBehind() async throws {
            try await withWorkerBed { bed in
                let count = 50
                try await bed.enqueue(count)
                let worker = try await bed.startWorker()
                try await waitFor("every job is accepted", timeout: .seconds(30)) {
                    try await bed.emulator.statistics().acceptedUnique == count
                }
                try await worker.drain()
                // Drained means stopped: its last trim was answered before it stopped.
                #expect(try await bed.client.integer("XLEN", bed.keys.jobs) == 0)
                #expect(try await bed.client.pendingCount(bed.keys.jobs, group: bed.keys.group) == 0)
            }
        }
    }
}
