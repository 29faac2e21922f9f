import CoreMetrics
import Synchronization

/// A gauge that every event loop of the worker reports into (`--threads`): each loop sets its own
/// part, and the gauge shows their sum (streams in flight, connections) or their maximum (a flag,
/// a time). A plain gauge set by each loop would show whichever loop published last.
///
/// Loops publish about once a second, so the lock is taken once a second per loop, never per
/// notification. Made through `HeraldMetrics.loopGauge`, which hands every loop the same one.
public final class LoopGauge: Sendable {
    public enum Combine: Sendable {
        case sum, max
    }

    private let gauge: CoreMetrics.Gauge
    private let combine: Combine
    private let parts: Mutex<[Double?]>

    init(gauge: CoreMetrics.Gauge, loops: Int, combine: Combine) {
        self.gauge = gauge
        self.combine = combine
        parts = Mutex(Array(repeating: nil, count: max(1, loops)))
    }

    /// Sets `loop`'s part and the gauge to the combination of every loop's latest part (loops that
    /// have not reported yet are left out).
    public func record(_ value: Double, loop: Int) {
        let combined = parts.withLock { parts -> Double in
            if loop >= 0 && loop < parts.count { parts[loop] = value }
            let known = parts.compactMap { $0 }
            switch combine {
            case .sum: return known.reduce(0, +)
            case .max: return known.max() ?? value
            }
        }
        gauge.record(combined)
    }

    public func record(_ value: Int, loop: Int) {
        record(Double(value), loop: loop)
    }
}
