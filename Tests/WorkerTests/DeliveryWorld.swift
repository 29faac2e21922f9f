import APNs
import Queue
import Worker

/// A world around `DeliveryRules` with no Redis and no sockets: a job stream, two apps' pools that
/// hold what was sent until the test answers it, and a Redis that applies a batch of outcome
/// writes only when the test confirms it (or drops it when the connection is lost).
///
/// The world is driven by steps (one `UInt64` each, decoded into an event and its parameters) and
/// checks the rules' invariants at every event and after `settle()`; each broken invariant is
/// recorded in `violations` with what happened.
final class DeliveryWorld {
    let policy: DeliveryPolicy
    let rules: DeliveryRules
    var now: Int64 = 1_800_000_000_000
    private(set) var violations: [String] = []
    private(set) var log: [String] = []

    static let apps = ["default", "second"]
    /// Few tokens, so collapse ids meet: 64 hex digits each.
    static let tokenPool: [String] = (0..<6).map { String(repeating: "a7", count: 28) + String(format8: UInt32($0)) }

    /// What the world knows of each notification (entry, token).
    struct Note {
        let entry: StreamEntryID
        let token: String
        let collapseID: String?
        let expiration: Int64?
        /// Attempts spent: the job's own, then one per counted failure or acceptance.
        var spent: Int
        var accepted = false
        var sends = 0
        /// Production answered BadDeviceToken (with `sandbox`): from then on it goes to sandbox.
        var redirected = false
        /// The number of production pumps before it was read (see `sandboxPumpedAt`).
        var readAfterPumps = 0
    }

    /// One entry the world put on the stream and what it expects of it.
    struct Entry {
        let id: StreamEntryID
        let fields: [(name: String, value: [UInt8])]
        /// Valid tokens, in job order; invalid ones are dead-lettered at once.
        let tokens: [String]
        let invalidTokens: [String]
        /// Expected to be dead-lettered whole (malformed, unknown app, delivered too often).
        let wholeReason: String?
        let initialAttempts: Int
        let collapseID: String?
        let expiration: Int64?
        /// The queue (index) it was read from.
        let queue: Int
        /// Its `deliver_at` (valid values only), and the world's time when it was read.
        var deliverAt: Int64? = nil
        var readAt: Int64 = 0
        /// Held for its deliver_at: a `scheduled` entry (already promoted) is not.
        var holds: Bool { wholeReason == nil && (deliverAt ?? 0) > readAt }
    }

    private(set) var entries: [StreamEntryID: Entry] = [:]
    private var entryOrder: [StreamEntryID] = []
    private var notes: [String: Note] = [:]
    private var nextSequence: UInt64 = 0

    /// Sent and not yet answered, per app: the pool's streams.
    private var inFlight: [[NotificationSend]]
    /// Taken batches written to Redis whose EXEC has not answered, oldest first.
    private var written: [OutcomeBatch] = []
    private var connected = true
    /// Batch sequences Redis applied, and each entry's outcome as applied.
    private var applied: Set<UInt64> = []
    private var outcomes: [StreamEntryID: EntryOutcome] = [:]
    /// Entries whose outcome the rules produced (taken in a batch): nothing of theirs may be sent after.
    private var finalized: Set<StreamEntryID> = []
    private var halted: [Bool]
    /// With `sandbox`: app `default` has both APNs environments, its sandbox pool lane 2.
    let sandbox: Bool
    /// The rules' lanes: the two apps, and `default`'s sandbox lane when `sandbox`.
    let laneCount: Int
    /// Tokens sandbox accepted after production's BadDeviceToken: they go straight to sandbox.
    private var sandboxTokens: Set<String> = []
    /// Production (lane 0) pumps so far, and per token the last one made while sandbox had
    /// accepted the token: in such a pump the rules may queue the token's notifications straight
    /// on the sandbox lane.
    private var productionPumps = 0
    private var sandboxPumpedAt: [String: Int] = [:]
    /// Sends to sandbox allowed only because the notification was queued there before sandbox
    /// refused its token (a test of that case checks that it happened).
    private(set) var sandboxSendsQueuedBeforeRefusal = 0

    /// How many queues the world's jobs come from (`q0`, `q1`, … when more than one).
    let queues: Int

    /// When each token was last answered 429 TooManyRequests: no notification for it may be sent
    /// within its backoff (at least 800 ms: 1 s less the jitter) while the table can hold every token.
    private var throttledAt: [String: Int64] = [:]

    /// `results`: every queue writes receipts, and each outcome is checked to carry exactly one
    /// result per notification that ended (none for those put in the retry set).
    init(maxAttempts: Int, immediateRetries: Int, maxDeliveries: Int, seed: UInt64, queues: Int = 1, results: Bool = false,
         tokenBackoffCapacity: Int = DeliveryPolicy().tokenBackoffCapacity, sandbox: Bool = false) {
        self.queues = queues
        self.sandbox = sandbox
        laneCount = sandbox ? 3 : 2
        inFlight = Array(repeating: [], count: laneCount)
        halted = Array(repeating: false, count: laneCount)
        var policy = DeliveryPolicy()
        policy.tokenBackoffCapacity = tokenBackoffCapacity
        policy.maxAttempts = maxAttempts
        policy.immediateRetries = immediateRetries
        policy.maxDeliveries = maxDeliveries
        self.policy = policy
        var defaults = JobDefaults(bundleID: "com.example.app")
        defaults.apnsIDNamespace = "default"
        rules = DeliveryRules(policy: policy, apps: (DeliveryWorld.apps + (sandbox ? ["default/sandbox"] : [])).map { ($0, defaults) },
                              queues: queues > 1 ? (0..<queues).map { "q\($0)" } : nil, seed: seed, sandboxTwins: sandbox ? [0: 2] : [:])
        // With several queues the last is an urgent stream (priority lanes): its tokens jump the
        // others', and every rule above must hold for it all the same.
        if queues > 1 { rules.urgentQueues = (0..<queues).map { $0 == queues - 1 } }
        if results { rules.resultsByQueue = Array(repeating: true, count: queues) }
    }

    private func violation(_ text: String) {
        violations.append(text + "\n  events: " + log.suffix(12).joined(separator: " | "))
    }

    private static func key(_ entry: StreamEntryID, _ token: String) -> String { "\(entry)/\(token)" }

    // MARK: steps

    func step(_ word: UInt64) {
        var random = SplitMix64(seed: word)
        switch word % 16 {
        case 0, 1, 2: read(count: Int(random.next() % 3) + 1, claimedDeliveries: nil, &random)
        case 3: read(count: Int(random.next() % 2) + 1, claimedDeliveries: Int(random.next() % UInt64(policy.maxDeliveries + 2)) + 1, &random)
        case 4, 5, 6: pump(lane: Int(random.next() % UInt64(laneCount)), slots: Int(random.next() % 8) + 1, refuseLast: random.next() % 5 == 0)
        case 7, 8, 9: answerOne(&random)
        case 10: tick()
        case 11: confirmOldest()
        case 12: loseConnection()
        case 13: reconnect()
        case 14:
            now += random.next() % 4 == 0 ? Int64(random.next() % 120_000) : Int64(random.next() % 3_000)
            log.append("now \(now)")
        default:
            switch random.next() % 10 {
            case 0, 1, 2: halt(lane: Int(random.next() % UInt64(laneCount)))
            case 3, 4, 5, 6: resume(lane: Int(random.next() % UInt64(laneCount)))
            case 7: drain()
            default: break
            }
        }
    }

    // MARK: entries in

    /// The apns-id namespace of a queue's jobs: its name.
    private func namespace(_ queue: Int) -> String { queues > 1 ? "q\(queue)" : "default" }

    private func makeEntry(_ random: inout SplitMix64, claimedDeliveries: Int?, queue: Int) -> Entry {
        nextSequence += 1
        let id = StreamEntryID(milliseconds: UInt64(now), sequence: nextSequence)
        var fields: [(name: String, value: [UInt8])] = []
        let tokenCount = Int(random.next() % 3) + 1
        var pool = DeliveryWorld.tokenPool
        var tokens: [String] = []
        for _ in 0..<tokenCount { tokens.append(pool.remove(at: Int(random.next() % UInt64(pool.count)))) }
        var invalid: [String] = []
        if tokenCount > 1, random.next() % 6 == 0 { invalid.append("zz-not-hex") }
        let all = tokens + invalid
        if all.count == 1 { fields.append(("token", Array(all[0].utf8))) } else { fields.append(("tokens", Array(all.joined(separator: ",").utf8))) }
        let malformed = random.next() % 15 == 0
        if !malformed { fields.append(("payload", Array("{\"aps\":{\"alert\":\"\(id)\"}}".utf8))) }
        let collapseID: String? = [nil, nil, "score", "news"][Int(random.next() % 4)]
        if let collapseID { fields.append(("collapse_id", Array(collapseID.utf8))) }
        let seconds = now / 1000
        let expiration: Int64? = [nil, nil, 0, seconds - 5, seconds + 2, seconds + 40, seconds + 3_600, Notification.maxExpiration][Int(random.next() % 8)]
        if let expiration { fields.append(("expiration", Array(String(expiration).utf8))) }
        let attempts = Int(random.next() % UInt64(policy.maxAttempts + 2))
        if attempts > 0 { fields.append(("attempts", Array(String(attempts).utf8))) }
        let appChoice = random.next() % 8
        var unknownApp = false
        if appChoice == 0 { fields.append(("app", Array("second".utf8))) }
        if appChoice == 1 { fields.append(("app", Array("nobody".utf8))); unknownApp = true }
        // Scheduled sends: a deliver_at past, just ahead or far ahead (as ms or RFC 3339), one
        // already held for (`scheduled`: sent when read), or a bad value.
        var deliverAt: Int64? = nil
        var badDeliverAt = false
        switch random.next() % 12 {
        case 0: deliverAt = now - 1_000
        case 1: deliverAt = now + 1_500
        case 2: deliverAt = now + 7_200_000
        case 3: badDeliverAt = true
        default: break
        }
        if let deliverAt {
            let text = random.next() % 2 == 0 ? String(deliverAt) : DeliverAt.format(deliverAt)
            fields.append(("deliver_at", Array(text.utf8)))
        } else if badDeliverAt {
            fields.append(("deliver_at", Array(["tomorrow", "-5", "2026-02-30T00:00:00Z", "99999999999999999"][Int(random.next() % 4)].utf8)))
        }
        let alreadyHeld = deliverAt != nil && random.next() % 4 == 0
        if alreadyHeld { fields.append(("scheduled", Array(String(deliverAt ?? 0).utf8))) }
        var whole: String? = nil
        if let claimedDeliveries, claimedDeliveries > policy.maxDeliveries { whole = "max_deliveries" }
        else if unknownApp { whole = "unknown_app" }
        else if malformed { whole = "missing_payload" }
        else if badDeliverAt { whole = "bad_deliver_at" }
        var entry = Entry(id: id, fields: fields, tokens: tokens, invalidTokens: invalid, wholeReason: whole,
                          initialAttempts: attempts, collapseID: collapseID, expiration: expiration, queue: queue)
        entry.deliverAt = alreadyHeld ? nil : deliverAt
        entry.readAt = now
        return entry
    }

    private func read(count: Int, claimedDeliveries: Int?, _ random: inout SplitMix64) {
        var records: [StreamRecord] = []
        var deliveries: [StreamEntryID: Int] = [:]
        // One read is of one queue (a draw only with several, so one queue's runs stay as they were).
        let queue = queues > 1 ? Int(random.next() % UInt64(queues)) : 0
        for _ in 0..<count {
            let entry = makeEntry(&random, claimedDeliveries: claimedDeliveries, queue: queue)
            entries[entry.id] = entry
            entryOrder.append(entry.id)
            for token in entry.tokens {
                notes[DeliveryWorld.key(entry.id, token)] = Note(entry: entry.id, token: token, collapseID: entry.collapseID,
                                                                 expiration: entry.expiration, spent: entry.initialAttempts,
                                                                 readAfterPumps: productionPumps)
            }
            records.append(StreamRecord(id: entry.id, fields: entry.fields))
            if let claimedDeliveries { deliveries[entry.id] = claimedDeliveries }
        }
        log.append("\(claimedDeliveries == nil ? "read" : "claim") q\(queue) \(records.map(\.id))")
        rules.entriesArrived(records, queue: queue, deliveries: claimedDeliveries == nil ? nil : deliveries, now: now)
    }

    /// Re-reads the pending list (after a reconnect): every entry not yet acknowledged in Redis
    /// comes again. The rules must take none of them in twice.
    private func rereadPending() {
        let pending = entryOrder.filter { outcomes[$0] == nil }.compactMap { entries[$0] }
        guard !pending.isEmpty else { return }
        let before = rules.counters
        for queue in 0..<queues {
            rules.entriesArrived(pending.filter { $0.queue == queue }.map { StreamRecord(id: $0.id, fields: $0.fields) }, queue: queue,
                                 deliveries: nil, now: now)
        }
        if rules.counters.jobsRead != before.jobsRead || rules.counters.jobsFinished != before.jobsFinished {
            violation("re-reading the pending list took in held entries again: \(before.jobsRead) -> \(rules.counters.jobsRead) read")
        }
    }

    // MARK: sending and answers

    private func pump(lane: Int, slots: Int, refuseLast: Bool) {
        if sandbox, lane == 0 {
            productionPumps += 1
            for token in sandboxTokens { sandboxPumpedAt[token] = productionPumps }
        }
        var sent = 0
        while sent < slots, let send = rules.nextSend(lane: lane, now: now) {
            if refuseLast && sent == slots - 1 {
                rules.sendRefused(context: send.context, lane: lane)
                break
            }
            checkSend(send, lane: lane)
            inFlight[lane].append(send)
            sent += 1
        }
        if sent > 0 { log.append("pump \(lane) x\(sent)") }
    }

    private func checkSend(_ send: NotificationSend, lane: Int) {
        let token = send.notification.deviceToken
        let key = DeliveryWorld.key(send.entryID, token)
        guard var note = notes[key], let entry = entries[send.entryID] else {
            violation("sent a notification the world never enqueued: \(send.entryID) \(token)")
            return
        }
        if halted[lane] { violation("sent \(key) on app \(lane) while its credentials are halted") }
        if rules.draining { violation("sent \(key) while draining") }
        if finalized.contains(send.entryID) { violation("sent \(key) after its entry's outcome was taken for acknowledgement") }
        if note.accepted { violation("sent \(key) again after APNs accepted it") }
        if let expiration = entry.expiration, expiration > 0, expiration <= Int64.max / 1000, expiration * 1000 <= now {
            violation("sent \(key) at \(now) after its apns-expiration \(expiration)")
        }
        if let at = throttledAt[token], now < at + 800, policy.tokenBackoffCapacity >= DeliveryWorld.tokenPool.count {
            violation("sent \(key) at \(now), \(now - at) ms after APNs answered 429 TooManyRequests for its token (it should back off)")
        }
        if entry.holds && entry.initialAttempts < policy.maxAttempts {
            violation("sent \(key) at \(now), read at \(entry.readAt) with deliver_at \(entry.deliverAt ?? 0) still ahead")
        }
        if send.attempts >= policy.maxAttempts { violation("sent \(key) with \(send.attempts) attempts spent (max \(policy.maxAttempts))") }
        if send.attempts != note.spent { violation("sent \(key) stating \(send.attempts) attempts; the world counts \(note.spent)") }
        if send.notification.apnsIDBits != StableID.bits(namespace: namespace(entry.queue), origin: entry.id, token: token) {
            violation("sent \(key) with an apns-id not derived in its queue's namespace \(namespace(entry.queue))")
        }
        var expectedLane = entry.fields.contains { $0.name == "app" && $0.value == Array("second".utf8) } ? 1 : 0
        // After production's BadDeviceToken, `default`'s notification goes to its sandbox lane
        // (only then), and straight there for a token sandbox accepted before.
        // A notification queued straight on the sandbox lane stays there even when sandbox
        // refuses its token for another notification before this one is sent.
        let routable = (sandboxPumpedAt[token] ?? 0) > note.readAfterPumps
        if note.redirected || (expectedLane == 0 && lane == 2 && (sandboxTokens.contains(token) || routable)) {
            if !note.redirected && !sandboxTokens.contains(token) { sandboxSendsQueuedBeforeRefusal += 1 }
            expectedLane = 2
        }
        if lane != expectedLane { violation("sent \(key) on lane \(lane), expected lane \(expectedLane) (redirected \(note.redirected))") }
        if lane == 0, sandboxTokens.contains(token), !halted[2] {
            violation("sent \(key) to production after sandbox had accepted its token")
        }
        if lane == 2 { note.redirected = true }
        note.sends += 1
        notes[key] = note
    }

    /// The outcomes a pool can report, and whether each spends an attempt (as the pool counts it).
    static let answers: [(outcome: DeliveryOutcome, counts: Bool)] = [
        (.accepted, true), (.accepted, true), (.accepted, true), (.accepted, true),
        (ResponseClassifier.classify(status: 400, reason: .badDeviceToken, timestamp: nil), true),
        (ResponseClassifier.classify(status: 410, reason: .unregistered, timestamp: 1_799_999_000_000), true),
        (ResponseClassifier.classify(status: 400, reason: .badTopic, timestamp: nil), true),
        (ResponseClassifier.classify(status: 413, reason: .payloadTooLarge, timestamp: nil), true),
        (ResponseClassifier.classify(status: 429, reason: .tooManyRequests, timestamp: nil), true),
        (ResponseClassifier.classify(status: 500, reason: .internalServerError, timestamp: nil), true),
        (ResponseClassifier.classify(status: 503, reason: .serviceUnavailable, timestamp: nil), true),
        (ResponseClassifier.classify(status: 400, reason: .idleTimeout, timestamp: nil), true),
        (.retryOnAnotherConnection(.streamReset(errorCode: 2)), true),
        (.retryOnAnotherConnection(.connectionLost), true),
        (.retryOnAnotherConnection(.responseTimeout), true),
        (.retryOnAnotherConnection(.goAway(notProcessed: false)), true),
        (.retryOnAnotherConnection(.goAway(notProcessed: true)), false),
        (.retryOnAnotherConnection(.refusedStream), false),
        (ResponseClassifier.classify(status: 403, reason: .expiredProviderToken, timestamp: nil), true),
        (ResponseClassifier.classify(status: 429, reason: .tooManyProviderTokenUpdates, timestamp: nil), true),
        (ResponseClassifier.classify(status: 403, reason: .invalidProviderToken, timestamp: nil), false),
    ]

    private func answerOne(_ random: inout SplitMix64) {
        let lane = Int(random.next() % UInt64(laneCount))
        guard !inFlight[lane].isEmpty else { return }
        let send = inFlight[lane].remove(at: Int(random.next() % UInt64(inFlight[lane].count)))
        let picked = DeliveryWorld.answers[Int(random.next() % UInt64(DeliveryWorld.answers.count))]
        // A pool may even count a credentials fault; the rules must not believe it.
        var bump = picked.counts ? 1 : 0
        if case .credentialsRejected = picked.outcome { bump = Int(random.next() % 2) }
        answer(send, lane: lane, outcome: picked.outcome, counts: picked.counts, reported: send.attempts + bump)
    }

    private func answer(_ send: NotificationSend, lane: Int, outcome: DeliveryOutcome, counts: Bool, reported: Int) {
        let key = DeliveryWorld.key(send.entryID, send.notification.deviceToken)
        log.append("answer \(key.suffix(20)) \(outcome)")
        if case .credentialsRejected = outcome, !halted[lane] {
            // The pool stops sending before it reports the answer, and hands over what it held.
            haltLane(lane, handingOver: Int(reported % 3))
        }
        if sandbox, lane == 0, outcome == ResponseClassifier.classify(status: 400, reason: .badDeviceToken, timestamp: nil),
           var note = notes[key] {
            // Production's BadDeviceToken: tried once on sandbox (or parked), spending no attempt.
            note.redirected = true
            notes[key] = note
        } else if counts, var note = notes[key] {
            note.spent = max(note.spent, reported)
            if outcome == .accepted { note.accepted = true }
            notes[key] = note
        }
        if case .retryTokenLater = outcome { throttledAt[send.notification.deviceToken] = now }
        if sandbox, lane == 2 {
            if outcome == .accepted { sandboxTokens.insert(send.notification.deviceToken) }
            if outcome == ResponseClassifier.classify(status: 400, reason: .badDeviceToken, timestamp: nil) {
                sandboxTokens.remove(send.notification.deviceToken)
            }
        }
        rules.answered(context: send.context, attempts: reported, outcome: outcome, now: now)
    }

    // MARK: credentials, drain

    private func halt(lane: Int) {
        guard !halted[lane] else { return }
        haltLane(lane, handingOver: 1)
    }

    private func haltLane(_ lane: Int, handingOver count: Int) {
        halted[lane] = true
        // Requests the pool queued for resending (never sent) come back with the halt.
        let handed = Array(inFlight[lane].prefix(count))
        inFlight[lane].removeFirst(handed.count)
        log.append("halt \(lane) handing over \(handed.count)")
        rules.credentialsHalted(lane: lane, unsent: handed.map(\.context), now: now)
        if rules.queued(lane: lane) != 0 { violation("app \(lane) halted with \(rules.queued(lane: lane)) still queued") }
    }

    private func resume(lane: Int) {
        guard halted[lane] else { return }
        halted[lane] = false
        log.append("resume \(lane)")
        rules.credentialsResumed(lane: lane)
    }

    private func drain() {
        guard !rules.draining else { return }
        log.append("drain")
        rules.drain(now: now)
        if rules.queuedTokens != 0 { violation("drain left \(rules.queuedTokens) queued") }
    }

    // MARK: writes

    private func tick() {
        guard let batch = rules.takeBatch() else { return }
        log.append("tick batch \(batch.sequence) q\(batch.queue) x\(batch.entries.count)")
        for entry in batch.entries {
            if let queue = entries[entry.entryID]?.queue, queue != batch.queue {
                violation("entry \(entry.entryID) of queue \(queue) in a batch of queue \(batch.queue)")
            }
            if finalized.contains(entry.entryID) { violation("entry \(entry.entryID) finished twice") }
            finalized.insert(entry.entryID)
            for lane in 0..<laneCount where inFlight[lane].contains(where: { $0.entryID == entry.entryID }) {
                violation("entry \(entry.entryID) taken for acknowledgement while one of its notifications is in flight")
            }
            check(entry)
        }
        if connected { written.append(batch) }
    }

    private func confirmOldest() {
        guard connected, !written.isEmpty else { return }
        apply(written.removeFirst())
    }

    private func apply(_ batch: OutcomeBatch) {
        log.append("exec \(batch.sequence)")
        guard applied.insert(batch.sequence).inserted else {
            violation("batch \(batch.sequence) written again after Redis confirmed it")
            return
        }
        for entry in batch.entries {
            if outcomes[entry.entryID] != nil { violation("entry \(entry.entryID) acknowledged twice") }
            outcomes[entry.entryID] = entry
            if !rules.isHeld(entry.entryID, queue: batch.queue) { violation("entry \(entry.entryID) released before its batch was confirmed") }
        }
        rules.confirmed(batch.sequence)
        for entry in batch.entries where rules.isHeld(entry.entryID, queue: batch.queue) {
            violation("entry \(entry.entryID) still held after its batch was confirmed")
        }
    }

    private func loseConnection() {
        guard connected else { return }
        log.append("redis lost (\(written.count) unconfirmed)")
        connected = false
        written = []
    }

    private func reconnect() {
        guard !connected else { return }
        log.append("redis back")
        connected = true
        // Each queue's connection comes back and replays that queue's unconfirmed batches.
        written = (0..<queues).flatMap { rules.redisReconnected(queue: $0) }
        if written.count != rules.unconfirmed.count { violation("reconnecting replays \(written.count) of \(rules.unconfirmed.count) unconfirmed batches") }
        rereadPending()
    }

    // MARK: invariants of one entry's outcome

    /// The outcome of one entry: every notification of it exactly once, in a form Redis can hold.
    private func check(_ outcome: EntryOutcome) {
        guard let entry = entries[outcome.entryID] else {
            violation("an outcome for \(outcome.entryID), which the world never enqueued")
            return
        }
        let results = outcome.writes.compactMap { if case .result(let draft) = $0 { draft } else { nil } }
        let receipts = entry.queue < rules.resultsByQueue.count && rules.resultsByQueue[entry.queue]
        if !receipts && !results.isEmpty { violation("\(entry.id) has \(results.count) results with results off") }
        if let reason = entry.wholeReason {
            let letters = outcome.writes.compactMap { if case .deadLetter(let draft) = $0 { draft } else { nil } }
            if receipts && (results.isEmpty || results.contains { $0.status != "dead_lettered" || $0.reason != reason }) {
                violation("entry \(entry.id) dead-lettered whole as \(reason) has results \(results)")
            }
            if outcome.writes.count - results.count != 1 || letters.first?.reason != reason || letters.first?.tokens != nil {
                violation("entry \(entry.id) should be dead-lettered whole as \(reason): \(outcome.writes)")
            }
            return
        }
        var seen: [String: String] = [:]
        func record(_ token: String, _ what: String) {
            if let earlier = seen[token] { violation("\(entry.id) token \(token.suffix(8)) ended twice: \(earlier) and \(what)") }
            seen[token] = what
        }
        /// The attempts a write of `tokens` must state: the most any of them spent (credential faults spend none).
        func expectedAttempts(_ tokens: [String]) -> Int {
            tokens.reduce(0) { max($0, notes[DeliveryWorld.key(entry.id, $1)]?.spent ?? entry.initialAttempts) }
        }
        for token in entry.tokens where notes[DeliveryWorld.key(entry.id, token)]?.accepted == true { record(token, "accepted") }
        for write in outcome.writes {
            switch write {
            case .feedback(let draft) where draft.reason == DeliveryRules.wrongEnvironmentReason:
                // Not an outcome of its own: the notification was accepted, by sandbox.
                let note = notes[DeliveryWorld.key(entry.id, draft.token)]
                if !sandbox || note?.accepted != true || note?.redirected != true || draft.environment != "sandbox" {
                    violation("wrong_environment feedback for \(draft.token.suffix(8)) of \(entry.id) not accepted by sandbox after production's BadDeviceToken: \(String(describing: note))")
                }
            case .feedback(let draft):
                record(draft.token, "feedback")
                if draft.job != entry.id.description { violation("feedback for \(draft.token) names job \(draft.job), not \(entry.id)") }
            case .deadLetter(let draft):
                guard let tokens = draft.tokens else { violation("a job's dead letter without tokens: \(entry.id)"); continue }
                for token in tokens { record(token, "dead letter \(draft.reason)") }
                if draft.reason.isEmpty { violation("dead letter without a reason for \(entry.id)") }
                if draft.attempts > policy.maxAttempts && entry.initialAttempts <= policy.maxAttempts {
                    violation("dead letter of \(entry.id) states \(draft.attempts) attempts (max \(policy.maxAttempts))")
                }
                if draft.attempts != expectedAttempts(tokens) {
                    violation("dead letter of \(entry.id) states \(draft.attempts) attempts; the world counts \(expectedAttempts(tokens))")
                }
                if draft.reason == "expired", let expiration = entry.expiration, expiration != 0, expiration <= Int64.max / 1000,
                   expiration * 1000 > max(now, entry.holds ? entry.deliverAt ?? 0 : 0) + 3_600_000 {
                    violation("\(entry.id) dead-lettered as expired with apns-expiration \(expiration) an hour away")
                }
            case .result:
                // Receipts mirror the outcomes above (checked by ResultsRulesTests), never one of their own.
                break
            case .retry(let retry):
                for token in retry.tokens { record(token, "retry set") }
                let lane = retry.fields.last { $0.name == JobLane.field }.map { String(decoding: $0.value, as: UTF8.self) }
                if lane != (queues > 1 && entry.queue == queues - 1 ? "urgent" : nil) {
                    violation("retry of \(entry.id) from queue \(entry.queue) has lane \(lane ?? "none"): a retry must go back to its own lane")
                }
                let holds = entry.holds && entry.initialAttempts < policy.maxAttempts
                if retry.scheduled != holds {
                    violation("retry of \(entry.id) scheduled \(retry.scheduled), but the job \(holds ? "waits for" : "has no") deliver_at ahead")
                }
                if retry.scheduled, retry.dueAt != entry.deliverAt {
                    violation("scheduled retry of \(entry.id) due at \(retry.dueAt), its deliver_at is \(entry.deliverAt ?? -1)")
                }
                if retry.scheduled, !retry.fields.contains(where: { $0.name == "scheduled" }) {
                    violation("scheduled retry of \(entry.id) carries no `scheduled` mark: it could be held again when promoted")
                }
                if retry.attempts >= policy.maxAttempts {
                    violation("retry of \(entry.id) with \(retry.attempts) attempts spent (max \(policy.maxAttempts))")
                }
                if retry.attempts != expectedAttempts(retry.tokens) {
                    violation("retry of \(entry.id) states \(retry.attempts) attempts; the world counts \(expectedAttempts(retry.tokens)) (credential faults spend none)")
                }
                if let expiration = entry.expiration, expiration > 0, expiration <= Int64.max / 1000, expiration * 1000 <= retry.dueAt {
                    violation("retry of \(entry.id) due at \(retry.dueAt), after its apns-expiration \(expiration)")
                }
            }
        }
        for token in entry.invalidTokens where seen[token] == nil { violation("invalid token \(token) of \(entry.id) got no dead letter") }
        for token in entry.tokens where seen[token] == nil {
            // Neither accepted nor written: superseded, which needs a newer job for the same token and collapse id.
            guard let collapseID = entry.collapseID,
                  entryOrder.contains(where: { $0 > entry.id && entries[$0]?.queue == entry.queue && entries[$0]?.collapseID == collapseID
                      && entries[$0]?.tokens.contains(token) == true })
            else {
                let note = notes[DeliveryWorld.key(entry.id, token)]
                violation("\(entry.id) token \(token.suffix(8)) has no outcome (not accepted, written, or superseded by a newer job): "
                          + "collapse \(entry.collapseID ?? "-") expiration \(entry.expiration.map(String.init) ?? "-") sends \(note?.sends ?? -1) writes \(outcome.writes)")
                continue
            }
            superseded += 1
            seen[token] = "superseded"
        }
        if receipts {
            // One result per notification that ended here, with the status it really had.
            var resulted: [String: String] = [:]
            for result in results {
                if resulted[result.token] != nil { violation("\(entry.id) token \(result.token.suffix(8)) has two results") }
                resulted[result.token] = result.status
                if result.job != (entry.fields.first { $0.name == "origin" }.map { String(decoding: $0.value, as: UTF8.self) } ?? entry.id.description) {
                    violation("result of \(entry.id) names job \(result.job)")
                }
            }
            for (token, what) in seen {
                let expected: String? = what == "retry set" ? nil : what == "accepted" ? "accepted" : what == "feedback" ? "dead_token"
                    : what == "superseded" ? "superseded" : "dead_lettered"
                if resulted[token] != expected {
                    violation("\(entry.id) token \(token.suffix(8)) ended as \(what) but its result is \(resulted[token] ?? "none")")
                }
            }
            for token in resulted.keys where seen[token] == nil { violation("\(entry.id) has a result for \(token.suffix(8)) without an outcome") }
        }
    }
    private(set) var superseded = 0

    // MARK: the end

    /// Lets everything finish: Redis back, the apps' credentials as they are, every send
    /// answered 200, every batch confirmed; then checks that nothing is left and the counts balance.
    func settle() {
        if !connected { reconnect() }
        var rounds = 0
        while rounds < 1_000 {
            rounds += 1
            for lane in 0..<laneCount { pump(lane: lane, slots: 1_000, refuseLast: false) }
            for lane in 0..<laneCount {
                while let send = inFlight[lane].first {
                    inFlight[lane].removeFirst()
                    answer(send, lane: lane, outcome: .accepted, counts: true, reported: send.attempts + 1)
                }
            }
            tick()
            while !written.isEmpty { confirmOldest() }
            if rules.queuedTokens == 0 && inFlight.allSatisfy(\.isEmpty) && rules.writesSettled { break }
        }
        if rules.queuedTokens != 0 || rules.heldCount != 0 || !rules.writesSettled {
            violation("did not settle: \(rules.queuedTokens) queued, \(rules.heldCount) held, writes settled \(rules.writesSettled)")
        }
        for id in entryOrder where outcomes[id] == nil { violation("entry \(id) never acknowledged") }

        // Counts balance: every notification read has exactly one outcome.
        let counters = rules.counters
        let read = entryOrder.reduce(0) { total, id in
            guard let entry = entries[id] else { return total }
            return total + (entry.wholeReason != nil ? 1 : entry.tokens.count + entry.invalidTokens.count)
        }
        let ended = counters.accepted + counters.deadTokens + counters.deadLettered + counters.superseded + counters.retried + counters.handedBack
            + counters.scheduled
        if read != ended { violation("counts do not balance: \(read) read, \(ended) ended (\(counters))") }
        // And per app (the labels of herald_notifications_total): each notification's outcome is
        // counted for its job's app; a job naming an app the rules do not serve, for none.
        var readPerApp = Array(repeating: 0, count: DeliveryWorld.apps.count)
        var readUnattributed = 0
        for id in entryOrder {
            guard let entry = entries[id] else { continue }
            let notifications = entry.wholeReason != nil ? 1 : entry.tokens.count + entry.invalidTokens.count
            let app = entry.fields.first { $0.name == "app" }.map { String(decoding: $0.value, as: UTF8.self) } ?? "default"
            if let lane = DeliveryWorld.apps.firstIndex(of: app) { readPerApp[lane] += notifications } else { readUnattributed += notifications }
        }
        if sandbox {
            if counters.apps.count != laneCount || counters.apps[2] != AppOutcomes() {
                violation("the sandbox lane counted outcomes of its own: \(counters.apps)")
            }
            let wrong = notes.values.filter { $0.accepted && $0.redirected }.count
            if counters.wrongEnvironment != wrong { violation("wrong environment: rules count \(counters.wrongEnvironment), APNs-by-sandbox \(wrong)") }
        } else if counters.apps.count != DeliveryWorld.apps.count { violation("\(counters.apps.count) apps counted, \(DeliveryWorld.apps.count) configured") }
        for (lane, outcomes) in counters.apps.enumerated() where lane < readPerApp.count {
            let endedForApp = outcomes.accepted + outcomes.deadTokens + outcomes.deadLettered + outcomes.superseded + outcomes.retried
                + outcomes.handedBack + outcomes.scheduled
            if endedForApp != readPerApp[lane] {
                violation("app \(DeliveryWorld.apps[lane]): \(readPerApp[lane]) read, \(endedForApp) ended (\(outcomes))")
            }
        }
        if counters.unattributedDeadLettered != readUnattributed {
            violation("jobs of no app: \(readUnattributed) read, \(counters.unattributedDeadLettered) dead-lettered")
        }
        let acceptedPerApp = counters.apps.map(\.accepted)
        let latencyPerApp = counters.apps.map { Int($0.endToEndLatency.count) }
        if acceptedPerApp != latencyPerApp { violation("accepted per app \(acceptedPerApp), end-to-end latencies recorded \(latencyPerApp)") }
        if counters.superseded != superseded { violation("superseded: rules count \(counters.superseded), the world finds \(superseded)") }
        if counters.jobsRead != entryOrder.count || counters.jobsFinished != entryOrder.count {
            violation("\(entryOrder.count) entries, \(counters.jobsRead) read, \(counters.jobsFinished) finished")
        }
        let acceptedNotes = notes.values.filter(\.accepted).count
        if counters.accepted != acceptedNotes { violation("accepted: rules count \(counters.accepted), APNs accepted \(acceptedNotes)") }
        for queue in 0..<queues {
            let accepted = notes.values.filter { $0.accepted && entries[$0.entry]?.queue == queue }.count
            let counted = rules.queueCounters[queue].accepted
            if counted != accepted { violation("queue \(queue) accepted: rules count \(counted), APNs accepted \(accepted)") }
            let read = entryOrder.filter { entries[$0]?.queue == queue }.count
            if rules.queueCounters[queue].jobsRead != read { violation("queue \(queue): \(read) entries, \(rules.queueCounters[queue].jobsRead) read") }
        }
    }
}

extension String {
    /// Eight lowercase hex digits of `value`.
    init(format8 value: UInt32) {
        let digits = Array("0123456789abcdef")
        var text = ""
        for shift in stride(from: 28, through: 0, by: -4) { text.append(digits[Int((value >> UInt32(shift)) & 0xF)]) }
        self = text
    }
}
