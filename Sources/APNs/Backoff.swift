/// How long to wait after a run of failures: exponential growth from `initial`, capped at
/// `maximum`, spread by random jitter so that many waiters do not retry in lockstep.
///
/// A value type with no state: the caller (connection pool, token backoff, job retries) counts
/// failures and asks for the delay. Injecting the random number generator keeps tests
/// deterministic.
public struct Backoff: Sendable {
    public let initial: Duration
    public let maximum: Duration
    public let multiplier: Double
    /// The fraction by which a delay is spread either way: 0.2 gives 80 %…120 % of the base delay.
    public let jitter: Double

    /// - Precondition: `0 <= initial <= maximum`, `multiplier >= 1`, `0 <= jitter <= 1`.
    public init(initial: Duration, maximum: Duration, multiplier: Double = 2, jitter: Double = 0.2) {
        precondition(initial >= .zero && initial <= maximum, "Backoff needs 0 <= initial <= maximum")
        precondition(multiplier >= 1, "Backoff multiplier must be at least 1")
        precondition(jitter >= 0 && jitter <= 1, "Backoff jitter must be within 0...1")
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// Reconnecting to APNs: 1 s, doubling, at most a minute.
    public static let reconnect = Backoff(initial: .seconds(1), maximum: .seconds(60))
    /// Retrying one device token after 429 TooManyRequests: 1 s, doubling, at most 10 minutes.
    public static let tokenRetry = Backoff(initial: .seconds(1), maximum: .seconds(600))

    /// The delay before the next attempt after `failures` consecutive failures (`0` or less: no
    /// delay). Before jitter it is `initial × multiplier^(failures−1)`, capped at `maximum`; jitter
    /// then scales it by a random factor in `1 ± jitter`, so the result lies within
    /// `0…maximum × (1 + jitter)`.
    public func delay(afterFailures failures: Int, using rng: inout some RandomNumberGenerator) -> Duration {
        .nanoseconds(delayNanoseconds(afterFailures: failures, using: &rng))
    }

    /// `delay(afterFailures:using:)` in whole milliseconds, for timers that count in ms.
    public func delayMilliseconds(afterFailures failures: Int, using rng: inout some RandomNumberGenerator) -> Int64 {
        delayNanoseconds(afterFailures: failures, using: &rng) / 1_000_000
    }

    private func delayNanoseconds(afterFailures failures: Int, using rng: inout some RandomNumberGenerator) -> Int64 {
        guard failures > 0 else { return 0 }
        let cap = Self.nanoseconds(maximum)
        var base = Self.nanoseconds(initial)
        var step = 1
        // Stops as soon as the cap is reached, so a huge failure count costs nothing.
        while step < failures, base < cap {
            base *= multiplier
            step += 1
        }
        base = min(base, cap)
        let factor = jitter > 0 ? Double.random(in: (1 - jitter)...(1 + jitter), using: &rng) : 1
        let jittered = min(max(base * factor, 0), cap * (1 + jitter))
        // Int64 nanoseconds reach 292 years: far beyond any sensible backoff.
        return jittered >= 9.2e18 ? Int64.max : Int64(jittered)
    }

    private static func nanoseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
    }
}
