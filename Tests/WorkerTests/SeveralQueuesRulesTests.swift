import APNs
import Queue
import Testing
import Worker

/// `DeliveryRules` with several queues: a job's outcome and acknowledgement go to its own queue's
/// batch, held entries and collapse ids are per queue (two streams may hold the same entry id),
/// apns-ids derive from the queue's name, and a reconnect replays only that queue's batches.
@Suite
struct SeveralQueuesRules {
    static let queues = ["alpha", "beta"]
    static let token = String(repeating: "ab", count: 32)

    static func rules() -> DeliveryRules {
        DeliveryRules(policy: DeliveryPolicy(), apps: [(WorkerApp.defaultName, JobDefaults(bundleID: "com.example.app"))],
                      queues: queues, seed: 7)
    }

    static func entry(_ id: StreamEntryID, token: String = token, collapseID: String? = nil) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = [("token", Array(token.utf8)), ("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8))]
        if let collapseID { fields.append(("collapse_id", Array(collapseID.utf8))) }
        return StreamRecord(id: id, fields: fields)
    }

    @Test
    func sameEntryIDInTwoQueuesIsTwoJobsEachAcknowledgedInItsOwnQueue() throws {
        let rules = SeveralQueuesRules.rules()
        let id = StreamEntryID(milliseconds: 1_800_000_000_000, sequence: 0)
        rules.entriesArrived([SeveralQueuesRules.entry(id)], queue: 0, deliveries: nil, now: 1_800_000_000_100)
        rules.entriesArrived([SeveralQueuesRules.entry(id)], queue: 1, deliveries: nil, now: 1_800_000_000_100)
        #expect(rules.isHeld(id, queue: 0) && rules.isHeld(id, queue: 1) && rules.heldCount == 2)
        // Reading queue 1's pending list again takes nothing in twice.
        rules.entriesArrived([SeveralQueuesRules.entry(id)], queue: 1, deliveries: nil, now: 1_800_000_000_100)
        #expect(rules.counters.jobsRead == 2)

        let first = try #require(rules.nextSend(lane: 0, now: 1_800_000_000_200))
        let second = try #require(rules.nextSend(lane: 0, now: 1_800_000_000_200))
        #expect(rules.nextSend(lane: 0, now: 1_800_000_000_200) == nil)
        // The apns-id derives from the queue's name: the same entry and token differ per queue.
        let expected = Set(SeveralQueuesRules.queues.map {
            StableID.apnsID(namespace: $0, origin: id, token: SeveralQueuesRules.token)
        })
        #expect(Set([first.notification.apnsID, second.notification.apnsID].compactMap { $0 }) == expected)

        rules.answered(context: first.context, attempts: 1, outcome: .accepted, now: 1_800_000_000_300)
        rules.answered(context: second.context, attempts: 1, outcome: .accepted, now: 1_800_000_000_300)
        let a = try #require(rules.takeBatch())
        let b = try #require(rules.takeBatch())
        #expect(rules.takeBatch() == nil)
        #expect(Set([a.queue, b.queue]) == [0, 1], "one batch per queue")
        #expect(a.entries.map(\.entryID) == [id] && b.entries.map(\.entryID) == [id])

        rules.confirmed(a.sequence)
        #expect(!rules.isHeld(id, queue: a.queue) && rules.isHeld(id, queue: b.queue), "confirming one queue's batch releases only its entries")
        #expect(rules.redisReconnected(queue: b.queue).map(\.sequence) == [b.sequence])
        #expect(rules.redisReconnected(queue: a.queue).isEmpty, "a reconnect replays only that queue's unconfirmed batches")
        rules.confirmed(b.sequence)
        #expect(rules.writesSettled && rules.heldCount == 0)
        #expect(rules.queueCounters.map(\.accepted) == [1, 1] && rules.counters.accepted == 2)
    }

    @Test
    func outcomesGoToTheJobsQueue() throws {
        let rules = SeveralQueuesRules.rules()
        let now: Int64 = 1_800_000_000_000
        // Queue 1: a malformed job (no payload) and a job whose token APNs calls dead.
        rules.entriesArrived([StreamRecord(id: StreamEntryID(milliseconds: 5, sequence: 0), fields: [("token", Array(SeveralQueuesRules.token.utf8))])],
                             queue: 1, deliveries: nil, now: now)
        rules.entriesArrived([SeveralQueuesRules.entry(StreamEntryID(milliseconds: 6, sequence: 0))], queue: 1, deliveries: nil, now: now)
        // Queue 0: a job that is accepted.
        rules.entriesArrived([SeveralQueuesRules.entry(StreamEntryID(milliseconds: 7, sequence: 0), token: String(repeating: "cd", count: 32))],
                             queue: 0, deliveries: nil, now: now)
        while let send = rules.nextSend(lane: 0, now: now) {
            let outcome: DeliveryOutcome = send.notification.deviceToken == SeveralQueuesRules.token
                ? .deadToken(status: 410, reason: .unregistered, timestamp: now) : .accepted
            rules.answered(context: send.context, attempts: 1, outcome: outcome, now: now)
        }
        var byQueue: [Int: [EntryOutcome]] = [:]
        while let batch = rules.takeBatch() { byQueue[batch.queue, default: []] += batch.entries }
        let first = try #require(byQueue[0])
        let second = try #require(byQueue[1])
        #expect(first.count == 1 && first[0].writes.isEmpty, "queue 0: only its accepted job's acknowledgement")
        #expect(second.count == 2)
        #expect(second.contains { $0.writes.contains { if case .deadLetter = $0 { true } else { false } } }, "queue 1's malformed job, dead-lettered in queue 1")
        #expect(second.contains { $0.writes.contains { if case .feedback = $0 { true } else { false } } }, "queue 1's dead token, in queue 1's feedback")
        #expect(rules.queueCounters[1].deadLettered == 1 && rules.queueCounters[1].deadTokens == 1 && rules.queueCounters[0].accepted == 1)
    }

    @Test
    func collapseIDsAreComparedWithinAQueue() throws {
        let rules = SeveralQueuesRules.rules()
        let now: Int64 = 1_800_000_000_000
        // The same token and collapse id in two queues: neither supersedes the other.
        rules.entriesArrived([SeveralQueuesRules.entry(StreamEntryID(milliseconds: 1, sequence: 0), collapseID: "score")], queue: 0, deliveries: nil, now: now)
        rules.entriesArrived([SeveralQueuesRules.entry(StreamEntryID(milliseconds: 2, sequence: 0), collapseID: "score")], queue: 1, deliveries: nil, now: now)
        // A newer one in queue 0 supersedes queue 0's older one only.
        rules.entriesArrived([SeveralQueuesRules.entry(StreamEntryID(milliseconds: 3, sequence: 0), collapseID: "score")], queue: 0, deliveries: nil, now: now)
        var sent = 0
        while let send = rules.nextSend(lane: 0, now: now) {
            sent += 1
            rules.answered(context: send.context, attempts: 1, outcome: .accepted, now: now)
        }
        #expect(sent == 2 && rules.counters.superseded == 1, "sent \(sent), superseded \(rules.counters.superseded)")
        #expect(rules.queueCounters.map(\.superseded) == [1, 0] && rules.queueCounters.map(\.accepted) == [1, 1])
    }

    @Test
    func queueSelection() throws {
        #expect(try QueueShards.resolve(queue: nil, queues: nil, shards: nil).get() == ["default"])
        #expect(try QueueShards.resolve(queue: "push", queues: nil, shards: 3).get() == ["push-0", "push-1", "push-2"])
        #expect(try QueueShards.resolve(queue: nil, queues: " a, b ,c", shards: nil).get() == ["a", "b", "c"])
        for (queue, queues, shards, words) in [
            (nil, "a,b", 2, "exclude each other"), ("x", "a,b", nil, "exclude each other"), (nil, "a,,b", nil, "empty queue name"),
            (nil, "a,a", nil, "named twice"), (nil, "a{b}", nil, "brace"), (nil, nil, 0, "1 to 256"), (nil, nil, 257, "1 to 256"),
        ] as [(String?, String?, Int?, String)] {
            guard case .failure(let error) = QueueShards.resolve(queue: queue, queues: queues, shards: shards) else {
                Issue.record("\(String(describing: queue)) \(String(describing: queues)) \(String(describing: shards)) was accepted")
                continue
            }
            #expect(error.description.contains(words), "\(error)")
        }
        // The shard function spreads tokens over every shard and lowers upper-case hex first.
        let shards = Set((0..<1_000).map { index -> Int in
            let hex = String(index * 7919, radix: 16)
            return QueueShards.shard(token: String(repeating: "0", count: 64 - hex.count) + hex, shards: 16)
        })
        #expect(shards == Set(0..<16))
        #expect(QueueShards.shard(token: "ABCDEF" + String(repeating: "0", count: 58), shards: 10)
                == QueueShards.shard(token: "abcdef" + String(repeating: "0", count: 58), shards: 10))
        #expect(QueueShards.crc32(Array("123456789".utf8)) == 0xCBF4_3926, "the CRC-32 check value")
    }
}
