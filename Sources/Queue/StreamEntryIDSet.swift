import Transport

/// A set of stream entry ids for the worker's hot path: the entries it holds (read and not yet
/// confirmed finished), one insert and one removal per job.
///
/// `Set<StreamEntryID>` hashes each id with SipHash (a hasher seeded, fed 16 bytes, finalised),
/// which a whole-drain profile put at about 2 % of the worker's time. This is an open-addressing
/// table with linear probing and backward-shift deletion (no tombstones, so probes stay short
/// however many ids pass through), hashed by a 64-bit mixer keyed with a random seed per table:
/// ids are chosen by producers (`XADD` with an explicit id), and a fixed hash would let one craft
/// ids that all probe the same run. It never holds more than half its slots; it grows by
/// doubling and keeps its size (the worker's held entries peak at the same level again).
public struct StreamEntryIDSet {
    @usableFromInline var slots: [Slot]
    @usableFromInline var mask: Int
    @usableFromInline let seed: UInt64
    public private(set) var count = 0

    @usableFromInline struct Slot {
        var milliseconds: UInt64 = 0
        var sequence: UInt64 = 0
        var used = false
    }

    /// An empty set with room for `capacity` ids before it first grows.
    public init(capacity: Int = 64) {
        var size = 16
        while size < capacity * 2 { size *= 2 }
        slots = Array(repeating: Slot(), count: size)
        mask = size - 1
        var generator = SystemRandomNumberGenerator()
        seed = generator.next()
    }

    public var isEmpty: Bool { count == 0 }

    @inlinable @inline(__always)
    func home(_ milliseconds: UInt64, _ sequence: UInt64) -> Int {
        StreamEntryIDSet.home(milliseconds, sequence, seed: seed, mask: mask)
    }

    @inlinable @inline(__always)
    static func home(_ milliseconds: UInt64, _ sequence: UInt64, seed: UInt64, mask: Int) -> Int {
        // murmur3's 64-bit finaliser over both halves, keyed by the seed.
        var value = (milliseconds ^ seed) &* 0x9E37_79B9_7F4A_7C15 ^ (sequence &+ seed.byteSwapped)
        value ^= value >> 33
        value = value &* 0xFF51_AFD7_ED55_8CCD
        value ^= value >> 33
        value = value &* 0xC4CE_B9FE_1A85_EC53
        value ^= value >> 33
        return Int(truncatingIfNeeded: value) & mask
    }

    /// Starts loading the slot where the probe for `id` begins, for an insert, removal or lookup
    /// of `id` soon after: the table is larger than the caches and its slots are hashed, so each
    /// of those otherwise waits on memory. A hint: nothing changes.
    @inlinable @inline(__always)
    public func prefetch(_ id: StreamEntryID) {
        let index = home(id.milliseconds, id.sequence)
        slots.withUnsafeBufferPointer { slots in
            if let base = slots.baseAddress { prefetchForWrite(UnsafeRawPointer(base + index)) }
        }
    }

    /// Whether `id` is in the set.
    public func contains(_ id: StreamEntryID) -> Bool {
        var index = home(id.milliseconds, id.sequence)
        while slots[index].used {
            if slots[index].milliseconds == id.milliseconds && slots[index].sequence == id.sequence { return true }
            index = (index + 1) & mask
        }
        return false
    }

    /// Adds `id`; false when it was there already.
    @discardableResult
    public mutating func insert(_ id: StreamEntryID) -> Bool {
        if (count + 1) * 2 > slots.count { grow() }
        let start = home(id.milliseconds, id.sequence)
        let mask = mask
        let inserted: Bool = slots.withUnsafeMutableBufferPointer { slots in
            var index = start
            while slots[index].used {
                if slots[index].milliseconds == id.milliseconds && slots[index].sequence == id.sequence { return false }
                index = (index + 1) & mask
            }
            slots[index] = Slot(milliseconds: id.milliseconds, sequence: id.sequence, used: true)
            return true
        }
        if inserted { count += 1 }
        return inserted
    }

    /// Removes `id`; false when it was not there. The ids after it in its probe run move back
    /// into the gap, so every id stays reachable from its home slot without tombstones.
    @discardableResult
    public mutating func remove(_ id: StreamEntryID) -> Bool {
        let start = home(id.milliseconds, id.sequence)
        let mask = mask, seed = seed
        let removed: Bool = slots.withUnsafeMutableBufferPointer { slots in
            var hole = start
            while true {
                guard slots[hole].used else { return false }
                if slots[hole].milliseconds == id.milliseconds && slots[hole].sequence == id.sequence { break }
                hole = (hole + 1) & mask
            }
            var next = (hole + 1) & mask
            while slots[next].used {
                let wanted = StreamEntryIDSet.home(slots[next].milliseconds, slots[next].sequence, seed: seed, mask: mask)
                // The entry at `next` may fill the hole unless its home lies cyclically in (hole, next].
                let distanceToNext = (next - wanted) & mask
                let distanceToHole = (hole - wanted) & mask
                if distanceToHole < distanceToNext {
                    slots[hole] = slots[next]
                    hole = next
                }
                next = (next + 1) & mask
            }
            slots[hole].used = false
            return true
        }
        if removed { count -= 1 }
        return removed
    }

    /// Removes every id, keeping the table's size.
    public mutating func removeAll() {
        guard count > 0 else { return }
        slots.withUnsafeMutableBufferPointer { slots in
            for index in slots.indices { slots[index].used = false }
        }
        count = 0
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: Slot(), count: old.count * 2)
        mask = slots.count - 1
        count = 0
        for slot in old where slot.used { insert(StreamEntryID(milliseconds: slot.milliseconds, sequence: slot.sequence)) }
    }
}
