import APNs
import Queue
import Testing

/// Jobs with fields at and past every limit, as a producer (or a mistaken one) writes them with
/// `XADD`: each is dead-lettered with a reason, never a trap, never sent.
@Suite struct JobHostileInputTests {
    static let token = JobDecoderTests.token

    static func code(_ pairs: [(String, String)], entry: StreamEntryID = JobDecoderTests.entry) -> String? {
        switch JobDecoder.decode(entryID: entry, fields: JobDecoderTests.fields(pairs), defaults: JobDecoderTests.defaults) {
        case .success: nil
        case .failure(let error): error.code
        }
    }

    static func message(_ pairs: [(String, String)]) -> String {
        switch JobDecoder.decode(entryID: JobDecoderTests.entry, fields: JobDecoderTests.fields(pairs), defaults: JobDecoderTests.defaults) {
        case .success: ""
        case .failure(let error): error.description
        }
    }

    @Test(arguments: [16_200, 200_000])
    func hugeTokensAreRefusedAtDecode(length: Int) throws {
        let huge = String(repeating: "ab", count: length / 2)
        #expect(Self.code([("token", huge), ("payload", "{}")]) == "device_token_too_long")
        // In a fan-out job only the huge token is set aside; the good one is still sent.
        let job = try JobDecoder.decode(entryID: JobDecoderTests.entry,
                                        fields: JobDecoderTests.fields([("tokens", Self.token + "," + huge), ("payload", "{}")]),
                                        defaults: JobDecoderTests.defaults).get()
        #expect(job.tokens == [Self.token])
        #expect(job.invalidTokens.map(\.error.code) == ["device_token_too_long"])
    }

    @Test func aTooShortTokenIsRefused() {
        #expect(Self.code([("token", "abcdef0123"), ("payload", "{}")]) == "device_token_too_short")
    }

    @Test func aHugeTopicIsRefused() {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("topic", String(repeating: "t", count: 300_000))])
                == "topic_too_long")
    }

    @Test func aHugeBundleIDGivesTopicTooLongNotATrap() {
        let defaults = JobDefaults(bundleID: String(repeating: "b", count: 1_000))
        let result = JobDecoder.decode(entryID: JobDecoderTests.entry,
                                       fields: JobDecoderTests.fields([("token", Self.token), ("payload", "{}")]), defaults: defaults)
        #expect(throws: (any Error).self) { try result.get() }
    }

    @Test(arguments: ["9223372036854775807", "-9223372036854775808", "-1", "1001", "99999999999999999999", "two", "1e3", " 1"])
    func attemptsOutOfRangeAreRefused(value: String) {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("attempts", value)]) == "bad_attempts")
    }

    @Test func attemptsWithinRangeAreKept() throws {
        let job = try JobDecoder.decode(entryID: JobDecoderTests.entry,
                                        fields: JobDecoderTests.fields([("token", Self.token), ("payload", "{}"), ("attempts", "1000")]),
                                        defaults: JobDecoderTests.defaults).get()
        #expect(job.attempts == 1000)
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("attempts", "")]) == nil, "empty is absent")
    }

    @Test(arguments: ["-9223372036854775808", "-1", "253402300800000", "9223372036854775807", "soon", "1.5"])
    func enqueuedAtOutOfRangeIsRefused(value: String) {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("enqueued_at", value)]) == "bad_enqueued_at")
    }

    @Test(arguments: ["9223372036854775807", "253402300800", "-9223372036854775808", "-1"])
    func expirationOutOfRangeIsRefused(value: String) {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("expiration", value)]) == "bad_expiration")
    }

    @Test func theLastExpirationOfYear9999IsAccepted() {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("expiration", "253402300799")]) == nil)
    }

    @Test(arguments: ["18446744073709551615-0", "253402300800000-0", "18446744073709551616-0", "1-18446744073709551616",
                      "abc", "-", "1-", "-1", "1700000000000"])
    func originsThatAreNotEntryIDsInRangeAreRefused(value: String) {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("origin", value)]) == "bad_origin")
    }

    @Test func anOriginWithTheLargestSequenceIsAccepted() {
        #expect(Self.code([("token", Self.token), ("payload", "{}"), ("origin", "1700000000000-18446744073709551615")]) == nil)
    }

    @Test func anEntryIDBeyondInt64GivesAClampedEnqueueTime() throws {
        // A producer may XADD with any explicit id up to 18446744073709551615-18446744073709551615.
        let entry = StreamEntryID(milliseconds: .max, sequence: .max)
        let job = try JobDecoder.decode(entryID: entry, fields: JobDecoderTests.fields([("token", Self.token), ("payload", "{}")]),
                                        defaults: JobDecoderTests.defaults).get()
        #expect(job.enqueuedAt == JobLimits.maxTimestampMilliseconds)
        #expect(job.origin == "18446744073709551615-18446744073709551615")
    }

    @Test func producerTextInMessagesIsEscapedAndCut() {
        let message = Self.message([("token", Self.token), ("payload", "{}"), ("push_type", "alert\n\u{0}\u{1B}[31m" + String(repeating: "x", count: 100_000))])
        #expect(message.contains(#""alert\n\u{0}\u{1b}[31m"#))
        #expect(!message.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F })
        #expect(message.utf8.count < 400)
        for (field, value) in [("priority", "1\r\n"), ("expiration", "9\u{0}"), ("id", "\u{2028}"), ("attempts", "\n"),
                               ("enqueued_at", "\t"), ("origin", "\u{7F}"), ("topic", "a\u{1}b")] {
            let text = Self.message([("token", Self.token), ("payload", "{}"), (field, value)])
            #expect(!text.isEmpty, "\(field)")
            #expect(!text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F || $0.value == 0x2028 }, "\(field): \(text)")
        }
    }

    @Test func randomHostileFieldsNeverTrapAndAlwaysGiveAReasonOrAJob() {
        var generator = SplitMix64(seed: 2024)
        let names = ["token", "tokens", "payload", "topic", "push_type", "priority", "expiration", "collapse_id", "id",
                     "attempts", "origin", "enqueued_at", "id_base", "app"]
        let samples = ["", "0", "-1", "1000", "1001", "9223372036854775807", "-9223372036854775808", "18446744073709551615",
                       "18446744073709551615-18446744073709551615", "253402300799", "253402300800", Self.token, "{}",
                       String(repeating: "ab", count: 8_100), "\u{0}\n", "5", "10", "background", "1-0"]
        for _ in 0..<3_000 {
            var pairs: [(String, String)] = [("payload", "{}"), ("token", Self.token)]
            for _ in 0..<Int(generator.next() % 5) {
                pairs.append((names[Int(generator.next() % UInt64(names.count))], samples[Int(generator.next() % UInt64(samples.count))]))
            }
            switch JobDecoder.decode(entryID: JobDecoderTests.entry, fields: JobDecoderTests.fields(pairs), defaults: JobDecoderTests.defaults) {
            case .success(let job):
                #expect((0...JobLimits.maxAttempts).contains(job.attempts))
                #expect((0...JobLimits.maxTimestampMilliseconds).contains(job.enqueuedAt))
                #expect(job.tokens.allSatisfy { (16...200).contains($0.utf8.count) })
                if let expiration = job.template.expiration { #expect((0...Notification.maxExpiration).contains(expiration)) }
            case .failure(let error):
                #expect(!error.code.isEmpty && error.description.utf8.count < 600)
            }
        }
    }
}

@Suite struct NumberParsingTests {
    @Test func entryIDDigitsPastUInt64AreRefusedNotTrapped() {
        #expect(StreamEntryID(bytes: Array("18446744073709551616-0".utf8)) == nil)
        #expect(StreamEntryID(bytes: Array("0-18446744073709551616".utf8)) == nil)
        #expect(StreamEntryID(bytes: Array("18446744073709551615-18446744073709551615".utf8))
                == StreamEntryID(milliseconds: .max, sequence: .max))
    }

    @Test func durationsPastInt64AreRefusedNotTrapped() {
        #expect(DurationText.milliseconds("9223372036854775808s") == nil)
        #expect(DurationText.milliseconds("9223372036854775807d") == nil)
        #expect(DurationText.milliseconds(String(repeating: "15250000w", count: 1_001)) == nil)
        #expect(DurationText.milliseconds("1d12h") == 129_600_000)
    }
}
