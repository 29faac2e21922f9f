import Testing

@testable import APNs

let token64 = "8d6b1f0e2c4a69573e1b5d7f9a0c2e4f6b8d0a1c3e5f7a9b2d4c6e8f0a1b3c5d"

/// A notification that passes validation, with the parts a test wants to change.
func makeNotification(
    deviceToken: String = token64,
    topic: String? = nil,
    pushType: PushType = .alert,
    priority: Priority? = nil,
    expiration: Int64? = nil,
    collapseID: String? = nil,
    apnsID: String? = nil,
    payload: String = #"{"aps":{"alert":"Hello"}}"#
) -> Notification {
    Notification(
        deviceToken: deviceToken, topic: topic ?? pushType.topic(bundleID: "com.example.app"), pushType: pushType,
        priority: priority, expiration: expiration, collapseID: collapseID, apnsID: apnsID,
        payload: Array(payload.utf8))
}

/// The error `validate()` throws, or nil when the notification is valid.
func validationError(_ notification: Notification) -> NotificationError? {
    do {
        try notification.validate()
        return nil
    } catch {
        return error
    }
}

let liveActivityUpdate = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":1}}}"#
let liveActivityStart =
    #"{"aps":{"timestamp":1700000000,"event":"start","attributes-type":"MatchAttributes","#
    + #""attributes":{"team":"A"},"content-state":{}}}"#

@Suite struct DeviceTokenValidationTests {
    @Test func validAlertPasses() {
        #expect(validationError(makeNotification()) == nil)
    }

    @Test func emptyTokenIsMissing() {
        #expect(validationError(makeNotification(deviceToken: "")) == .missingDeviceToken)
    }

    @Test func tokenOfOddLengthIsRejected() {
        let token = String(token64.dropLast())
        #expect(
            validationError(makeNotification(deviceToken: token))
                == .deviceTokenOddLength(tokenPrefix: "8d6b1f0e…", length: 63))
    }

    @Test func wordAtATimeHexScanAgreesWithTheByteRuleForEveryByteAtEveryOffset() {
        // The scan reads eight bytes at a time: put each of the 256 byte values at each offset of
        // buffers whose lengths cover whole words, a tail, and both.
        let hex = Array("0123456789abcdefABCDEF".utf8)
        for length in [1, 7, 8, 9, 16, 19, 64] {
            let clean = (0..<length).map { hex[$0 % hex.count] }
            let cleanResult = clean.withUnsafeBufferPointer { Notification.firstNonHexDigit(in: $0) }
            #expect(cleanResult == nil)
            for offset in 0..<length {
                for value in 0...255 {
                    var bytes = clean
                    bytes[offset] = UInt8(value)
                    let expected = hex.contains(UInt8(value)) ? nil : offset
                    let found = bytes.withUnsafeBufferPointer { Notification.firstNonHexDigit(in: $0) }
                    if found != expected {
                        Issue.record("length \(length), byte \(value) at \(offset): found \(String(describing: found)), expected \(String(describing: expected))")
                        return
                    }
                }
            }
        }
    }

    @Test func fanOutTokenRuleMatchesTheNotificationRule() {
        #expect(Notification.deviceTokenError(token64) == nil)
        #expect(Notification.deviceTokenError(token64.uppercased()) == nil)
        #expect(Notification.deviceTokenError("") == .missingDeviceToken)
        #expect(Notification.deviceTokenError("abc") == .deviceTokenOddLength(tokenPrefix: "abc", length: 3))
        #expect(Notification.deviceTokenError("8d6b1f0e2c4g" + String(token64.dropFirst(12)))
                == .badDeviceToken(tokenPrefix: "8d6b1f0e…", offset: 11))
    }

    @Test func nonHexCharacterIsRejectedWithItsPosition() {
        let token = "8d6b1f0e2c4g" + String(token64.dropFirst(12))
        #expect(
            validationError(makeNotification(deviceToken: token))
                == .badDeviceToken(tokenPrefix: "8d6b1f0e…", offset: 11))
    }

    @Test(arguments: [
        " " + token64.dropFirst(1), token64 + " ", "0x" + token64.dropFirst(2), "<" + token64.dropFirst(1),
        "é" + token64.dropFirst(2),
    ])
    func tokensWithNonHexCharactersAreRejected(token: String) {
        #expect(validationError(makeNotification(deviceToken: token))?.code == "bad_device_token")
    }

    @Test(arguments: [16, 18, 64, 128, 200])
    func tokenLengthIsNotAssumedToBe64(length: Int) {
        let token = String(repeating: "ab", count: length / 2)
        #expect(validationError(makeNotification(deviceToken: token)) == nil)
    }

    @Test func uppercaseAndMixedCaseTokensAreAccepted() {
        #expect(validationError(makeNotification(deviceToken: token64.uppercased())) == nil)
        #expect(validationError(makeNotification(deviceToken: "ABcd12EF00112233")) == nil)
    }

    @Test func normalizedDeviceTokenIsLowercase() {
        #expect(makeNotification(deviceToken: "ABcd12EF").normalizedDeviceToken == "abcd12ef")
        #expect(makeNotification(deviceToken: token64.uppercased()).normalizedDeviceToken == token64)
    }

    @Test func normalizedDeviceTokenKeepsLowercaseTokenUnchanged() {
        #expect(makeNotification(deviceToken: token64).normalizedDeviceToken == token64)
    }

    @Test func shortBadTokenIsShownWhole() {
        #expect(
            validationError(makeNotification(deviceToken: "abc"))
                == .deviceTokenOddLength(tokenPrefix: "abc", length: 3))
    }
}

@Suite struct HeaderValidationTests {
    @Test func emptyTopicIsMissing() {
        #expect(validationError(makeNotification(topic: "")) == .missingTopic)
    }

    @Test(arguments: [
        "com.example app", " com.example.app", "com.example.app\n", "com.example\tapp", "com.exämple.app",
        "com.example\u{7F}", "com.example\u{A0}app",
    ])
    func topicWithSpaceOrControlOrNonASCIIIsRejected(topic: String) {
        #expect(validationError(makeNotification(topic: topic)) == .badTopic(topic))
    }

    @Test(arguments: PushType.allCases)
    func suffixedTopicOfEveryPushTypePasses(pushType: PushType) {
        let payload = pushType == .liveactivity ? liveActivityUpdate : #"{"aps":{}}"#
        #expect(validationError(makeNotification(pushType: pushType, payload: payload)) == nil)
    }

    @Test func mdmCertificateUIDTopicPasses() {
        let topic = "com.apple.mgmt.External.2f2e8b3e-4c5d-4a6b-9c7d-8e9f0a1b2c3d"
        #expect(validationError(makeNotification(topic: topic, pushType: .mdm, payload: #"{"mdm":"abc"}"#)) == nil)
    }

    @Test func backgroundRejectsPriority10() {
        #expect(
            validationError(makeNotification(pushType: .background, priority: .immediate))
                == .badPriority(.immediate, pushType: .background))
    }

    @Test func backgroundRejectsPriority1() {
        #expect(
            validationError(makeNotification(pushType: .background, priority: .lowest))
                == .badPriority(.lowest, pushType: .background))
    }

    @Test func backgroundAcceptsPriority5() {
        #expect(validationError(makeNotification(pushType: .background, priority: .powerAware)) == nil)
    }

    @Test func backgroundWithoutPriorityPassesAndDefaultsTo5() {
        let notification = makeNotification(pushType: .background)
        #expect(validationError(notification) == nil)
        #expect(notification.effectivePriority == .powerAware)
    }

    @Test func liveActivityRejectsPriority1() {
        #expect(
            validationError(makeNotification(pushType: .liveactivity, priority: .lowest, payload: liveActivityUpdate))
                == .badPriority(.lowest, pushType: .liveactivity))
    }

    @Test(arguments: PushType.allCases, Priority.allCases)
    func priorityIsCheckedAgainstThePushType(pushType: PushType, priority: Priority) {
        let payload = pushType == .liveactivity ? liveActivityUpdate : #"{"aps":{}}"#
        let error = validationError(makeNotification(pushType: pushType, priority: priority, payload: payload))
        #expect(error == (pushType.allows(priority) ? nil : .badPriority(priority, pushType: pushType)))
    }

    @Test func explicitPriorityIsEffective() {
        #expect(makeNotification(priority: .lowest).effectivePriority == .lowest)
        #expect(makeNotification().effectivePriority == .immediate)
    }

    @Test func negativeExpirationIsRejected() {
        #expect(validationError(makeNotification(expiration: -1)) == .badExpiration(-1))
    }

    @Test(arguments: [Int64(0), 1_700_000_000, Notification.maxExpiration])
    func expirationWithinYear9999Passes(expiration: Int64) {
        #expect(validationError(makeNotification(expiration: expiration)) == nil)
    }

    @Test func emptyCollapseIDIsRejected() {
        #expect(validationError(makeNotification(collapseID: "")) == .emptyCollapseID)
    }

    @Test func collapseIDOf64BytesPasses() {
        #expect(validationError(makeNotification(collapseID: String(repeating: "c", count: 64))) == nil)
    }

    @Test func collapseIDOf65BytesIsTooLong() {
        #expect(
            validationError(makeNotification(collapseID: String(repeating: "c", count: 65)))
                == .collapseIDTooLong(byteCount: 65))
    }

    @Test func collapseIDIsMeasuredInUTF8Bytes() {
        // 33 characters, 66 bytes.
        #expect(
            validationError(makeNotification(collapseID: String(repeating: "é", count: 33)))
                == .collapseIDTooLong(byteCount: 66))
        #expect(validationError(makeNotification(collapseID: String(repeating: "é", count: 32))) == nil)
    }

    @Test(arguments: ["score\n", "a\rb", "\u{0}", "x\u{7F}"])
    func collapseIDWithControlCharacterIsRejected(collapseID: String) {
        #expect(validationError(makeNotification(collapseID: collapseID)) == .collapseIDHasControlCharacter)
    }

    @Test func canonicalAPNsIDPasses() {
        #expect(validationError(makeNotification(apnsID: "123e4567-e89b-12d3-a456-426614174000")) == nil)
    }

    @Test(arguments: [
        "123E4567-E89B-12D3-A456-426614174000", "123e4567e89b12d3a456426614174000", "", "not-a-uuid",
        "{123e4567-e89b-12d3-a456-426614174000}",
    ])
    func nonCanonicalAPNsIDIsRejected(apnsID: String) {
        #expect(validationError(makeNotification(apnsID: apnsID)) == .badAPNsID(apnsID))
    }

    @Test func longBadAPNsIDIsShortenedInTheError() {
        let id = String(repeating: "z", count: 100)
        #expect(validationError(makeNotification(apnsID: id)) == .badAPNsID(String(repeating: "z", count: 40) + "…"))
    }

    @Test func headersAreCheckedBeforeThePayload() {
        #expect(validationError(makeNotification(deviceToken: "", payload: "")) == .missingDeviceToken)
        #expect(
            validationError(makeNotification(pushType: .background, priority: .immediate, payload: "["))
                == .badPriority(.immediate, pushType: .background))
    }
}

@Suite struct PayloadValidationTests {
    @Test func emptyPayloadIsRejected() {
        #expect(validationError(makeNotification(payload: "")) == .payloadEmpty)
    }

    /// A JSON object of exactly `size` bytes.
    func payload(ofSize size: Int) -> String {
        let frame = #"{"aps":{},"p":""}"#
        return #"{"aps":{},"p":""# + String(repeating: "x", count: size - frame.utf8.count) + #""}"#
    }

    @Test func payloadOfExactly4096BytesPasses() {
        #expect(validationError(makeNotification(payload: payload(ofSize: 4096))) == nil)
    }

    @Test func payloadOf4097BytesIsTooLarge() {
        #expect(
            validationError(makeNotification(payload: payload(ofSize: 4097)))
                == .payloadTooLarge(byteCount: 4097, limit: 4096))
    }

    @Test func voipAllows5120Bytes() {
        #expect(validationError(makeNotification(pushType: .voip, payload: payload(ofSize: 5120))) == nil)
        #expect(
            validationError(makeNotification(pushType: .voip, payload: payload(ofSize: 5121)))
                == .payloadTooLarge(byteCount: 5121, limit: 5120))
    }

    @Test func sizeIsCheckedBeforeSyntax() {
        let garbage = String(repeating: "!", count: 5000)
        #expect(validationError(makeNotification(payload: garbage)) == .payloadTooLarge(byteCount: 5000, limit: 4096))
    }

    @Test func malformedPayloadIsNotJSON() {
        #expect(
            validationError(makeNotification(payload: #"{"aps":{"alert":"x",}}"#))
                == .payloadNotJSON(.init(.trailingComma, at: 20)))
    }

    @Test func whitespaceOnlyPayloadIsNotJSON() {
        #expect(validationError(makeNotification(payload: "  \n")) == .payloadNotJSON(.init(.unexpectedEnd, at: 3)))
    }

    @Test(arguments: [
        (#"[{"aps":{}}]"#, JSONScanner.Value.Kind.array), (#""aps""#, .string), ("42", .number), ("true", .boolean),
        ("null", .null),
    ])
    func arraysAndScalarsAreNotObjects(payload: String, kind: JSONScanner.Value.Kind) {
        #expect(validationError(makeNotification(payload: payload)) == .payloadNotObject(found: kind))
    }

    @Test func payloadWithoutApsPassesForAlert() {
        #expect(validationError(makeNotification(payload: #"{"custom":1}"#)) == nil)
    }

    @Test func backgroundWithoutContentAvailablePasses() {
        #expect(validationError(makeNotification(pushType: .background, payload: #"{"aps":{}}"#)) == nil)
    }

    @Test func backgroundWithAlertIsLeftToAPNs() {
        #expect(
            validationError(
                makeNotification(pushType: .background, payload: #"{"aps":{"content-available":1,"alert":"x"}}"#))
                == nil)
    }

    @Test func payloadWithInvalidUTF8IsNotJSON() {
        var notification = makeNotification()
        notification.payload = (Array(#"{"aps":{"alert":""#.utf8) + [0xFF] + Array(#""}}"#.utf8))[...]
        #expect(validationError(notification) == .payloadNotJSON(.init(.invalidUTF8, at: 17)))
    }
}

@Suite struct LiveActivityValidationTests {
    func error(_ payload: String) -> NotificationError? {
        validationError(makeNotification(pushType: .liveactivity, payload: payload))
    }

    @Test func updatePasses() {
        #expect(error(liveActivityUpdate) == nil)
    }

    @Test func endPasses() {
        #expect(error(#"{"aps":{"timestamp":1700000000,"event":"end","dismissal-date":1700003600,"content-state":{}}}"#) == nil)
    }

    @Test func startWithAttributesPasses() {
        #expect(error(liveActivityStart) == nil)
    }

    @Test func fractionalTimestampPasses() {
        #expect(error(#"{"aps":{"timestamp":1700000000.5,"event":"update","content-state":{}}}"#) == nil)
    }

    @Test func escapedEventNamePasses() {
        #expect(error(#"{"aps":{"timestamp":1,"event":"\u0065nd","content-state":{}}}"#) == nil)
    }

    @Test func missingApsIsRejected() {
        #expect(error(#"{"timestamp":1,"event":"update"}"#) == .liveActivityMissingAPS)
    }

    @Test func apsThatIsNotAnObjectIsRejected() {
        #expect(error(#"{"aps":[{"timestamp":1,"event":"update"}]}"#) == .liveActivityMissingAPS)
    }

    @Test func missingTimestampIsRejected() {
        #expect(error(#"{"aps":{"event":"update"}}"#) == .liveActivityMissingTimestamp)
    }

    @Test func timestampOutsideApsDoesNotCount() {
        #expect(error(#"{"timestamp":1,"aps":{"event":"update"}}"#) == .liveActivityMissingTimestamp)
    }

    @Test func timestampNestedDeeperInApsDoesNotCount() {
        #expect(error(#"{"aps":{"content-state":{"timestamp":1},"event":"update"}}"#) == .liveActivityMissingTimestamp)
    }

    @Test func stringTimestampIsRejected() {
        #expect(
            error(#"{"aps":{"timestamp":"1700000000","event":"update"}}"#) == .liveActivityBadTimestamp(found: .string))
    }

    @Test func missingEventIsRejected() {
        #expect(error(#"{"aps":{"timestamp":1}}"#) == .liveActivityMissingEvent)
    }

    @Test func unknownEventIsRejectedWithAHint() {
        #expect(error(#"{"aps":{"timestamp":1,"event":"stop"}}"#) == .liveActivityBadEvent(hint: #""stop""#))
    }

    @Test func eventIsCaseSensitive() {
        #expect(error(#"{"aps":{"timestamp":1,"event":"Start"}}"#) == .liveActivityBadEvent(hint: #""Start""#))
    }

    @Test func longEventIsShortenedInTheHint() {
        let event = String(repeating: "e", count: 100)
        #expect(
            error(#"{"aps":{"timestamp":1,"event":""# + event + #""}}"#)
                == .liveActivityBadEvent(hint: "\"" + String(repeating: "e", count: 16) + "…\""))
    }

    @Test func nonStringEventIsRejectedNamingItsType() {
        #expect(error(#"{"aps":{"timestamp":1,"event":1}}"#) == .liveActivityBadEvent(hint: "a number"))
    }

    @Test func startWithoutAttributesTypeIsRejected() {
        #expect(
            error(#"{"aps":{"timestamp":1,"event":"start","attributes":{}}}"#)
                == .liveActivityStartMissingAttributesType)
    }

    @Test func startWithNonStringAttributesTypeIsRejected() {
        #expect(
            error(#"{"aps":{"timestamp":1,"event":"start","attributes-type":{},"attributes":{}}}"#)
                == .liveActivityStartMissingAttributesType)
    }

    @Test func startWithoutAttributesIsRejected() {
        #expect(
            error(#"{"aps":{"timestamp":1,"event":"start","attributes-type":"A"}}"#)
                == .liveActivityStartMissingAttributes)
    }

    @Test func startWithNonObjectAttributesIsRejected() {
        #expect(
            error(#"{"aps":{"timestamp":1,"event":"start","attributes-type":"A","attributes":[]}}"#)
                == .liveActivityStartMissingAttributes)
    }

    @Test func startAttributesOutsideApsDoNotCount() {
        #expect(
            error(#"{"attributes-type":"A","attributes":{},"aps":{"timestamp":1,"event":"start"}}"#)
                == .liveActivityStartMissingAttributesType)
    }

    @Test func updateNeedsNoAttributes() {
        #expect(error(#"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#) == nil)
    }

    @Test func otherPushTypesSkipLiveActivityRules() {
        #expect(validationError(makeNotification(pushType: .widgets, payload: #"{"aps":{"event":"bogus"}}"#)) == nil)
    }
}

/// The Live Activity rules after timestamp, event and the start attributes: content-state,
/// dates, relevance score, and the start-only input-push members.
@Suite struct LiveActivityMoreRulesTests {
    func error(_ aps: String) -> NotificationError? {
        validationError(makeNotification(pushType: .liveactivity, payload: #"{"aps":{"# + aps + "}}"))
    }

    let start = #""timestamp":1,"event":"start","attributes-type":"A","attributes":{},"content-state":{}"#
    let update = #""timestamp":1,"event":"update","content-state":{"eta":3}"#

    @Test(arguments: ["start", "update", "end"])
    func everyEventNeedsContentState(event: String) {
        let attributes = event == "start" ? #","attributes-type":"A","attributes":{}"# : ""
        #expect(error(#""timestamp":1,"event":""# + event + "\"" + attributes) == .liveActivityMissingContentState(event: event))
        #expect(error(#""timestamp":1,"event":""# + event + "\"" + attributes + #","content-state":{}"#) == nil)
    }

    @Test(arguments: [(#"[]"#, JSONScanner.Value.Kind.array), (#""x""#, .string), ("null", .null), ("1", .number)])
    func contentStateMustBeAnObject(value: String, kind: JSONScanner.Value.Kind) {
        #expect(error(#""timestamp":1,"event":"update","content-state":"# + value) == .liveActivityBadContentState(found: kind))
    }

    @Test func contentStateOutsideApsDoesNotCount() {
        #expect(validationError(makeNotification(pushType: .liveactivity,
            payload: #"{"content-state":{},"aps":{"timestamp":1,"event":"update"}}"#)) == .liveActivityMissingContentState(event: "update"))
    }

    @Test func datesAndScoreMayBeAnyNumber() {
        #expect(error(update + #","dismissal-date":1700003600,"stale-date":1.5e9,"relevance-score":75.0"#) == nil)
        #expect(error(update + #","relevance-score":-0.5"#) == nil)
    }

    @Test func datesMustBeNumbers() {
        #expect(error(update + #","dismissal-date":"1700003600""#) == .liveActivityBadDismissalDate(found: .string))
        #expect(error(update + #","stale-date":null"#) == .liveActivityBadStaleDate(found: .null))
        #expect(error(update + #","stale-date":{}"#) == .liveActivityBadStaleDate(found: .object))
    }

    @Test func relevanceScoreMustBeANumber() {
        #expect(error(update + #","relevance-score":"high""#) == .liveActivityBadRelevanceScore(found: .string))
        #expect(error(update + #","relevance-score":true"#) == .liveActivityBadRelevanceScore(found: .boolean))
    }

    @Test func inputPushTokenOneOnStartPasses() {
        #expect(error(start + #","input-push-token":1"#) == nil)
    }

    @Test(arguments: [("0", "0"), ("2", "2"), ("1.0", "1.0"), ("1e0", "1e0"), ("-1", "-1"), ("true", "true"),
                      (#""1""#, #""1""#), ("{}", "an object"), ("null", "null")])
    func inputPushTokenMustBeTheNumberOne(value: String, hint: String) {
        #expect(error(start + #","input-push-token":"# + value) == .liveActivityBadInputPushToken(hint: hint))
    }

    @Test(arguments: ["update", "end"])
    func inputPushMembersAreForStartOnly(event: String) {
        let base = #""timestamp":1,"event":""# + event + #"","content-state":{}"#
        #expect(error(base + #","input-push-token":1"#) == .liveActivityInputPushTokenNotStart(event: event))
        #expect(error(base + #","input-push-channel":"dHJhY2s=""#) == .liveActivityInputPushChannelNotStart(event: event))
    }

    @Test func inputPushChannelOnStartPasses() {
        #expect(error(start + #","input-push-channel":"dHJhY2tpbmc=""#) == nil)
    }

    @Test func inputPushChannelMustBeANonEmptyString() {
        #expect(error(start + #","input-push-channel":"""#) == .liveActivityBadInputPushChannel(found: .string))
        #expect(error(start + #","input-push-channel":5"#) == .liveActivityBadInputPushChannel(found: .number))
    }

    @Test func tokenAndChannelTogetherAreRefused() {
        #expect(error(start + #","input-push-token":1,"input-push-channel":"abc""#) == .liveActivityInputPushTokenAndChannel)
    }

    @Test func duplicateMembersTakeTheLast() {
        #expect(error(update + #","stale-date":"x","stale-date":2"#) == nil)
        #expect(error(update + #","stale-date":2,"stale-date":"x""#) == .liveActivityBadStaleDate(found: .string))
        #expect(error(#""timestamp":1,"event":"update","content-state":{},"content-state":[]"#) == .liveActivityBadContentState(found: .array))
    }

    @Test func escapedMemberNamesCount() {
        #expect(error(update + #","st\u0061le-date":"x""#) == .liveActivityBadStaleDate(found: .string))
    }

    @Test func everyNewRuleHasItsOwnCode() {
        let errors: [NotificationError] = [
            .liveActivityMissingContentState(event: "end"), .liveActivityBadContentState(found: .array),
            .liveActivityBadDismissalDate(found: .string), .liveActivityBadStaleDate(found: .string),
            .liveActivityBadRelevanceScore(found: .string), .liveActivityBadInputPushToken(hint: "2"),
            .liveActivityInputPushTokenNotStart(event: "end"), .liveActivityBadInputPushChannel(found: .number),
            .liveActivityInputPushChannelNotStart(event: "update"), .liveActivityInputPushTokenAndChannel,
            .topicPushTypeMismatch(topic: "a.voip", pushType: .alert, suffixOf: .voip),
        ]
        #expect(Set(errors.map(\.code)).count == errors.count)
        for error in errors {
            #expect(error.code.allSatisfy { $0.isLowercase || $0 == "_" })
            #expect(error.description.hasSuffix(".") && !error.description.isEmpty)
        }
    }
}

/// A topic carries its push type's suffix; an alert or background topic carries none.
@Suite struct TopicPushTypeTests {
    func error(_ topic: String, _ pushType: PushType, bundleID: String? = nil) -> NotificationError? {
        let payload = pushType == .liveactivity ? liveActivityUpdate : #"{"aps":{}}"#
        var notification = makeNotification(pushType: pushType, payload: payload)
        notification.topic = topic
        do {
            try notification.validate(bundleID: bundleID)
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: PushType.allCases)
    func theDefaultTopicPasses(pushType: PushType) {
        #expect(error(pushType.topic(bundleID: "com.example.app"), pushType) == nil)
        #expect(error(pushType.topic(bundleID: "com.example.app"), pushType, bundleID: "com.example.app") == nil)
    }

    @Test(arguments: PushType.allCases.filter { !$0.topicSuffix.isEmpty })
    func aSuffixedPushTypeNeedsItsSuffix(pushType: PushType) {
        let found = error("com.example.app", pushType)
        #expect(found == .topicPushTypeMismatch(topic: "com.example.app", pushType: pushType, suffixOf: nil))
        #expect(found?.code == "topic_push_type_mismatch")
        #expect(found?.description.contains(pushType.topicSuffix) == true)
        // The bare suffix is no topic: there is no bundle id before it.
        #expect(error(pushType.topicSuffix, pushType) != nil)
    }

    @Test func anotherTypesSuffixIsAMismatch() {
        #expect(error("com.example.app.voip", .liveactivity)
            == .topicPushTypeMismatch(topic: "com.example.app.voip", pushType: .liveactivity, suffixOf: .voip))
        #expect(error("com.example.app.voip", .pushtotalk)
            == .topicPushTypeMismatch(topic: "com.example.app.voip", pushType: .pushtotalk, suffixOf: .voip))
        #expect(error("com.example.app.voip-ptt", .voip)
            == .topicPushTypeMismatch(topic: "com.example.app.voip-ptt", pushType: .voip, suffixOf: .pushtotalk))
    }

    @Test(arguments: PushType.allCases.filter { !$0.topicSuffix.isEmpty }, [PushType.alert, .background])
    func anAlertOrBackgroundTopicWithASuffixIsAMismatch(suffixed: PushType, pushType: PushType) {
        let topic = suffixed.topic(bundleID: "com.example.app")
        let found = error(topic, pushType)
        #expect(found == .topicPushTypeMismatch(topic: topic, pushType: pushType, suffixOf: suffixed))
        #expect(found?.description.contains("bare bundle id") == true)
    }

    @Test func aBundleIDThatEndsLikeASuffixIsLegitimateWhenItIsTheApps() {
        #expect(error("com.example.voip", .alert, bundleID: "com.example.voip") == nil)
        #expect(error("com.example.voip.voip", .voip, bundleID: "com.example.voip") == nil)
        // Another topic that ends like a suffix is still refused.
        #expect(error("com.other.voip", .alert, bundleID: "com.example.voip") != nil)
    }

    @Test func bundleIDsThatMerelyContainASuffixWordPass() {
        #expect(error("com.example.voipapp", .alert) == nil)
        #expect(error("com.example.complications", .alert) == nil)
        #expect(error("com.voip.app", .background) == nil)
    }

    @Test func mdmTakesAnyTopic() {
        #expect(error("com.apple.mgmt.External.2f1e0b4a-1d2c-4e5f-8a9b-0c1d2e3f4a5b", .mdm) == nil)
        #expect(error("x.voip", .mdm) == nil)
    }
}
