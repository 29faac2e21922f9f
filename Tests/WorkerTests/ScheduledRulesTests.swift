import APNs
import Queue
import Testing
import Worker

/// `DeliveryRules` and `deliver_at`, event by event: a job due later is held (one scheduled-set
/// member, marked, nothing sent, no attempt spent), one due now or past is sent, the promoted
/// entry is sent whatever the reader's clock says, and expiration still rules.
@Suite
struct ScheduledRules {
    static let token = String(repeating: "ab", count: 32)
    static let now: Int64 = 1_800_000_000_000

    static func rules() -> DeliveryRules {
        DeliveryRules(policy: DeliveryPolicy(), apps: [(WorkerApp.defaultName, JobDefaults(bundleID: "com.example.app"))], seed: 3)
    }

    static func entry(_ sequence: UInt64, _ extra: [(String, String)], tokens: String = token) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = [("tokens", Array(tokens.utf8)), ("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8))]
        for (name, value) in extra { fields.append((name, Array(value.utf8))) }
        return StreamRecord(id: StreamEntryID(milliseconds: UInt64(now - 10), sequence: sequence), fields: fields)
    }

    @Test
    func aJobDueLaterIsHeldInTheScheduledSetWithItsMark() throws {
        let rules = Self.rules()
        let other = String(repeating: "cd", count: 32)
        rules.entriesArrived([Self.entry(1, [("deliver_at", "1800000060000")], tokens: "\(Self.token),\(other),zz")],
                             deliveries: nil, now: Self.now)
        #expect(rules.nextSend(lane: 0, now: Self.now) == nil, "nothing is sent before deliver_at")
        let batch = try #require(rules.takeBatch())
        let writes = try #require(batch.entries.first?.writes)
        let retries = writes.compactMap { if case .retry(let retry) = $0 { retry } else { nil } }
        let letters = writes.compactMap { if case .deadLetter(let letter) = $0 { letter } else { nil } }
        let retry = try #require(retries.first)
        #expect(retries.count == 1 && retry.scheduled && retry.dueAt == 1_800_000_060_000 && retry.attempts == 0)
        #expect(retry.tokens == [Self.token, other], "the valid tokens wait; the invalid one is dead-lettered now")
        #expect(letters.count == 1 && letters.first?.tokens == ["zz"], "\(letters.map(\.reason))")
        let fields = Dictionary(retry.fields.map { ($0.name, String(decoding: $0.value, as: UTF8.self)) }, uniquingKeysWith: { a, _ in a })
        #expect(fields["scheduled"] == "1800000060000" && fields["deliver_at"] == "1800000060000")
        #expect(fields["origin"] == "\(Self.now - 10)-1", "the apns-ids stay those of the first entry")
        #expect(rules.counters.scheduled == 2 && rules.counters.notificationsSent == 0)
    }

    @Test
    func dueNowOrPastIsSentAndAPromotedEntryIsSentWhateverTheClock() throws {
        let rules = Self.rules()
        rules.entriesArrived([Self.entry(1, [("deliver_at", String(Self.now))]),
                              Self.entry(2, [("deliver_at", "2020-01-01T00:00:00Z")]),
                              // Promoted by a worker whose clock runs 5 s ahead of this one's.
                              Self.entry(3, [("deliver_at", String(Self.now + 5_000)), ("scheduled", String(Self.now + 5_000))])],
                             deliveries: nil, now: Self.now)
        var sent = 0
        while rules.nextSend(lane: 0, now: Self.now) != nil { sent += 1 }
        #expect(sent == 3 && rules.counters.scheduled == 0)
    }

    @Test
    func expirationBeforeDeliverAtIsDeadLetteredExpiredAndBadValuesAreRefused() throws {
        let rules = Self.rules()
        rules.entriesArrived([Self.entry(1, [("deliver_at", String(Self.now + 3_600_000)), ("expiration", String(Self.now / 1000 + 60))]),
                              Self.entry(2, [("deliver_at", "soon")]),
                              Self.entry(3, [("deliver_at", "253402300800000")])],
                             deliveries: nil, now: Self.now)
        #expect(rules.nextSend(lane: 0, now: Self.now) == nil)
        let batch = try #require(rules.takeBatch())
        let reasons = batch.entries.flatMap(\.writes).compactMap { if case .deadLetter(let letter) = $0 { letter.reason } else { nil } }
        #expect(reasons == ["expired", "bad_deliver_at", "bad_deliver_at"])
        #expect(!batch.entries.flatMap(\.writes).contains { if case .retry = $0 { true } else { false } })
    }
}
