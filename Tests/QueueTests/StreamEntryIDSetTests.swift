import Queue
import Testing

/// The worker's held-entry set against Swift's `Set`: the same answers for every operation, over
/// random ids, ids a producer chose (the extremes of the id space, one millisecond's sequences,
/// ids that differ in one bit) and long runs of inserts and removals that wrap the table.
@Suite
struct StreamEntryIDSetBehaviour {
    /// SplitMix64: the same sequence on every run.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Runs `operations` random operations over ids drawn by `draw` (each prefetched first),
    /// checking every answer and the count against `Set`, then that exactly the model's ids remain.
    func compare(operations: Int, seed: UInt64, draw: (inout Generator) -> StreamEntryID) {
        var generator = Generator(state: seed)
        var table = StreamEntryIDSet(capacity: 4)
        var model = Set<StreamEntryID>()
        var seen: [StreamEntryID] = []
        for step in 0..<operations {
            // Mostly ids seen before (removals and repeats hit), some new.
            let id = seen.isEmpty || generator.next() % 3 == 0 ? draw(&generator) : seen[Int(generator.next() % UInt64(seen.count))]
            // The worker hints each id's slot before using it: the hint must change no answer.
            table.prefetch(id)
            switch generator.next() % 5 {
            case 0, 1:
                let inserted = table.insert(id)
                let modelInserted = model.insert(id).inserted
                #expect(inserted == modelInserted, "insert \(id) at step \(step)")
                if inserted { seen.append(id) }
            case 2, 3:
                let removed = table.remove(id)
                let modelRemoved = model.remove(id) != nil
                #expect(removed == modelRemoved, "remove \(id) at step \(step)")
            default:
                #expect(table.contains(id) == model.contains(id), "contains \(id) at step \(step)")
            }
            #expect(table.count == model.count)
            if step % 997 == 0 { #expect(seen.allSatisfy { table.contains($0) == model.contains($0) }) }
        }
        #expect(seen.allSatisfy { table.contains($0) == model.contains($0) })
        #expect(table.count == model.count)
    }

    @Test
    func randomIdsAnswerLikeSet() {
        compare(operations: 40_000, seed: 1) { generator in
            StreamEntryID(milliseconds: generator.next(), sequence: generator.next())
        }
    }

    @Test
    func idsOfOneMillisecondAndNeighboursAnswerLikeSet() {
        // The usual stream: a few milliseconds, sequences counting up.
        compare(operations: 40_000, seed: 2) { generator in
            StreamEntryID(milliseconds: 1_717_171_717_000 + generator.next() % 4, sequence: generator.next() % 2_000)
        }
    }

    @Test
    func extremeAndOneBitApartIdsAnswerLikeSet() {
        let extremes: [UInt64] = [0, 1, 2, UInt64.max, UInt64.max - 1, 1 << 63, 1 << 32, (1 << 32) - 1]
        compare(operations: 20_000, seed: 3) { generator in
            let base = extremes[Int(generator.next() % UInt64(extremes.count))]
            let bit = UInt64(1) << (generator.next() % 64)
            return StreamEntryID(milliseconds: generator.next() % 2 == 0 ? base : base ^ bit,
                                 sequence: extremes[Int(generator.next() % UInt64(extremes.count))] ^ (generator.next() % 2 == 0 ? 0 : bit))
        }
    }

    @Test
    func aWorkerSizedWindowSlidesThroughWithoutGrowing() {
        // Held entries come and go in order: 4,000 in flight over a million ids. Every id stays
        // findable, and removing them all empties the set.
        var table = StreamEntryIDSet(capacity: 4_096)
        let window = 4_000
        for n in 0..<1_000_000 {
            let inserted = table.insert(StreamEntryID(milliseconds: UInt64(n / 7), sequence: UInt64(n % 7)))
            if !inserted { Issue.record("id \(n) was not inserted") }
            if n >= window {
                let old = n - window
                let removed = table.remove(StreamEntryID(milliseconds: UInt64(old / 7), sequence: UInt64(old % 7)))
                if !removed { Issue.record("id \(old) was not found to remove") }
            }
        }
        #expect(table.count == window)
        for n in (1_000_000 - window)..<1_000_000 {
            #expect(table.contains(StreamEntryID(milliseconds: UInt64(n / 7), sequence: UInt64(n % 7))))
        }
        table.removeAll()
        #expect(table.isEmpty && !table.contains(StreamEntryID(milliseconds: 142_857, sequence: 0)))
        let again = table.insert(StreamEntryID(milliseconds: 142_857, sequence: 0))
        #expect(again && table.count == 1)
    }
}
