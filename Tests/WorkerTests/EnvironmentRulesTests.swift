import APNs
import PropertyBased
import Queue
import Testing
import Worker

/// An app with both APNs environments, in the rules alone: production's BadDeviceToken sends the
/// notification once to the app's sandbox lane with no attempt spent; accepted there it is
/// delivered with a `wrong_environment` feedback entry naming sandbox; refused there too, the
/// token is dead. Outcomes are counted for the app, not its sandbox lane.
@Suite
struct EnvironmentRulesTests {
    static let now: Int64 = 1_800_000_000_000

    private static func rules() -> DeliveryRules {
        var defaults = JobDefaults(bundleID: "com.example.app")
        defaults.apnsIDNamespace = "default"
        return DeliveryRules(policy: DeliveryPolicy(), apps: [("default", defaults), ("default/sandbox", defaults)], seed: 3,
                             sandboxTwins: [0: 1])
    }

    private static func entry(_ sequence: UInt64, tokens: [String], app: String? = nil) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = [("tokens", Array(tokens.joined(separator: ",").utf8)),
                                                        ("payload", Array("{\"aps\":{\"alert\":\"hi\"}}".utf8))]
        if let app { fields.append(("app", Array(app.utf8))) }
        return StreamRecord(id: StreamEntryID(milliseconds: UInt64(now), sequence: sequence), fields: fields)
    }

    private static func writes(_ rules: DeliveryRules) -> [OutcomeWrite] {
        var found: [OutcomeWrite] = []
        while let batch = rules.takeBatch() {
            for entry in batch.entries { found += entry.writes }
            rules.confirmed(batch.sequence)
        }
        return found
    }

    static let badDeviceToken = ResponseClassifier.classify(status: 400, reason: .badDeviceToken, timestamp: nil)

    @Test
    func aBadDeviceTokenFromProductionIsTriedOnceOnSandbox() throws {
        let rules = EnvironmentRulesTests.rules()
        let sandboxToken = String(repeating: "5b", count: 32), deadToken = String(repeating: "dd", count: 32)
        let productionToken = String(repeating: "a0", count: 32)
        rules.entriesArrived([EnvironmentRulesTests.entry(1, tokens: [productionToken, sandboxToken, deadToken])], deliveries: nil,
                             now: EnvironmentRulesTests.now)
        #expect(rules.nextSend(lane: 1, now: EnvironmentRulesTests.now) == nil, "nothing starts on sandbox")
        var sends: [NotificationSend] = []
        while let send = rules.nextSend(lane: 0, now: EnvironmentRulesTests.now) { sends.append(send) }
        #expect(sends.count == 3)
        // Production accepts its own token and calls the other two bad.
        rules.answered(context: sends[0].context, attempts: 1, outcome: .accepted, now: EnvironmentRulesTests.now)
        #expect(rules.answered(context: sends[1].context, attempts: 1, outcome: EnvironmentRulesTests.badDeviceToken, now: EnvironmentRulesTests.now))
        #expect(rules.answered(context: sends[2].context, attempts: 1, outcome: EnvironmentRulesTests.badDeviceToken, now: EnvironmentRulesTests.now))
        #expect(rules.nextSend(lane: 0, now: EnvironmentRulesTests.now) == nil, "production does not get them again")
        let first = try #require(rules.nextSend(lane: 1, now: EnvironmentRulesTests.now))
        let second = try #require(rules.nextSend(lane: 1, now: EnvironmentRulesTests.now))
        #expect(first.attempts == 0 && second.attempts == 0, "the try on the other environment spends no attempt")
        let bySandbox = [first, second].first { $0.notification.deviceToken == sandboxToken }!
        let byNeither = [first, second].first { $0.notification.deviceToken == deadToken }!
        rules.answered(context: bySandbox.context, attempts: 1, outcome: .accepted, now: EnvironmentRulesTests.now)
        #expect(!rules.answered(context: byNeither.context, attempts: 1, outcome: EnvironmentRulesTests.badDeviceToken, now: EnvironmentRulesTests.now),
                "refused by both: not tried again")
        let feedback = EnvironmentRulesTests.writes(rules).compactMap { if case .feedback(let draft) = $0 { draft } else { nil } }
        #expect(feedback.count == 2, "\(feedback)")
        let wrong = try #require(feedback.first { $0.token == sandboxToken })
        #expect(wrong.reason == "wrong_environment" && wrong.environment == "sandbox" && wrong.topic == "com.example.app")
        let dead = try #require(feedback.first { $0.token == deadToken })
        #expect(dead.reason == "BadDeviceToken" && dead.environment == nil)
        let counters = rules.counters
        #expect(counters.apps[0].accepted == 2 && counters.apps[0].deadTokens == 1 && counters.apps[0].wrongEnvironment == 1, "\(counters)")
        #expect(counters.apps[1] == AppOutcomes(), "the sandbox lane counts nothing of its own: \(counters.apps[1])")
    }

    @Test
    func aTokenSandboxAcceptedGoesStraightToSandboxNextTime() throws {
        let rules = EnvironmentRulesTests.rules()
        let token = String(repeating: "5b", count: 32)
        let now = EnvironmentRulesTests.now
        rules.entriesArrived([EnvironmentRulesTests.entry(1, tokens: [token])], deliveries: nil, now: now)
        let first = try #require(rules.nextSend(lane: 0, now: now))
        rules.answered(context: first.context, attempts: 1, outcome: EnvironmentRulesTests.badDeviceToken, now: now)
        let onSandbox = try #require(rules.nextSend(lane: 1, now: now))
        rules.answered(context: onSandbox.context, attempts: 1, outcome: .accepted, now: now)
        _ = EnvironmentRulesTests.writes(rules)

        // The next notification for the token skips production.
        rules.entriesArrived([EnvironmentRulesTests.entry(2, tokens: [token])], deliveries: nil, now: now)
        #expect(rules.nextSend(lane: 0, now: now) == nil, "not sent to production again")
        let straight = try #require(rules.nextSend(lane: 1, now: now))
        #expect(straight.notification.deviceToken == token && straight.attempts == 0)
        rules.answered(context: straight.context, attempts: 1, outcome: .accepted, now: now)
        let feedback = EnvironmentRulesTests.writes(rules).compactMap { if case .feedback(let draft) = $0 { draft } else { nil } }
        #expect(feedback.map(\.reason) == ["wrong_environment"] && feedback.first?.environment == "sandbox",
                "the backend's record is still wrong: \(feedback)")
        #expect(rules.counters.apps[0].accepted == 2 && rules.counters.apps[0].wrongEnvironment == 2)

        // Refused by sandbox later (the token died): a dead token, and production gets the next one again.
        rules.entriesArrived([EnvironmentRulesTests.entry(3, tokens: [token])], deliveries: nil, now: now)
        #expect(rules.nextSend(lane: 0, now: now) == nil, "production's lane hands it to sandbox's")
        let third = try #require(rules.nextSend(lane: 1, now: now))
        rules.answered(context: third.context, attempts: 1, outcome: EnvironmentRulesTests.badDeviceToken, now: now)
        let dead = EnvironmentRulesTests.writes(rules).compactMap { if case .feedback(let draft) = $0 { draft } else { nil } }
        #expect(dead.map(\.reason) == ["BadDeviceToken"])
        rules.entriesArrived([EnvironmentRulesTests.entry(4, tokens: [token])], deliveries: nil, now: now)
        #expect(rules.nextSend(lane: 0, now: now) != nil)
    }

    @Test
    func theRememberedSandboxTokensAreBounded() {
        var set = BoundedTokenSet(capacity: 3)
        for index in 0..<1_000 { set.insert("t\(index)") }
        #expect(set.count == 3 && set.contains("t999") && set.contains("t997") && !set.contains("t996"))
        set.remove("t998")
        set.insert("t998")
        set.insert("new")
        #expect(set.count == 3 && !set.contains("t997") && set.contains("t998") && set.contains("new"))
        var off = BoundedTokenSet(capacity: 0)
        off.insert("a")
        #expect(off.isEmpty)
    }

    @Test
    func noJobNamesTheSandboxLane() {
        let rules = EnvironmentRulesTests.rules()
        rules.entriesArrived([EnvironmentRulesTests.entry(1, tokens: [String(repeating: "a0", count: 32)], app: "default/sandbox")],
                             deliveries: nil, now: EnvironmentRulesTests.now)
        #expect(rules.nextSend(lane: 1, now: EnvironmentRulesTests.now) == nil)
        let letters = EnvironmentRulesTests.writes(rules).compactMap { if case .deadLetter(let draft) = $0 { draft } else { nil } }
        #expect(letters.map(\.reason) == ["unknown_app"])
    }

    @Test
    func aHaltedSandboxParksTheNotificationWithNoAttemptSpent() throws {
        let rules = EnvironmentRulesTests.rules()
        rules.credentialsHalted(lane: 1, unsent: [], now: EnvironmentRulesTests.now)
        rules.entriesArrived([EnvironmentRulesTests.entry(1, tokens: [String(repeating: "5b", count: 32)])], deliveries: nil,
                             now: EnvironmentRulesTests.now)
        let send = try #require(rules.nextSend(lane: 0, now: EnvironmentRulesTests.now))
        rules.answered(context: send.context, attempts: 1, outcome: EnvironmentRulesTests.badDeviceToken, now: EnvironmentRulesTests.now)
        let retries = EnvironmentRulesTests.writes(rules).compactMap { if case .retry(let retry) = $0 { retry } else { nil } }
        #expect(retries.count == 1 && retries.first?.attempts == 0, "\(retries)")
        #expect(rules.counters.handedBack == 1 && rules.counters.deadTokens == 0)
    }

    /// A case the random check found (shrunk): sandbox accepts a token, a later job of the same
    /// token is queued straight on the sandbox lane, and before it is sent sandbox refuses the
    /// token for another job. The queued one still goes to sandbox (where it was put), which the
    /// world must allow: it is not a send to sandbox without cause.
    @Test
    func aNotificationQueuedForSandboxStaysThereWhenSandboxRefusesItsTokenMeanwhile() {
        let steps: [UInt64] = [7680364041691028195, 10351770262189490740, 9954747565228533672, 2758897388497530020,
                               11758654736392802183, 2461402513176343908, 120254456938706454, 438906457869615090,
                               10406808442948389, 12457831894796048696]
        let world = DeliveryWorld(maxAttempts: 5, immediateRetries: 0, maxDeliveries: 3, seed: steps[0], sandbox: true)
        for step in steps { world.step(step) }
        world.settle()
        #expect(world.violations.isEmpty, "\(world.violations.prefix(3).joined(separator: "\n"))")
        // The steps still reach the case (a change of the world's step meanings would not make
        // this test pass by skipping it).
        #expect(world.sandboxSendsQueuedBeforeRefusal > 0)
    }

    /// The rules' invariants (`DeliveryWorld`) with app `default` on both environments: every
    /// notification ends once (a `wrong_environment` entry only beside an acceptance by sandbox),
    /// sandbox gets a notification only after production's BadDeviceToken, no attempt is spent
    /// for it, and the sandbox lane counts nothing of its own.
    @Test
    func theRulesHoldWithBothEnvironments() async {
        await propertyCheck(count: 200, input: Gen.int(in: 1...5), Gen.int(in: 0...3), Gen.uint64().array(of: 1...400)) { maxAttempts, immediateRetries, steps in
            let world = DeliveryWorld(maxAttempts: maxAttempts, immediateRetries: immediateRetries, maxDeliveries: 3, seed: steps.first ?? 1,
                                      sandbox: true)
            for step in steps { world.step(step) }
            world.settle()
            #expect(world.violations.isEmpty, "\(world.violations.prefix(3).joined(separator: "\n"))")
        }
        for seed in UInt64(1)...20 {
            var random = SplitMix64(seed: seed)
            let world = DeliveryWorld(maxAttempts: Int(random.next() % 5) + 1, immediateRetries: Int(random.next() % 4),
                                      maxDeliveries: Int(random.next() % 4) + 1, seed: seed, sandbox: true)
            for _ in 0..<3_000 { world.step(random.next()) }
            world.settle()
            #expect(world.violations.isEmpty, "seed \(seed): \(world.violations.prefix(3).joined(separator: "\n"))")
            if !world.violations.isEmpty { break }
        }
    }
}
