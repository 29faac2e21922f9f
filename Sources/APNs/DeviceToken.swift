/// A device token as Herald carries it through the worker.
///
/// Today's tokens are 32 bytes, written as 64 hex digits. The job decoder keeps such a token
/// *packed*: its 32 bytes inline in four words, so a notification needs no heap string for its
/// token (an allocation, and a retain and release at every copy, per notification). Every
/// other token (another length, a channel id in a broadcast's token place, a value not yet
/// checked) is kept as the text it came as.
///
/// A packed token always spells itself in lowercase; two tokens are equal when they spell the
/// same bytes, whichever way each is kept. Interpolated or dumped, a token shows only its first 8
/// characters (`NotificationError.tokenPrefix`): a whole token must not reach a log line.
public struct DeviceToken: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable {
    /// The packed token's bytes: the first digit in the top nibble of `word0`. Zero when `text`
    /// is not nil.
    @usableFromInline let word0: UInt64
    @usableFromInline let word1: UInt64
    @usableFromInline let word2: UInt64
    @usableFromInline let word3: UInt64
    /// The token's text when it is not packed.
    public let text: String?

    /// The digits of a packed token.
    public static let packedDigits = 64

    /// A token kept as `text`, exactly as given (nothing is checked or folded).
    public init(_ text: String) {
        word0 = 0
        word1 = 0
        word2 = 0
        word3 = 0
        self.text = text
    }

    @usableFromInline
    init(packed word0: UInt64, _ word1: UInt64, _ word2: UInt64, _ word3: UInt64) {
        self.word0 = word0
        self.word1 = word1
        self.word2 = word2
        self.word3 = word3
        text = nil
    }

    /// The token `bytes` spell with ASCII A–Z folded to lowercase: packed when they are 64 hex
    /// digits (either case), else kept as the folded text.
    public init(lowercasing bytes: UnsafeRawBufferPointer) {
        if let packed = Self.pack(bytes) {
            self = packed
        } else {
            self.init(Self.lowercasedText(bytes))
        }
    }

    /// The same, from a slice of a larger buffer.
    public init(lowercasing bytes: ArraySlice<UInt8>) {
        self = bytes.withUnsafeBytes { DeviceToken(lowercasing: $0) }
    }

    /// Whether the token is kept as its 32 bytes (then `text` is nil).
    @inlinable
    public var isPacked: Bool { text == nil }

    /// The token's text. Builds a string for a packed token: for the rare paths (dead letters,
    /// feedback, logs, retries), not for each notification.
    public var string: String {
        if let text { return text }
        return String(unsafeUninitializedCapacity: Self.packedDigits) { target in
            writeHex(into: target.baseAddress!)
            return Self.packedDigits
        }
    }

    /// Calls `body` with the token's text as UTF-8 bytes (a packed token's digits are written
    /// on the stack; nothing is allocated).
    public func withUTF8<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        if let text {
            return try text.utf8Span.span.withUnsafeBufferPointer { try body($0) }
        }
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.packedDigits) { buffer in
            writeHex(into: buffer.baseAddress!)
            return try body(UnsafeBufferPointer(buffer))
        }
    }

    /// Writes a packed token's 64 lowercase hex digits at `target`. Nothing for a token kept as
    /// text (use `withUTF8`).
    @inlinable @inline(__always)
    public func writeHex(into target: UnsafeMutablePointer<UInt8>) {
        guard text == nil else { return }
        let raw = UnsafeMutableRawPointer(target)
        Self.storeHex(word0, raw)
        Self.storeHex(word1, raw + 16)
        Self.storeHex(word2, raw + 32)
        Self.storeHex(word3, raw + 48)
    }

    /// The 16 digits of `word` as ASCII, most significant first, stored at `target` (unaligned).
    @inlinable @inline(__always)
    static func storeHex(_ word: UInt64, _ target: UnsafeMutableRawPointer) {
        target.storeBytes(of: hexASCII(UInt32(truncatingIfNeeded: word >> 32)), as: UInt64.self)
        (target + 8).storeBytes(of: hexASCII(UInt32(truncatingIfNeeded: word)), as: UInt64.self)
    }

    /// The 8 hex digits of `value` as 8 ASCII bytes in one word whose bytes, stored, read most
    /// significant digit first: the nibbles are spread one per byte, then each becomes `0`–`9`
    /// or `a`–`f` without a branch.
    @inlinable @inline(__always)
    static func hexASCII(_ value: UInt32) -> UInt64 {
        var spread = UInt64(value)
        spread = (spread | spread << 16) & 0x0000_FFFF_0000_FFFF
        spread = (spread | spread << 8) & 0x00FF_00FF_00FF_00FF
        spread = (spread | spread << 4) & 0x0F0F_0F0F_0F0F_0F0F
        // Byte k now holds nibble k counted from the least significant; each is 0…15.
        let letters = ((spread &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        let ascii = spread &+ 0x3030_3030_3030_3030 &+ letters &* 39
        // Stored as is, the most significant byte must come first: big-endian order.
        return ascii.bigEndian
    }

    /// 64 hex digits (either case) as a packed token, or nil when one of them is not a hex digit.
    static func pack(_ bytes: UnsafeRawBufferPointer) -> DeviceToken? {
        guard bytes.count == packedDigits, let base = bytes.baseAddress else { return nil }
        var valid = true
        func half(_ offset: Int) -> UInt64 {
            let high = nibbles(base.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian, &valid)
            let low = nibbles(base.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self).littleEndian, &valid)
            return UInt64(high) << 32 | UInt64(low)
        }
        let token = DeviceToken(packed: half(0), half(16), half(32), half(48))
        return valid ? token : nil
    }

    /// Eight hex digits (the first in the lowest byte of `word`) as the 32 bits they spell,
    /// without a branch: a per-digit branch on digit or letter mispredicted about every third
    /// digit of a random token (about 250 ns a token in a drain's profile). Clears `valid` when
    /// a byte is not a hex digit of either case.
    @inline(__always)
    static func nibbles(_ word: UInt64, _ valid: inout Bool) -> UInt32 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        // With every byte below 0x80, adding at most 0x7F to each cannot carry into the next:
        // a byte's top bit then says whether it reached the bound the constant was made from.
        let folded = word | ones &* 0x20
        let atLeast0 = word &+ ones &* (0x80 - 0x30)
        let past9 = word &+ ones &* (0x80 - 0x3A)
        let atLeastA = folded &+ ones &* (0x80 - 0x61)
        let pastF = folded &+ ones &* (0x80 - 0x67)
        let digits = atLeast0 & ~past9 & high
        let letters = atLeastA & ~pastF & high
        if (digits | letters) != high || word & high != 0 { valid = false }
        // '0'–'9' keep their low four bits; 'a'–'f' and 'A'–'F' have 1–6 there and gain 9.
        let values = (word & 0x0F0F_0F0F_0F0F_0F0F) &+ (letters >> 7) &* 9
        // Pairs of digits into bytes (the first digit high), then the four bytes in order.
        let pairs = (values & 0x000F_000F_000F_000F) << 4 | (values & 0x0F00_0F00_0F00_0F00) >> 8
        let quads = (pairs | pairs >> 8) & 0x0000_FFFF_0000_FFFF
        let packed = UInt32(truncatingIfNeeded: quads | quads >> 16)
        return packed.byteSwapped
    }

    /// The bytes as text with ASCII A–Z folded to lowercase, in one pass (A–Z are one byte each
    /// in UTF-8, so folding them never changes how the rest decodes).
    static func lowercasedText(_ source: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: source.count) { target in
            for index in 0..<source.count {
                let byte = source[index]
                target[index] = byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
            }
            return source.count
        }
    }

    public static func == (lhs: DeviceToken, rhs: DeviceToken) -> Bool {
        if lhs.isPacked && rhs.isPacked {
            return lhs.word0 == rhs.word0 && lhs.word1 == rhs.word1 && lhs.word2 == rhs.word2 && lhs.word3 == rhs.word3
        }
        // Compared as bytes, as they are hashed (String's `==` would also equate canonically
        // equivalent Unicode spellings, which hash apart).
        if let left = lhs.text, let right = rhs.text { return left.utf8.elementsEqual(right.utf8) }
        return lhs.withUTF8 { left in rhs.withUTF8 { right in left.elementsEqual(right) } }
    }

    /// Hashes the four words a packed token holds. A token kept as text that spells 64 hex
    /// digits hashes as those digits packed, so that equal tokens (above) hash alike whichever
    /// way each is kept; any other text hashes as its bytes.
    public func hash(into hasher: inout Hasher) {
        if let text {
            text.utf8Span.span.withUnsafeBufferPointer { bytes in
                let raw = UnsafeRawBufferPointer(bytes)
                if let packed = DeviceToken.pack(raw) { packed.hash(into: &hasher) } else { hasher.combine(bytes: raw) }
            }
            return
        }
        hasher.combine(word0)
        hasher.combine(word1)
        hasher.combine(word2)
        hasher.combine(word3)
    }

    /// The token's first 8 characters and an ellipsis: what logs may show.
    public var description: String { NotificationError.tokenPrefix(string) }

    public var debugDescription: String { "DeviceToken(\(description))" }

    /// Dumped (`dump`, `Mirror`), a token shows its redacted form, not its words.
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}
