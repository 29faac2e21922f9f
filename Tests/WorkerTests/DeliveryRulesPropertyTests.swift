import APNs
import PropertyBased
import Queue
import Testing
import Worker

/// The delivery rules' invariants over random event sequences (no Redis, no sockets): random jobs
/// (1…3 tokens, an invalid one now and then, collapse ids, expirations already past, soon or far,
/// attempts already spent, unknown apps, missing payloads, claims delivered too often), random
/// APNs answers per send (200, 400/403/410/413/429 reasons, 500/503, resets, lost connections,
/// GOAWAYs, refused streams, credential 403s), timers, drain, halted and resumed credentials,
/// confirmed and lost writes, Redis reconnects with the pending list read again.
///
/// `DeliveryWorld` checks at every event and at the end: every notification ends exactly once
/// (accepted, dead token, dead letter with a reason, superseded by a newer job, or the retry
/// set); an entry is acknowledged once, only in the batch holding its writes, and nothing of it is
/// in flight or sent after; nothing is sent or retried after its apns-expiration; no send and no
/// retry entry exceeds `maxAttempts`; a credentials fault spends no attempt; counts balance.
@Suite
struct DeliveryRulesProperties {
    /// One scenario: a policy (max attempts, immediate retries, max deliveries) and up to 400
    /// events. Shrinking drops events, so a failure ends as a short sequence.
    @Test
    func everyNotificationEndsExactlyOnceAndTheRulesHold() async {
        await propertyCheck(count: 400, input: Gen.int(in: 1...5), Gen.int(in: 0...3), Gen.int(in: 1...4),
                            Gen.uint64().array(of: 1...400)) { maxAttempts, immediateRetries, maxDeliveries, steps in
            let world = DeliveryWorld(maxAttempts: maxAttempts, immediateRetries: immediateRetries, maxDeliveries: maxDeliveries,
                                      seed: steps.first ?? 1)
            for step in steps { world.step(step) }
            world.settle()
            #expect(world.violations.isEmpty, "\(world.violations.prefix(3).joined(separator: "\n"))")
        }
    }

    /// The same with receipts on: every notification that ends has exactly one result, with the
    /// status of its real outcome; one put in the retry set has none until its retry ends.
    @Test
    func receiptsMirrorEveryOutcomeExactlyOnce() async {
        await propertyCheck(count: 200, input: Gen.int(in: 1...5), Gen.int(in: 0...3), Gen.int(in: 1...4),
                            Gen.uint64().array(of: 1...400)) { maxAttempts, immediateRetries, maxDeliveries, steps in
            let world = DeliveryWorld(maxAttempts: maxAttempts, immediateRetries: immediateRetries, maxDeliveries: maxDeliveries,
                                      seed: steps.first ?? 1, queues: (steps.first ?? 0) % 3 == 0 ? 2 : 1, results: true)
            for step in steps { world.step(step) }
            world.settle()
            #expect(world.violations.isEmpty, "\(world.violations.prefix(3).joined(separator: "\n"))")
        }
    }

    /// The same with jobs from two or three queues: each outcome in its own queue's batch, held
    /// entries and reconnect replays per queue, collapse ids compared within a queue, apns-ids
    /// derived in the queue's namespace, and every queue's counts balanced.
    @Test
    func severalQueuesKeepTheRules() async {
        await propertyCheck(count: 200, input: Gen.int(in: 2...3), Gen.int(in: 1...5), Gen.int(in: 0...3),
                            Gen.uint64().array(of: 1...400)) { queues, maxAttempts, immediateRetries, steps in
            let world = DeliveryWorld(maxAttempts: maxAttempts, immediateRetries: immediateRetries, maxDeliveries: 3,
                                      seed: steps.first ?? 1, queues: queues)
            for step in steps { world.step(step) }
            world.settle()
            #expect(world.violations.isEmpty, "\(world.violations.prefix(3).joined(separator: "\n"))")
        }
        for seed in UInt64(1)...15 {
            var random = SplitMix64(seed: seed)
            let world = DeliveryWorld(maxAttempts: Int(random.next() % 5) + 1, immediateRetries: Int(random.next() % 4),
                                      maxDeliveries: Int(random.next() % 4) + 1, seed: seed, queues: Int(seed % 2) + 2)
            for _ in 0..<3_000 { world.step(random.next()) }
            world.settle()
            #expect(world.violations.isEmpty, "seed \(seed): \(world.violations.prefix(3).joined(separator: "\n"))")
            if !world.violations.isEmpty { break }
        }
    }

    /// The same with a seeded generator and long runs: thousands of events in one world, so
    /// collapse chains, halts and reconnects pile up as they do in a long-running worker.
    @Test
    func longRunsKeepTheRules() {
        for seed in UInt64(1)...40 {
            var random = SplitMix64(seed: seed)
            let world = DeliveryWorld(maxAttempts: Int(random.next() % 5) + 1, immediateRetries: Int(random.next() % 4),
                                      maxDeliveries: Int(random.next() % 4) + 1, seed: seed)
            for _ in 0..<3_000 { world.step(random.next()) }
            world.settle()
            #expect(world.violations.isEmpty, "seed \(seed): \(world.violations.prefix(3).joined(separator: "\n"))")
            if !world.violations.isEmpty { break }
        }
    }
}
