import Foundation
import Queue
import Testing
import Transport
@testable import Worker

extension IntegrationTests {
    /// Leases (`StreamLease`): a worker records each read as one hash field instead of an entry
    /// per job in the pending list. The scripts against a real redis-server, then workers that
    /// find leases a stopped worker (or an earlier process of their own consumer name) left, and
    /// leases an operator mangled.
    @Suite(.serialized)
    struct StreamLeaseTests {
        /// One leased read by hand, as the worker sends it: the EXEC reply's parts.
        static func leasedRead(_ bed: WorkerBed, field: String, count: Int, consumer: String) async throws -> (RedisReply, RedisReply) {
            let keys = bed.keys
            _ = try await bed.client.send(["MULTI"])
            _ = try await bed.client.send(["EVAL", QueueScripts.leaseRead, "2", keys.jobs, keys.leases, keys.group, field, String(count),
                                           consumer])
            _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, consumer, "COUNT", String(count), "NOACK",
                                           "STREAMS", keys.jobs, ">"])
            let reply = try await bed.client.send(["EXEC"])
            guard case .array(let parts) = reply, parts.count == 2 else {
                throw WaitTimeout(description: "EXEC answered \(reply)")
            }
            return (parts[0], parts[1])
        }

        /// `count` jobs and the worker's group, before any worker starts.
        @discardableResult
        static func enqueueWithGroup(_ bed: WorkerBed, _ count: Int) async throws -> [String] {
            let ids = try await bed.enqueue(count)
            _ = try await bed.client.send(["XGROUP", "CREATE", bed.keys.jobs, bed.keys.group, "0"])
            return ids
        }

        /// A worker (2 connections × 50 streams, `--claim-idle` `claimIdle` ms: a claim tick every
        /// quarter of it, at least 500 ms) that delivered `count` jobs enqueued before it started.
        static func settledWorker(_ bed: WorkerBed, jobs count: Int, claimIdle: Int64) async throws -> InProcessWorker {
            try await enqueueWithGroup(bed, count)
            let worker = try await bed.startWorker(connections: 2, maxStreams: 50) { $0.claimIdleMilliseconds = claimIdle }
            _ = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(30))
            return worker
        }

        /// Ids of one millisecond a minute ahead of Redis's clock, so that they are known before the
        /// entries exist: `ids(range)` names sequences `range` of it.
        static func futureIDs(_ bed: WorkerBed) async throws -> (Range<Int>) -> [StreamEntryID] {
            let base = UInt64(try await redisMilliseconds(bed) + 60_000)
            return { range in range.map { StreamEntryID(milliseconds: base, sequence: UInt64($0)) } }
        }

        /// Redis's clock (`TIME`), ms.
        static func redisMilliseconds(_ bed: WorkerBed) async throws -> Int64 {
            guard case .array(let parts) = try await bed.client.send(["TIME"]), parts.count == 2,
                  let seconds = parts[0].string.flatMap({ Int64($0) }), let micros = parts[1].string.flatMap({ Int64($0) }) else {
                throw WaitTimeout(description: "TIME answered something else")
            }
            return seconds * 1000 + micros / 1000
        }

        static func lease(_ bed: WorkerBed, _ field: String) async throws -> StreamLease.Value? {
            try await bed.client.send(["HGET", bed.keys.leases, field]).string.flatMap(StreamLease.Value.init)
        }

        /// The ids a read reply (`[[stream, [[id, fields], …]]]`) holds.
        static func ids(_ reply: RedisReply) -> [String] {
            RedisReplyReader.readEntries(reply).map(\.id.description)
        }

        @Test
        func aLeaseNamesExactlyTheEntriesReadAndFinishesWithThem() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let ids = try await bed.enqueue(10)
                _ = try await bed.client.send(["XGROUP", "CREATE", keys.jobs, keys.group, "0"])

                // 4 of 10, then the 6 left (asked for 100), then nothing: no lease for an empty read.
                let (first, firstRead) = try await Self.leasedRead(bed, field: "a-1", count: 4, consumer: "c")
                #expect(Self.ids(firstRead) == Array(ids[0..<4]))
                #expect(first == .array([.bulk(Array("0-0".utf8)), .integer(4)]))
                let lease = try #require(try await Self.lease(bed, "a-1"))
                let redisNow = try await Self.redisMilliseconds(bed)
                #expect(lease.after == "0-0" && lease.count == 4 && lease.deliveries == 1 && abs(lease.leasedAt - redisNow) < 5_000
                        && lease.mask == "-" && lease.consumer == "c" && lease.unfinished == 4, "\(lease)")
                let (_, secondRead) = try await Self.leasedRead(bed, field: "a-2", count: 100, consumer: "c")
                #expect(Self.ids(secondRead) == Array(ids[4...]))
                if RedisServer.isRedis7 {
                    #expect(try await Self.lease(bed, "a-2")?.count == 6, "the lease counts what the read returns (the group's lag)")
                } else {
                    // Redis 6.2 reports no lag: the lease counts what was asked, bounded by the
                    // stream's last id, until its first finish makes it exact (below).
                    let bounded = try #require(try await Self.lease(bed, "a-2"))
                    #expect(bounded.count == 100 && bounded.top == ids[9], "\(bounded)")
                }
                let (empty, emptyRead) = try await Self.leasedRead(bed, field: "a-3", count: 100, consumer: "c")
                #expect(empty == .array([.bulk(Array(ids[9].utf8)), .integer(0)]) && emptyRead == .null)
                #expect(try await bed.client.send(["HEXISTS", keys.leases, "a-3"]) == .integer(0))
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 0, "NOACK: nothing in the pending list")
                #expect(try await bed.client.leasedCount(keys.jobs) == (RedisServer.isRedis7 ? 10 : 104))

                // Finishing positions 0 and 2 of a-1 (mask 5), then 1 and 3 (a).
                let finish = ["EVAL", QueueScripts.leaseFinish, "1", keys.leases]
                #expect(try await bed.client.send(finish + ["a-1", "4", ids[3], "5"]) == .array([.integer(0)]))
                #expect(try await Self.lease(bed, "a-1")?.unfinished == 2)
                #expect(try await bed.client.send(finish + ["a-1", "4", ids[3], "5"]) == .array([.integer(0)]), "setting a bit twice changes nothing")
                #expect(try await Self.lease(bed, "a-1")?.unfinished == 2)

                // Which entries are finished (after a lost answer): by the bits of a lease that stands.
                let finished = try await bed.client.send(["EVAL", QueueScripts.leaseFinished, "2", keys.jobs, keys.leases, keys.group,
                                                          "a-1", "0", ids[0], "a-1", "1", ids[1], "a-2", "0", ids[4]])
                #expect(finished == .array([.integer(1), .integer(0), .integer(0)]))
                let delete = ["EVAL", QueueScripts.leaseDelete, "1", keys.leases]
                #expect(try await bed.client.send(delete + ["a-1"]) == .integer(0), "positions 1 and 3 are not set: it stays")
                #expect(try await bed.client.send(finish + ["a-1", "4", ids[3], "a"]) == .array([.integer(0)]))
                #expect(try await Self.lease(bed, "a-1")?.unfinished == 0, "every position set")
                #expect(try await bed.client.send(delete + ["a-1"]) == .integer(1), "every position set: the worker deletes it")
                // … and by the pending list once the lease is gone (finished: not pending).
                let gone = try await bed.client.send(["EVAL", QueueScripts.leaseFinished, "2", keys.jobs, keys.leases, keys.group,
                                                      "a-1", "1", ids[1]])
                #expect(gone == .array([.integer(1)]))

                // The trim stops below the oldest lease: a-2 holds 4–9.
                #expect(try await bed.client.send(StreamTrim.command(stream: keys.jobs)) == .integer(3))
                #expect(try await bed.client.entries(keys.jobs).map(\.id) == Array(ids[3...]), "entry 3 (a-2's after) stays until a-2 ends")

                // Released by another instance once idle (ages by Redis's clock): positions 0 and 5 of
                // a-2 were finished (mask "12": digit 1 holds positions 0–3, bit 1 is position 0;
                // digit 2, positions 4–7).
                #expect(try await bed.client.send(finish + ["a-2", "6", ids[9], "12"]) == .array([.integer(0)]))
                let release = ["EVAL", QueueScripts.leaseRelease, "2", keys.jobs, keys.leases, keys.group]
                let notYet = try await bed.client.send(release + ["60000", "b", "other", "64"])
                #expect(notYet == .array([.integer(0), .integer(0), .integer(0)]), "leased just now: not idle for a minute")
                try await Task.sleep(for: .milliseconds(300))
                let ownInstance = try await bed.client.send(release + ["200", "a", "c", "64"])
                #expect(ownInstance == .array([.integer(0), .integer(0), .integer(0)]), "a worker never releases its live leases")
                let held = try await bed.client.send(release + ["60000", "a", "c", "64", "3", "2"])
                #expect(held == .array([.integer(0), .integer(0), .integer(0)]), "a-2 is among the worker's leases")
                let inFlight = try await bed.client.send(release + ["60000", "a", "c", "64", "2"])
                #expect(inFlight == .array([.integer(0), .integer(0), .integer(0)]), "a-2 is the worker's read in flight")
                let released = try await bed.client.send(release + ["200", "b", "other", "64"])
                #expect(released == .array([.integer(1), .integer(4), .integer(0)]))
                #expect(try await bed.client.send(["HLEN", keys.leases]) == .integer(0))
                // The 4 unfinished entries are pending for the lease's consumer, idle since the lease, delivered once.
                guard case .array(let rows) = try await bed.client.send(["XPENDING", keys.jobs, keys.group, "-", "+", "10"]) else {
                    Issue.record("XPENDING failed"); return
                }
                let pending = rows.compactMap { row -> (String, String, Int64, Int64)? in
                    guard case .array(let c) = row, c.count == 4, let id = c[0].string, let owner = c[1].string,
                          let idle = c[2].integer, let count = c[3].integer else { return nil }
                    return (id, owner, idle, count)
                }
                #expect(pending.map(\.0) == Array(ids[5...8]))
                #expect(pending.allSatisfy { $0.1 == "c" && $0.2 >= 200 && $0.3 == 1 }, "idle since the lease: \(pending)")
                // The lease is gone: a late outcome of its worker is told so (-1) and never recreates it.
                #expect(try await bed.client.send(finish + ["a-2", "6", ids[9], "1"]) == .array([.integer(-1)]))
                #expect(try await bed.client.send(["HLEN", keys.leases]) == .integer(0))
            }
        }

        /// An entry deleted inside a stopped worker's lease (a producer's own `XDEL`): bits and
        /// entries no longer pair up, so every entry left in the range is released, finished or
        /// not: sent twice rather than lost.
        @Test
        func anEntryDeletedInsideALeaseReleasesTheWholeRange() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let ids = try await Self.enqueueWithGroup(bed, 8)
                _ = try await Self.leasedRead(bed, field: "x-1", count: 8, consumer: "stopped-1")
                let finish = ["EVAL", QueueScripts.leaseFinish, "1", keys.leases]
                #expect(try await bed.client.send(finish + ["x-1", "8", ids[7], "f"]) == .array([.integer(0)]), "0 to 3 finished")
                #expect(try await bed.client.integer("XDEL", keys.jobs, ids[5]) == 1)
                let released = try await bed.client.send(["EVAL", QueueScripts.leaseRelease, "2", keys.jobs, keys.leases, keys.group,
                                                          "0", "other", "other-consumer", "64"])
                #expect(released == .array([.integer(1), .integer(7), .integer(0)]), "all 7 entries left, the finished ones too")
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 7)
            }
        }

        @Test
        func aStoppedWorkersLeasesAreTakenOverAndNothingIsLostOrSentTwice() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let count = 600
                let ids = try await Self.enqueueWithGroup(bed, count)
                // A worker that read 250 under two leases, finished 20 of the first, then stopped.
                _ = try await Self.leasedRead(bed, field: "dead-1", count: 100, consumer: "stopped-0")
                _ = try await Self.leasedRead(bed, field: "dead-2", count: 150, consumer: "stopped-0")
                _ = try await bed.client.send(["EVAL", QueueScripts.leaseFinish, "1", keys.leases, "dead-1", "100", ids[99], "fffff"])
                #expect(try await bed.client.leasedCount(keys.jobs) == 230)

                let worker = try await bed.startWorker(connections: 2, maxStreams: 50) { $0.claimIdleMilliseconds = 2_000 }
                let ledger = try await bed.waitUntilSettled(enqueued: count - 20, timeout: .seconds(60))
                let counters = try await worker.counters()
                #expect(ledger.acceptedUnique == count - 20 && ledger.duplicates == 0, "the 20 finished are not sent: \(ledger)")
                #expect(counters.jobsReclaimed == 230, "\(counters)")
                #expect(try await bed.client.send(["HLEN", keys.leases]) == .integer(0))
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 0)
            }
        }

        @Test
        func aRestartedConsumerTakesItsEarlierLeasesAtOnce() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let count = 300
                try await Self.enqueueWithGroup(bed, count)
                let consumer = WorkerHarness.uniqueConsumer("restarted")
                _ = try await Self.leasedRead(bed, field: "earlier-1", count: 120, consumer: consumer)
                // The default --claim-idle (60 s) is far beyond the wait: only the restart rule applies.
                try await bed.startWorker(connections: 2, maxStreams: 50) { $0.consumer = consumer }
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(30))
                #expect(ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                #expect(try await bed.client.send(["HLEN", keys.leases]) == .integer(0))
            }
        }

        /// A leased read Redis ran whose answer the worker never got (the connection went first):
        /// the lease is in Redis and the group has moved past its entries, but the worker knows
        /// nothing of them. It releases such a lease of its own to its pending list as soon as it
        /// is back, and reads them from there, rather than after `--claim-idle`.
        @Test
        func aReadWhoseAnswerWasLostIsReleasedAtOnce() async throws {
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 200 }) { bed in
                let keys = bed.keys
                try await Self.enqueueWithGroup(bed, 100)
                // The default --claim-idle (60 s) is far beyond the waits below.
                let worker = try bed.startProcess(["--consumer", "lost-answer", "--connections", "1", "--max-streams", "40"])
                // The worker's instance: the prefix of its lease fields (`<instance>-<number>`).
                var instance = ""
                try await waitFor("the worker holds a lease", timeout: .seconds(30)) {
                    guard case .array(let fields) = try await bed.client.send(["HKEYS", keys.leases]),
                          let field = fields.first?.string, let dash = field.lastIndex(of: "-") else { return false }
                    instance = String(field[..<dash])
                    return true
                }
                _ = try await bed.waitUntilSettled(enqueued: 100, timeout: .seconds(60))
                try await waitFor("its leases are gone", timeout: .seconds(10)) {
                    try await bed.client.send(["HLEN", keys.leases]) == .integer(0)
                }

                // Its connections drop while it is stopped, and a read of its first lease number
                // runs in Redis with nobody to take the answer.
                worker.signal(SIGSTOP)
                _ = try await bed.client.send(["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
                try await bed.enqueue(40)
                let (_, lost) = try await Self.leasedRead(bed, field: "\(instance)-1", count: 25, consumer: "lost-answer-0")
                #expect(Self.ids(lost).count == 25)
                worker.signal(SIGCONT)

                let ledger = try await bed.waitUntilSettled(enqueued: 140, timeout: .seconds(20))
                #expect(ledger.acceptedUnique == 140 && ledger.duplicates == 0, "\(ledger)")
                #expect(try await bed.client.send(["HLEN", keys.leases]) == .integer(0))
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 0)
            }
        }

        /// A lease the worker still counts as live while it holds none of its entries, the state
        /// an outcome planned before a failover's re-read once left (see `QueueChannel.noteRead`):
        /// no outcome will ever settle it, and it would hold its entries and the stream's trim for
        /// good. Here it is set up directly: the worker notes a lease of its own numbering, and
        /// the read it names runs in Redis without reaching the worker. The claim ticks find it
        /// holding nothing and release it, and its entries are delivered from the pending list.
        @Test
        func aLeaseTheWorkerHoldsNothingOfIsReleasedAndItsEntriesDelivered() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                // A claim tick every 500 ms.
                let worker = try await Self.settledWorker(bed, jobs: 100, claimIdle: 1_000)
                let ids = try await Self.futureIDs(bed)(0..<40)
                let field = try await worker.onLoop { worker in
                    let (sequence, field) = worker.nextLease()
                    worker.channels[0].addLease(LocalLease(sequence: sequence, field: field, ids: ids))
                    return field
                }
                // The entries and the read of them in one transaction: the worker's blocking read
                // wakes after it, with nothing left to read.
                let consumer = worker.configuration.consumer
                _ = try await bed.client.send(["MULTI"])
                for (index, id) in ids.enumerated() {
                    _ = try await bed.client.send(["XADD", keys.jobs, id.description, "token", WorkerHarness.deviceToken(100 + index),
                                                   "payload", WorkerHarness.payload(100 + index)])
                }
                _ = try await bed.client.send(["EVAL", QueueScripts.leaseRead, "2", keys.jobs, keys.leases, keys.group, field, "40",
                                               consumer])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, consumer, "COUNT", "40", "NOACK",
                                               "STREAMS", keys.jobs, ">"])
                let reply = try await bed.client.send(["EXEC"])
                guard case .array(let parts) = reply, parts.count == 42 else { throw WaitTimeout(description: "EXEC answered \(reply)") }
                #expect(try await Self.lease(bed, field)?.count == 40, "the read is under the worker's lease")

                let ledger = try await bed.waitUntilSettled(enqueued: 140, timeout: .seconds(30))
                #expect(ledger.acceptedUnique == 140 && ledger.duplicates == 0, "\(ledger)")
                #expect(try await bed.client.send(["HLEN", keys.leases]) == .integer(0))
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 0)
                #expect(try await worker.onLoop { $0.channels[0].leases.isEmpty }, "the worker dropped the lease")
            }
        }

        /// The lease writes outside outcome batches (`QueueWorker.finishElsewhere`, a newer lease's
        /// `takeOver`) are kept until Redis confirms them: refused (here NOREPLICAS) they are sent
        /// again after the reconnect. Sent once, as they were, the entries they finish were sent
        /// twice: those acknowledged in the pending list when they were claimed after
        /// --claim-idle, those set in a lease when the safety net released it.
        @Test
        func aRefusedLeaseWriteIsSentAgainSoFinishedEntriesAreNotSentTwice() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                // Claim ticks every 7.5 s: the safety net would release an unsettled lease after
                // about 22 s, XAUTOCLAIM take an idle pending entry after 30 s.
                let worker = try await Self.settledWorker(bed, jobs: 50, claimIdle: 30_000)

                // 20 entries another worker released to the pending list (under its own name) and
                // 10 read under a lease of this worker that its rules do not hold: both as this
                // worker finds them after a failover, with their outcomes written already. Added
                // and read in one transaction: the worker's blocking read finds nothing.
                let ids = try await Self.futureIDs(bed)
                let released = ids(0..<20)
                let leased = ids(20..<30)
                // And 5 under an older lease of this worker that a newer one took over: every
                // position of it is set by the take-over's write. Unknown to the worker (it gave
                // the lease up), it is released at the reconnect, after that write.
                let older = ids(30..<35)
                // Known to the worker until the take-over (a claim tick would release it before).
                let (field, olderField) = try await worker.onLoop { worker in
                    let (sequence, field) = worker.nextLease()
                    worker.channels[0].addLease(LocalLease(sequence: sequence, field: field, ids: leased))
                    let (olderSequence, olderField) = worker.nextLease()
                    worker.channels[0].addLease(LocalLease(sequence: olderSequence, field: olderField, ids: older))
                    return (field, olderField)
                }
                _ = try await bed.client.send(["MULTI"])
                for (index, id) in (released + leased + older).enumerated() {
                    _ = try await bed.client.send(["XADD", keys.jobs, id.description, "token", WorkerHarness.deviceToken(100 + index),
                                                   "payload", WorkerHarness.payload(100 + index)])
                }
                _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, "released", "COUNT", "20", "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["EVAL", QueueScripts.leaseRead, "2", keys.jobs, keys.leases, keys.group, field, "10",
                                               worker.configuration.consumer])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, worker.configuration.consumer, "COUNT", "10", "NOACK",
                                               "STREAMS", keys.jobs, ">"])
                _ = try await bed.client.send(["EVAL", QueueScripts.leaseRead, "2", keys.jobs, keys.leases, keys.group, olderField, "5",
                                               worker.configuration.consumer])
                _ = try await bed.client.send(["XREADGROUP", "GROUP", keys.group, worker.configuration.consumer, "COUNT", "5", "NOACK",
                                               "STREAMS", keys.jobs, ">"])
                let reply = try await bed.client.send(["EXEC"])
                guard case .array(let parts) = reply, parts.count == 40 else { throw WaitTimeout(description: "EXEC answered \(reply)") }
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 20)
                #expect(try await Self.lease(bed, field)?.count == 10, "the read is under the worker's lease")

                // Redis refuses writes while the worker finishes the 30.
                #expect(try await bed.client.send(["CONFIG", "SET", "min-replicas-to-write", "1"]) == .status("OK"))
                var olderMask: [UInt8] = []
                for position in 0..<5 { StreamLease.set(position, in: &olderMask) }
                let olderPositions: OutcomeBatch.LeasePositions = (olderField, 5, older[4], olderMask)
                try await worker.onLoop { worker in
                    let channel = worker.channels[0]
                    if let lease = channel.leases.first(where: { $0.field == olderField }) { channel.removeLease(lease) }
                    worker.finishElsewhere(worker.channels[0], released + leased)
                    worker.leaseWrite(worker.channels[0], .takenOver([olderPositions]))
                }
                try await waitFor("Redis refused both writes, which are kept", timeout: .seconds(10)) {
                    try await worker.onLoop { worker in
                        let writes = worker.channels[0].pendingLeaseWrites
                        return writes.count == 2 && writes.allSatisfy { !$0.sending }
                    }
                }
                #expect(try await bed.client.pendingListCount(keys.jobs, group: keys.group) == 20, "the acknowledgement was refused")
                #expect(try await bed.client.send(["CONFIG", "SET", "min-replicas-to-write", "0"]) == .status("OK"))

                // Sent again after the reconnect, well before a claim tick could act on either set.
                try await waitFor("the refused lease write landed", timeout: .seconds(15)) {
                    let pending = try await bed.client.pendingListCount(keys.jobs, group: keys.group)
                    let leases = try await bed.client.send(["HLEN", keys.leases])
                    return pending == 0 && leases == .integer(0)
                }
                try await waitFor("the worker has the confirmations", timeout: .seconds(5)) {
                    try await worker.onLoop { $0.channels[0].pendingLeaseWrites.isEmpty && $0.channels[0].leases.isEmpty }
                }
                // Finished, so never sent: the 50 enqueued are all the emulator saw (the 35 added
                // by hand stand for entries whose outcomes were written before the failover).
                let stats = try await bed.emulator.statistics()
                #expect(stats.acceptedUnique == 50 && stats.duplicates == 0, "\(stats)")
            }
        }

        @Test
        func leasesAnOperatorMangledStopNothing() async throws {
            try await withWorkerBed { bed in
                let keys = bed.keys
                let count = 500
                try await Self.enqueueWithGroup(bed, count)
                // Values in no format Herald writes: binary, empty, huge, numbers out of range.
                let junk: [(String, [UInt8])] = [
                    ("x-1", [0, 255, 10, 13, 32]), ("x-2", []), ("x-3", Array(repeating: UInt8(ascii: "9"), count: 100_000)),
                    ("x-4", Array("99999999999999999999-1 + 99999999999999999999 1 1 - c".utf8)), ("x-5", Array("0-0 + -5 1 1 zz c".utf8)),
                ]
                for (field, value) in junk { _ = try await bed.client.send(arguments: [.text("HSET"), .text(keys.leases), .text(field), .bytes(value)]) }
                let worker = try await bed.startWorker(connections: 2, maxStreams: 50) { $0.claimIdleMilliseconds = 1_000 }
                let ledger = try await bed.waitUntilSettled(enqueued: count, timeout: .seconds(60))
                #expect(ledger.acceptedUnique == count && ledger.duplicates == 0, "\(ledger)")
                // It stays alive and keeps reading: more jobs after the claim ticks ran over the junk.
                try await Task.sleep(for: .seconds(3))
                try await bed.enqueue(100)
                try await waitFor("the worker still delivers", timeout: .seconds(30)) {
                    try await bed.emulator.statistics().acceptedUnique == count + 100
                }
                try await waitFor("the worker counts them", timeout: .seconds(10)) {
                    try await worker.counters().accepted >= count + 100
                }
                let stats = try QueueInspector(redis: try BlockingRedisClient(endpoint: bed.redis.endpoint)).stats(keys: keys)
                #expect(stats.group != nil, "herald stats reads the queue despite the junk")
            }
        }
    }
}
