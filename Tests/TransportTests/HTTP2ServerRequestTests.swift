import Testing

@testable import Transport

/// The emulator's request keeps its header fields as bytes and makes Strings only when asked:
/// lookups, counts and the duplicate check must answer as they did on Strings.
struct HTTP2ServerRequestTests {
    static func request(_ fields: [(String, [UInt8])]) -> HTTP2ServerRequest {
        var request = HTTP2ServerRequest(streamID: 1)
        for (name, value) in fields {
            Array(name.utf8).withUnsafeBufferPointer { name in
                value.withUnsafeBufferPointer { request.appendField(name: name, value: $0) }
            }
        }
        return request
    }

    @Test func lookupsFindTheFirstValueAndCountEveryOne() {
        let request = Self.request([
            ("apns-topic", Array("com.example.herald".utf8)), ("apns-id", []), ("apns-topic", Array("second".utf8)),
            ("authorization", Array("bearer a.b.c".utf8)),
        ])
        #expect(request.header("apns-topic").value == "com.example.herald")
        #expect(request.header("apns-topic").count == 2)
        #expect(request.header("apns-id") == ("", 1), "an empty value is present, not absent")
        #expect(request.header("apns-priority").value == nil && request.header("apns-priority").count == 0)
        #expect(request.headerBytes("authorization").map(Array.init) == Array("bearer a.b.c".utf8))
        #expect(request.headerBytes("apns-expiration") == nil)
        // Names match whole, never by prefix either way.
        #expect(request.header("apns-top").count == 0 && request.header("apns-topics").count == 0)
        #expect(request.header("").count == 0)
        #expect(request.headers.map(\.name) == ["apns-topic", "apns-id", "apns-topic", "authorization"])
        #expect(request.headers.map(\.value) == ["com.example.herald", "", "second", "bearer a.b.c"])
    }

    @Test func binaryValuesStayExactAsBytesAndAreRepairedAsText() {
        let raw: [UInt8] = [0x61, 0xFF, 0x00, 0xC3, 0x62]
        let request = Self.request([("apns-collapse-id", raw)])
        #expect(request.headerBytes("apns-collapse-id").map(Array.init) == raw)
        #expect(request.header("apns-collapse-id").value == String(decoding: raw, as: UTF8.self))
        #expect(request.header("apns-collapse-id").value?.contains("\u{FFFD}") == true)
    }

    @Test(arguments: [
        ([("apns-topic", "a"), ("apns-topic", "b")], true),
        ([("authorization", "x"), ("apns-id", "y"), ("authorization", "x")], true),
        ([("apns-", "1"), ("apns-", "2")], true),
        ([("x-trace", "1"), ("x-trace", "2")], false),
        ([("apns-topic", "a"), ("apns-topics", "a"), ("apns-id", "b"), ("authorisation", "c"), ("authorisation", "c")], false),
        ([("apns", "1"), ("apns", "2"), ("a", "3"), ("a", "4")], false),
        ([], false),
    ])
    func duplicatesCountOnlyForAPNsAndAuthorizationHeaders(fields: [(String, String)], duplicated: Bool) {
        let request = Self.request(fields.map { ($0.0, Array($0.1.utf8)) })
        #expect(request.hasDuplicateHeader(prefix: "apns-", orName: "authorization") == duplicated, "\(fields)")
    }

    /// Names are matched by a key of their length and first 7 bytes, then by the rest: names that
    /// share the key's bytes, or are longer than the key's length byte can say, must not match.
    @Test func namesThatShareTheirFirstBytesOrAreHugeStayApart() {
        let long300 = "x-" + String(repeating: "a", count: 298)
        let long400 = "x-" + String(repeating: "a", count: 398)
        let request = Self.request([
            ("apns-topic", Array("t".utf8)), ("apns-topix", Array("u".utf8)), ("apns-to", Array("v".utf8)),
            (long300, Array("300".utf8)), (long400, Array("400".utf8)), ("", Array("empty".utf8)),
        ])
        #expect(request.header("apns-topic") == ("t", 1))
        #expect(request.header("apns-topix") == ("u", 1))
        #expect(request.header("apns-to") == ("v", 1))
        #expect(request.header("apns-t").count == 0 && request.header("apns-topicz").count == 0)
        #expect(request.header(long300) == ("300", 1))
        #expect(request.header(long400) == ("400", 1))
        #expect(request.header(long300 + "a").count == 0, "301 bytes shares the key of 300 and 400 (lengths cap at 255)")
        #expect(request.header("") == ("empty", 1))
        #expect(!request.hasDuplicateHeader(prefix: "apns-", orName: "authorization"))
        #expect(!request.hasDuplicateHeader(prefix: "x-", orName: "authorization"), "300 and 400 bytes are different names")
        #expect(Self.request([(long400, [1]), (long400, [2])]).hasDuplicateHeader(prefix: "x-aaaaaaaaaa", orName: "-"))
        #expect(!Self.request([(long400, [1]), (long400, [2])]).hasDuplicateHeader(prefix: "x-aaaaaaab", orName: "-"))
    }

    @Test func resetForgetsEveryFieldButKeepsTheBuffers() {
        var request = Self.request([("apns-topic", Array(repeating: 0x61, count: 300))])
        request.reset(streamID: 3)
        #expect(request.streamID == 3)
        #expect(request.headers.isEmpty && request.header("apns-topic").count == 0)
        #expect(request.fieldBytes.isEmpty && request.fieldBytes.capacity >= 310)
        #expect(!request.hasDuplicateHeader(prefix: "apns-", orName: "authorization"))

        // A huge header block's buffer is not kept for the slot's next streams.
        var huge = Self.request([("x-padding", Array(repeating: 0x62, count: 100_000))])
        #expect(huge.fieldBytes.capacity >= 100_000)
        huge.reset(streamID: 5)
        #expect(huge.fieldBytes.capacity <= HTTP2ServerRequest.keptFieldBytes)
        #expect(huge.headers.isEmpty)
        // So is the index of a block of many tiny fields.
        var many = Self.request(Array(repeating: ("a", [0x62]), count: 10_000))
        #expect(many.fields.capacity >= 10_000)
        many.reset(streamID: 7)
        #expect(many.fields.capacity <= HTTP2ServerRequest.keptFields)
        #expect(many.header("a").count == 0)
        // An ordinary block keeps its buffers for the next stream.
        var ordinary = Self.request([("apns-topic", Array("com.example.herald".utf8)), ("apns-id", Array(repeating: 0x30, count: 36))])
        ordinary.reset(streamID: 9)
        #expect(ordinary.fieldBytes.capacity >= 54 && ordinary.fields.capacity >= 2)
    }
}
