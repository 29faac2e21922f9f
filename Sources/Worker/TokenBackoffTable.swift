import APNs

/// Device tokens APNs answered 429 TooManyRequests, each with the time until which nothing more is
/// sent to it: one per worker loop, read before every send while it holds anything.
///
/// APNs throttles a device token, not a notification: once it said "too many" for a token, every
/// other notification queued for that token would be throttled too, and each 429 spends an attempt
/// and makes APNs' own throttle last longer. So the token backs off as a whole (`DeliveryRules`
/// parks its other notifications in the retry set, due when the backoff ends).
///
/// Bounded: at most `capacity` tokens; adding one more evicts the oldest entry (insertion order),
/// which at worst costs that token one more 429. Keyed by the token as the worker keeps it
/// (`DeviceToken`, lowercase from `JobDecoder` on): the per-send lookup builds no string for a
/// packed token. Consecutive
/// 429s of one token lengthen its backoff along `Backoff.tokenRetry` (`strikes`); a token whose
/// backoff has passed starts again at one strike. Loop-confined.
public struct TokenBackoffTable {
    struct Slot {
        var until: Int64
        var strikes: Int
        /// The insertion that placed it: its entry in `order` (a stale entry there has another).
        var sequence: UInt64
    }

    public let capacity: Int
    private var slots: [DeviceToken: Slot] = [:]
    /// Tokens in insertion order with the sequence they were inserted with, from `head` on.
    private var order: [(token: DeviceToken, sequence: UInt64)] = []
    private var head = 0
    private var nextSequence: UInt64 = 0
    /// Tokens evicted because the table was full (for metrics and tests).
    public private(set) var evictions = 0

    /// `capacity` 0 turns the table off: nothing is remembered, every notification is sent.
    public init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    /// No token backed off: the per-send check is this one comparison.
    public var isEmpty: Bool { slots.isEmpty }

    /// Tokens in the table (some may have passed their time; `removeExpired` drops those).
    public var count: Int { slots.count }

    /// Until when `token` backs off, if that is after `now`.
    public func until(_ token: String, now: Int64) -> Int64? { until(DeviceToken(token), now: now) }

    /// The same, for a token as the worker keeps it.
    public func until(_ token: DeviceToken, now: Int64) -> Int64? {
        guard let slot = slots[token], slot.until > now else { return nil }
        return slot.until
    }

    /// A 429 for `token` at `now`: its backoff becomes at least `now + delay(strikes)`, where
    /// `strikes` counts its 429s in a row (one more than before if its backoff had not passed).
    /// Returns the time the token backs off until.
    @discardableResult
    public mutating func throttled(_ token: String, now: Int64, delay: (Int) -> Int64) -> Int64 {
        throttled(DeviceToken(token), now: now, delay: delay)
    }

    /// The same, for a token as the worker keeps it.
    @discardableResult
    public mutating func throttled(_ token: DeviceToken, now: Int64, delay: (Int) -> Int64) -> Int64 {
        guard capacity > 0 else { return now.addingSaturating(delay(1)) }
        if var slot = slots[token] {
            // 429s in a row lengthen the backoff; one after the backoff passed starts over.
            slot.strikes = slot.until > now ? slot.strikes + 1 : 1
            slot.until = max(slot.until, now.addingSaturating(max(0, delay(slot.strikes))))
            slots[token] = slot
            return slot.until
        }
        if slots.count >= capacity { evictOldest() }
        nextSequence += 1
        let until = now.addingSaturating(max(0, delay(1)))
        slots[token] = Slot(until: until, strikes: 1, sequence: nextSequence)
        order.append((token, nextSequence))
        if order.count - head > 2 * capacity + 64 { compact() }
        return until
    }

    /// Drops every token whose backoff has passed by `now` (about once a second, for the gauge).
    /// Returns how many tokens are still backed off.
    @discardableResult
    public mutating func removeExpired(now: Int64) -> Int {
        guard !slots.isEmpty else { return 0 }
        var kept: [(token: DeviceToken, sequence: UInt64)] = []
        kept.reserveCapacity(slots.count)
        for index in head..<order.count {
            let entry = order[index]
            guard let slot = slots[entry.token], slot.sequence == entry.sequence else { continue }
            if slot.until > now {
                kept.append(entry)
            } else {
                slots[entry.token] = nil
            }
        }
        order = kept
        head = 0
        return slots.count
    }

    private mutating func evictOldest() {
        while head < order.count {
            let entry = order[head]
            head += 1
            if let slot = slots[entry.token], slot.sequence == entry.sequence {
                slots[entry.token] = nil
                evictions += 1
                break
            }
        }
        if head > 4_096 && head * 2 > order.count { compact() }
    }

    /// Drops `order`'s consumed and stale entries, so it stays within a small multiple of `capacity`.
    private mutating func compact() {
        order = order[head...].filter { slots[$0.token]?.sequence == $0.sequence }
        head = 0
    }
}
