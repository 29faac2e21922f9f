import Testing

@testable import APNs

@Suite struct SplitMix64Tests {
    /// The reference sequence for seed 0 (Vigna's splitmix64.c): stable ids and load shapes depend on it.
    @Test func matchesTheReferenceSequence() {
        var generator = SplitMix64(seed: 0)
        #expect((0..<3).map { _ in generator.next() } == [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F])
    }

    @Test func theSameSeedGivesTheSameSequence() {
        var first = SplitMix64(seed: 99)
        var second = SplitMix64(seed: 99)
        var other = SplitMix64(seed: 100)
        let a = (0..<16).map { _ in first.next() }
        #expect(a == (0..<16).map { _ in second.next() })
        #expect(a != (0..<16).map { _ in other.next() })
    }
}
