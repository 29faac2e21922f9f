import APNs
import Foundation
import MockAPNs
import Queue
import Testing
import Transport
import Worker

extension IntegrationTests {
    /// The payload and topic rules APNs enforces, through the real worker, a private redis-server
    /// and the emulator over TLS + HTTP/2: good Live Activity and suffixed jobs are delivered, each
    /// bad one is dead-lettered with its own reason and never reaches the emulator, and every job
    /// is counted.
    @Suite
    struct PayloadRules {
        static let bundle = WorkerHarness.bundleID

        static func activity(_ aps: String) -> String { #"{"aps":{"timestamp":1700000000,"# + aps + "}}" }
        static let start = #""event":"start","attributes-type":"Match","attributes":{"home":"A"},"content-state":{"score":"0-0"}"#
        static let update = #""event":"update","content-state":{"score":"1-0"}"#

        /// (fields besides the token, the reason or nil for delivered)
        static let cases: [(fields: [(String, String)], reason: String?)] = [
            ([("push_type", "liveactivity"), ("payload", activity(start))], nil),
            ([("push_type", "liveactivity"), ("payload", activity(start + #","input-push-token":1"#))], nil),
            ([("push_type", "liveactivity"), ("payload", activity(start + #","input-push-channel":"dHJhY2s=""#))], nil),
            ([("push_type", "liveactivity"), ("payload", activity(update + #","stale-date":1700003600,"relevance-score":50"#))], nil),
            ([("push_type", "liveactivity"), ("payload", activity(#""event":"end","content-state":{},"dismissal-date":1700007200"#))], nil),
            ([("push_type", "liveactivity"), ("topic", bundle + ".push-type.liveactivity"), ("payload", activity(update))], nil),
            ([("push_type", "voip"), ("topic", bundle + ".voip"), ("payload", #"{"aps":{}}"#)], nil),
            ([("push_type", "widgets"), ("payload", #"{"aps":{"content-changed":true}}"#)], nil),
            ([("push_type", "mdm"), ("topic", "com.apple.mgmt.External.0b7c"), ("payload", #"{"mdm":"x"}"#)], nil),
            ([("push_type", "liveactivity"), ("payload", activity(#""event":"update""#))], "live_activity_missing_content_state"),
            ([("push_type", "liveactivity"), ("payload", activity(#""event":"end""#))], "live_activity_missing_content_state"),
            ([("push_type", "liveactivity"), ("payload", activity(#""event":"update","content-state":[1]"#))], "live_activity_bad_content_state"),
            ([("push_type", "liveactivity"), ("payload", activity(update + #","dismissal-date":"tomorrow""#))], "live_activity_bad_dismissal_date"),
            ([("push_type", "liveactivity"), ("payload", activity(update + #","stale-date":null"#))], "live_activity_bad_stale_date"),
            ([("push_type", "liveactivity"), ("payload", activity(update + #","relevance-score":"high""#))], "live_activity_bad_relevance_score"),
            ([("push_type", "liveactivity"), ("payload", activity(start + #","input-push-token":true"#))], "live_activity_bad_input_push_token"),
            ([("push_type", "liveactivity"), ("payload", activity(update + #","input-push-token":1"#))], "live_activity_input_push_token_not_start"),
            ([("push_type", "liveactivity"), ("payload", activity(start + #","input-push-channel":7"#))], "live_activity_bad_input_push_channel"),
            ([("push_type", "liveactivity"), ("payload", activity(update + #","input-push-channel":"abc""#))], "live_activity_input_push_channel_not_start"),
            ([("push_type", "liveactivity"), ("payload", activity(start + #","input-push-token":1,"input-push-channel":"abc""#))],
             "live_activity_input_push_token_and_channel"),
            ([("push_type", "liveactivity"), ("topic", bundle), ("payload", activity(update))], "topic_push_type_mismatch"),
            ([("push_type", "liveactivity"), ("topic", bundle + ".voip"), ("payload", activity(update))], "topic_push_type_mismatch"),
            ([("topic", bundle + ".voip"), ("payload", #"{"aps":{"alert":"hi"}}"#)], "topic_push_type_mismatch"),
            ([("push_type", "background"), ("topic", bundle + ".push-type.widgets"), ("payload", #"{"aps":{"content-available":1}}"#)],
             "topic_push_type_mismatch"),
            ([("push_type", "voip"), ("topic", bundle), ("payload", #"{"aps":{}}"#)], "topic_push_type_mismatch"),
            ([("payload", #"{"aps":{"alert":"late"}}"#), ("expiration", "1000000000")], "expired"),
        ]

        @Test
        func goodAndBadLiveActivityAndTopicJobsAreAllCounted() async throws {
            try await withWorkerBed { bed in
                let cases = Self.cases
                let good = 300
                let total = cases.count + good
                try await bed.enqueue(total) { index in
                    let token = ("token", WorkerHarness.deviceToken(index, prefix: "1a"))
                    if index < cases.count { return [token] + cases[index].fields }
                    return [token, ("payload", WorkerHarness.payload(index))]
                }
                try await bed.startWorker()
                let ledger = try await bed.waitUntilSettled(enqueued: total)

                let bad = cases.compactMap(\.reason)
                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique == total - bad.count && ledger.duplicates == 0, "\(ledger)")
                #expect(ledger.rejected.isEmpty, "no bad job reached the emulator: \(ledger)")
                let dead = try await bed.client.entries(bed.keys.dead)
                var expected: [String: Int] = [:]
                for reason in bad { expected[reason, default: 0] += 1 }
                #expect(ledger.deadByReason == expected, "\(ledger)")
                for entry in dead {
                    let message = entry["message"] ?? ""
                    #expect(!message.isEmpty && !message.unicodeScalars.contains { $0.value < 0x20 }, "\(entry["reason"] ?? "?"): \(message)")
                    if entry["reason"] == "topic_push_type_mismatch" {
                        #expect(message.contains("suffix"), "names the suffix: \(message)")
                    }
                    if entry["reason"] == "expired" { #expect(message.contains("had passed when the worker read it"), "\(message)") }
                }
            }
        }

        /// The emulator holds requests to the same rules (so a job Herald sends is one APNs would
        /// take): notifications sent straight through the pool, past Herald's own checks, get
        /// APNs' answers: TopicDisallowed for a topic that does not fit its push type, BadPayload
        /// for a Live Activity without content-state.
        @Test
        func theEmulatorRefusesWhatHeraldRefuses() async throws {
            let bed = try await TestBed()
            defer { bed.shutdown() }
            let sends: [(PushType, String, String)] = [
                (.alert, TestBed.topic + ".voip", #"{"aps":{"alert":"x"}}"#),
                (.background, TestBed.topic + ".push-type.liveactivity", #"{"aps":{"content-available":1}}"#),
                (.liveactivity, TestBed.topic + ".push-type.liveactivity", Self.activity(#""event":"update""#)),
                (.liveactivity, TestBed.topic + ".push-type.liveactivity", Self.activity(Self.update + #","stale-date":"x""#)),
                (.liveactivity, TestBed.topic + ".push-type.liveactivity", Self.activity(Self.update)),
            ]
            try await bed.onLoop { bed in
                try bed.startPool(connections: 1, maxStreams: 10)
                bed.recorder.enqueue(sends.enumerated().map { index, send in
                    APNs.Notification(deviceToken: TestBed.deviceToken(index: index, prefix: "c3"), topic: send.1, pushType: send.0,
                                      priority: send.0 == .background ? .powerAware : nil,
                                      apnsID: bed.apnsID(index: index), payload: Array(send.2.utf8))
                })
                bed.recorder.feed(bed.pool)
            }
            let finished = await bed.waitForAllOutcomes()
            let state = try await bed.onLoop { $0.snapshot() }
            try #require(finished, "\(state)")
            #expect(state.emulator.rejected == ["TopicDisallowed": 2, "BadPayload": 2], "\(state)")
            #expect(state.emulator.accepted == 1, "\(state)")
            for index in 0..<2 { #expect(state.finalOutcomes[index] == .permanent(status: 400, reason: .topicDisallowed), "\(state)") }
        }

        /// A job that expires while it waits for a stream slot is dead-lettered `expired`, not
        /// sent: one connection with one stream, and an emulator that takes a second to answer.
        @Test
        func aJobExpiringWhileItWaitsIsExpired() async throws {
            try await withWorkerBed(emulator: { $0.latencyMilliseconds = 1_000; $0.maxStreams = 1 }) { bed in
                let total = 8
                let expiration = Int(Date().timeIntervalSince1970) + 3
                try await bed.enqueue(total) { index in
                    [("token", WorkerHarness.deviceToken(index, prefix: "2b")), ("payload", WorkerHarness.payload(index)),
                     ("expiration", String(expiration))]
                }
                try await bed.startWorker(connections: 1, maxStreams: 1)
                let ledger = try await bed.waitUntilSettled(enqueued: total)
                #expect(ledger.settled, "\(ledger)")
                #expect(ledger.acceptedUnique + (ledger.deadByReason["expired"] ?? 0) == total, "\(ledger)")
                #expect(ledger.rejected.isEmpty && ledger.duplicates == 0, "\(ledger)")
                let dead = try await bed.client.entries(bed.keys.dead)
                // Eight one-second answers on one stream outlast a three-second expiration.
                #expect(dead.contains { ($0["message"] ?? "").contains("passed while it waited") }, "\(dead.map { $0["message"] })")
                #expect(ledger.acceptedUnique >= 1, "\(ledger)")
            }
        }
    }
}
