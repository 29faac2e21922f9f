import Testing

@testable import APNs

/// One value of every case.
let everyNotificationError: [NotificationError] = [
    .missingDeviceToken,
    .badDeviceToken(tokenPrefix: "8d6b1f0e…", offset: 3),
    .deviceTokenOddLength(tokenPrefix: "8d6b1f0e…", length: 63),
    .missingTopic,
    .badTopic("com.example app"),
    .badPriority(.immediate, pushType: .background),
    .badExpiration(-1),
    .emptyCollapseID,
    .collapseIDTooLong(byteCount: 65),
    .collapseIDHasControlCharacter,
    .badAPNsID("nope"),
    .payloadEmpty,
    .payloadTooLarge(byteCount: 5000, limit: 4096),
    .payloadNotJSON(.init(.trailingComma, at: 7)),
    .payloadNotObject(found: .array),
    .liveActivityMissingAPS,
    .liveActivityMissingTimestamp,
    .liveActivityBadTimestamp(found: .string),
    .liveActivityMissingEvent,
    .liveActivityBadEvent(hint: #""stop""#),
    .liveActivityStartMissingAttributesType,
    .liveActivityStartMissingAttributes,
    .liveActivityMissingContentState(event: "update"),
    .liveActivityBadContentState(found: .array),
    .liveActivityBadDismissalDate(found: .string),
    .liveActivityBadStaleDate(found: .string),
    .liveActivityBadRelevanceScore(found: .boolean),
    .liveActivityBadInputPushToken(hint: "2"),
    .liveActivityInputPushTokenNotStart(event: "end"),
    .liveActivityBadInputPushChannel(found: .number),
    .liveActivityInputPushChannelNotStart(event: "update"),
    .liveActivityInputPushTokenAndChannel,
    .topicPushTypeMismatch(topic: "com.example.app", pushType: .voip, suffixOf: nil),
]

@Suite struct NotificationErrorTests {
    @Test func everyCaseHasADistinctCode() {
        let codes = everyNotificationError.map(\.code)
        #expect(Set(codes).count == codes.count)
    }

    @Test(arguments: everyNotificationError)
    func codeIsSnakeCase(error: NotificationError) {
        #expect(!error.code.isEmpty)
        #expect(
            error.code.utf8.allSatisfy {
                $0 == UInt8(ascii: "_") || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z"))
            })
    }

    @Test(arguments: everyNotificationError)
    func descriptionIsOneSentence(error: NotificationError) {
        #expect(error.description.hasSuffix("."))
        #expect(!error.description.contains("\n"))
        #expect(error.description.first?.isUppercase == true || error.description.hasPrefix("aps.") || error.description.hasPrefix("aps["))
    }

    @Test func codesNamedInTheBriefExist() {
        let codes = Set(everyNotificationError.map(\.code))
        for code in [
            "bad_device_token", "payload_too_large", "payload_not_json", "payload_not_object", "payload_empty",
            "bad_priority", "collapse_id_too_long", "bad_apns_id", "bad_topic", "missing_topic",
            "live_activity_missing_timestamp", "live_activity_missing_event", "live_activity_bad_event",
            "live_activity_start_missing_attributes", "bad_expiration",
        ] {
            #expect(codes.contains(code), "missing \(code)")
        }
    }

    @Test func deviceTokenErrorShowsOnlyItsFirstEightCharacters() throws {
        let error = try #require(validationError(makeNotification(deviceToken: token64 + "0")))
        #expect(error.description.contains("8d6b1f0e…"))
        #expect(!error.description.contains(String(token64.prefix(9))))
    }

    @Test func badTokenErrorDoesNotCarryTheToken() throws {
        let token = String(token64.dropLast()) + "z"
        let error = try #require(validationError(makeNotification(deviceToken: token)))
        #expect(error == .badDeviceToken(tokenPrefix: "8d6b1f0e…", offset: 63))
        #expect(!String(describing: error).contains(String(token64.prefix(9))))
    }

    @Test func payloadErrorDoesNotQuoteThePayload() throws {
        let error = try #require(validationError(makeNotification(payload: #"{"secret":"hunter2""#)))
        #expect(error.code == "payload_not_json")
        #expect(!error.description.contains("hunter2"))
        #expect(!error.description.contains("secret"))
        #expect(error.description.contains("byte 19"))
    }

    @Test func topicErrorEscapesControlCharacters() {
        let description = NotificationError.badTopic("com.example\napp").description
        #expect(description.contains(#""com.example\napp""#))
        #expect(!description.contains("\n"))
    }

    @Test func priorityErrorListsWhatIsAllowed() {
        #expect(
            NotificationError.badPriority(.immediate, pushType: .background).description
                == "Priority 10 is not allowed for push type background; allowed: 5.")
        #expect(
            NotificationError.badPriority(.lowest, pushType: .liveactivity).description.hasSuffix("allowed: 5, 10."))
    }

    @Test func sizeErrorNamesSizeAndLimit() {
        #expect(
            NotificationError.payloadTooLarge(byteCount: 5000, limit: 4096).description
                == "The payload is 5000 bytes; this push type allows at most 4096.")
    }

    @Test func notObjectErrorNamesWhatWasFound() {
        #expect(
            NotificationError.payloadNotObject(found: .array).description
                == "The payload is JSON but an array, not an object.")
    }
}
