import APNs
import Queue
import Testing
import Worker

/// `DeliveryRules` reuses a finished job's record for the next job it reads (one allocation less
/// per job). A reused record must start clean: nothing of the finished job's outcomes, attempts or
/// supersessions may reach the next job's batch.
@Suite
struct RecycledJobRecords {
    static let now: Int64 = 1_800_000_000_000
    static func token(_ n: Int) -> String { String(repeating: "0", count: 62) + (n < 16 ? "0" : "") + String(n, radix: 16) }

    static func entry(_ sequence: UInt64, tokens: [String], collapseID: String? = nil) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = tokens.count == 1
            ? [("token", Array(tokens[0].utf8))] : [("tokens", Array(tokens.joined(separator: ",").utf8))]
        fields.append(("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8)))
        if let collapseID { fields.append(("collapse_id", Array(collapseID.utf8))) }
        return StreamRecord(id: StreamEntryID(milliseconds: 1_799_999_000_000, sequence: sequence), fields: fields)
    }

    /// Answers everything queued with `outcome(token)`; returns the tokens sent, in order.
    @discardableResult
    static func answerAll(_ rules: DeliveryRules, _ outcome: (String) -> DeliveryOutcome) -> [String] {
        var sent: [String] = []
        while let send = rules.nextSend(lane: 0, now: now) {
            sent.append(send.notification.deviceToken)
            rules.answered(context: send.context, attempts: send.attempts + 1, outcome: outcome(send.notification.deviceToken), now: now + 5)
        }
        return sent
    }

    /// `prefetch(contexts:)` reads the job table as raw addresses: contexts out of range, of
    /// finished jobs, of recycled slots or of nothing at all must be passed over, and the hint
    /// must change no outcome.
    @Test
    func prefetchingAnyContextChangesNothing() throws {
        let rules = DeliveryRules(policy: DeliveryPolicy(), apps: [("default", JobDefaults(bundleID: "com.example.app"))], seed: 4)
        func hint(_ contexts: [UInt64]) { contexts.withUnsafeBufferPointer { rules.prefetch(contexts: $0) } }
        hint([0, 1, .max, UInt64(Int.max), 1 << 16, 12_345 << 16 | 7])
        rules.entriesArrived((1...4).map { Self.entry(UInt64($0), tokens: [Self.token($0), Self.token($0 + 20)]) },
                             deliveries: nil, now: Self.now)
        var sends: [NotificationSend] = []
        while let send = rules.nextSend(lane: 0, now: Self.now) { sends.append(send) }
        #expect(sends.count == 8)
        let contexts = sends.map(\.context)
        // Every context, again after the first job finished (its slot then empty), and garbage.
        hint(contexts + [.max, 0xFFFF_FFFF_FFFF])
        rules.answered(context: sends[0].context, attempts: 1, outcome: .accepted, now: Self.now + 5)
        rules.answered(context: sends[1].context, attempts: 1, outcome: .accepted, now: Self.now + 5)
        hint(contexts + contexts.map { $0 | 0xFFFF } + [.max])
        for send in sends.dropFirst(2) {
            rules.answered(context: send.context, attempts: 1, outcome: .accepted, now: Self.now + 5)
            hint(contexts)
        }
        #expect(rules.counters.accepted == 8)
        let batch = try #require(rules.takeBatch())
        #expect(batch.entries.map(\.entryID.sequence).sorted() == [1, 2, 3, 4])
        rules.confirmed(batch.sequence)
        // The next entries take the finished jobs' records (their jobs prefetched as they are
        // freed): each sends its own tokens.
        rules.entriesArrived((5...8).map { Self.entry(UInt64($0), tokens: [Self.token($0 + 40)]) }, deliveries: nil, now: Self.now)
        hint(contexts)
        #expect(Set(Self.answerAll(rules) { _ in .accepted }) == Set((5...8).map { Self.token($0 + 40) }))
        #expect(rules.counters.accepted == 12 && rules.heldCount == 4)
    }

    @Test
    func aReusedRecordCarriesNothingOfTheJobBefore() throws {
        let rules = DeliveryRules(policy: DeliveryPolicy(), apps: [("default", JobDefaults(bundleID: "com.example.app"))], seed: 5)
        // Job 1: three tokens; one dead, one dead-lettered (400), one resent at once and accepted.
        rules.entriesArrived([Self.entry(1, tokens: [Self.token(1), Self.token(2), Self.token(3)])], deliveries: nil, now: Self.now)
        var resent = false
        let first = Self.answerAll(rules) { token in
            switch token {
            case Self.token(1): return .deadToken(status: 410, reason: .unregistered, timestamp: Self.now)
            case Self.token(2): return .permanent(status: 400, reason: .badDeviceToken)
            default:
                if resent { return .accepted }
                resent = true
                return .retryOnAnotherConnection(.status(500, .internalServerError))
            }
        }
        #expect(first.count == 4)
        let batch1 = try #require(rules.takeBatch())
        #expect(batch1.entries.count == 1 && batch1.entries[0].writes.count == 2, "feedback and a dead letter: \(batch1.entries)")
        rules.confirmed(batch1.sequence)
        // Job 2 takes the finished job's record: three tokens, none sent before, all accepted; its
        // entry has only the acknowledgement.
        rules.entriesArrived([Self.entry(2, tokens: [Self.token(9), Self.token(10), Self.token(11)])], deliveries: nil, now: Self.now)
        var sent: [String] = []
        while let send = rules.nextSend(lane: 0, now: Self.now) {
            #expect(send.attempts == 0, "the reused record kept the job before's attempts")
            sent.append(send.notification.deviceToken)
            rules.answered(context: send.context, attempts: 1, outcome: .accepted, now: Self.now + 5)
        }
        #expect(sent == [Self.token(9), Self.token(10), Self.token(11)])
        let batch2 = try #require(rules.takeBatch())
        #expect(batch2.entries.map(\.entryID.sequence) == [2])
        #expect(batch2.entries[0].writes.isEmpty, "the reused record kept the job before's outcomes: \(batch2.entries[0].writes)")
        rules.confirmed(batch2.sequence)
        #expect(rules.counters.accepted == 4 && rules.counters.deadTokens == 1 && rules.counters.deadLettered == 1)
        #expect(rules.heldCount == 0)
    }

    @Test
    func aReusedRecordForgetsSupersededTokens() throws {
        let rules = DeliveryRules(policy: DeliveryPolicy(), apps: [("default", JobDefaults(bundleID: "com.example.app"))], seed: 6)
        // Two updates of one collapse id for one token: the older (entry 1) is superseded unsent.
        rules.entriesArrived([Self.entry(1, tokens: [Self.token(1)], collapseID: "score"),
                              Self.entry(2, tokens: [Self.token(1)], collapseID: "score")], deliveries: nil, now: Self.now)
        #expect(Self.answerAll(rules) { _ in .accepted } == [Self.token(1)])
        let batch = try #require(rules.takeBatch())
        rules.confirmed(batch.sequence)
        #expect(rules.counters.superseded == 1)
        // The next jobs reuse both records; each is sent (nothing of the supersession stays).
        rules.entriesArrived([Self.entry(3, tokens: [Self.token(5)]), Self.entry(4, tokens: [Self.token(6)])], deliveries: nil, now: Self.now)
        #expect(Set(Self.answerAll(rules) { _ in .accepted }) == [Self.token(5), Self.token(6)])
        #expect(rules.counters.accepted == 3 && rules.counters.superseded == 1)
        #expect(rules.heldCount == 2 && rules.takeBatch()?.entries.count == 2)
    }
}
