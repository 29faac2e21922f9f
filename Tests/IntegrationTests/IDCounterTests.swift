import APNs
@testable import MockAPNs
import Testing

/// The emulator's duplicate detector: every id counted exactly, through growth and forgetting.
@Suite struct IDCounterTests {
    @Test func countsEachIdSeparatelyThroughGrowth() {
        // Sized for one id, fed 20,000 sequential ones (the least random input there is): the
        // table grows ten times and must keep every count.
        var counter = IDCounter(expected: 1)
        let keys = (0..<20_000).map { UUIDKey(high: UInt64($0 >> 3), low: UInt64($0)) }
        for key in keys { #expect(counter.increment(key) == 1) }
        #expect(counter.distinct == keys.count)
        for key in keys where key.low % 3 == 0 { #expect(counter.increment(key) == 2) }
        for key in keys {
            let expected: UInt32 = key.low % 3 == 0 ? 2 : 1
            if counter.count(of: key) != expected {
                Issue.record("id \(key.low) counted \(counter.count(of: key)), expected \(expected)")
                return
            }
        }
        #expect(counter.count(of: UUIDKey(high: 1 << 40, low: 7)) == 0)
        #expect(counter.distinct == keys.count)
    }

    /// A growth moves the ids a few per increment instead of all at once (at a million ids that
    /// held the emulator's loop for ~165 ms): while it goes on, ids counted before it are found
    /// in the old table, counted on from where they were, and moved; none is lost or doubled.
    @Test func growthIsSpreadOverIncrementsAndLosesNoCount() {
        var counter = IDCounter(expected: 1_000)
        let before = (0..<1_540).map { UUIDKey(high: UInt64($0) &* 0x9E37_79B9, low: UInt64($0)) }
        for key in before { #expect(counter.increment(key) == 1) }
        #expect(counter.isGrowing, "the growth started and is still moving slots")
        var incrementsWhileGrowing = 0
        var next = 1_000_000
        while counter.isGrowing {
            // Every third step an id from before the growth comes again; the others are new.
            if incrementsWhileGrowing % 3 == 0 {
                let key = before[(incrementsWhileGrowing * 7) % before.count]
                let previous = counter.count(of: key)
                #expect(previous >= 1)
                #expect(counter.increment(key) == previous + 1)
            } else {
                #expect(counter.increment(UUIDKey(high: UInt64(next), low: UInt64(next) << 1)) == 1)
                next += 1
            }
            incrementsWhileGrowing += 1
            if incrementsWhileGrowing > 10_000 { break }
        }
        #expect(!counter.isGrowing)
        #expect(incrementsWhileGrowing > 1, "moved over several increments, not at once: \(incrementsWhileGrowing)")
        // Every id from before: its count is 1 plus the times it came again.
        var again = [Int](repeating: 0, count: before.count)
        for step in stride(from: 0, to: incrementsWhileGrowing, by: 3) { again[(step * 7) % before.count] += 1 }
        for (index, key) in before.enumerated() where counter.count(of: key) != UInt32(1 + again[index]) {
            Issue.record("id \(index) counted \(counter.count(of: key)), expected \(1 + again[index])")
            return
        }
        #expect(counter.distinct == before.count + (next - 1_000_000))
    }

    @Test func forgettingEmptiesTheTableButKeepsItUsable() {
        var counter = IDCounter(expected: 100)
        let key = UUIDKey(high: 0xDEAD_BEEF, low: 42)
        #expect(counter.increment(key) == 1)
        #expect(counter.increment(key) == 2)
        counter.removeAll()
        #expect(counter.distinct == 0)
        #expect(counter.count(of: key) == 0)
        #expect(counter.increment(key) == 1)
    }

    @Test func canonicalParseAcceptsExactlyWhatAPNsAccepts() {
        let valid = "8f1d3c1e-5a7b-4c2d-9e0f-123456789abc"
        let key = UUIDKey(canonical: valid)
        #expect(key?.high == 0x8f1d_3c1e_5a7b_4c2d && key?.low == 0x9e0f_1234_5678_9abc)
        for text in [valid.uppercased(), String(valid.dropLast()), valid + "0", "8f1d3c1e5a7b-4c2d-9e0f-123456789abc-",
                     "8f1d3c1e-5a7b-4c2d-9e0f-123456789abg", "8f1d3c1e-5a7b-4c2d-9e0f_123456789abc", ""] {
            #expect(UUIDKey(canonical: text) == nil, "\(text)")
            #expect(!UUIDString.isCanonical(text), "\(text)")
        }
        #expect(UUIDString.isCanonical(valid))
    }
}
