import Testing

@testable import APNs

@Suite struct PushTypeTests {
    @Test(arguments: [
        (PushType.alert, "com.example.app"),
        (.background, "com.example.app"),
        (.location, "com.example.app.location-query"),
        (.voip, "com.example.app.voip"),
        (.complication, "com.example.app.complication"),
        (.fileprovider, "com.example.app.pushkit.fileprovider"),
        (.mdm, "com.example.app"),
        (.liveactivity, "com.example.app.push-type.liveactivity"),
        (.pushtotalk, "com.example.app.voip-ptt"),
        (.widgets, "com.example.app.push-type.widgets"),
        (.controls, "com.example.app.push-type.controls"),
    ])
    func topicAddsThePushTypeSuffix(pushType: PushType, topic: String) {
        #expect(pushType.topic(bundleID: "com.example.app") == topic)
    }

    @Test(arguments: [
        "alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity",
        "pushtotalk", "widgets", "controls",
    ])
    func headerWordRoundTrips(word: String) {
        #expect(PushType(rawValue: word)?.rawValue == word)
    }

    /// The static word the request writer sends is the raw value, for every push type.
    @Test(arguments: PushType.allCases)
    func headerValueIsTheRawValue(pushType: PushType) {
        #expect(pushType.headerValue.description == pushType.rawValue)
    }

    @Test(arguments: ["Alert", "live-activity", "", "liveActivity", "voip "])
    func unknownHeaderWordIsNil(word: String) {
        #expect(PushType(rawValue: word) == nil)
    }

    @Test func thereAreElevenPushTypes() {
        #expect(PushType.allCases.count == 11)
    }

    @Test(arguments: PushType.allCases)
    func payloadLimitIs4096ExceptVoip(pushType: PushType) {
        #expect(pushType.maxPayloadBytes == (pushType == .voip ? 5120 : 4096))
    }

    @Test func backgroundAllowsOnlyPriority5() {
        #expect(PushType.background.allowedPriorities == [.powerAware])
    }

    @Test func liveActivityAllowsPriorities5And10() {
        #expect(PushType.liveactivity.allowedPriorities == [.powerAware, .immediate])
    }

    @Test(arguments: PushType.allCases.filter { $0 != .background && $0 != .liveactivity })
    func otherPushTypesAllowEveryPriority(pushType: PushType) {
        #expect(pushType.allowedPriorities == Set(Priority.allCases))
    }

    @Test(arguments: PushType.allCases, Priority.allCases)
    func allowsAgreesWithAllowedPriorities(pushType: PushType, priority: Priority) {
        #expect(pushType.allows(priority) == pushType.allowedPriorities.contains(priority))
    }

    @Test(arguments: PushType.allCases)
    func defaultPriorityIsAllowedAndIs10ExceptBackground(pushType: PushType) {
        #expect(pushType.allows(pushType.defaultPriority))
        #expect(pushType.defaultPriority == (pushType == .background ? .powerAware : .immediate))
    }

    @Test func priorityRawValuesAreTheHeaderNumbers() {
        #expect(Priority.immediate.rawValue == 10)
        #expect(Priority.powerAware.rawValue == 5)
        #expect(Priority.lowest.rawValue == 1)
        #expect(Priority(rawValue: 7) == nil)
    }
}
