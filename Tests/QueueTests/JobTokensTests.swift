import APNs
import Queue
import Testing

/// A job's tokens: the usual single token kept without a list, fan-out as a list; both read alike.
@Suite
struct JobTokensReading {
    static let a = String(repeating: "a", count: 64)
    static let b = String(repeating: "b", count: 64)

    @Test
    func oneTokenReadsLikeAOneElementArray() {
        let tokens = JobTokens(Self.a)
        #expect(tokens.count == 1 && tokens[0] == Self.a && tokens.first == Self.a)
        #expect(Array(tokens) == [Self.a] && tokens.array == [Self.a])
        #expect(tokens == [Self.a] && tokens == JobTokens([Self.a]) && tokens != [Self.b])
    }

    @Test
    func severalTokensKeepTheirOrder() {
        let tokens = JobTokens([Self.b, Self.a])
        #expect(tokens.count == 2 && tokens[0] == Self.b && tokens[1] == Self.a)
        #expect(Array(tokens.enumerated().map(\.offset)) == [0, 1])
        #expect(tokens == [Self.b, Self.a] && tokens != [Self.a, Self.b] && tokens != [Self.b])
    }

    @Test
    func decodedJobsHoldTheirTokens() throws {
        let payload = Array(#"{"aps":{"alert":"x"}}"#.utf8)
        let id = StreamEntryID(milliseconds: 1, sequence: 0)
        let single = try JobDecoder.decode(entryID: id, fields: [("token", Array(Self.a.uppercased().utf8)), ("payload", payload)],
                                           defaults: JobDefaults(bundleID: "com.example.app")).get()
        #expect(single.tokens == [Self.a], "lowercased, one token")
        // `token` and `tokens` together: both kept, `token` first.
        let both = try JobDecoder.decode(entryID: id, fields: [("token", Array(Self.a.utf8)), ("tokens", Array(Self.b.utf8)), ("payload", payload)],
                                         defaults: JobDefaults(bundleID: "com.example.app")).get()
        #expect(both.tokens == [Self.a, Self.b])
        let missing = JobDecoder.decode(entryID: id, fields: [("token", []), ("payload", payload)], defaults: JobDefaults(bundleID: "com.example.app"))
        guard case .failure(.missingToken) = missing else { Issue.record("an empty token is no token: \(missing)"); return }
    }

    /// The prefetch hint names the headers freeing the job writes: its fields' storage (whose
    /// bytes hold the payload) and, for a token kept as text, its string, each 32 bytes before
    /// their bytes. A packed 64-digit token lies in the job itself: no hint for it.
    @Test
    func thePrefetchHintNamesTheStorageAndTheTokenHeaders() throws {
        let payload = Array(#"{"aps":{"alert":"x"}}"#.utf8)
        let id = StreamEntryID(milliseconds: 1, sequence: 0)
        let packed = try JobDecoder.decode(entryID: id, fields: [("token", Array(Self.a.utf8)), ("payload", payload)],
                                           defaults: JobDefaults(bundleID: "com.example.app")).get()
        var packedHints: [UnsafeRawPointer] = []
        packed.prefetchOwnedObjects { packedHints.append($0) }
        #expect(packedHints.count == 1)
        let shorter = String(repeating: "a", count: 62)
        let job = try JobDecoder.decode(entryID: id, fields: [("token", Array(shorter.utf8)), ("payload", payload)],
                                        defaults: JobDefaults(bundleID: "com.example.app")).get()
        var hints: [UnsafeRawPointer] = []
        job.prefetchOwnedObjects { hints.append($0) }
        #expect(hints.count == 2)
        let payloadStart = try #require(job.template.payload.withUnsafeBytes { $0.baseAddress })
        let text = try #require(job.tokens.token(at: 0).text)
        let tokenStart = try #require(text.utf8Span.span.withUnsafeBufferPointer { $0.baseAddress })
        if hints.count == 2 {
            #expect(hints[0] + 32 <= payloadStart && payloadStart - hints[0] < 1024, "not the fields' storage")
            #expect(hints[1] + 32 == UnsafeRawPointer(tokenStart), "not the token's header")
        }
        if let first = packedHints.first {
            let packedPayload = try #require(packed.template.payload.withUnsafeBytes { $0.baseAddress })
            #expect(first + 32 <= packedPayload && packedPayload - first < 1024, "not the fields' storage")
        }
        // A fan-out job's list, and a job whose every token is invalid: hints, no crash.
        for tokens in ["\(Self.a),\(Self.b)", "zz,yy"] {
            let fanOut = try JobDecoder.decode(entryID: id, fields: [("tokens", Array(tokens.utf8)), ("payload", payload)],
                                               defaults: JobDefaults(bundleID: "com.example.app")).get()
            var count = 0
            fanOut.prefetchOwnedObjects { _ in count += 1 }
            #expect(count == 2)
        }
    }
}
