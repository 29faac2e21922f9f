import APNs
import Queue
import Testing

/// Jobs with `channel_id`: the broadcast half of the job decoder.
@Suite struct BroadcastJobDecoderTests {
    static let channel = "dHN0LXNyY2gtY2hubA=="
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":1}}}"#
    static let entry = StreamEntryID(milliseconds: 1_700_000_000_123, sequence: 4)
    static let defaults = JobDefaults(bundleID: "com.example.app")

    static func decode(_ pairs: [(String, String)]) -> Result<Job, JobError> {
        JobDecoder.decode(entryID: entry, fields: pairs.map { ($0.0, Array($0.1.utf8)) }, defaults: defaults)
    }

    static func code(_ pairs: [(String, String)]) -> String? {
        if case .failure(let error) = decode(pairs) { return error.code }
        return nil
    }

    @Test func aChannelJobIsALiveActivityBroadcastToTheBareBundleID() throws {
        let job = try Self.decode([("channel_id", Self.channel), ("payload", Self.update), ("priority", "5")]).get()
        #expect(job.tokens == [Self.channel])
        #expect(job.template.isBroadcast)
        #expect(job.template.pushType == .liveactivity)
        #expect(job.template.topic == "com.example.app")
        let notification = job.notification(forToken: Self.channel)
        #expect(notification.isBroadcast)
        #expect(notification.deviceToken == Self.channel)
        #expect(notification.priority == .powerAware)
    }

    @Test func theChannelIDKeepsItsCase() throws {
        // Base64 is case-sensitive: folding it as device tokens are folded would name another channel.
        let job = try Self.decode([("channel_id", "AbCd"), ("payload", Self.update)]).get()
        #expect(job.tokens == ["AbCd"])
    }

    @Test func aTopicWithTheLiveActivitySuffixNamesTheBareBundleID() throws {
        let job = try Self.decode([("channel_id", Self.channel), ("payload", Self.update),
                                   ("topic", "com.other.app.push-type.liveactivity"), ("push_type", "liveactivity")]).get()
        #expect(job.template.topic == "com.other.app")
    }

    @Test func theApnsIDIsDerivedFromTheEntryAndTheChannelAndStableAcrossRetries() throws {
        let first = try Self.decode([("channel_id", Self.channel), ("payload", Self.update)]).get()
        let other = try Self.decode([("channel_id", "b3RoZXI="), ("payload", Self.update)]).get()
        let retry = try JobDecoder.decode(
            entryID: StreamEntryID(milliseconds: 1_800_000_000_000, sequence: 0),
            fields: [("channel_id", Array(Self.channel.utf8)), ("payload", Array(Self.update.utf8)),
                     ("origin", Array("1700000000123-4".utf8)), ("attempts", Array("2".utf8))],
            defaults: Self.defaults).get()
        let id = first.notification(forToken: Self.channel).apnsID
        #expect(id != nil)
        #expect(id == retry.notification(forToken: Self.channel).apnsID)
        #expect(id != other.notification(forToken: "b3RoZXI=").apnsID)
    }

    @Test func expirationPassesThrough() throws {
        let job = try Self.decode([("channel_id", Self.channel), ("payload", Self.update), ("expiration", "0")]).get()
        #expect(job.template.expiration == 0)
    }

    @Test func aBroadcastPayloadMayHold5120BytesButNoMore() throws {
        func payload(_ size: Int) -> String {
            let head = #"{"aps":{"timestamp":1,"event":"update"},"pad":""#
            return head + String(repeating: "x", count: size - head.utf8.count - 2) + #""}"#
        }
        #expect(payload(5120).utf8.count == 5120)
        _ = try Self.decode([("channel_id", Self.channel), ("payload", payload(5000))]).get()
        _ = try Self.decode([("channel_id", Self.channel), ("payload", payload(5120))]).get()
        #expect(Self.code([("channel_id", Self.channel), ("payload", payload(5121))]) == "payload_too_large")
    }

    @Test(arguments: [
        ([("channel_id", channel), ("token", String(repeating: "ab", count: 32)), ("payload", update)], "channel_and_tokens"),
        ([("channel_id", channel), ("tokens", String(repeating: "ab", count: 32)), ("payload", update)], "channel_and_tokens"),
        ([("channel_id", ""), ("payload", update)], "empty_channel_id"),
        ([("channel_id", String(repeating: "QUJD", count: 17)), ("payload", update)], "channel_id_too_long"),
        ([("channel_id", "not base64!"), ("payload", update)], "bad_channel_id"),
        ([("channel_id", "abc"), ("payload", update)], "bad_channel_id"),
        ([("channel_id", "ab=c"), ("payload", update)], "bad_channel_id"),
        ([("channel_id", "a==="), ("payload", update)], "bad_channel_id"),
        ([("channel_id", "dGVz\r\n"), ("payload", update)], "bad_channel_id"),
        ([("channel_id", channel), ("payload", update), ("push_type", "alert")], "broadcast_push_type"),
        ([("channel_id", channel), ("payload", update), ("push_type", "voip")], "broadcast_push_type"),
        ([("channel_id", channel), ("payload", update), ("collapse_id", "score")], "broadcast_collapse_id"),
        ([("channel_id", channel), ("payload", update), ("priority", "1")], "bad_priority"),
        ([("channel_id", channel), ("payload", update), ("expiration", "-5")], "bad_expiration"),
        ([("channel_id", channel), ("payload", #"{"aps":{"alert":"Hi"}}"#)], "live_activity_missing_timestamp"),
        ([("channel_id", channel), ("payload", #"{"aps":{"timestamp":1,"event":"start"}}"#)], "live_activity_start_missing_attributes_type"),
        ([("channel_id", channel), ("payload", "[1]")], "payload_not_object"),
        ([("channel_id", channel)], "missing_payload"),
        ([("channel_id", channel), ("payload", update), ("topic", "com.example app")], "bad_topic"),
    ] as [([(String, String)], String)])
    func hostileBroadcastJobsGetTheirOwnReasons(pairs: [(String, String)], code: String) {
        #expect(Self.code(pairs) == code)
        if case .failure(let error) = Self.decode(pairs) {
            // Every reason comes with a sentence that says what to do.
            #expect(error.description.count > 20)
        }
    }

    @Test func withoutABundleIDABroadcastNeedsATopic() {
        let result = JobDecoder.decode(entryID: Self.entry, fields: [("channel_id", Array(Self.channel.utf8)), ("payload", Array(Self.update.utf8))],
                                       defaults: JobDefaults())
        guard case .failure(let error) = result else { Issue.record("decoded without a bundle id"); return }
        #expect(error.code == "missing_topic")
    }

    @Test func aChannelFeedbackEntryIsWrittenWithChannelID() {
        var draft = FeedbackEntry.Draft(token: Self.channel, topic: "com.example.app", reason: "ChannelNotRegistered", timestamp: nil, job: "1-0")
        draft.isChannel = true
        let words = draft.command(stream: "herald:{q}:feedback", maxLength: 100).map { "\($0)" }
        #expect(words.contains { $0.contains("channel_id") })
        #expect(!words.contains { $0.contains("\"token\"") || $0 == "token" })
    }
}

/// What Herald writes back for a broadcast (retry-set members, dead letters) names the channel
/// once, in `channel_id`: a `token` beside it would make the job unreadable (`channel_and_tokens`).
@Suite struct BroadcastRewriteTests {
    @Test func aRetriedBroadcastIsStillTheSameBroadcast() throws {
        let job = try BroadcastJobDecoderTests.decode([("channel_id", BroadcastJobDecoderTests.channel),
                                                       ("payload", BroadcastJobDecoderTests.update)]).get()
        let retry = RetryEntry(job: job, tokens: job.tokens.array, attempts: 3, retryID: "r1", dueAt: 0)
        #expect(!retry.fields.contains { $0.name == "token" || $0.name == "tokens" })
        let again = try JobDecoder.decode(entryID: StreamEntryID(milliseconds: 1_800_000_000_000, sequence: 0),
                                          fields: retry.fields, defaults: BroadcastJobDecoderTests.defaults).get()
        #expect(again.template.isBroadcast && again.tokens == job.tokens && again.attempts == 3)
        #expect(again.notification(forToken: again.tokens[0]).apnsID == job.notification(forToken: job.tokens[0]).apnsID)
    }

    @Test func aBroadcastDeadLetterNamesOnlyItsChannel() {
        let fields: [(name: String, value: [UInt8])] = [("channel_id", Array(BroadcastJobDecoderTests.channel.utf8)),
                                                        ("payload", Array(BroadcastJobDecoderTests.update.utf8))]
        let draft = DeadLetter.Draft(fields: fields, tokens: [BroadcastJobDecoderTests.channel], reason: "BadExpirationDate",
                                     message: "m", status: 400, attempts: 1, failedAt: 1)
        let words = draft.command(stream: "d", maxLength: 10).map { argument -> String in
            switch argument {
            case .text(let text): text
            case .bytes(let bytes): String(decoding: bytes, as: UTF8.self)
            case .integer(let value): String(value)
            }
        }
        #expect(!words.contains("token") && words.contains("channel_id"))
        #expect(words.filter { $0 == BroadcastJobDecoderTests.channel }.count == 1)
    }
}
