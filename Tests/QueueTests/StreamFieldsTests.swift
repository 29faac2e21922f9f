import APNs
import Queue
import Testing
import Transport

/// Packed field lists (`StreamFields`): what goes in comes out byte for byte, whether packed from
/// pairs or straight off a reply tape, and a name matches only its exact bytes.
struct StreamFieldsTests {
    /// Random fields: names of any bytes (some Herald's own), values empty to a few KiB.
    static func randomPairs(_ random: inout SplitMix64) -> [(name: String, value: [UInt8])] {
        let known = ["token", "tokens", "payload", "topic", "app", "id", "collapse_id", "receipt", "lane"]
        return (0..<Int(random.next() % 9)).map { _ in
            let name: String
            switch random.next() % 3 {
            case 0: name = known[Int(random.next() % UInt64(known.count))]
            case 1: name = FieldName.decode((0..<Int(random.next() % 6)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
            default: name = "field\(random.next() % 100)"
            }
            let length = random.next() % 4 == 0 ? Int(random.next() % 5000) : Int(random.next() % 40)
            return (name, (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        }
    }

    static func same(_ a: [(name: String, value: [UInt8])], _ b: [(name: String, value: [UInt8])]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { FieldName.bytes($0.name) == FieldName.bytes($1.name) && $0.value == $1.value }
    }

    static func bulk(_ bytes: [UInt8]) -> [UInt8] { Array("$\(bytes.count)\r\n".utf8) + bytes + [13, 10] }

    /// An XREADGROUP reply holding `entries` (a nil field list is `*-1`: deleted while pending).
    static func reply(_ entries: [(id: String, fields: [(name: String, value: [UInt8])]?)]) -> [UInt8] {
        var bytes = Array("*1\r\n*2\r\n".utf8) + bulk(Array("herald:{q}:jobs".utf8)) + Array("*\(entries.count)\r\n".utf8)
        for entry in entries {
            bytes += Array("*2\r\n".utf8) + bulk(Array(entry.id.utf8))
            guard let fields = entry.fields else { bytes += Array("*-1\r\n".utf8); continue }
            bytes += Array("*\(2 * fields.count)\r\n".utf8)
            for field in fields { bytes += bulk(FieldName.bytes(field.name)) + bulk(field.value) }
        }
        return bytes
    }

    static func readTape(_ bytes: [UInt8], limits: RESPReader.Limits = .init()) throws -> [StreamRecord] {
        let tape = RedisReplyTape()
        let reader = RESPReader(tape: tape, limits: limits)
        var offset = 0
        let complete = try bytes.withUnsafeBytes { try reader.read($0, from: &offset) }
        #expect(complete && offset == bytes.count)
        return try RedisReplyReader.readEntries(tape: tape).get()
    }

    @Test
    func pairsRoundTripExactly() {
        var random = SplitMix64(seed: 11)
        for _ in 0..<2_000 {
            let pairs = Self.randomPairs(&random)
            let packed = StreamFields(pairs)
            #expect(packed.count == pairs.count)
            #expect(Self.same(packed.pairs, pairs))
            for (index, pair) in pairs.enumerated() {
                #expect(Array(packed.value(at: index)) == pair.value)
                #expect(packed.name(at: index, is: pair.name) == (FieldName.bytes(pair.name) == Array(pair.name.utf8)))
            }
        }
    }

    @Test
    func entriesOffTheTapeMatchWhatWasWritten() throws {
        var random = SplitMix64(seed: 12)
        for round in 0..<300 {
            let entries: [(id: String, fields: [(name: String, value: [UInt8])]?)] = (0..<Int(random.next() % 6)).map { index in
                ("\(1_700_000_000_000 + round)-\(index)", random.next() % 8 == 0 ? nil : Self.randomPairs(&random))
            }
            let records = try Self.readTape(Self.reply(entries))
            #expect(records.count == entries.count)
            for (record, entry) in zip(records, entries) {
                #expect(record.id.description == entry.id)
                #expect(Self.same(record.fields, entry.fields ?? []), "entry \(entry.id)")
                #expect(record.truncated.isEmpty)
            }
            // The tools' path (a RedisReply tree) reads the same.
            let tree = try readTree(Self.reply(entries))
            #expect(zip(RedisReplyReader.readEntries(tree), records).allSatisfy { Self.same($0.fields, $1.fields) })
        }
    }

    private func readTree(_ bytes: [UInt8]) throws -> RedisReply {
        let tape = RedisReplyTape()
        let reader = RESPReader(tape: tape)
        var offset = 0
        _ = try bytes.withUnsafeBytes { try reader.read($0, from: &offset) }
        return tape.reply()
    }

    @Test
    func aCutValueIsNamedByItsOwnField() throws {
        let big = [UInt8](repeating: 0x61, count: 10_000)
        let fields: [(name: String, value: [UInt8])] = [("token", Array("ab".utf8)), ("payload", big), ("topic", Array("t".utf8))]
        let records = try Self.readTape(Self.reply([("5-1", fields)]),
                                        limits: .init(maxBulkBytes: 4_000, keptPrefixBytes: 100))
        #expect(records.count == 1)
        #expect(records[0].truncated.map(\.field) == ["payload"])
        #expect(records[0].truncated.first?.length == 10_000)
        #expect(records[0].text("token") == "ab" && records[0].text("topic") == "t")
        #expect(records[0].lastValue("payload") == Array(big.prefix(100)))
    }

    @Test
    func repeatedNamesGiveTheFirstOrTheLastValue() {
        let packed = StreamFields([("attempts", Array("1".utf8)), ("token", Array("aa".utf8)), ("attempts", Array("2".utf8))])
        #expect(packed.firstValue("attempts").map { Array($0) } == Array("1".utf8))
        #expect(packed.lastValue("attempts").map { Array($0) } == Array("2".utf8))
        #expect(packed.firstValue("tokens") == nil)
        #expect(StreamFields.empty.firstValue("token") == nil && StreamFields.empty.isEmpty)
    }

    /// Names that differ from one Herald reads by a byte, a case, a length or an escape are
    /// unknown fields, never that field.
    @Test
    func nearMissNamesAreUnknownFields() throws {
        let token = String(repeating: "ab", count: 32)
        let nearMisses = ["Token", "tokenx", "toke", "payloa", "payload\u{0}", " topic", "push-type", "ID", "collapse_Id",
                          FieldName.decode([0xFF, 0x74]), FieldName.decode(Array("token".utf8) + [0xEF, 0x9C, 0x80])]
        var fields: [(name: String, value: [UInt8])] = [("token", Array(token.utf8)), ("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8))]
        fields += nearMisses.map { ($0, Array("zz".utf8)) }
        let job = try JobDecoder.decode(entryID: StreamEntryID(milliseconds: 1, sequence: 0), fields: fields,
                                        defaults: JobDefaults(bundleID: "com.example.app")).get()
        #expect(job.unknownFields == nearMisses.count)
        #expect(job.tokens.count == 1 && job.tokens[0] == token)
        #expect(Array(job.template.payload) == Array(#"{"aps":{"alert":"x"}}"#.utf8))
        #expect(Self.same(job.fields, fields), "the job keeps every field for its dead letter or retry")
    }

    /// Every field Herald knows (its own retry fields and `lane` among them) counts as known.
    @Test
    func everyKnownNameIsKnown() throws {
        let token = String(repeating: "cd", count: 32)
        let fields: [(name: String, value: [UInt8])] = [
            ("token", Array(token.utf8)), ("payload", Array(#"{"aps":{"alert":"x"}}"#.utf8)), ("topic", Array("com.example.app".utf8)),
            ("push_type", Array("alert".utf8)), ("priority", Array("10".utf8)), ("expiration", Array("0".utf8)),
            ("collapse_id", Array("c".utf8)), ("app", []), ("attempts", Array("1".utf8)), ("origin", Array("1-0".utf8)),
            ("retry_id", Array("r".utf8)), ("enqueued_at", Array("5".utf8)), ("id_base", Array("b".utf8)), ("lane", Array("bulk".utf8)),
            ("receipt", Array("1".utf8)), ("deliver_at", Array("7".utf8)), ("scheduled", Array("7".utf8)),
        ]
        let job = try JobDecoder.decode(entryID: StreamEntryID(milliseconds: 2, sequence: 0), fields: fields,
                                        defaults: JobDefaults(bundleID: "com.example.app")).get()
        #expect(job.unknownFields == 0)
        #expect(job.attempts == 1 && job.enqueuedAt == 5 && job.origin == "1-0" && job.template.collapseID == "c")
        #expect(job.wantsReceipt && job.deliverAt == nil, "receipt read; deliver_at already held for (scheduled)")
    }
}
