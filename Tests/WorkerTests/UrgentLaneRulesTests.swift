import APNs
import Queue
import Testing
import Worker

/// The urgent lane in `DeliveryRules`: tokens of a queue's urgent stream go ahead of the bulk
/// tokens already waiting, bulk keeps one send in four while urgent work floods, a retry of an
/// urgent job carries `lane` = `urgent` (so the promote script puts it back into the urgent
/// stream), and sends are counted by effective priority per app.
@Suite
struct UrgentLaneRules {
    static let now: Int64 = 1_800_000_000_000

    static func entry(_ sequence: UInt64, token: Int, priority: String? = nil) -> StreamRecord {
        var fields: [(name: String, value: [UInt8])] = [
            ("token", Array((String(repeating: "0", count: 60) + String(format4(token))).utf8)),
            ("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8)),
        ]
        if let priority { fields.append(("priority", Array(priority.utf8))) }
        return StreamRecord(id: StreamEntryID(milliseconds: 1_799_999_000_000, sequence: sequence), fields: fields)
    }

    static func format4(_ n: Int) -> String {
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    /// Queue 0 is the bulk stream of "q", queue 1 its urgent stream.
    static func rules() -> DeliveryRules {
        let rules = DeliveryRules(policy: DeliveryPolicy(), apps: [("default", JobDefaults(bundleID: "com.example.app"))],
                                  queues: ["q", "q"], seed: 7)
        rules.urgentQueues = [false, true]
        return rules
    }

    @Test
    func urgentTokensGoAheadOfBulkTokensAlreadyWaiting() {
        let rules = UrgentLaneRules.rules()
        rules.entriesArrived((0..<8).map { UrgentLaneRules.entry(UInt64($0), token: $0) }, queue: 0, deliveries: nil, now: UrgentLaneRules.now)
        rules.entriesArrived((0..<2).map { UrgentLaneRules.entry(UInt64(100 + $0), token: 100 + $0) }, queue: 1, deliveries: nil,
                             now: UrgentLaneRules.now)
        #expect(rules.queuedUrgent(lane: 0) == 2 && rules.queued(lane: 0) == 10)
        let first = (0..<2).compactMap { _ in rules.nextSend(lane: 0, now: UrgentLaneRules.now) }
        #expect(first.map(\.entryID.sequence) == [100, 101], "the urgent jobs, read last, are sent first: \(first.map(\.entryID))")
        let rest = (0..<8).compactMap { _ in rules.nextSend(lane: 0, now: UrgentLaneRules.now) }
        #expect(rest.map(\.entryID.sequence) == Array(0..<8), "then the bulk ones in order")
        #expect(rules.nextSend(lane: 0, now: UrgentLaneRules.now) == nil)
    }

    @Test
    func bulkKeepsOneSendInFourWhileUrgentWorkFloods() {
        let rules = UrgentLaneRules.rules()
        rules.entriesArrived((0..<40).map { UrgentLaneRules.entry(UInt64($0), token: $0) }, queue: 0, deliveries: nil, now: UrgentLaneRules.now)
        rules.entriesArrived((0..<40).map { UrgentLaneRules.entry(UInt64(1000 + $0), token: 1000 + $0) }, queue: 1, deliveries: nil,
                             now: UrgentLaneRules.now)
        let sends = (0..<40).compactMap { _ in rules.nextSend(lane: 0, now: UrgentLaneRules.now) }
        let bulk = sends.filter { $0.entryID.sequence < 1000 }.count
        #expect(bulk == 10, "3 urgent, then 1 bulk: \(sends.map(\.entryID.sequence))")
        // Once bulk is empty or urgent is, the other lane gets every send.
        let all = (0..<40).compactMap { _ in rules.nextSend(lane: 0, now: UrgentLaneRules.now) }
        #expect(all.count == 40 && rules.queued(lane: 0) == 0)
    }

    @Test
    func aRetryOfAnUrgentJobRemembersItsLaneAndABulkOneDoesNot() throws {
        let rules = UrgentLaneRules.rules()
        rules.entriesArrived([UrgentLaneRules.entry(1, token: 1)], queue: 0, deliveries: nil, now: UrgentLaneRules.now)
        rules.entriesArrived([UrgentLaneRules.entry(2, token: 2)], queue: 1, deliveries: nil, now: UrgentLaneRules.now)
        // A drain hands both back to the retry set (no attempt spent).
        #expect(rules.drain(now: UrgentLaneRules.now) == 2)
        var lanes: [Int: String] = [:]
        while let batch = rules.takeBatch() {
            for entry in batch.entries {
                for write in entry.writes {
                    guard case .retry(let retry) = write else { continue }
                    lanes[batch.queue] = retry.fields.last { $0.name == JobLane.field }.map { String(decoding: $0.value, as: UTF8.self) } ?? "none"
                }
            }
        }
        #expect(lanes[1] == "urgent", "the urgent stream's retry goes back to it: \(lanes)")
        #expect(lanes[0] == "none", "a bulk retry has no lane field (a plain XADD stays bulk): \(lanes)")
    }

    @Test
    func sendsAreCountedByEffectivePriorityPerApp() {
        let rules = UrgentLaneRules.rules()
        rules.entriesArrived([UrgentLaneRules.entry(1, token: 1), UrgentLaneRules.entry(2, token: 2, priority: "10"),
                              UrgentLaneRules.entry(3, token: 3, priority: "5"), UrgentLaneRules.entry(4, token: 4, priority: "1")],
                             queue: 0, deliveries: nil, now: UrgentLaneRules.now)
        while rules.nextSend(lane: 0, now: UrgentLaneRules.now) != nil {}
        let app = rules.counters.apps[0]
        #expect(app.sentPriority10 == 2 && app.sentPriority5 == 1 && app.sentPriority1 == 1,
                "an alert without priority is sent at APNs' default 10: \(app)")
    }

    @Test
    func producerRoutingRule() {
        #expect(JobLane.route(pushType: nil, priority: nil) == .urgent)
        #expect(JobLane.route(pushType: "alert", priority: "10") == .urgent)
        #expect(JobLane.route(pushType: "voip", priority: nil) == .urgent)
        #expect(JobLane.route(pushType: "alert", priority: "5") == .bulk)
        #expect(JobLane.route(pushType: "background", priority: nil) == .bulk)
        #expect(JobLane.route(pushType: "liveactivity", priority: "10") == .bulk)
        #expect(JobLane.of([("lane", "bulk"), ("priority", "10")]) == .bulk)
        #expect(JobLane.of([("lane", "fast")]) == nil)
    }
}
