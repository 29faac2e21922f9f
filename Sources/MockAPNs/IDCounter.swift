import CHeraldShims
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
        /// 1 in a slot of an old table whose id moved to the new one (a tombstone while growing).
        private var moveFlag: UInt32 = 0
        private var padding2: UInt64 = 0

        var isMoved: Bool {
            get { moveFlag != 0 }
            set { moveFlag = newValue ? 1 : 0 }
        }

        init() {}
        init(high: UInt64, low: UInt64, count: UInt32) {
            self.high = high
            self.low = low
            self.count = count
        }
    }

    private var table: SlotTable
    private var shift: UInt64
    /// Distinct ids held (in both tables while growing).
    private(set) var distinct = 0
    /// While growing: the table being emptied into `table`, a few slots per increment, so that no
    /// single request pays for rehashing them all (at a million ids that was ~165 ms of the
    /// emulator's loop, which every request waiting meanwhile counted as latency).
    private var old: SlotTable?
    private var oldShift: UInt64 = 0
    /// Slots of `old` below this index are moved already.
    private var moved = 0
    /// Old slots moved per increment while growing: the new table is twice the old one, so it
    /// cannot fill before the move ends (at most 3/4 of old's slots plus one id per 32 moved).
    static let slotsMovedPerIncrement = 32

    /// A table that holds `expected` ids without growing.
    init(expected: Int) {
        var size = 16
        while size * 3 < max(expected, 1) * 4 { size <<= 1 }
        table = SlotTable(count: size, upFront: true)
        shift = UInt64(64 - size.trailingZeroBitCount)
    }

    private static func home(_ key: UUIDKey, shift: UInt64) -> Int {
        let mixed = (key.high ^ (key.low &* 0xBF58_476D_1CE4_E5B9)) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: mixed >> shift)
    }

    /// Where `key` is in `table`, or the empty slot that ends its probe. Moved-out slots of an old
    /// table are skipped like occupied ones (a tombstone keeps later keys' probes intact).
    private static func find(_ key: UUIDKey, in table: SlotTable, shift: UInt64) -> (index: Int, found: Bool) {
        let slots = table.slots
        let mask = table.count - 1
        var index = home(key, shift: shift)
        while slots[index].count != 0 {
            if slots[index].high == key.high && slots[index].low == key.low && !slots[index].isMoved { return (index, true) }
            index = (index + 1) & mask
        }
        return (index, false)
    }

    /// Asks the caches for `key`'s home slot ahead of `increment(key)`: that lookup is a miss on
    /// a random slot of a table far larger than the caches, and the request's other checks (its
    /// provider token, its payload) can run while the slot's line comes in.
    func prefetch(_ key: UUIDKey) {
        herald_prefetch_for_write(table.slots + IDCounter.home(key, shift: shift))
    }

    /// Counts one more acceptance of `key`; returns its count so far.
    mutating func increment(_ key: UUIDKey) -> UInt32 {
        if old != nil { moveSomeSlots() } else if (distinct + 1) * 4 > table.count * 3 { startGrowing() }
        let slots = table.slots
        let (index, found) = IDCounter.find(key, in: table, shift: shift)
        if found {
            // Saturates: a count that wrapped to 0 would mark the slot empty.
            if slots[index].count < UInt32.max { slots[index].count += 1 }
            return slots[index].count
        }
        var count: UInt32 = 1
        if let old {
            // Counted before the growth and not moved yet: it moves now, one more.
            let (oldIndex, inOld) = IDCounter.find(key, in: old, shift: oldShift)
            if inOld {
                count = old.slots[oldIndex].count < UInt32.max ? old.slots[oldIndex].count + 1 : UInt32.max
                old.slots[oldIndex].isMoved = true
                distinct -= 1
            }
        }
        slots[index] = Slot(high: key.high, low: key.low, count: count)
        distinct += 1
        return count
    }

    /// How many times `key` was counted (0 if never).
    func count(of key: UUIDKey) -> UInt32 {
        let (index, found) = IDCounter.find(key, in: table, shift: shift)
        if found { return table.slots[index].count }
        guard let old else { return 0 }
        let (oldIndex, inOld) = IDCounter.find(key, in: old, shift: oldShift)
        return inOld ? old.slots[oldIndex].count : 0
    }

    /// Forgets every id, keeping the table's size.
    mutating func removeAll() {
        old = nil
        moved = 0
        guard distinct > 0 else { return }
        table.clear()
        distinct = 0
    }

    /// Whether a growth is still moving slots (for tests).
    var isGrowing: Bool { old != nil }

    private mutating func startGrowing() {
        old = table
        oldShift = shift
        moved = 0
        table = SlotTable(count: table.count * 2, upFront: false)
        shift -= 1
        moveSomeSlots()
    }

    private mutating func moveSomeSlots() {
        guard let old else { return }
        let end = min(old.count, moved + IDCounter.slotsMovedPerIncrement)
        let slots = table.slots
        for oldIndex in moved..<end {
            let slot = old.slots[oldIndex]
            guard slot.count != 0, !slot.isMoved else { continue }
            var index = IDCounter.home(UUIDKey(high: slot.high, low: slot.low), shift: shift)
            while slots[index].count != 0 { index = (index + 1) & (table.count - 1) }
            slots[index] = Slot(high: slot.high, low: slot.low, count: slot.count)
            old.slots[oldIndex].isMoved = true
        }
        moved = end
        if moved == old.count { self.old = nil }
    }
}

/// The slots' memory: zeroed, freed with the table. Owned by one `IDCounter` (never shared: the
/// emulator's loop holds it). A large table is an anonymous mapping. Made up front (at start, when
/// nothing waits) it is aligned to 2 MiB, asked to be backed by huge pages and touched once, so
/// that a lookup later costs one cache miss and no page walk. Made while growing it is left to
/// the kernel to zero 4 KiB page by page as slots are first touched: a `memset` or huge-page
/// faults of the whole table at once held the emulator's loop for 75 ms at 32 MiB, measured.
private final class SlotTable {
    let slots: UnsafeMutablePointer<IDCounter.Slot>
    let count: Int
    private let bytes: Int
    /// The mapping (base and length) of a large table; nil for a small one from the heap.
    private let mapping: (base: UnsafeMutableRawPointer, length: Int)?

    static let hugePage = 2 << 20

    init(count: Int, upFront: Bool) {
        self.count = count
        bytes = count * MemoryLayout<IDCounter.Slot>.stride
        let hugePage = SlotTable.hugePage
        if bytes >= hugePage {
            let length = bytes + hugePage
            guard let base = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), base != MAP_FAILED else {
                fatalError("the emulator could not map its apns-id table (\(bytes) bytes): lower --expect-notifications")
            }
            let aligned = (Int(bitPattern: base) + hugePage - 1) & ~(hugePage - 1)
            let memory = UnsafeMutableRawPointer(bitPattern: aligned)!
            if upFront {
                // A hint: where the kernel offers no huge pages the table works the same, only slower.
                _ = madvise(memory, bytes, MADV_HUGEPAGE)
                memset(memory, 0, bytes)
            }
            mapping = (base, length)
            slots = memory.bindMemory(to: IDCounter.Slot.self, capacity: count)
        } else {
            var memory: UnsafeMutableRawPointer? = nil
            guard posix_memalign(&memory, 64, bytes) == 0, let memory else {
                fatalError("the emulator could not allocate its apns-id table (\(bytes) bytes)")
            }
            memset(memory, 0, bytes)
            mapping = nil
            slots = memory.bindMemory(to: IDCounter.Slot.self, capacity: count)
        }
    }

    func clear() {
        // A mapping's pages are handed back and come back zeroed when touched again.
        if mapping != nil, madvise(UnsafeMutableRawPointer(slots), bytes, MADV_DONTNEED) == 0 { return }
        memset(slots, 0, bytes)
    }

    deinit {
        if let mapping {
            munmap(mapping.base, mapping.length)
        } else {
            free(slots)
        }
    }
}
