import APNs
import PropertyBased
import Queue
import Testing
import Worker

/// Per-token backoff after 429 TooManyRequests: the table's bounds, the rules' deferral of a
/// throttled token's other notifications (retry set, due when the backoff ends, no attempt
/// spent), and the rules' invariants with the table full, tiny or off.
@Suite
struct TokenBackoffTests {
    static let token = String(repeating: "7e", count: 32)
    static let other = String(repeating: "0b", count: 32)
    static let start: Int64 = 1_800_000_000_000

    private static func rules(capacity: Int = 65_536) -> DeliveryRules {
        var policy = DeliveryPolicy()
        policy.tokenBackoffCapacity = capacity
        var defaults = JobDefaults(bundleID: "com.example.app")
        defaults.apnsIDNamespace = "default"
        return DeliveryRules(policy: policy, apps: [("default", defaults)], seed: 7)
    }

    private static func entry(_ sequence: UInt64, token: String, attempts: Int = 0) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = [("token", Array(token.utf8)), ("payload", Array("{\"aps\":{\"alert\":\"\(sequence)\"}}".utf8))]
        if attempts > 0 { fields.append(("attempts", Array(String(attempts).utf8))) }
        return StreamRecord(id: StreamEntryID(milliseconds: UInt64(start), sequence: sequence), fields: fields)
    }

    private static func retries(_ rules: DeliveryRules) -> [RetryEntry] {
        var found: [RetryEntry] = []
        while let batch = rules.takeBatch() {
            for entry in batch.entries {
                for write in entry.writes { if case .retry(let retry) = write { found.append(retry) } }
            }
            rules.confirmed(batch.sequence)
        }
        return found
    }

    @Test
    func aThrottledTokensOtherNotificationsWaitInTheRetrySetWithNoAttemptSpent() throws {
        let rules = TokenBackoffTests.rules()
        var now = TokenBackoffTests.start
        rules.entriesArrived([TokenBackoffTests.entry(1, token: TokenBackoffTests.token)], deliveries: nil, now: now)
        let first = try #require(rules.nextSend(lane: 0, now: now))
        rules.answered(context: first.context, attempts: 1, outcome: .retryTokenLater(reason: .tooManyRequests), now: now)
        let firstRetry = try #require(TokenBackoffTests.retries(rules).first)
        #expect(firstRetry.attempts == 1 && firstRetry.dueAt >= now + 800, "the throttled one: \(firstRetry.attempts) attempts, due \(firstRetry.dueAt - now) ms")

        // Read later: two for the throttled token (one with attempts already spent), one for another token.
        now += 100
        rules.entriesArrived([TokenBackoffTests.entry(2, token: TokenBackoffTests.token),
                              TokenBackoffTests.entry(3, token: TokenBackoffTests.other),
                              TokenBackoffTests.entry(4, token: TokenBackoffTests.token, attempts: 3)], deliveries: nil, now: now)
        let sent = try #require(rules.nextSend(lane: 0, now: now))
        #expect(sent.notification.deviceToken == TokenBackoffTests.other, "only the other token is sent")
        #expect(rules.nextSend(lane: 0, now: now) == nil)
        let deferred = TokenBackoffTests.retries(rules)
        #expect(deferred.count == 2 && deferred.allSatisfy { $0.tokens == [TokenBackoffTests.token] })
        // Due when the token's backoff ends (no earlier than the throttled one's own retry), attempts unchanged.
        #expect(deferred.map(\.attempts).sorted() == [0, 3], "\(deferred.map(\.attempts))")
        #expect(deferred.allSatisfy { $0.dueAt == firstRetry.dueAt }, "\(deferred.map(\.dueAt)) vs \(firstRetry.dueAt)")
        #expect(rules.counters.tokenBackoffDeferred == 2 && rules.counters.handedBack == 2, "\(rules.counters)")
        #expect(rules.counters.notificationsSent == 2, "\(rules.counters)")
        #expect(rules.tokensBackingOff(now: now) == 1)

        // Once the backoff has passed, the token's notifications are sent again.
        now = firstRetry.dueAt
        rules.entriesArrived([TokenBackoffTests.entry(5, token: TokenBackoffTests.token)], deliveries: nil, now: now)
        let again = try #require(rules.nextSend(lane: 0, now: now))
        #expect(again.notification.deviceToken == TokenBackoffTests.token)
        #expect(rules.tokensBackingOff(now: now) == 0)
    }

    @Test
    func queuedNotificationsOfTheTokenAreDeferredToo() throws {
        let rules = TokenBackoffTests.rules()
        let now = TokenBackoffTests.start
        rules.entriesArrived((1...5).map { TokenBackoffTests.entry($0, token: TokenBackoffTests.token) }, deliveries: nil, now: now)
        let first = try #require(rules.nextSend(lane: 0, now: now))
        rules.answered(context: first.context, attempts: 1, outcome: .retryTokenLater(reason: .tooManyRequests), now: now)
        #expect(rules.nextSend(lane: 0, now: now) == nil, "the four queued behind it wait")
        #expect(rules.counters.tokenBackoffDeferred == 4)
        #expect(rules.counters.notificationsSent == 1)
    }

    @Test
    func consecutive429sLengthenTheBackoff() {
        var table = TokenBackoffTable(capacity: 4)
        let now = TokenBackoffTests.start
        let first = table.throttled("a", now: now) { Int64(1_000 << ($0 - 1)) }
        let second = table.throttled("a", now: now + 10) { Int64(1_000 << ($0 - 1)) }
        #expect(first == now + 1_000 && second == now + 10 + 2_000)
        // After the backoff passed, it starts over at one strike.
        let later = table.throttled("a", now: second + 1) { Int64(1_000 << ($0 - 1)) }
        #expect(later == second + 1 + 1_000)
    }

    @Test
    func theTableIsBoundedAndForgetsTheOldestFirst() {
        var table = TokenBackoffTable(capacity: 3)
        let now = TokenBackoffTests.start
        for index in 0..<1_000 { table.throttled("t\(index)", now: now) { _ in 60_000 } }
        #expect(table.count == 3 && table.evictions == 997)
        #expect(table.until("t999", now: now) != nil && table.until("t997", now: now) != nil && table.until("t996", now: now) == nil)
        // Expired entries go when asked; off means nothing is remembered.
        #expect(table.removeExpired(now: now + 60_000) == 0 && table.isEmpty)
        var off = TokenBackoffTable(capacity: 0)
        off.throttled("a", now: now) { _ in 1_000 }
        #expect(off.isEmpty && off.until("a", now: now) == nil)
    }

    /// The rules' invariants (`DeliveryWorld`) with the table large (the world also checks that no
    /// token is sent within 800 ms of its 429), tiny (evicting all the time) or off.
    @Test
    func theRulesHoldWithTokenBackoff() async {
        await propertyCheck(count: 200, input: Gen.int(in: 0...3), Gen.int(in: 1...5), Gen.uint64().array(of: 1...400)) { size, maxAttempts, steps in
            let capacity = [0, 1, 3, 65_536][size]
            let world = DeliveryWorld(maxAttempts: maxAttempts, immediateRetries: 1, maxDeliveries: 3, seed: steps.first ?? 1,
                                      tokenBackoffCapacity: capacity)
            for step in steps { world.step(step) }
            world.settle()
            #expect(world.violations.isEmpty, "capacity \(capacity): \(world.violations.prefix(3).joined(separator: "\n"))")
        }
    }
}
