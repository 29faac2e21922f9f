import APNs
import Queue
import Testing
import Worker

/// `DeliveryRules` counts every outcome for the job's own queue and app (the labels of
/// herald_notifications_total), and jobs of no app of the worker apart.
@Suite
struct AppOutcomeCounting {
    static let now: Int64 = 1_800_000_000_000

    static func entry(_ sequence: UInt64, app: String?, token: String, payload: Bool = true) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = [("token", Array(token.utf8))]
        if payload { fields.append(("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8))) }
        if let app { fields.append(("app", Array(app.utf8))) }
        return StreamRecord(id: StreamEntryID(milliseconds: 1_799_999_000_000, sequence: sequence), fields: fields)
    }

    @Test
    func outcomesLandInTheirQueueAndApp() throws {
        let defaults = JobDefaults(bundleID: "com.example.app")
        let rules = DeliveryRules(policy: DeliveryPolicy(), apps: [("default", defaults), ("second", defaults)],
                                  queues: ["alpha", "beta"], seed: 3)
        let token = { (n: Int) in String(repeating: "0", count: 63) + String(n, radix: 16) }
        // alpha: 2 for default (one APNs calls dead), 1 for second; beta: 1 for second, 1 malformed
        // for default, 1 for an app the worker does not serve.
        rules.entriesArrived([AppOutcomeCounting.entry(0, app: nil, token: token(1)), AppOutcomeCounting.entry(1, app: "default", token: token(2)),
                              AppOutcomeCounting.entry(2, app: "second", token: token(3))], queue: 0, deliveries: nil, now: AppOutcomeCounting.now)
        rules.entriesArrived([AppOutcomeCounting.entry(3, app: "second", token: token(4)),
                              AppOutcomeCounting.entry(4, app: nil, token: token(5), payload: false),
                              AppOutcomeCounting.entry(5, app: "nobody", token: token(6))], queue: 1, deliveries: nil, now: AppOutcomeCounting.now)
        for lane in 0..<2 {
            while let send = rules.nextSend(lane: lane, now: AppOutcomeCounting.now) {
                let outcome: DeliveryOutcome = send.notification.deviceToken == token(2)
                    ? .deadToken(status: 410, reason: .unregistered, timestamp: AppOutcomeCounting.now) : .accepted
                rules.answered(context: send.context, attempts: 1, outcome: outcome, now: AppOutcomeCounting.now + 5)
            }
        }
        let alpha = rules.queueCounters[0], beta = rules.queueCounters[1]
        #expect(alpha.apps.map(\.accepted) == [1, 1] && alpha.apps.map(\.deadTokens) == [1, 0], "\(alpha.apps)")
        #expect(alpha.apps.map { Int($0.endToEndLatency.count) } == [1, 1])
        #expect(beta.apps.map(\.accepted) == [0, 1] && beta.apps.map(\.deadLettered) == [1, 0], "\(beta.apps)")
        #expect(alpha.unattributedDeadLettered == 0 && beta.unattributedDeadLettered == 1)
        // The totals are the sums.
        #expect(rules.counters.accepted == 3 && rules.counters.deadTokens == 1 && rules.counters.deadLettered == 2)
        #expect(rules.counters.apps.map(\.accepted) == [1, 2])
    }
}
