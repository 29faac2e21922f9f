import APNs
import Glibc
import Histogram

/// End-to-end latency of accepted notifications, as the emulator measures it when asked to
/// (`MockAPNsConfiguration.measureLatency`): the producer stamps the enqueue time into the payload
/// as a top-level number `"t"` (ms or µs since the epoch), and the emulator records now − t when it
/// sends the 200. Producer and emulator share this machine's clock, so the difference is valid.
///
/// Owned by `MockAPNsServer` (loop-confined); read through `MockAPNsStatistics.latency`.
public struct LatencyRecorder: Sendable {
    /// Microseconds, 3 significant digits, up to one hour (longer values are clamped to it).
    private var histogram = Histogram<UInt64>(lowestDiscernibleValue: 1, highestTrackableValue: LatencyRecorder.highest,
                                              numberOfSignificantValueDigits: .three)
    /// Stamps later than the answer (another clock, or a broken producer): not recorded, counted.
    public private(set) var stampsInTheFuture = 0

    static let highest: UInt64 = 3_600_000_000

    public init() {}

    /// Records one answer sent at `nowMicros` for a notification stamped `stampMicros`.
    public mutating func record(stampMicros: Int64, nowMicros: Int64) {
        let elapsed = nowMicros - stampMicros
        if elapsed < 0 {
            // Within a millisecond is a ms-resolution stamp taken in the same millisecond.
            if elapsed > -1000 { _ = histogram.record(0) } else { stampsInTheFuture += 1 }
            return
        }
        _ = histogram.record(min(UInt64(elapsed), LatencyRecorder.highest))
    }

    public var count: Int { Int(histogram.totalCount) }

    /// The value at `percentile` (0…100), in µs.
    public func micros(atPercentile percentile: Double) -> UInt64 {
        histogram.valueAtPercentile(percentile)
    }

    /// The summary the stats JSON carries (in ms, with µs precision).
    public var percentiles: LatencyPercentiles {
        func ms(_ micros: UInt64) -> Double { Double(micros) / 1000 }
        var curve: [LatencyPercentiles.Point] = []
        let total = Double(histogram.totalCount)
        if total > 0 {
            for level in LatencyRecorder.curveLevels where level < 100 {
                // Beyond the last whole sample a percentile says nothing new.
                if (100 - level) / 100 * total < 1 { break }
                curve.append(.init(percentile: level, milliseconds: ms(histogram.valueAtPercentile(level))))
            }
            curve.append(.init(percentile: 100, milliseconds: ms(histogram.maxRecorded)))
        }
        var summary = LatencyPercentiles(
            count: count, p50: ms(micros(atPercentile: 50)), p90: ms(micros(atPercentile: 90)), p99: ms(micros(atPercentile: 99)),
            p999: ms(micros(atPercentile: 99.9)), max: histogram.totalCount == 0 ? 0 : ms(histogram.maxRecorded), curve: curve)
        summary.stampsInTheFuture = stampsInTheFuture
        return summary
    }

    /// Percentile levels of the curve: evenly spaced on the 1/(1−p) log scale, 8 per decade, to 99.999%.
    public static let curveLevels: [Double] = (0...40).map { step in
        let level = 100 * (1 - pow(10, -Double(step) / 8))
        return (level * 1_000_000).rounded() / 1_000_000
    }

    /// Wall-clock microseconds since the epoch (the producer's clock too).
    public static func nowMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }

    /// A stamp read from a payload: below 10^14 it is milliseconds (until the year 5138), else µs.
    public static func stampMicros(_ value: Int64) -> Int64? {
        guard value > 0 else { return nil }
        return value < 100_000_000_000_000 ? value * 1000 : value
    }
}
