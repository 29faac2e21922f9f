import APNs

/// Derives the `apns-id` of a job's notification from the job's origin (its first stream entry id)
/// and the device token: the same on every retry and on every worker, so a duplicate after a
/// crash carries the same `apns-id` as the original.
///
/// The id is two FNV-1a 64 lanes over `namespace/origin:token` (the token's hex letters folded
/// to lowercase), each finished by SplitMix64. Its value is pinned by tests: it must not change
/// between versions. What is tuned is only how it is computed: the namespace's part once per
/// queue (`Seed`), and a packed token's digits spelled in one go and fed so that each costs a
/// lane one xor and one multiply in sequence.
public enum StableID {
    /// A canonical lowercase UUID from `origin` and `token` (FNV-1a 64 twice, with SplitMix
    /// finishing). A non-empty `namespace` (the queue) is hashed first, as if written
    /// `namespace/origin`, without building that string.
    public static func apnsID(namespace: String = "", origin: String, token: String) -> String {
        UUIDString.make(bits(namespace: namespace, origin: origin, token: token))
    }

    /// The bits `apnsID(namespace:origin:token:)` spells.
    public static func bits(namespace: String = "", origin: String, token: String) -> UUIDBits {
        bits(seed: Seed(namespace: namespace), origin: origin, token: DeviceToken(token))
    }

    /// The same id as `apnsID(namespace:origin:token:)` with `origin.description`, hashing the
    /// entry id's digits as they are produced instead of building its string (once per job).
    public static func apnsID(namespace: String = "", origin: StreamEntryID, token: String) -> String {
        UUIDString.make(bits(namespace: namespace, origin: origin, token: token))
    }

    /// The bits `apnsID(namespace:origin:token:)` spells, for an entry id.
    public static func bits(namespace: String = "", origin: StreamEntryID, token: String) -> UUIDBits {
        bits(seed: Seed(namespace: namespace), origin: origin, token: DeviceToken(token))
    }

    /// The bits for a token as the worker keeps it: the same as for its text.
    public static func bits(namespace: String = "", origin: String, token: DeviceToken) -> UUIDBits {
        bits(seed: Seed(namespace: namespace), origin: origin, token: token)
    }

    /// The bits for an entry id and a token as the worker keeps it: the same as for its text.
    public static func bits(namespace: String = "", origin: StreamEntryID, token: DeviceToken) -> UUIDBits {
        bits(seed: Seed(namespace: namespace), origin: origin, token: token)
    }

    /// The same ids from a namespace hashed once (`JobDefaults` keeps one per queue). A token
    /// kept as text (`DeviceToken(_:)`) hashes its text, folded, as the string forms do.
    @inline(__always)
    public static func bits(seed: Seed, origin: String, token: DeviceToken) -> UUIDBits {
        var state = State(seed: seed)
        state.feedOrigin(origin)
        return state.finish(token: token)
    }

    @inline(__always)
    public static func bits(seed: Seed, origin: StreamEntryID, token: DeviceToken) -> UUIDBits {
        var state = State(seed: seed)
        state.feedOrigin(origin)
        return state.finish(token: token)
    }

    /// Both lanes after `namespace/` (or the lanes' start for no namespace): the part of every
    /// id of a queue that depends on the queue alone, hashed when the queue is configured.
    public struct Seed: Sendable, Equatable {
        let high: UInt64
        let low: UInt64

        public init(namespace: String) {
            var state = State()
            if !namespace.isEmpty {
                state.feedOrigin(namespace)
                state.feed(0x2F, lowConstant: State.originConstant)  // "/"
            }
            high = state.high
            low = state.low
        }
    }

    /// Two FNV-1a 64 lanes. The low lane xors a constant into each product (`originConstant`
    /// for the namespace and origin, `tokenConstant` for the token's digits).
    struct State {
        static let prime: UInt64 = 0x100_0000_01b3
        static let originConstant: UInt64 = 0x9E37
        static let tokenConstant: UInt64 = 0x7F4A

        var high: UInt64 = 0xcbf2_9ce4_8422_2325
        var low: UInt64 = 0x8422_2325_cbf2_9ce4

        init() {}

        @inline(__always)
        init(seed: Seed) {
            high = seed.high
            low = seed.low
        }

        @inline(__always)
        mutating func feed(_ byte: UInt8, lowConstant: UInt64) {
            high = (high ^ UInt64(byte)) &* State.prime
            low = (low ^ UInt64(byte)) &* State.prime ^ lowConstant
        }

        /// Each of `bytes` as `feed(_:lowConstant:)` would, with ASCII `A`–`F` folded to `a`–`f`
        /// first when `foldingHex` (a token's text).
        @inline(__always)
        mutating func feed(_ bytes: UnsafeRawBufferPointer, lowConstant: UInt64, foldingHex: Bool = false) {
            var high = self.high, low = self.low
            for byte in bytes {
                let value = UInt64(foldingHex && byte >= 0x41 && byte <= 0x46 ? byte | 0x20 : byte)
                high = (high ^ value) &* State.prime
                low = (low ^ value) &* State.prime ^ lowConstant
            }
            self.high = high
            self.low = low
        }

        @inline(__always)
        mutating func feedOrigin(_ origin: String) {
            origin.utf8Span.span.withUnsafeBytes { feed($0, lowConstant: State.originConstant) }
        }

        /// The entry id's text, its digits fed as produced: the same state as its string.
        @inline(__always)
        mutating func feedOrigin(_ origin: StreamEntryID) {
            feedDecimal(origin.milliseconds)
            feed(0x2D, lowConstant: State.originConstant)  // "-"
            feedDecimal(origin.sequence)
        }

        /// `value`'s decimal digits, most significant first, with no string in between.
        mutating func feedDecimal(_ value: UInt64) {
            DecimalDigits.with(value) { digits in feed(digits, lowConstant: State.originConstant) }
        }

        /// The `:` before the token (no constant in either lane), then the token's digits.
        @inline(__always)
        mutating func separateToken() {
            high = (high ^ 0x3A) &* State.prime
            low = (low ^ 0x3A) &* State.prime
        }

        /// A packed token's digits are its lowercase text, spelled into a buffer at once and
        /// fed: the same id as its text gives, with no string read.
        mutating func finish(token: DeviceToken) -> UUIDBits {
            if let text = token.text { return finish(token: text) }
            separateToken()
            var digits: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
            // Each digit after the first as the low lane takes it, xored with the constant of the
            // digit before: loaded from memory, the compiler cannot put that xor back on the
            // lane's chain (written as `low ^ (digit ^ constant)`, it made two xors of it).
            var carried = (digits, digits)
            withUnsafeMutableBytes(of: &digits) { buffer in
                let text = buffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
                token.writeHex(into: text)
                withUnsafeMutableBytes(of: &carried) { carried in
                    let lowBytes = carried.baseAddress!.assumingMemoryBound(to: UInt16.self)
                    for index in 1..<DeviceToken.packedDigits {
                        lowBytes[index] = UInt16(text[index]) ^ UInt16(truncatingIfNeeded: State.tokenConstant)
                    }
                    var high = self.high, low = self.low
                    let first = UInt64(text[0])
                    high = (high ^ first) &* State.prime
                    low = (low ^ first) &* State.prime
                    for index in 1..<DeviceToken.packedDigits {
                        high = (high ^ UInt64(text[index])) &* State.prime
                        low = (low ^ UInt64(lowBytes[index])) &* State.prime
                    }
                    self.high = high
                    self.low = low ^ State.tokenConstant
                }
            }
            return UUIDBits(high: StableID.mix(high), low: StableID.mix(low ^ high))
        }

        mutating func finish(token: String) -> UUIDBits {
            separateToken()
            // Tokens are hex in either case: fold to lowercase so both spell one id. The bytes
            // are read as a buffer (iterating UTF8View costs more than the hash), borrowed through
            // `utf8Span`: a `var` copy for `withUTF8` retained and released the token's storage.
            token.utf8Span.span.withUnsafeBytes { bytes in
                feed(bytes, lowConstant: State.tokenConstant, foldingHex: true)
            }
            return UUIDBits(high: StableID.mix(high), low: StableID.mix(low ^ high))
        }
    }

    /// SplitMix64's output for `value`: its first draw when seeded with it.
    static func mix(_ value: UInt64) -> UInt64 {
        var generator = SplitMix64(seed: value)
        return generator.next()
    }
}
