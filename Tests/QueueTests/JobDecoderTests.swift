import APNs
import CHeraldShims
import Queue
import Testing

@Suite struct JobDecoderTests {
    static let token = String(repeating: "ab", count: 32)
    static let entry = StreamEntryID(milliseconds: 1_700_000_000_123, sequence: 4)
    static let defaults = JobDefaults(bundleID: "com.example.app")

    static func fields(_ pairs: [(String, String)]) -> [(name: String, value: [UInt8])] {
        pairs.map { ($0.0, Array($0.1.utf8)) }
    }

    static func decode(_ pairs: [(String, String)], defaults: JobDefaults = defaults) -> Result<Job, JobError> {
        JobDecoder.decode(entryID: entry, fields: fields(pairs), defaults: defaults)
    }

    @Test func minimalJobGetsDefaultTopicAndPushType() throws {
        let job = try Self.decode([("token", Self.token), ("payload", #"{"aps":{"alert":"Hi"}}"#)]).get()
        #expect(job.template.topic == "com.example.app")
        #expect(job.template.pushType == .alert)
        #expect(job.tokens == [Self.token])
        #expect(job.origin == "1700000000123-4")
        #expect(job.enqueuedAt == 1_700_000_000_123)
        #expect(job.attempts == 0)
    }

    @Test func voipTopicGetsItsSuffix() throws {
        let job = try Self.decode([("token", Self.token), ("payload", "{}"), ("push_type", "voip")]).get()
        #expect(job.template.topic == "com.example.app.voip")
    }

    @Test(arguments: [
        ([("token", token)], "missing_payload"),
        ([("payload", "{}")], "missing_token"),
        ([("token", token), ("payload", "{}"), ("push_type", "carrier-pigeon")], "unknown_push_type"),
        ([("token", token), ("payload", "{}"), ("priority", "7")], "bad_priority"),
        ([("token", token), ("payload", "{}"), ("expiration", "soon")], "bad_expiration"),
        ([("token", token), ("payload", "{}"), ("id", "NOT-A-UUID")], "bad_apns_id"),
        ([("token", token), ("payload", "{\"aps\":")], "payload_not_json"),
        ([("token", token), ("payload", "[1]")], "payload_not_object"),
        ([("token", "abc"), ("payload", "{}")], "device_token_odd_length"),
        ([("token", "zz"), ("payload", "{}")], "bad_device_token"),
        ([("token", token), ("payload", "{}"), ("push_type", "background"), ("priority", "10")], "bad_priority"),
    ] as [([(String, String)], String)])
    func malformedJobsGetDistinctReasons(pairs: [(String, String)], code: String) {
        guard case .failure(let error) = Self.decode(pairs) else {
            Issue.record("expected \(code), the job decoded")
            return
        }
        #expect(error.code == code)
        #expect(!error.description.isEmpty)
    }

    /// The one-token job checks its token apart from its template: a job wrong in both says
    /// what is wrong with the token, as `Notification.validate` would, and the decoded job
    /// keeps its token (folded to lowercase) in `tokens`, with every field of the rest read
    /// whole from the packed buffer.
    @Test func aOneTokenJobIsCheckedTokenFirstAndKeepsItsTokenApart() throws {
        let both = Self.decode([("token", "zz"), ("payload", "[1]"), ("priority", "5"), ("push_type", "background")])
        guard case .failure(let error) = both else {
            Issue.record("a job with a bad token and a bad payload decoded")
            return
        }
        #expect(error.code == "bad_device_token")
        let upper = Self.token.uppercased()
        let job = try Self.decode([("collapse_id", "order-4711"), ("token", upper), ("payload", #"{"aps":{}}"#),
                                   ("topic", "com.example.app"), ("priority", "5"), ("push_type", "background"),
                                   ("expiration", "1700000000")]).get()
        #expect(job.tokens == [Self.token])
        #expect(job.template.deviceToken.isEmpty)
        #expect(job.template.collapseID == "order-4711")
        #expect(job.template.priority == .powerAware)
        #expect(job.template.pushType == .background)
        #expect(job.template.expiration == 1_700_000_000)
        #expect(Array(job.template.payload) == Array(#"{"aps":{}}"#.utf8))
    }

    /// `receipt` asks for receipts when its first value is `1` or `true`, whatever follows; any
    /// other value, or none, does not. Read in the decoder's one pass over the fields, for single,
    /// fan-out and broadcast jobs alike.
    @Test func receiptIsReadFromTheFirstReceiptField() throws {
        let base = [("token", Self.token), ("payload", "{}")]
        let cases: [([(String, String)], Bool)] = [
            ([], false), ([("receipt", "1")], true), ([("receipt", "true")], true), ([("receipt", "0")], false),
            ([("receipt", "yes")], false), ([("receipt", "")], false), ([("receipt", "TRUE")], false),
            ([("receipt", "1"), ("receipt", "0")], true), ([("receipt", "0"), ("receipt", "1")], false),
            ([("receipts", "1")], false),
        ]
        for (extra, wanted) in cases {
            let job = try Self.decode(base + extra).get()
            #expect(job.wantsReceipt == wanted, "\(extra)")
        }
        let fanOut = try Self.decode([("tokens", "\(Self.token),\(Self.token)"), ("payload", "{}"), ("receipt", "true")]).get()
        #expect(fanOut.wantsReceipt)
        let broadcast = try Self.decode([("channel_id", "dHN0LTI2LXJlY2VpcHQ="), ("payload", #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#),
                                         ("receipt", "1")]).get()
        #expect(broadcast.template.isBroadcast && broadcast.wantsReceipt)
    }

    /// 64-digit tokens, single or in a list, are kept packed; other lengths as text. Either way the
    /// worker's request is addressed with the folded text, and its apns-id is the one the text gives.
    @Test func sixtyFourDigitTokensAreKeptPacked() throws {
        let single = try Self.decode([("token", Self.token.uppercased()), ("payload", "{}")]).get()
        #expect(single.tokens.token(at: 0).isPacked)
        #expect(single.tokens[0] == Self.token)
        let addressed = single.request(tokenAt: 0, context: 0, attempts: 0).notification
        #expect(addressed.deviceToken == Self.token)
        #expect(addressed.apnsID == single.notification(forToken: Self.token).apnsID)
        #expect(addressed.apnsID == StableID.apnsID(origin: single.origin, token: Self.token))

        let short = String(repeating: "c", count: 62)
        let long = String(repeating: "e", count: 66)
        let fanOut = try Self.decode([("tokens", "\(Self.token),\(short), \(Self.token.uppercased()) ,\(long)"), ("payload", "{}")]).get()
        #expect((0..<4).map { fanOut.tokens.token(at: $0).isPacked } == [true, false, true, false])
        #expect(fanOut.tokens == [Self.token, short, Self.token, long])
        for index in 0..<4 {
            let notification = fanOut.request(tokenAt: index, context: UInt64(index), attempts: 0).notification
            #expect(notification.deviceToken == [Self.token, short, Self.token, long][index])
            #expect(notification.apnsID == fanOut.notification(forToken: fanOut.tokens[index]).apnsID)
        }
    }

    /// The worker prefetches `Job.allocationBytes` from a job's address: the job's allocation
    /// must not reach past them, whatever its tokens.
    ///
    /// The bound is checked against the object's size (from the class's metadata) rounded as
    /// glibc's malloc rounds it, not against one job's `malloc_usable_size`: malloc hands out a
    /// free chunk up to 31 bytes larger than asked for whole, so on a used heap a job can come
    /// back with 16 bytes more than its rounded size (bytes it never touches).
    @Test func aJobsAllocationFitsTheBytesTheWorkerPrefetches() throws {
        // The metadata read is checked on a class whose size is known: a header and two words.
        #expect(Self.instanceSize(of: SizeProbe()) == 32)
        for pairs in [[("token", Self.token), ("payload", "{}")],
                      [("tokens", "\(Self.token),\(Self.token)"), ("payload", "{}"), ("collapse_id", "c"), ("id_base", "b")]] {
            let jobs = try (0..<64).map { _ in try Self.decode(pairs).get() }
            let size = Self.instanceSize(of: jobs[0])
            let rounded = max(32, (size + 8 + 15) & ~15) - 8
            #expect(rounded <= Job.allocationBytes, "a job's object is \(size) bytes, \(rounded) with malloc's rounding")
            #expect(rounded > Job.allocationBytes - 64, "a job's object is \(size) bytes: the bound is loose")
            let usable = jobs.map { herald_allocation_size(Unmanaged.passUnretained($0).toOpaque()) }
            #expect(usable.allSatisfy { $0 >= rounded && $0 < rounded + 32 }, "malloc_usable_size \(Set(usable).sorted())")
        }
    }

    private final class SizeProbe {
        var first = 0
        var second = 0
    }

    /// The instance size a Swift class's metadata records (on Linux, the 32-bit field after the
    /// kind, the superclass and two 32-bit fields).
    private static func instanceSize(of object: AnyObject) -> Int {
        let metadata = unsafeBitCast(type(of: object), to: UnsafeRawPointer.self)
        return Int(metadata.load(fromByteOffset: 24, as: UInt32.self))
    }

    /// A 64-byte token with one bad byte is not packed, and validation names the byte.
    @Test(arguments: [0, 17, 63])
    func aSixtyFourByteTokenWithABadByteIsRefusedAtThatByte(position: Int) {
        var bytes = Array(Self.token.utf8)
        bytes[position] = UInt8(ascii: "g")
        let result = Self.decode([("token", String(decoding: bytes, as: UTF8.self)), ("payload", "{}")])
        #expect(throws: JobError.notification(.badDeviceToken(tokenPrefix: String(decoding: bytes.prefix(8), as: UTF8.self) + "…",
                                                             offset: position))) { try result.get() }
    }

    @Test func jobWithoutTopicNeedsABundleID() {
        let result = Self.decode([("token", Self.token), ("payload", "{}")], defaults: JobDefaults())
        #expect(throws: JobError.noTopic) { try result.get() }
    }

    @Test func oversizePayloadIsRejected() {
        let big = "{\"a\":\"" + String(repeating: "x", count: 4100) + "\"}"
        guard case .failure(let error) = Self.decode([("token", Self.token), ("payload", big)]) else {
            Issue.record("a 4 KiB+ payload decoded")
            return
        }
        #expect(error.code == "payload_too_large")
    }

    @Test func fanOutKeepsValidTokensAndSetsAsideInvalidOnes() throws {
        let (a, b, d) = (String(repeating: "a", count: 16), String(repeating: "b", count: 16), String(repeating: "d", count: 16))
        let job = try Self.decode([("tokens", "\(a), \(b.uppercased()) ,zz,ccc,\(d),abcd"), ("payload", "{}")]).get()
        #expect(job.tokens == [a, b, d])
        #expect(job.invalidTokens.map(\.token) == ["zz", "ccc", "abcd"])
        #expect(job.invalidTokens.map(\.error.code) == ["bad_device_token", "device_token_odd_length", "device_token_too_short"])
    }

    @Test func tooManyTokensIsRejected() {
        let tokens = (0..<10_001).map { _ in Self.token }.joined(separator: ",")
        #expect(throws: JobError.tooManyTokens(count: 10_001, limit: 10_000)) {
            try Self.decode([("tokens", tokens), ("payload", "{}")]).get()
        }
    }

    @Test func unknownFieldsAreCountedNotRejected() throws {
        let job = try Self.decode([("token", Self.token), ("payload", "{}"), ("campaign", "spring"), ("user_id", "42")]).get()
        #expect(job.unknownFields == 2)
    }

    @Test func singleTokenJobSendsItsOwnID() throws {
        let id = "123e4567-e89b-12d3-a456-426614174000"
        let job = try Self.decode([("token", Self.token), ("payload", "{}"), ("id", id)]).get()
        #expect(job.notification(forToken: Self.token).apnsID == id)
    }

    @Test func fanOutDerivesIDsFromItsIDAndKeepsThemOnARetryOfOneToken() throws {
        let id = "123e4567-e89b-12d3-a456-426614174000"
        let (a, b) = (String(repeating: "a", count: 16), String(repeating: "b", count: 16))
        let job = try Self.decode([("tokens", "\(a),\(b)"), ("payload", "{}"), ("id", id)]).get()
        let first = job.notification(forToken: b).apnsID
        #expect(first != id)
        #expect(first == StableID.apnsID(origin: id, token: b))
        // The retry entry Herald writes for the one remaining token carries id_base, not id.
        let retry = try Self.decode([("token", b), ("payload", "{}"), ("id_base", id), ("origin", "1700000000123-4"),
                                     ("attempts", "1")]).get()
        #expect(retry.notification(forToken: b).apnsID == first)
        #expect(retry.attempts == 1)
    }

    @Test func equalEntryIDsOfTwoQueuesGiveDifferentAPNsIDs() throws {
        let orders = try Self.decode([("token", Self.token), ("payload", "{}")],
                                     defaults: JobDefaults(bundleID: "com.example.app", apnsIDNamespace: "orders")).get()
        let news = try Self.decode([("token", Self.token), ("payload", "{}")],
                                   defaults: JobDefaults(bundleID: "com.example.app", apnsIDNamespace: "news")).get()
        #expect(orders.notification(forToken: Self.token).apnsID != news.notification(forToken: Self.token).apnsID)
        // The namespace hashes exactly as if the origin were written "orders/<origin>".
        #expect(orders.notification(forToken: Self.token).apnsID
                == StableID.apnsID(origin: "orders/" + orders.origin, token: Self.token))
    }

    @Test func retriedJobKeepsItsOriginAndDerivedID() throws {
        let original = try Self.decode([("token", Self.token), ("payload", "{}")]).get()
        let retry = JobDecoder.decode(
            entryID: StreamEntryID(milliseconds: 1_700_000_999_000, sequence: 0),
            fields: Self.fields([("token", Self.token), ("payload", "{}"), ("origin", "1700000000123-4"), ("attempts", "2")]),
            defaults: Self.defaults)
        let retried = try retry.get()
        #expect(retried.originID == Self.entry)
        #expect(retried.notification(forToken: Self.token).apnsID == original.notification(forToken: Self.token).apnsID)
        #expect(retried.enqueuedAt == 1_700_000_000_123)
    }
}

@Suite struct StreamEntryIDTests {
    @Test func parsesTextAndBytesAlike() {
        #expect(StreamEntryID("1700000000123-4") == StreamEntryID(milliseconds: 1_700_000_000_123, sequence: 4))
        #expect(StreamEntryID(bytes: Array("1700000000123-4".utf8)) == StreamEntryID("1700000000123-4"))
    }

    @Test(arguments: ["", "-", "12", "12-", "-3", "1-2-3", "a-1", "1-b", "99999999999999999999-1"])
    func rejectsMalformedIDs(text: String) {
        #expect(StreamEntryID(text) == nil)
        #expect(StreamEntryID(bytes: Array(text.utf8)) == nil)
        Array(text.utf8).withUnsafeBytes { #expect(StreamEntryID(bytes: $0) == nil) }
    }

    /// The id parse against its rule written plainly (exactly one dash, one or more decimal
    /// digits on each side, each side fits in 64 bits), on the edges and on 20,000 random strings
    /// over digits, dashes and other bytes; raw buffers, arrays and non-contiguous sequences alike.
    @Test func parseFollowsTheIDRule() {
        func rule(_ bytes: [UInt8]) -> StreamEntryID? {
            let parts = bytes.split(separator: 0x2D, omittingEmptySubsequences: false)
            guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }),
                  let milliseconds = UInt64(String(decoding: parts[0], as: UTF8.self)),
                  let sequence = UInt64(String(decoding: parts[1], as: UTF8.self)) else { return nil }
            return StreamEntryID(milliseconds: milliseconds, sequence: sequence)
        }
        func check(_ bytes: [UInt8]) -> Bool {
            let expected = rule(bytes)
            let raw = bytes.withUnsafeBytes { StreamEntryID(bytes: $0) }
            #expect(raw == expected, "\(bytes)")
            #expect(StreamEntryID(bytes: bytes) == expected, "\(bytes)")
            #expect(StreamEntryID(bytes: bytes.lazy.map { $0 }) == expected, "\(bytes)")
            return expected != nil
        }
        let edges = ["0-0", "1700000000123-4", "18446744073709551615-18446744073709551615",
                     "18446744073709551616-0", "0-18446744073709551616", "00-00", "1-", "-1", "1--1", "1-2-", "+1-2", "1-+2"]
        for text in edges { _ = check(Array(text.utf8)) }
        #expect(rule(Array("18446744073709551615-7".utf8)) == StreamEntryID(milliseconds: .max, sequence: 7))
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let alphabet: [UInt8] = Array("0123456789-".utf8) + [0, 0x2F, 0x3A, 0xFF]
        var parsed = 0
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let length = Int(state >> 59)
            var bytes: [UInt8] = []
            for position in 0..<length {
                let pick = Int((state >> UInt64(position % 48)) & 0xFF) % (position % 3 == 2 ? alphabet.count : 11)
                bytes.append(alphabet[pick])
            }
            if check(bytes) { parsed += 1 }
        }
        #expect(parsed > 100)
    }

    @Test func ordersByTimeThenSequence() {
        #expect(StreamEntryID("5-9")! < StreamEntryID("6-0")!)
        #expect(StreamEntryID("6-0")! < StreamEntryID("6-1")!)
        #expect(StreamEntryID("6-1")!.description == "6-1")
    }
}

@Suite struct StableIDTests {
    /// A packed token (the decoder's form of a 64-digit token) hashes as its text does: the
    /// apns-id of a notification must not depend on how the worker keeps its token.
    @Test func aPackedTokenHashesLikeItsText() {
        var generator = SplitMix64(seed: 11)
        for round in 0..<200 {
            var text = ""
            for _ in 0..<4 { text += String(generator.next() | 1 << 63, radix: 16).suffix(16) }
            let spelled = round % 2 == 0 ? text : text.uppercased()
            let packed = Array(spelled.utf8).withUnsafeBytes { DeviceToken(lowercasing: $0) }
            #expect(packed.isPacked)
            let entry = StreamEntryID(milliseconds: generator.next() >> 20, sequence: UInt64(round))
            for namespace in ["", "orders"] {
                #expect(StableID.bits(namespace: namespace, origin: entry, token: packed)
                        == StableID.bits(namespace: namespace, origin: entry, token: text))
                #expect(StableID.bits(namespace: namespace, origin: "1-\(round)", token: packed)
                        == StableID.bits(namespace: namespace, origin: "1-\(round)", token: spelled))
            }
        }
        let pinned = Array(String(repeating: "0F", count: 32).utf8).withUnsafeBytes { DeviceToken(lowercasing: $0) }
        #expect(UUIDString.make(StableID.bits(namespace: "orders", origin: StreamEntryID(milliseconds: 1_700_000_000_123, sequence: 4),
                                              token: pinned)) == "3009deaf-ea11-8236-bcd8-b19a889f949f")
    }

    /// The derivation as written in the docs, byte by byte: every way Herald computes an id
    /// (namespace hashed once, a packed token's digits spelled at once, the lanes' constants
    /// folded off their chains) must give what this gives.
    static func plainBits(namespace: String, origin: String, token: String) -> UUIDBits {
        var high: UInt64 = 0xcbf2_9ce4_8422_2325, low: UInt64 = 0x8422_2325_cbf2_9ce4
        let prime: UInt64 = 0x100_0000_01b3
        let prefix = namespace.isEmpty ? origin : namespace + "/" + origin
        for byte in prefix.utf8 {
            high = (high ^ UInt64(byte)) &* prime
            low = ((low ^ UInt64(byte)) &* prime) ^ 0x9E37
        }
        high = (high ^ 0x3A) &* prime
        low = (low ^ 0x3A) &* prime
        for byte in token.lowercased().utf8 {
            high = (high ^ UInt64(byte)) &* prime
            low = ((low ^ UInt64(byte)) &* prime) ^ 0x7F4A
        }
        var first = SplitMix64(seed: high), second = SplitMix64(seed: low ^ high)
        return UUIDBits(high: first.next(), low: second.next())
    }

    @Test func everyFormMatchesThePlainDerivation() {
        var generator = SplitMix64(seed: 23)
        let namespaces = ["", "a", "orders", String(repeating: "queue-name/", count: 9)]
        for round in 0..<400 {
            var token = ""
            for _ in 0..<4 { token += String(generator.next() | 1 << 63, radix: 16).suffix(16) }
            if round % 3 == 1 { token = token.uppercased() }
            if round % 5 == 4 { token = String(token.prefix(Int(generator.next() % 70))) }  // text, not packed
            let packed = Array(token.utf8).withUnsafeBytes { DeviceToken(lowercasing: $0) }
            #expect(packed.isPacked == (token.utf8.count == 64))
            let entry = StreamEntryID(milliseconds: generator.next() >> UInt64(generator.next() % 64),
                                      sequence: round % 7 == 0 ? UInt64.max : generator.next() % 1_000)
            let namespace = namespaces[round % namespaces.count]
            let expected = Self.plainBits(namespace: namespace, origin: entry.description, token: token)
            #expect(StableID.bits(namespace: namespace, origin: entry, token: packed) == expected)
            #expect(StableID.bits(namespace: namespace, origin: entry.description, token: packed) == expected)
            #expect(StableID.bits(namespace: namespace, origin: entry, token: token) == expected)
            #expect(StableID.bits(seed: StableID.Seed(namespace: namespace), origin: entry, token: packed) == expected)
            var defaults = JobDefaults()
            defaults.apnsIDNamespace = namespace
            #expect(defaults.apnsIDSeed == StableID.Seed(namespace: namespace))
        }
    }

    @Test func isCanonicalAndStable() {
        let id = StableID.apnsID(origin: "1700000000123-4", token: "abcd")
        #expect(UUIDString.isCanonical(id))
        #expect(id == StableID.apnsID(origin: "1700000000123-4", token: "abcd"))
        #expect(id == StableID.apnsID(origin: "1700000000123-4", token: "ABCD"))
    }

    /// Jobs hash their own entry id digit by digit; retries hash the `origin` text they carry.
    /// Both must give one id, or a retried notification would get a new apns-id.
    @Test(arguments: [(UInt64(0), UInt64(0)), (1, 0), (9, 9), (10, 10), (1_700_000_000_123, 4),
                      (999_999_999_999_999, 18_446_744_073_709_551_615), (UInt64.max, UInt64.max)])
    func entryIDHashesLikeItsText(milliseconds: UInt64, sequence: UInt64) {
        let entry = StreamEntryID(milliseconds: milliseconds, sequence: sequence)
        for namespace in ["", "orders"] {
            #expect(StableID.apnsID(namespace: namespace, origin: entry, token: "abcd")
                    == StableID.apnsID(namespace: namespace, origin: entry.description, token: "abcd"))
        }
    }

    /// Pinned values: an apns-id must not change between Herald versions, or a job retried by an
    /// upgraded worker would reach the device as a second notification instead of replacing it.
    @Test func derivedIDsAreTheSameInEveryVersion() {
        #expect(StableID.apnsID(origin: "1700000000123-4", token: "abcd") == "be24aab3-5b37-8b56-ab89-885a27d0e71b")
        #expect(StableID.apnsID(namespace: "orders", origin: StreamEntryID(milliseconds: 1_700_000_000_123, sequence: 4),
                                token: String(repeating: "0f", count: 32)) == "3009deaf-ea11-8236-bcd8-b19a889f949f")
    }

    @Test func differsByOriginAndByToken() {
        let ids = Set([
            StableID.apnsID(origin: "1-0", token: "abcd"),
            StableID.apnsID(origin: "1-1", token: "abcd"),
            StableID.apnsID(origin: "1-0", token: "abce"),
            StableID.apnsID(origin: "1-0a", token: "bcd"),
        ])
        #expect(ids.count == 4)
    }

    @Test func hundredThousandOriginsGiveDistinctIDs() {
        var seen = Set<String>()
        for sequence in 0..<100_000 { seen.insert(StableID.apnsID(origin: "1700000000000-\(sequence)", token: "abcd")) }
        #expect(seen.count == 100_000)
    }
}

@Suite struct RetryEncodingTests {
    @Test func encodesFieldsAsAJSONArrayOfStrings() throws {
        let encoded = RetryEncoding.encode([("token", Array("abcd".utf8)), ("payload", Array(#"{"aps":{"alert":"a\"b\\c"}}"#.utf8)),
                                            ("note", [0x0A, 0x01, 0x09])])
        let root = try encoded.withUnsafeBufferPointer { try JSONScanner($0).validate() }
        #expect(root.kind == .array)
        #expect(String(decoding: encoded, as: UTF8.self)
                == #"["token","abcd","payload","{\"aps\":{\"alert\":\"a\\\"b\\\\c\"}}","note","\n\u0001\t"]"#)
    }

    @Test func keysOfAQueueShareOneHashTag() {
        let keys = QueueKeys(queue: "orders")
        for key in [keys.jobs, keys.retry, keys.dead, keys.feedback] { #expect(key.hasPrefix("herald:{orders}:")) }
        #expect(keys.group == "herald")
    }
}
