import Glibc

/// How many times each apns-id was accepted: the emulator's duplicate detector.
///
/// One open-addressing table of (id, count) slots with linear probing. An apns-id is already
/// random (or a hash), so a multiply-shift of its bits places it; no `Hasher` run, no
/// allocation per id. This is measuring overhead that only clients sending apns-ids pay (h2load
/// sends none), so it is kept small: a table sized for millions of ids is far larger than the
/// caches, and every lookup lands on a random slot. Profiled under Herald's requests, that miss
/// was the largest single cost Herald's requests add, so the slots are 32 bytes aligned to 32
/// (never straddling two cache lines, as 24-byte slots did one time in three) and the table is
/// memory the kernel is asked to back with 2 MiB pages (`MADV_HUGEPAGE`), so a lookup costs
/// one cache miss instead of a cache miss plus a page-table walk of its own.
struct IDCounter {
    fileprivate struct Slot {
        var high: UInt64 = 0
        var low: UInt64 = 0
        /// 0 marks an empty slot: a stored id was counted at least once.
        var count: UInt32 = 0
        private var padding: UInt32 = 0
        private var padding2: UInt64 = 0

        init() {}
        init(high: UInt64, low: UInt64, count: UInt32) {
            self.high = high
            self.low = low
            self.count = count
        }
    }

    private var table: SlotTable
    private var shift: UInt64
    /// Distinct ids held.
    private(set) var distinct = 0

    /// A table that holds `expected` ids without growing (growing rehashes everything at once).
    init(expected: Int) {
        var size = 16
        while size * 3 < max(expected, 1) * 4 { size <<= 1 }
        table = SlotTable(count: size)
        shift = UInt64(64 - size.trailingZeroBitCount)
    }

    private func home(_ key: UUIDKey) -> Int {
        let mixed = (key.high ^ (key.low &* 0xBF58_476D_1CE4_E5B9)) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: mixed >> shift)
    }

    /// Counts one more acceptance of `key`; returns its count so far.
    mutating func increment(_ key: UUIDKey) -> UInt32 {
        if (distinct + 1) * 4 > table.count * 3 { grow() }
        let slots = table.slots
        let mask = table.count - 1
        var index = home(key)
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

    /// How many times `key` was counted (0 if never).
    func count(of key: UUIDKey) -> UInt32 {
        let slots = table.slots
        let mask = table.count - 1
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
        table.clear()
        distinct = 0
    }

    private mutating func grow() {
        let old = table
        table = SlotTable(count: old.count * 2)
        shift -= 1
        distinct = 0
        let slots = table.slots
        let mask = table.count - 1
        for oldIndex in 0..<old.count where old.slots[oldIndex].count != 0 {
            let slot = old.slots[oldIndex]
            var index = home(UUIDKey(high: slot.high, low: slot.low))
            while slots[index].count != 0 { index = (index + 1) & mask }
            slots[index] = slot
            distinct += 1
        }
    }
}

/// The slots' memory: zeroed, aligned to 2 MiB when large (so it can be backed by huge pages),
/// freed with the table. Owned by one `IDCounter` (never shared: the emulator's loop holds it).
private final class SlotTable {
    let slots: UnsafeMutablePointer<IDCounter.Slot>
    let count: Int
    private let bytes: Int

    init(count: Int) {
        self.count = count
        bytes = count * MemoryLayout<IDCounter.Slot>.stride
        let hugePage = 2 << 20
        let alignment = bytes >= hugePage ? hugePage : 64
        var memory: UnsafeMutableRawPointer? = nil
        guard posix_memalign(&memory, alignment, bytes) == 0, let memory else {
            fatalError("the emulator could not allocate its apns-id table (\(bytes) bytes): lower --expect-notifications")
        }
        // A hint: where the kernel offers no huge pages the table works the same, only slower.
        if alignment == hugePage { _ = madvise(memory, bytes, MADV_HUGEPAGE) }
        memset(memory, 0, bytes)
        slots = memory.bindMemory(to: IDCounter.Slot.self, capacity: count)
    }

    func clear() {
        memset(slots, 0, bytes)
    }

    deinit {
        free(slots)
    }
}
