import Testing

@testable import APNs

/// The worker keeps a 64-digit token as its 32 bytes (`DeviceToken`); everything that reads it
/// back (the request path, the stable apns-id, dead letters, feedback) must see the same text
/// the producer wrote, folded to lowercase.
@Suite struct DeviceTokenTests {
    static let hexDigits = Array("0123456789abcdef".utf8)

    /// 64 hex digits of random bytes, from a seeded generator (the same on every run).
    static func randomHex(_ generator: inout SplitMix64) -> [UInt8] {
        var text: [UInt8] = []
        for _ in 0..<4 {
            let word = generator.next()
            for shift in stride(from: 60, through: 0, by: -4) { text.append(hexDigits[Int(word >> UInt64(shift) & 0xF)]) }
        }
        return text
    }

    static func token(_ bytes: [UInt8]) -> DeviceToken {
        bytes.withUnsafeBytes { DeviceToken(lowercasing: $0) }
    }

    @Test func sixtyFourHexDigitsArePackedAndSpellThemselvesBack() {
        var generator = SplitMix64(seed: 7)
        var fixed: [[UInt8]] = [
            Array(String(repeating: "0", count: 64).utf8), Array(String(repeating: "f", count: 64).utf8),
            Array(String(repeating: "0123456789abcdef", count: 4).utf8),
            Array(String(repeating: "9a", count: 32).utf8),
        ]
        for _ in 0..<2_000 { fixed.append(Self.randomHex(&generator)) }
        for text in fixed {
            let token = Self.token(text)
            #expect(token.isPacked)
            #expect(token.text == nil)
            #expect(Array(token.string.utf8) == text)
            #expect(token.withUTF8 { Array($0) } == text)
            var written = [UInt8](repeating: 0, count: 66)
            written.withUnsafeMutableBufferPointer { token.writeHex(into: $0.baseAddress! + 1) }
            #expect(Array(written[1...64]) == text && written[0] == 0 && written[65] == 0)
        }
    }

    @Test func uppercaseDigitsAreFoldedWhenPacked() {
        let upper = Array(String(repeating: "ABCDEF0123456789", count: 4).utf8)
        let token = Self.token(upper)
        #expect(token.isPacked)
        #expect(token.string == String(repeating: "abcdef0123456789", count: 4))
    }

    /// Every byte that is not a hex digit, at the first, a middle and the last place, keeps the
    /// token as (folded) text, so validation names the offending byte as before.
    @Test func aNonHexByteAnywhereKeepsTheText() {
        let base = Array(String(repeating: "ab", count: 32).utf8)
        let hex = Set(Array("0123456789abcdefABCDEF".utf8))
        for byte in UInt8.min...UInt8.max where !hex.contains(byte) {
            for position in [0, 7, 8, 15, 16, 31, 40, 63] {
                var text = base
                text[position] = byte
                let token = Self.token(text)
                #expect(!token.isPacked, "byte \(byte) at \(position)")
                let folded = text.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
                // Bytes that are not UTF-8 come out repaired, as any text field of a job does.
                #expect(token.text == String(decoding: folded, as: UTF8.self))
            }
        }
    }

    @Test(arguments: [0, 1, 16, 62, 63, 65, 66, 128, 200, 4096])
    func otherLengthsKeepTheText(length: Int) {
        let text = Array(String(repeating: "A", count: length).utf8)
        let token = Self.token(text)
        #expect(!token.isPacked)
        #expect(token.text == String(repeating: "a", count: length))
        #expect(token.string.utf8.count == length)
    }

    @Test func tokensAreEqualWhenTheySpellTheSameText() {
        let text = String(repeating: "0f", count: 32)
        let packed = Self.token(Array(text.utf8))
        #expect(packed == DeviceToken(text))
        #expect(DeviceToken(text) == packed)
        #expect(packed == Self.token(Array(text.uppercased().utf8)))
        #expect(packed != DeviceToken(text.uppercased()))
        #expect(packed != DeviceToken(String(repeating: "0f", count: 31) + "0e"))
        #expect(packed != Self.token(Array((String(repeating: "0f", count: 31) + "0e").utf8)))
        #expect(packed != DeviceToken(""))
        // Equal tokens hash alike, whichever way each is kept (collapse keys are looked up by either).
        #expect(packed.hashValue == DeviceToken(text).hashValue)
        #expect(Set([packed, DeviceToken(text), Self.token(Array(text.uppercased().utf8))]).count == 1)
        #expect(Set([packed, DeviceToken(text.uppercased())]).count == 2)
    }

    /// Text tokens are equal when their bytes are: canonically equivalent Unicode spellings
    /// (which String's `==` equates) are different tokens, and equal tokens hash alike.
    @Test func textTokensCompareAndHashTheirBytes() {
        let composed = DeviceToken("caf\u{E9}")
        let decomposed = DeviceToken("cafe\u{301}")
        #expect(composed != decomposed)
        #expect(Set([composed, decomposed]).count == 2)
        #expect(DeviceToken("abc") == DeviceToken("abc"))
        #expect(DeviceToken("abc").hashValue == DeviceToken("abc").hashValue)
    }

    /// Logs and dumps show a token's first 8 characters only, packed or not.
    @Test func aTokenNeverPrintsWhole() {
        let text = String(repeating: "5a", count: 32)
        for token in [Self.token(Array(text.utf8)), DeviceToken(text)] {
            for shown in ["\(token)", String(describing: token), String(reflecting: token), { var out = ""; dump(token, to: &out); return out }()] {
                #expect(!shown.contains(text.prefix(9)), "\(shown)")
                if token.isPacked { #expect(!shown.contains(String(token.word0)), "\(shown)") }
                #expect(shown.contains("5a5a5a5a"), "\(shown)")
            }
        }
    }

    /// `writeHex` writes nothing for a token kept as text (its caller writes the text).
    @Test func writeHexLeavesATextTokenToItsText() {
        var target = [UInt8](repeating: 0xEE, count: 64)
        target.withUnsafeMutableBufferPointer { DeviceToken("abcd").writeHex(into: $0.baseAddress!) }
        #expect(target.allSatisfy { $0 == 0xEE })
    }

    /// A packed token satisfies the token rule without a scan; a text token is checked as text.
    @Test func theTokenRuleSeesEitherForm() {
        let packed = Self.token(Array(String(repeating: "ab", count: 32).utf8))
        #expect(Notification.deviceTokenError(packed) == nil)
        for text in ["", "abc", String(repeating: "ab", count: 7), String(repeating: "zz", count: 32),
                     String(repeating: "ab", count: 101), String(repeating: "ab", count: 40)] {
            #expect(Notification.deviceTokenError(DeviceToken(text)) == Notification.deviceTokenError(text))
        }
    }

    /// `deviceToken` reads a packed token's text and a write keeps the text given.
    @Test func aNotificationReadsAndWritesTheTokenAsText() throws {
        let text = String(repeating: "c4", count: 32)
        var notification = Notification(deviceToken: "", topic: "com.example.app", pushType: .alert, payload: Array("{}".utf8))
        notification.token = Self.token(Array(text.uppercased().utf8))
        #expect(notification.deviceToken == text)
        #expect(notification.normalizedDeviceToken == text)
        try notification.validate(bundleID: "com.example.app")
        notification.deviceToken = "C4"
        #expect(!notification.token.isPacked)
        #expect(notification.deviceToken == "C4")
        #expect(notification.normalizedDeviceToken == "c4")
    }
}
