import Testing

@testable import APNs

/// Values a producer or a server controls, at and past every limit: each is refused with a
/// reason (or clamped), never a trap, and never copied whole into a message.
@Suite struct DeviceTokenLengthTests {
    @Test(arguments: [16, 18, 64, 100, 198, 200])
    func tokensOf8To100BytesPass(length: Int) {
        #expect(Notification.deviceTokenError(String(repeating: "a1", count: length / 2)) == nil)
    }

    @Test(arguments: [2, 8, 14])
    func tokensUnder8BytesAreTooShort(length: Int) {
        let token = String(repeating: "a1", count: length / 2)
        #expect(validationError(makeNotification(deviceToken: token))?.code == "device_token_too_short")
    }

    @Test(arguments: [202, 16_200, 200_000])
    func tokensOver100BytesAreTooLong(length: Int) {
        let token = String(repeating: "ab", count: length / 2)
        let error = validationError(makeNotification(deviceToken: token))
        #expect(error == .deviceTokenTooLong(tokenPrefix: "abababab…", length: length))
        // The message names the length and the limits, and at most 8 characters of the token.
        let message = error?.description ?? ""
        #expect(message.contains("\(length)") && message.contains("16 to 200"))
        #expect(message.utf8.count < 200)
    }

    @Test func aHugeTokenIsTooLongEvenWhenItIsNotHex() {
        let token = String(repeating: "\u{0}z", count: 100_000)
        #expect(Notification.deviceTokenError(token)?.code == "device_token_too_long")
        #expect(!(Notification.deviceTokenError(token)?.description.contains("\u{0}") ?? true))
    }
}

@Suite struct TopicLengthTests {
    @Test func maxTopicIsTheLongestBundleIDPlusTheLongestSuffix() {
        let longestSuffix = PushType.allCases.map(\.topicSuffix.utf8.count).max() ?? 0
        #expect(Notification.maxTopicBytes == Notification.maxBundleIDBytes + longestSuffix)
    }

    @Test func topicOfTheLongestBundleIDAndSuffixPasses() {
        let bundle = String(repeating: "a", count: Notification.maxBundleIDBytes)
        #expect(validationError(makeNotification(pushType: .liveactivity, payload: liveActivityUpdate)
            .with(topic: PushType.liveactivity.topic(bundleID: bundle))) == nil)
    }

    @Test(arguments: [Notification.maxTopicBytes + 1, 100_000])
    func longerTopicsAreRefused(length: Int) {
        let error = validationError(makeNotification(topic: String(repeating: "c", count: length)))
        #expect(error?.code == "topic_too_long")
        #expect((error?.description.utf8.count ?? .max) < 300)
    }
}

@Suite struct ExpirationRangeTests {
    @Test func theLastSecondOfYear9999Passes() {
        #expect(validationError(makeNotification(expiration: Notification.maxExpiration)) == nil)
        #expect(validationError(makeNotification(expiration: 0)) == nil)
    }

    @Test(arguments: [Notification.maxExpiration + 1, Int64.max, -1, Int64.min])
    func expirationsOutsideTheRangeAreRefused(expiration: Int64) {
        let error = validationError(makeNotification(expiration: expiration))
        #expect(error == .badExpiration(expiration))
        #expect(error?.description.contains(String(expiration)) == true)
    }
}

@Suite struct SaturatingArithmeticTests {
    @Test func productsAndSumsStopAtTheBounds() {
        #expect(Int64.max.multipliedSaturating(by: 1000) == .max)
        #expect(Int64.min.multipliedSaturating(by: 1000) == .min)
        #expect(Int64.min.multipliedSaturating(by: -1) == .max)
        #expect(Int64(253_402_300_799).multipliedSaturating(by: 1000) == 253_402_300_799_000)
        #expect(Int64.max.addingSaturating(1) == .max)
        #expect(Int64.min.addingSaturating(-1) == .min)
        #expect(Int64.min.subtractingSaturating(1) == .min)
        #expect(Int64(0).subtractingSaturating(.min) == .max)
        #expect(UInt64.max.addingSaturating(1) == .max)
        #expect(UInt64(0).subtractingSaturating(1) == 0)
    }

    @Test func randomOperandsAgreeWithWideArithmetic() {
        var generator = SplitMix64(seed: 7)
        for _ in 0..<10_000 {
            let a = Int64(bitPattern: generator.next()) >> Int64(generator.next() % 64)
            let b = Int64(bitPattern: generator.next()) >> Int64(generator.next() % 64)
            let clamp = { (wide: Double) -> Int64 in wide >= 9.2e18 ? .max : wide <= -9.2e18 ? .min : 0 }
            let sum = a.addingReportingOverflow(b)
            #expect(a.addingSaturating(b) == (sum.overflow ? clamp(Double(a) + Double(b)) : sum.partialValue))
            let product = a.multipliedReportingOverflow(by: b)
            #expect(a.multipliedSaturating(by: b) == (product.overflow ? clamp(Double(a) * Double(b)) : product.partialValue))
        }
    }
}

@Suite struct ServerReasonBoundTests {
    @Test func aHugeReasonIsUnknown() {
        let body = #"{"reason":""# + String(repeating: "A", count: 1_000_000) + #""}"#
        #expect(parseBody(body).reason == .unknown)
    }

    @Test(arguments: [#"{"reason":"Bad\nThing"}"#, #"{"reason":"\u0000"}"#, #"{"reason":""}"#,
                      #"{"reason":"lowercase_word"}"#, #"{"reason":"Ünicode"}"#, #"{"reason":"9Lives"}"#])
    func aReasonThatIsNotAnAPNsWordIsUnknown(body: String) {
        #expect(parseBody(body).reason == .unknown)
    }

    @Test func anUndocumentedReasonThatLooksLikeOneIsKeptButCountedAsUnknown() {
        let reason = parseBody(#"{"reason":"BrandNewReason2030"}"#).reason
        #expect(reason?.rawValue == "BrandNewReason2030")
        #expect(reason?.isKnown == false)
        #expect(reason?.countingKey == "Unknown")
        #expect(APNsReason.badTopic.countingKey == "BadTopic")
    }

    @Test func binaryBytesInAReasonAreUnknown() {
        var body = Array(#"{"reason":""#.utf8)
        body += [0xFF, 0xFE, 0x80, 0x41]
        body += Array(#""}"#.utf8)
        let reason = APNsErrorBody.parse(body).reason
        #expect(reason == nil || reason == .unknown)
    }

    @Test func responseCountingKeysAreBoundedWhateverTheServerSends() {
        var keys = Set<String>()
        var generator = SplitMix64(seed: 42)
        for _ in 0..<5_000 {
            let status = Int(Int32(truncatingIfNeeded: generator.next()))
            let reason = "X" + String(generator.next(), radix: 36)
            keys.insert(APNsReason.countingKey(status: status, reason: reason))
        }
        #expect(keys.count <= 2, "every random status is outside 100...599 or one of few, every reason undocumented")
        #expect(APNsReason.countingKey(status: 400, reason: "BadTopic") == "400 BadTopic")
        #expect(APNsReason.countingKey(status: 500, reason: "") == "500 ")
        #expect(APNsReason.countingKey(status: 1_000_000, reason: "Whatever") == "other Unknown")
    }

    @Test func deadLetterCountingKeysKeepHeraldsWordsAndAPNsWordsOnly() {
        #expect(DeadLetterText.countingKey(reason: "bad_device_token") == "bad_device_token")
        #expect(DeadLetterText.countingKey(reason: "max_attempts") == "max_attempts")
        #expect(DeadLetterText.countingKey(reason: "TopicDisallowed") == "TopicDisallowed")
        #expect(DeadLetterText.countingKey(reason: "Status418") == "Status418")
        #expect(DeadLetterText.countingKey(reason: "Status4180000") == "Unknown")
        #expect(DeadLetterText.countingKey(reason: "BrandNewReason2030") == "Unknown")
        #expect(DeadLetterText.countingKey(reason: String(repeating: "x", count: 65)) == "Unknown")
    }
}

@Suite struct DeadLetterTextTests {
    @Test func controlCharactersAreEscaped() {
        #expect(DeadLetterText.quoted("a\nb\r\tc") == #""a\nb\r\tc""#)
        #expect(DeadLetterText.quoted("nul\u{0}esc\u{1B}del\u{7F}") == #""nul\u{0}esc\u{1b}del\u{7f}""#)
        #expect(DeadLetterText.quoted("say \"hi\" \\o/") == #""say \"hi\" \\o/""#)
        #expect(DeadLetterText.quoted("line\u{2028}bidi\u{202E}zw\u{200B}bom\u{FEFF}")
                == #""line\u{2028}bidi\u{202e}zw\u{200b}bom\u{feff}""#)
        #expect(DeadLetterText.quoted("ok: ünïcode ✓") == "\"ok: ünïcode ✓\"")
    }

    @Test func longTextIsCut() {
        #expect(DeadLetterText.quoted(String(repeating: "x", count: 41)) == "\"" + String(repeating: "x", count: 40) + "…\"")
        #expect(DeadLetterText.quoted(String(repeating: "x", count: 40)) == "\"" + String(repeating: "x", count: 40) + "\"")
        #expect(DeadLetterText.quoted("abc", limit: 0) == "\"…\"")
    }

    @Test func randomBytesNeverLeaveAControlCharacterOrALongLine() {
        var generator = SplitMix64(seed: 1)
        for _ in 0..<2_000 {
            let length = Int(generator.next() % 300)
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            let quoted = DeadLetterText.quoted(String(decoding: bytes, as: UTF8.self))
            #expect(!quoted.unicodeScalars.contains { DeadLetterText.isInvisible($0) })
            // 40 scalars, each at most 8 bytes escaped (\u{2028}), plus quotes and "…".
            #expect(quoted.utf8.count <= 40 * 8 + 5)
        }
    }
}

extension Notification {
    func with(topic: String) -> Notification {
        var copy = self
        copy.topic = topic
        return copy
    }
}

/// Hostile Live Activity payloads and topics: whatever the bytes, validation answers (a rule or
/// nil) without crashing, and its answer agrees with a plain reading of the payload.
@Suite struct LiveActivityHostileTests {
    let valid = Array(#"{"aps":{"timestamp":1,"event":"start","attributes-type":"A","attributes":{},"content-state":{"x":1},"stale-date":2,"input-push-token":1}}"#.utf8)

    func error(_ bytes: [UInt8]) -> NotificationError? {
        var notification = makeNotification(pushType: .liveactivity)
        notification.payload = bytes[...]
        return validationError(notification)
    }

    @Test func randomByteFlipsNeverCrashAndNeverPassBrokenJSON() {
        var generator = SplitMix64(seed: 11)
        #expect(error(valid) == nil)
        for _ in 0..<5_000 {
            var bytes = valid
            for _ in 0..<(1 + Int(generator.next() % 4)) {
                bytes[Int(generator.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: generator.next())
            }
            let found = error(bytes)
            let isJSON = bytes.withUnsafeBufferPointer { (try? JSONScanner($0).validate()) != nil }
            if !isJSON { #expect(found?.code == "payload_not_json") }
        }
    }

    @Test func binaryPayloadsAreNotJSON() {
        var generator = SplitMix64(seed: 12)
        for _ in 0..<1_000 {
            let bytes = (0..<(1 + Int(generator.next() % 512))).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            let found = error(bytes)
            #expect(found != nil)
        }
    }

    @Test func deeplyNestedContentStatePassesUpToTheDepthLimitAndNoFurther() {
        func payload(depth: Int) -> [UInt8] {
            Array((#"{"aps":{"timestamp":1,"event":"update","content-state":"# + String(repeating: #"{"a":"#, count: depth) + "1"
                + String(repeating: "}", count: depth) + "}}").utf8)
        }
        // The root and aps are two levels; content-state's objects the rest.
        #expect(error(payload(depth: JSONScanner.maximumDepth - 2)) == nil)
        #expect(error(payload(depth: JSONScanner.maximumDepth - 1))?.code == "payload_not_json")
        #expect(error(payload(depth: 10_000))?.code == "payload_too_large")
    }

    @Test func hugeApsIsRefusedBySizeBeforeAnyMemberRule() {
        let members = (0..<2_000).map { #""k\#($0)":1"# }.joined(separator: ",")
        #expect(error(Array((#"{"aps":{"# + members + "}}").utf8))?.code == "payload_too_large")
    }

    @Test func manyDuplicateMembersEndWithTheLastOne() {
        let repeated = String(repeating: #""relevance-score":"x","#, count: 100)
        let base = #"{"aps":{"timestamp":1,"event":"update","content-state":{},"#
        #expect(error(Array((base + repeated + #""relevance-score":1}}"#).utf8)) == nil)
        #expect(error(Array((base + repeated.dropLast() + "}}").utf8)) == .liveActivityBadRelevanceScore(found: .string))
    }

    @Test func randomTopicsNeverCrashAndSuffixRulesAgreeWithHasSuffix() {
        var generator = SplitMix64(seed: 13)
        let parts = ["com", "example", "voip", "ptt", "push-type", "liveactivity", "widgets", "pushkit", "fileprovider",
                     "complication", "location-query", "voip-ptt", "controls", "", "."]
        for _ in 0..<5_000 {
            let topic = (0..<(1 + Int(generator.next() % 5))).map { _ in parts[Int(generator.next() % UInt64(parts.count))] }
                .joined(separator: ".")
            let pushType = PushType.allCases[Int(generator.next() % UInt64(PushType.allCases.count))]
            let found = Notification.topicPushTypeError(topic: topic, pushType: pushType, bundleID: nil)
            switch pushType {
            case .mdm: #expect(found == nil)
            case .alert, .background:
                let suffixed = PushType.allCases.contains { !$0.topicSuffix.isEmpty && topic.hasSuffix($0.topicSuffix) && topic != $0.topicSuffix }
                #expect((found != nil) == suffixed, "\(topic) \(pushType)")
            default:
                let fits = topic.hasSuffix(pushType.topicSuffix) && topic.utf8.count > pushType.topicSuffix.utf8.count
                #expect((found == nil) == fits, "\(topic) \(pushType)")
            }
        }
    }
}
