import Testing

@testable import APNs

@Suite struct BackoffTests {
    let noJitter = Backoff(initial: .seconds(1), maximum: .seconds(60), jitter: 0)

    @Test func withoutJitterDelaysDoubleUpToTheCap() {
        var rng = SplitMix64(seed: 1)
        let delays = (1...9).map { noJitter.delay(afterFailures: $0, using: &rng) }
        #expect(delays == [1, 2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
    }

    @Test(arguments: [0, -1, Int.min])
    func noFailuresMeansNoDelay(failures: Int) {
        var rng = SplitMix64(seed: 1)
        #expect(Backoff.reconnect.delay(afterFailures: failures, using: &rng) == .zero)
        #expect(Backoff.reconnect.delayMilliseconds(afterFailures: failures, using: &rng) == 0)
    }

    @Test func firstFailureWaitsAboutTheInitialDelay() {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<1000 {
            let delay = Backoff.reconnect.delay(afterFailures: 1, using: &rng)
            #expect(delay >= .milliseconds(800) && delay <= .milliseconds(1200))
        }
    }

    @Test func hugeFailureCountsAreCappedQuickly() {
        var rng = SplitMix64(seed: 3)
        #expect(noJitter.delay(afterFailures: .max, using: &rng) == .seconds(60))
        let jittered = Backoff.reconnect.delay(afterFailures: .max, using: &rng)
        #expect(jittered >= .seconds(48) && jittered <= .seconds(72))
    }

    @Test func jitteredDelaysStayWithinBounds() {
        var rng = SplitMix64(seed: 7)
        let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(5), multiplier: 3, jitter: 0.5)
        for failures in 1...20 {
            for _ in 0..<200 {
                let delay = backoff.delay(afterFailures: failures, using: &rng)
                #expect(delay >= .zero)
                #expect(delay <= .milliseconds(7500))
            }
        }
    }

    @Test func fullJitterNeverGoesNegative() {
        var rng = SplitMix64(seed: 11)
        let backoff = Backoff(initial: .seconds(1), maximum: .seconds(2), jitter: 1)
        for _ in 0..<1000 {
            let delay = backoff.delay(afterFailures: 3, using: &rng)
            #expect(delay >= .zero && delay <= .seconds(4))
        }
    }

    @Test func jitterSpreadsDelaysAroundTheBase() {
        var rng = SplitMix64(seed: 5)
        let samples = (0..<1000).map { _ in Backoff.reconnect.delayMilliseconds(afterFailures: 3, using: &rng) }
        #expect(Set(samples).count > 100)
        #expect(samples.contains { $0 < 3800 })
        #expect(samples.contains { $0 > 4200 })
        let mean = Double(samples.reduce(0, +)) / Double(samples.count)
        #expect(abs(mean - 4000) < 100)
    }

    @Test func sameSeedGivesSameDelays() {
        var first = SplitMix64(seed: 99)
        var second = SplitMix64(seed: 99)
        let a = (1...10).map { Backoff.tokenRetry.delay(afterFailures: $0, using: &first) }
        let b = (1...10).map { Backoff.tokenRetry.delay(afterFailures: $0, using: &second) }
        #expect(a == b)
    }

    @Test func millisecondsAgreeWithDuration() {
        var first = SplitMix64(seed: 13)
        var second = SplitMix64(seed: 13)
        for failures in 1...12 {
            let delay = Backoff.reconnect.delay(afterFailures: failures, using: &first)
            let milliseconds = Backoff.reconnect.delayMilliseconds(afterFailures: failures, using: &second)
            let (seconds, attoseconds) = delay.components
            #expect(milliseconds == seconds * 1000 + attoseconds / 1_000_000_000_000_000)
        }
    }

    @Test func multiplierIsApplied() {
        var rng = SplitMix64(seed: 1)
        let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(10), multiplier: 1.5, jitter: 0)
        #expect(backoff.delayMilliseconds(afterFailures: 3, using: &rng) == 225)
    }

    @Test func multiplierOfOneKeepsTheInitialDelay() {
        var rng = SplitMix64(seed: 1)
        let backoff = Backoff(initial: .milliseconds(250), maximum: .seconds(10), multiplier: 1, jitter: 0)
        #expect(backoff.delayMilliseconds(afterFailures: 1_000_000, using: &rng) == 250)
    }

    @Test func presetsMatchTheirPurpose() {
        #expect(Backoff.reconnect.initial == .seconds(1))
        #expect(Backoff.reconnect.maximum == .seconds(60))
        #expect(Backoff.tokenRetry.initial == .seconds(1))
        #expect(Backoff.tokenRetry.maximum == .seconds(600))
        #expect(Backoff.reconnect.multiplier == 2 && Backoff.reconnect.jitter == 0.2)
    }

    @Test func tokenRetryReachesTenMinutes() {
        var rng = SplitMix64(seed: 1)
        let capped = Backoff(initial: .seconds(1), maximum: .seconds(600), jitter: 0)
        #expect(capped.delay(afterFailures: 10, using: &rng) == .seconds(512))
        #expect(capped.delay(afterFailures: 11, using: &rng) == .seconds(600))
    }
}
