import APNs

/// Derives the `apns-id` of a job's notification from the job's origin (its first stream entry id)
/// and the device token: the same on every retry and on every worker, so a duplicate after a
/// crash carries the same `apns-id` as the original.
public enum StableID {
    /// A canonical lowercase UUID from `origin` and `token` (FNV-1a 64 twice, with SplitMix
    /// finishing). A non-empty `namespace` (the queue) is hashed first, as if written
    /// `namespace/origin`, without building that string.
    public static func apnsID(namespace: String = "", origin: String, token: String) -> String {
        UUIDString.make(bits(namespace: namespace, origin: origin, token: token))
    }

    /// The bits `apnsID(namespace:origin:token:)` spells.
    public static func bits(namespace: String = "", origin: String, token: String) -> UUIDBits {
        var state = State(namespace: namespace, origin: origin)
        return state.finish(token: token)
    }

    /// The same id as `apnsID(namespace:origin:token:)` with `origin.description`, hashing the
    /// entry id's digits as they are produced instead of building its string (once per job).
    public static func apnsID(namespace: String = "", origin: StreamEntryID, token: String) -> String {
        UUIDString.make(bits(namespace: namespace, origin: origin, token: token))
    }

    /// The bits `apnsID(namespace:origin:token:)` spells, for an entry id.
    public static func bits(namespace: String = "", origin: StreamEntryID, token: String) -> UUIDBits {
        var state = State(namespace: namespace, origin: origin)
        return state.finish(token: token)
    }

    /// The bits for a token as the worker keeps it: the same as for its text.
    public static func bits(namespace: String = "", origin: String, token: DeviceToken) -> UUIDBits {
        var state = State(namespace: namespace, origin: origin)
        return state.finish(token: token)
    }

    /// The bits for an entry id and a token as the worker keeps it: the same as for its text.
    public static func bits(namespace: String = "", origin: StreamEntryID, token: DeviceToken) -> UUIDBits {
        var state = State(namespace: namespace, origin: origin)
        return state.finish(token: token)
    }

    /// Two FNV-1a 64 lanes over `namespace/origin:token`.
    struct State {
        var high: UInt64 = 0xcbf2_9ce4_8422_2325
        var low: UInt64 = 0x8422_2325_cbf2_9ce4

        init(namespace: String) {
            if !namespace.isEmpty {
                // Read as a buffer: iterating the UTF8View cost ~280 instructions a job.
                var namespace = namespace
                namespace.withUTF8 { bytes in
                    for byte in bytes { feedOrigin(byte) }
                }
                feedOrigin(0x2F)  // "/"
            }
        }

        /// The state after `namespace/origin`.
        @inline(__always)
        init(namespace: String, origin: String) {
            self.init(namespace: namespace)
            for byte in origin.utf8 { feedOrigin(byte) }
        }

        /// The state after `namespace/` and the entry id's text, its digits fed as produced.
        @inline(__always)
        init(namespace: String, origin: StreamEntryID) {
            self.init(namespace: namespace)
            feedDecimal(origin.milliseconds)
            feedOrigin(0x2D)  // "-"
            feedDecimal(origin.sequence)
        }

        @inline(__always)
        mutating func feedOrigin(_ byte: UInt8) {
            high = (high ^ UInt64(byte)) &* 0x100_0000_01b3
            low = (low ^ UInt64(byte)) &* 0x100_0000_01b3 ^ 0x9E37
        }

        /// `value`'s decimal digits, most significant first, with no string in between.
        mutating func feedDecimal(_ value: UInt64) {
            DecimalDigits.with(value) { digits in
                for digit in digits { feedOrigin(digit) }
            }
        }

        @inline(__always)
        mutating func feedToken(_ byte: UInt8) {
            let folded = (byte >= 0x41 && byte <= 0x46) ? byte | 0x20 : byte
            high = (high ^ UInt64(folded)) &* 0x100_0000_01b3
            low = (low ^ UInt64(folded)) &* 0x100_0000_01b3 ^ 0x7F4A
        }

        /// A packed token's digits are its lowercase text, fed as they are spelled: the same id
        /// as its text gives, with no string read.
        mutating func finish(token: DeviceToken) -> UUIDBits {
            if let text = token.text { return finish(token: text) }
            high = (high ^ 0x3A) &* 0x100_0000_01b3
            low = (low ^ 0x3A) &* 0x100_0000_01b3
            token.forEachPackedDigit { feedToken($0) }
            return UUIDBits(high: StableID.mix(high), low: StableID.mix(low ^ high))
        }

        mutating func finish(token: String) -> UUIDBits {
            high = (high ^ 0x3A) &* 0x100_0000_01b3
            low = (low ^ 0x3A) &* 0x100_0000_01b3
            // Tokens are hex in either case: fold to lowercase so both spell one id. The bytes
            // are read as a buffer (iterating UTF8View costs more than the hash), borrowed through
            // `utf8Span`: a `var` copy for `withUTF8` retained and released the token's storage.
            token.utf8Span.span.withUnsafeBufferPointer { bytes in
                for byte in bytes { feedToken(byte) }
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
