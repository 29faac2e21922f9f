import Testing

@testable import APNs

/// Scans `bytes` and returns the top-level kind or the syntax error.
func scanJSON(_ bytes: [UInt8]) -> Result<JSONScanner.Value.Kind, JSONScanner.SyntaxError> {
    bytes.withUnsafeBufferPointer { buffer in
        do throws(JSONScanner.SyntaxError) {
            return .success(try JSONScanner(buffer).validate().kind)
        } catch {
            return .failure(error)
        }
    }
}

func scanJSON(_ text: String) -> Result<JSONScanner.Value.Kind, JSONScanner.SyntaxError> {
    scanJSON(Array(text.utf8))
}

func problem(_ result: Result<JSONScanner.Value.Kind, JSONScanner.SyntaxError>) -> JSONScanner.SyntaxError.Problem? {
    if case .failure(let error) = result { return error.problem }
    return nil
}

/// Runs `body` with a scanner over `text`.
func withScanner<R>(_ text: String, _ body: (JSONScanner) -> R) -> R {
    Array(text.utf8).withUnsafeBufferPointer { body(JSONScanner($0)) }
}

@Suite struct JSONScannerSyntaxTests {
    @Test(arguments: [
        "{}",
        " \t\r\n{ } \n",
        #"{"a":1}"#,
        #"{"a" : [1, 2.5, -0, 1e10, 1E-2, 0.5e+3, -12.75E2, true, false, null, "x", {}, []]}"#,
        #"{"a":{"b":{"c":[[],[{}]]}}}"#,
        #"{"s":"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00 \u0000"}"#,
        #"{"":""}"#,
        #"{"a":1,"a":2}"#,
        #"{"aps":{"alert":"héllo € 😀"}}"#,
    ])
    func validObjectsAreAccepted(text: String) {
        #expect(scanJSON(text) == .success(.object))
    }

    @Test func loneEscapedSurrogatesAreAccepted() {
        #expect(scanJSON(#"{"s":"\ud800"}"#) == .success(.object))
        #expect(scanJSON(#"{"s":"\udc00\ud800x"}"#) == .success(.object))
    }

    @Test func topLevelScalarsAndArraysReportTheirKind() {
        #expect(scanJSON("[1]") == .success(.array))
        #expect(scanJSON(#""x""#) == .success(.string))
        #expect(scanJSON(" 12 ") == .success(.number))
        #expect(scanJSON("true") == .success(.boolean))
        #expect(scanJSON("false") == .success(.boolean))
        #expect(scanJSON("null") == .success(.null))
    }

    @Test(arguments: [
        (#"{"a":1,}"#, JSONScanner.SyntaxError.Problem.trailingComma),
        ("[1,]", .trailingComma),
        (#"{"a":1,  }"#, .trailingComma),
        (#"{"a":01}"#, .badNumber),
        (#"{"a":-01}"#, .badNumber),
        (#"{"a":00}"#, .badNumber),
        (#"{"a":-}"#, .badNumber),
        (#"{"a":1.}"#, .badNumber),
        (#"{"a":1.e5}"#, .badNumber),
        (#"{"a":1e}"#, .badNumber),
        (#"{"a":1e+}"#, .badNumber),
        (#"{"a":-x}"#, .badNumber),
        (#"{"a":.5}"#, .expectedValue),
        (#"{"a":+1}"#, .expectedValue),
        (#"{"a":NaN}"#, .expectedValue),
        (#"{"a":Infinity}"#, .expectedValue),
        (#"{"a":True}"#, .expectedValue),
        (#"{"a":}"#, .expectedValue),
        (#"{"a":tru}"#, .badLiteral),
        (#"{"a":nul}"#, .badLiteral),
        (#"{"a":fals"#, .badLiteral),
        (#"{"a":"abc}"#, .unterminatedString),
        (#"{"a":"abc"#, .unterminatedString),
        (#"{"a":"abc\"}"#, .unterminatedString),
        (#"{"a":"\u12"#, .unterminatedString),
        (#"{"a":"\"#, .unterminatedString),
        (#"{"a":"\x"}"#, .badEscape),
        (#"{"a":"\U0041"}"#, .badEscape),
        (#"{"a":"\'"}"#, .badEscape),
        (#"{"a":"\u12G4"}"#, .badUnicodeEscape),
        (#"{"a":"\u1"}"#, .badUnicodeEscape),
        ("{\"a\":\"tab\there\"}", .controlCharacterInString),
        ("{\"a\":\"line\nbreak\"}", .controlCharacterInString),
        (#"{"a":1} x"#, .trailingCharacters),
        (#"{"a":1}}"#, .trailingCharacters),
        (#"{}{}"#, .trailingCharacters),
        (#"{"a":1}\#0"#, .trailingCharacters),
        ("{a:1}", .expectedMemberName),
        ("{'a':1}", .expectedMemberName),
        ("{1:1}", .expectedMemberName),
        (#"{"a" 1}"#, .expectedColon),
        (#"{"a"=1}"#, .expectedColon),
        (#"{"a":1 "b":2}"#, .expectedCommaOrObjectEnd),
        (#"{"a":1;"b":2}"#, .expectedCommaOrObjectEnd),
        ("[1 2]", .expectedCommaOrArrayEnd),
        (#"{"a":[1}"#, .expectedCommaOrArrayEnd),
        ("", .unexpectedEnd),
        ("   ", .unexpectedEnd),
        ("{", .unexpectedEnd),
        (#"{"a""#, .unexpectedEnd),
        (#"{"a":"#, .unexpectedEnd),
        (#"{"a":1"#, .unexpectedEnd),
        (#"{"a":[1,2"#, .unexpectedEnd),
        ("/* comment */{}", .expectedValue),
        ("\u{FEFF}{}", .expectedValue),
        ("{,}", .expectedMemberName),
        ("[,1]", .expectedValue),
    ])
    func malformedTextIsRejected(text: String, expected: JSONScanner.SyntaxError.Problem) {
        #expect(problem(scanJSON(text)) == expected)
    }

    @Test func errorOffsetPointsAtTheProblem() {
        #expect(scanJSON(#"{"a":1,}"#) == .failure(.init(.trailingComma, at: 7)))
        #expect(scanJSON(#"{"a":01}"#) == .failure(.init(.badNumber, at: 5)))
        #expect(scanJSON(#"{"a":"x"#) == .failure(.init(.unterminatedString, at: 5)))
        #expect(scanJSON(#"{"a":1} x"#) == .failure(.init(.trailingCharacters, at: 8)))
        #expect(scanJSON("") == .failure(.init(.unexpectedEnd, at: 0)))
    }

    @Test func nestingUpToTheLimitIsAccepted() {
        let depth = JSONScanner.maximumDepth
        let arrays = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        #expect(scanJSON(arrays) == .success(.array))
        let objects = String(repeating: #"{"a":"#, count: depth - 1) + "{}" + String(repeating: "}", count: depth - 1)
        #expect(scanJSON(objects) == .success(.object))
    }

    @Test func nestingBeyondTheLimitIsRejected() {
        let depth = JSONScanner.maximumDepth + 1
        let arrays = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        #expect(scanJSON(arrays) == .failure(.init(.tooDeep, at: depth - 1)))
        let objects = String(repeating: #"{"a":"#, count: depth - 1) + "{}" + String(repeating: "}", count: depth - 1)
        #expect(problem(scanJSON(objects)) == .tooDeep)
    }

    @Test func veryDeepNestingFailsWithoutExhaustingTheStack() {
        let text = String(repeating: "[", count: 100_000)
        #expect(problem(scanJSON(text)) == .tooDeep)
    }

    @Test(
        arguments: [
            [0xC3, 0xA9],  // é
            [0xE2, 0x82, 0xAC],  // €
            [0xF0, 0x9F, 0x98, 0x80],  // 😀
            [0xEF, 0xBF, 0xBF],  // U+FFFF
            [0xF4, 0x8F, 0xBF, 0xBF],  // U+10FFFF
            [0xED, 0x9F, 0xBF],  // U+D7FF, just below the surrogates
        ] as [[UInt8]])
    func wellFormedUTF8InStringsIsAccepted(sequence: [UInt8]) {
        #expect(scanJSON(Array(#"{"a":""#.utf8) + sequence + Array(#""}"#.utf8)) == .success(.object))
    }

    @Test(
        arguments: [
            [0x80],  // lone continuation byte
            [0xC0, 0xAF],  // overlong "/"
            [0xC1, 0xBF],  // overlong
            [0xE0, 0x80, 0xAF],  // overlong three-byte
            [0xED, 0xA0, 0x80],  // encoded surrogate U+D800
            [0xF0, 0x80, 0x80, 0xAF],  // overlong four-byte
            [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
            [0xF5, 0x80, 0x80, 0x80],
            [0xFF],
            [0xE2, 0x82],  // truncated before the closing quote
            [0xC3, 0x41],  // continuation missing
        ] as [[UInt8]])
    func malformedUTF8InStringsIsRejected(sequence: [UInt8]) {
        let text = Array(#"{"a":""#.utf8) + sequence + Array(#""}"#.utf8)
        #expect(scanJSON(text) == .failure(.init(.invalidUTF8, at: 6)))
    }

    @Test func truncatedUTF8AtTheEndOfTheTextIsRejected() {
        #expect(problem(scanJSON(Array(#"{"a":""#.utf8) + [0xF0, 0x9F])) == .invalidUTF8)
    }

    @Test func nonASCIIOutsideStringsIsRejected() {
        #expect(problem(scanJSON(Array("{".utf8) + [0xC3, 0xA9] + Array("}".utf8))) == .expectedMemberName)
        #expect(problem(scanJSON([0xC2, 0xA0] + Array("{}".utf8))) == .expectedValue)
    }

    @Test func syntaxErrorDescriptionNamesProblemAndOffset() {
        #expect(
            JSONScanner.SyntaxError(.trailingComma, at: 7).description
                == "a ',' is followed by a closing bracket (byte 7)")
    }
}

@Suite struct JSONScannerMemberTests {
    @Test func rootMemberFindsValueAndItsRange() {
        let text = #"{"a": 1, "aps": {"x": "y"}, "b": [true]}"#
        let aps = withScanner(text) { $0.rootMember("aps") }
        #expect(aps?.kind == .object)
        #expect(aps?.range == 16..<26)
        #expect(withScanner(text) { $0.rootMember("b") } == JSONScanner.Value(kind: .array, range: 33..<39))
    }

    @Test func rootMemberIsNilWhenAbsent() {
        #expect(withScanner(#"{"a":1}"#) { $0.rootMember("b") } == nil)
        #expect(withScanner("{}") { $0.rootMember("a") } == nil)
    }

    /// `rootMembers` reads two members in one pass and must answer exactly what two
    /// `rootMember` calls answer, on good and on hostile text.
    @Test(arguments: [
        #"{"t":1,"s":2}"#, #"{"s":2,"t":1}"#, #"{"t":1}"#, #"{"s":2}"#, "{}", " \n{ \"t\" : 7 , \"x\":{\"s\":1}} ",
        #"{"t":1,"t":"two","s":3,"s":[4]}"#, #"{"\u0074":5,"\u0073":6}"#, #"{"x":{"t":1,"s":2}}"#,
        #"{"t":1,"s":2"#, #"{"t":1,,"s":2}"#, #"[{"t":1}]"#, #""t""#, "", "   ", #"{"t":1}garbage"#,
        #"{"ts":1,"st":2,"T":3,"S":4}"#, #"{"t":{"s":1},"s":{"t":2}}"#,
    ])
    func rootMembersAnswersWhatTwoLookupsAnswer(text: String) {
        let pair = withScanner(text) { $0.rootMembers("t", "s") }
        #expect(pair.0 == withScanner(text) { $0.rootMember("t") }, "t in \(text)")
        #expect(pair.1 == withScanner(text) { $0.rootMember("s") }, "s in \(text)")
    }

    @Test func rootMembersFindsBothInEitherOrder() {
        let text = #"{"s": [1], "aps": {}, "t": 12}"#
        let (t, s) = withScanner(text) { $0.rootMembers("t", "s") }
        #expect(t == JSONScanner.Value(kind: .number, range: 27..<29))
        #expect(s == JSONScanner.Value(kind: .array, range: 6..<9))
    }

    @Test func lastDuplicateMemberWins() {
        let value = withScanner(#"{"a":1,"a":"two"}"#) { json in json.rootMember("a").flatMap(json.string) }
        #expect(value == "two")
    }

    @Test func memberNamesAreComparedAfterDecodingEscapes() {
        let found = withScanner(#"{"\u0061ps":{"ev\u0065nt":"x"}}"#) { $0.apsMember("event")?.kind }
        #expect(found == .string)
    }

    @Test func nestedMembersAreNotMistakenForTopLevelOnes() {
        let text = #"{"data":{"timestamp":1,"aps":{}},"aps":{"alert":"x"}}"#
        #expect(withScanner(text) { $0.rootMember("timestamp") } == nil)
        #expect(withScanner(text) { $0.apsMember("alert")?.kind } == .string)
        #expect(withScanner(text) { $0.apsMember("timestamp") } == nil)
    }

    @Test func memberNamePrefixesDoNotMatch() {
        #expect(withScanner(#"{"apsx":{},"ap":{}}"#) { $0.rootMember("aps") } == nil)
    }

    @Test func apsMemberIsNilWhenApsIsNotAnObject() {
        #expect(withScanner(#"{"aps":[{"event":"start"}]}"#) { $0.apsMember("event") } == nil)
        #expect(withScanner(#"{"aps":"event"}"#) { $0.apsMember("event") } == nil)
    }

    @Test func lookupsOnNonObjectsOrMalformedTextAreNil() {
        #expect(withScanner(#"[{"aps":{}}]"#) { $0.rootMember("aps") } == nil)
        #expect(withScanner(#"{"aps":{"x":1},"#) { $0.rootMember("aps") } == nil)
        #expect(withScanner("") { $0.rootMember("aps") } == nil)
        #expect(withScanner(#"{"a":1}"#) { $0.member("a", of: JSONScanner.Value(kind: .array, range: 0..<7)) } == nil)
    }

    @Test func memberOfNestedObject() {
        let value = withScanner(#"{"o":{"k":42}}"#) { json in
            json.rootMember("o").flatMap { json.member("k", of: $0) }.flatMap(json.int64)
        }
        #expect(value == 42)
    }

    @Test func forEachMemberVisitsEveryMemberInOrder() {
        let names = withScanner(#"{"a":1,"b":{"c":2},"d":[]}"#) { json in
            var names: [String] = []
            try? json.forEachMember(of: JSONScanner.Value(kind: .object, range: 0..<26)) { name, _ in
                names.append(json.string(JSONScanner.Value(kind: .string, range: name)) ?? "?")
            }
            return names
        }
        #expect(names == ["a", "b", "d"])
    }

    @Test func forEachMemberThrowsOnMalformedObject() {
        let threw = withScanner(#"{"a":1,"b"}"#) { json in
            do throws(JSONScanner.SyntaxError) {
                try json.forEachMember(of: JSONScanner.Value(kind: .object, range: 0..<11)) { _, _ in }
                return false
            } catch {
                return error.problem == .expectedColon
            }
        }
        #expect(threw)
    }

    @Test func stringDecodesEveryEscape() {
        let decoded = withScanner(#"{"s":"q\" b\\ s\/ \b\f\n\r\t \u00e9\u20AC \uD83D\uDE00"}"#) { json in
            json.rootMember("s").flatMap(json.string)
        }
        #expect(decoded == "q\" b\\ s/ \u{08}\u{0C}\n\r\t é€ 😀")
    }

    @Test func stringDecodesLoneSurrogatesAsReplacementCharacter() {
        let decoded = withScanner(#"{"s":"a\ud800b\udc00c\ud800\u0041"}"#) { json in
            json.rootMember("s").flatMap(json.string)
        }
        #expect(decoded == "a\u{FFFD}b\u{FFFD}c\u{FFFD}A")
    }

    @Test func stringWithoutEscapesIsReturnedAsIs() {
        #expect(withScanner(#"{"s":"héllo"}"#) { json in json.rootMember("s").flatMap(json.string) } == "héllo")
        #expect(withScanner(#"{"s":""}"#) { json in json.rootMember("s").flatMap(json.string) } == "")
    }

    @Test func stringOfANonStringIsNil() {
        #expect(withScanner(#"{"s":1}"#) { json in json.rootMember("s").flatMap(json.string) } == nil)
    }

    @Test func stringEqualsComparesDecodedText() {
        withScanner(#"{"e":"st\u0061rt","u":"\u00e9\uD83D\uDE00","n":1}"#) { json in
            let e = json.rootMember("e")!
            #expect(json.stringEquals(e, "start"))
            #expect(!json.stringEquals(e, "star"))
            #expect(!json.stringEquals(e, "startx"))
            #expect(json.stringEquals(e, String("start")))
            #expect(json.stringEquals(json.rootMember("u")!, "é😀"))
            #expect(!json.stringEquals(json.rootMember("n")!, "1"))
        }
    }

    @Test(arguments: [
        ("0", Int64(0)), ("-0", 0), ("42", 42), ("-17", -17),
        ("9223372036854775807", .max), ("-9223372036854775808", .min),
    ])
    func int64ReadsIntegers(text: String, expected: Int64) {
        #expect(withScanner(#"{"n":"# + text + "}") { json in json.rootMember("n").flatMap(json.int64) } == expected)
    }

    @Test(arguments: ["9223372036854775808", "-9223372036854775809", "1.0", "1e3", "\"1\"", "true"])
    func int64IsNilForNonIntegersAndOverflow(text: String) {
        #expect(withScanner(#"{"n":"# + text + "}") { json in json.rootMember("n").flatMap(json.int64) } == nil)
    }

    @Test func doubleReadsAnyNumber() {
        #expect(withScanner(#"{"n":-1.5e3}"#) { json in json.rootMember("n").flatMap(json.double) } == -1500)
        #expect(withScanner(#"{"n":7}"#) { json in json.rootMember("n").flatMap(json.double) } == 7)
        #expect(withScanner(#"{"n":"7"}"#) { json in json.rootMember("n").flatMap(json.double) } == nil)
    }

    @Test func boolReadsBooleans() {
        #expect(withScanner(#"{"b":true}"#) { json in json.rootMember("b").flatMap(json.bool) } == true)
        #expect(withScanner(#"{"b":false}"#) { json in json.rootMember("b").flatMap(json.bool) } == false)
        #expect(withScanner(#"{"b":null}"#) { json in json.rootMember("b").flatMap(json.bool) } == nil)
    }

    @Test func rawBufferInitializerScansTheSameBytes() {
        let bytes = Array(#"{"k":5}"#.utf8)
        let value = bytes.withUnsafeBytes { raw in
            let json = JSONScanner(raw)
            return json.rootMember("k").flatMap(json.int64)
        }
        #expect(value == 5)
    }
}

/// Strings are skipped eight bytes at a time while they are plain ASCII; whatever matters (the
/// closing quote, an escape, a control byte, UTF-8) must be found at every offset of a word.
@Suite struct JSONScannerWordSkipTests {
    static func object(padding: Int, insert: [UInt8], tail: Int = 13) -> [UInt8] {
        Array(#"{"k":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: padding) + insert
            + Array(repeating: UInt8(ascii: "y"), count: tail) + Array(#""}"#.utf8)
    }

    @Test(arguments: 0..<17)
    func specialBytesAreFoundAtEveryOffset(padding: Int) {
        #expect(problem(scanJSON(Self.object(padding: padding, insert: []))) == nil)
        #expect(problem(scanJSON(Self.object(padding: padding, insert: Array(#"\n\"\\"#.utf8)))) == nil)
        #expect(problem(scanJSON(Self.object(padding: padding, insert: Array("é€😀".utf8)))) == nil)
        #expect(problem(scanJSON(Self.object(padding: padding, insert: [0x1F]))) == .controlCharacterInString)
        #expect(problem(scanJSON(Self.object(padding: padding, insert: [0x00]))) == .controlCharacterInString)
        #expect(problem(scanJSON(Self.object(padding: padding, insert: [0xFF]))) == .invalidUTF8)
        #expect(problem(scanJSON(Self.object(padding: padding, insert: Array(#"\q"#.utf8)))) == .badEscape)
        // A quote in the middle ends the string early: what follows is not JSON.
        #expect(problem(scanJSON(Self.object(padding: padding, insert: [UInt8(ascii: "\"")]))) != nil)
        // Bytes 0x20 and 0x7F are plain; 0x7F must not be mistaken for UTF-8.
        #expect(problem(scanJSON(Self.object(padding: padding, insert: [0x20, 0x7F, 0x21]))) == nil)
        // Unterminated: the string runs to the end of the buffer.
        let open = Array(#"{"k":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: padding)
        #expect(problem(scanJSON(open)) == .unterminatedString)
    }
}
