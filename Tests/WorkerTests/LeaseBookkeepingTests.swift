import Logging
import Queue
import Testing
@testable import Worker

/// A worker's own record of its leases (`LocalLease`, `QueueChannel`): which lease an outcome
/// settles after a failover made a newer read name entries again, and the safety net for a
/// lease no outcome will settle. The Redis side is in the integration tests (StreamLeaseTests,
/// SentinelTests).
@Suite
struct LeaseBookkeepingTests {
    static func ids(_ range: Range<UInt64>) -> [StreamEntryID] {
        range.map { StreamEntryID(milliseconds: 1_000, sequence: $0) }
    }

    static func channel() -> QueueChannel {
        QueueChannel(index: 0, keys: QueueKeys(), logger: Logger(label: "lease-bookkeeping"))
    }

    /// After a failover the new master hands out again entries the worker still holds (their
    /// outcome not confirmed yet): those are noted, since an outcome planned before the read set
    /// nothing in the lease Redis has; reads of new entries note nothing.
    @Test
    func aReadNamingHeldEntriesAgainNotesThemUntilTheirOutcomeIsPlanned() {
        let channel = Self.channel()
        let first = LocalLease(sequence: 1, field: "w-1", ids: Self.ids(0..<10))
        channel.addLease(first)
        channel.noteRead(first) { _ in true }
        #expect(channel.rereadWhileHeld.isEmpty, "a first read is new entries only")
        #expect(channel.newestRead == StreamEntryID(milliseconds: 1_000, sequence: 9))

        let next = LocalLease(sequence: 2, field: "w-2", ids: Self.ids(10..<20))
        channel.addLease(next)
        channel.noteRead(next) { _ in true }
        #expect(channel.rereadWhileHeld.isEmpty, "a read after the newest entry names nothing again")

        // The new master had seen reads up to entry 4 only.
        let again = LocalLease(sequence: 3, field: "w-3", ids: Self.ids(5..<25))
        channel.addLease(again)
        let held = Set(Self.ids(5..<8) + Self.ids(18..<20))
        channel.noteRead(again) { held.contains($0) }
        #expect(channel.rereadWhileHeld == held)
        #expect(channel.newestRead == StreamEntryID(milliseconds: 1_000, sequence: 24))

        channel.planned(StreamEntryID(milliseconds: 1_000, sequence: 6))
        #expect(channel.rereadWhileHeld.count == held.count - 1, "an outcome planned after the read finds the newer lease")

    }

    /// A write of entries finished while their lease was gone, refused and sent again later, is
    /// planned with the leases there were when it was made: a read after that which names one of
    /// them again (a second failover lost the read in between) delivers it anew, and its own
    /// outcome sets its position; the write setting it too would settle that lease twice.
    @Test
    func aLaterLeaseIsNotPlannedForAnEntryFinishedBeforeIt() {
        let channel = Self.channel()
        let before = LocalLease(sequence: 2, field: "w-2", ids: Self.ids(0..<10))
        channel.addLease(before)
        let entry = StreamEntryID(milliseconds: 1_000, sequence: 3)
        #expect(channel.lease(containing: entry, upTo: 2)?.0 === before)
        // The later read names entries 0 to 4 again and takes their positions over.
        let later = LocalLease(sequence: 5, field: "w-5", ids: Self.ids(0..<5))
        channel.addLease(later)
        _ = channel.takeOver(for: later)
        #expect(channel.lease(containing: entry)?.0 === later, "the later lease holds it now")
        #expect(channel.lease(containing: entry, upTo: 2) == nil, "not for a write made before that read")
        #expect(channel.lease(containing: entry, upTo: 5)?.0 === later)
        #expect(channel.lease(containing: StreamEntryID(milliseconds: 1_000, sequence: 7), upTo: 2)?.0 === before)
    }

    /// A newer read takes over positions of an older lease whose outcome was planned already:
    /// the older lease counted them when they were taken over, so the outcome settles only the
    /// rest (counting them twice dropped the lease while some of its entries were still out).
    @Test
    func positionsTakenOverAreNotSettledTwice() {
        let channel = Self.channel()
        let older = LocalLease(sequence: 1, field: "w-1", ids: Self.ids(0..<10))
        channel.addLease(older)
        // An outcome batch of positions 2 to 5 is planned and written; 0 and 1 are still out.
        var plan = LeaseAcknowledgementPlan()
        var mask: [UInt8] = Array(repeating: UInt8(ascii: "0"), count: StreamLease.maskDigits(count: 10))
        for position in 2..<6 { StreamLease.set(position, in: &mask) }
        plan.leases = [older]
        plan.counts = [4]
        plan.acknowledgement.leases = [("w-1", 10, older.ids[9], mask)]
        #expect(plan.settling(ofLease: 0) == 4)

        // Before Redis answers, a newer read names entries 4 to 13.
        let newer = LocalLease(sequence: 2, field: "w-2", ids: Self.ids(4..<14))
        channel.addLease(newer)
        let taken = channel.takeOver(for: newer)
        #expect(taken.taken.count == 1 && taken.emptied.isEmpty)
        #expect(older.unsettled == 4, "positions 4 to 9 went to the newer lease")
        #expect(plan.settling(ofLease: 0) == 2, "positions 4 and 5 were counted when taken over")
        #expect(!channel.settle(older, count: plan.settling(ofLease: 0)), "entries 0 and 1 are still out: the lease stays")
        #expect(older.unsettled == 2)
        #expect(channel.leases.contains { $0 === older })
    }

    /// The safety net: a lease whose unsettled positions the worker holds none of, three claim
    /// ticks in a row, is dropped (the release hands its entries to the pending list); a lease
    /// with an entry still held is kept, and an entry held again starts the count over.
    @Test
    func aLeaseHoldingNothingForThreeTicksIsDropped() {
        let channel = Self.channel()
        let busy = LocalLease(sequence: 1, field: "w-1", ids: Self.ids(0..<10))
        let idle = LocalLease(sequence: 2, field: "w-2", ids: Self.ids(10..<20))
        channel.addLease(busy)
        channel.addLease(idle)
        var held: Set<StreamEntryID> = [StreamEntryID(milliseconds: 1_000, sequence: 3)]
        let isHeld: (StreamEntryID) -> Bool = { held.contains($0) }
        #expect(channel.leasesLost(isHeld: isHeld).isEmpty)
        #expect(channel.leasesLost(isHeld: isHeld).isEmpty)
        let lost = channel.leasesLost(isHeld: isHeld)
        #expect(lost.map(\.field) == ["w-2"], "the third tick drops the lease holding nothing")
        #expect(channel.leases.map(\.field) == ["w-1"])

        // An entry held again resets the count.
        held = []
        #expect(channel.leasesLost(isHeld: { held.contains($0) }).isEmpty)
        held = [StreamEntryID(milliseconds: 1_000, sequence: 0)]
        #expect(channel.leasesLost(isHeld: { held.contains($0) }).isEmpty)
        held = []
        #expect(channel.leasesLost(isHeld: { held.contains($0) }).isEmpty)
        #expect(channel.leasesLost(isHeld: { held.contains($0) }).isEmpty)
        #expect(channel.leasesLost(isHeld: { held.contains($0) }).count == 1)
    }
}
