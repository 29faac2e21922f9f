/// How many times each apns-id was accepted: the emulator's duplicate detector.
///
/// One open-addressing table of (id, count) slots with linear probing. An apns-id is already
/// random (or a hash), so a multiply-shift of its bits places it; no `Hasher` run, no
/// allocation per id, and one cache line touched per lookup in the common case. This is
/// measuring overhead that only clients sending apns-ids pay, so it is kept small.
struct IDCounter {
    private struct Slot {
        var high: UInt64 = 0
        var low: UInt64 = 0
        /// 0 marks an empty slot: a stored id was counted at least once.
        var count: UInt32 = 0
    }

    private var slots: [Slot]
    private var shift: UInt64
    /// Distinct ids held.
    private(set) var distinct = 0

    /// A table that holds `expected` ids without growing (growing rehashes everything at once).
    init(expected: Int) {
        var size = 16
        while size * 3 < max(expected, 1) * 4 { size <<= 1 }
        slots = Array(repeating: Slot(), count: size)
        shift = UInt64(64 - size.trailingZeroBitCount)
    }

    private func home(_ key: UUIDKey) -> Int {
        let mixed = (key.high ^ (key.low &* 0xBF58_476D_1CE4_E5B9)) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: mixed >> shift)
    }

    /// Counts one more acceptance of `key`; returns its count so far.
    mutating func increment(_ key: UUIDKey) -> UInt32 {
        if (distinct + 1) * 4 > slots.count * 3 { grow() }
        let mask = slots.count - 1
        var index = home(key)
        return slots.withUnsafeMutableBufferPointer { slots in
            while true {
                if slots[index].count == 0 {
                    slots[index] = Slot(high: key.high, low: key.low, count: 1)
                    distinct += 1
                    return 1
                }
                if slots[index].high == key.high && slots[index].low == key.low {
                    // Saturates: a count that wrapped to 0 would mark the slot empty.
                    if slots[index].count < UInt32.max { slots[index].count += 1 }
                    return slots[index].count
                }
                index = (index + 1) & mask
            }
        }
    }

    /// How many times `key` was counted (0 if never).
    func count(of key: UUIDKey) -> UInt32 {
        let mask = slots.count - 1
        var index = home(key)
        while slots[index].count != 0 {
            if slots[index].high == key.high && slots[index].low == key.low { return slots[index].count }
            index = (index + 1) & mask
        }
        return 0
    }

    /// Forgets every id, keeping the table's size.
    mutating func removeAll() {
        guard distinct > 0 else { return }
        slots.withUnsafeMutableBufferPointer { slots in
            for index in slots.indices { slots[index].count = 0 }
        }
        distinct = 0
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: Slot(), count: old.count * 2)
        shift -= 1
        distinct = 0
        let mask = slots.count - 1
        for slot in old where slot.count != 0 {
            let key = UUIDKey(high: slot.high, low: slot.low)
            var index = home(key)
            while slots[index].count != 0 { index = (index + 1) & mask }
            slots[index] = slot
            distinct += 1
        }
    }
}
