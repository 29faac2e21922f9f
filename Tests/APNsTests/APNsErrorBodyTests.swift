import Testing

@testable import APNs

func parseBody(_ text: String) -> (reason: APNsReason?, timestamp: Int64?) {
    APNsErrorBody.parse(Array(text.utf8))
}

@Suite struct APNsErrorBodyTests {
    @Test func reasonIsRead() {
        let body = parseBody(#"{"reason":"BadDeviceToken"}"#)
        #expect(body.reason == .badDeviceToken)
        #expect(body.timestamp == nil)
    }

    @Test func reasonAndTimestampAreRead() {
        let body = parseBody(#"{"reason":"Unregistered","timestamp":1700000000123}"#)
        #expect(body.reason == .unregistered)
        #expect(body.timestamp == 1_700_000_000_123)
    }

    @Test func memberOrderAndWhitespaceDoNotMatter() {
        let body = parseBody(" {\n \"timestamp\" : 42 ,\r\n\t\"reason\" : \"ExpiredToken\" } ")
        #expect(body.reason == .expiredToken)
        #expect(body.timestamp == 42)
    }

    @Test func unknownMembersAreIgnored() {
        let body = parseBody(#"{"extra":{"nested":[1,2]},"reason":"Shutdown","x":null}"#)
        #expect(body.reason == .shutdown)
    }

    @Test func undocumentedReasonIsKeptVerbatim() {
        let body = parseBody(#"{"reason":"BrandNewReason"}"#)
        #expect(body.reason == APNsReason(rawValue: "BrandNewReason"))
        #expect(body.reason?.isKnown == false)
    }

    @Test func escapedReasonIsDecoded() {
        #expect(parseBody(#"{"reason":"Bad\u0054opic"}"#).reason == .badTopic)
        #expect(parseBody(#"{"reason":"New\u0052eason"}"#).reason == APNsReason(rawValue: "NewReason"))
        // A reason that decodes to a control character is no APNs word: it never reaches a dead letter.
        #expect(parseBody(#"{"reason":"New\nLine"}"#).reason == .unknown)
    }

    @Test func lastDuplicateReasonWins() {
        #expect(parseBody(#"{"reason":"BadTopic","reason":"MissingTopic"}"#).reason == .missingTopic)
    }

    @Test(arguments: [
        "", "   ", "not json", #"{"reason":"BadTopic""#, #"{"reason":"BadTopic",}"#, #"["BadTopic"]"#, #""BadTopic""#,
        #"{"reason":"BadTopic"} trailing"#, "null",
    ])
    func malformedBodiesYieldNils(text: String) {
        let body = parseBody(text)
        #expect(body.reason == nil)
        #expect(body.timestamp == nil)
    }

    @Test func emptyObjectYieldsNils() {
        let body = parseBody("{}")
        #expect(body.reason == nil && body.timestamp == nil)
    }

    @Test func reasonOfWrongTypeIsNil() {
        let body = parseBody(#"{"reason":400,"timestamp":5}"#)
        #expect(body.reason == nil)
        #expect(body.timestamp == 5)
    }

    @Test func timestampOfWrongTypeIsNil() {
        let body = parseBody(#"{"reason":"Unregistered","timestamp":"1700000000123"}"#)
        #expect(body.reason == .unregistered)
        #expect(body.timestamp == nil)
    }

    @Test func fractionalTimestampIsTruncated() {
        #expect(parseBody(#"{"timestamp":1.7e12}"#).timestamp == 1_700_000_000_000)
        #expect(parseBody(#"{"timestamp":12.9}"#).timestamp == 12)
    }

    @Test func timestampOutOfRangeIsNil() {
        #expect(parseBody(#"{"timestamp":99999999999999999999}"#).timestamp == nil)
        #expect(parseBody(#"{"timestamp":1e400}"#).timestamp == nil)
    }

    @Test func rawBufferOverloadParsesTheSameBytes() {
        let bytes = Array(#"{"reason":"TooManyRequests"}"#.utf8)
        let body = bytes.withUnsafeBytes { APNsErrorBody.parse($0) }
        #expect(body.reason == .tooManyRequests)
    }

    @Test(arguments: APNsReason.all)
    func everyDocumentedReasonParsesToItsConstant(reason: APNsReason) {
        #expect(parseBody(#"{"reason":""# + reason.rawValue + #""}"#).reason == reason)
    }
}
