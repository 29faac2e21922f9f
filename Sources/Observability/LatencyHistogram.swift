import Synchronization

/// A fixed-bucket histogram that one event loop fills without locks or allocation: recording a
/// value is a bucket search and two additions. Loops hand their counts to a `SharedHistogram`
/// about once a second, so the per-notification path never touches shared state.
public struct LatencyHistogram: Sendable, Equatable {
    /// Upper bounds in seconds (the Prometheus `le` values), ascending; +Inf is implied.
    public let bounds: [Double]
    public private(set) var counts: [UInt64]
    public private(set) var sum: Double = 0
    public private(set) var count: UInt64 = 0

    /// 1 ms to 60 s: APNs round trips, queueing and retries.
    public static let defaultBounds: [Double] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60]

    public init(bounds: [Double] = LatencyHistogram.defaultBounds) {
        self.bounds = bounds
        counts = Array(repeating: 0, count: bounds.count + 1)
    }

    public mutating func record(seconds: Double) {
        var index = 0
        while index < bounds.count && seconds > bounds[index] { index += 1 }
        counts[index] += 1
        sum += seconds
        count += 1
    }

    public mutating func record(milliseconds: Int64) {
        record(seconds: Double(milliseconds) / 1000)
    }

    /// Adds `other`'s counts (same bounds).
    public mutating func merge(_ other: LatencyHistogram) {
        for index in counts.indices { counts[index] += other.counts[index] }
        sum += other.sum
        count += other.count
    }

    /// What was recorded since `earlier` (a copy of this histogram taken before).
    public func subtracting(_ earlier: LatencyHistogram) -> LatencyHistogram {
        var delta = self
        for index in counts.indices { delta.counts[index] -= min(earlier.counts[index], counts[index]) }
        delta.sum -= earlier.sum
        delta.count -= min(earlier.count, count)
        return delta
    }

    public mutating func reset() {
        for index in counts.indices { counts[index] = 0 }
        sum = 0
        count = 0
    }
}

/// The process-wide histograms behind /metrics, keyed by name and labels, filled in batches.
public final class SharedHistograms: Sendable {
    struct Key: Hashable {
        let name: String
        let labels: String
    }

    private let state = Mutex<[Key: LatencyHistogram]>([:])
    private let help: Mutex<[String: String]> = Mutex([:])

    public init() {}

    /// Adds a loop's counts to the histogram `name{labels}`.
    public func add(_ histogram: LatencyHistogram, name: String, labels: [(String, String)]) {
        guard histogram.count > 0 else { return }
        let key = Key(name: name, labels: PrometheusText.labels(labels))
        state.withLock { histograms in
            if histograms[key] == nil { histograms[key] = LatencyHistogram(bounds: histogram.bounds) }
            histograms[key]!.merge(histogram)
        }
    }

    /// Declares a histogram so it is exposed (empty) before its first value.
    public func declare(name: String, labels: [(String, String)], help text: String, bounds: [Double] = LatencyHistogram.defaultBounds) {
        let key = Key(name: name, labels: PrometheusText.labels(labels))
        state.withLock { histograms in
            if histograms[key] == nil { histograms[key] = LatencyHistogram(bounds: bounds) }
        }
        help.withLock { $0[name] = text }
    }

    /// Appends every histogram in the Prometheus text exposition format.
    public func emit(into buffer: inout [UInt8]) {
        let snapshot = state.withLock { $0 }
        let helpTexts = help.withLock { $0 }
        var text = ""
        let byName = Dictionary(grouping: snapshot, by: { $0.key.name })
        for name in byName.keys.sorted() {
            if let help = helpTexts[name] { text += "# HELP \(name) \(help)\n" }
            text += "# TYPE \(name) histogram\n"
            for (key, histogram) in byName[name]!.sorted(by: { $0.key.labels < $1.key.labels }) {
                var cumulative: UInt64 = 0
                let prefix = key.labels.isEmpty ? "" : key.labels + ","
                for (index, bound) in histogram.bounds.enumerated() {
                    cumulative += histogram.counts[index]
                    text += "\(name)_bucket{\(prefix)le=\"\(PrometheusText.number(bound))\"} \(cumulative)\n"
                }
                cumulative += histogram.counts[histogram.bounds.count]
                text += "\(name)_bucket{\(prefix)le=\"+Inf\"} \(cumulative)\n"
                let labelBlock = key.labels.isEmpty ? "" : "{\(key.labels)}"
                text += "\(name)_sum\(labelBlock) \(PrometheusText.number(histogram.sum))\n"
                text += "\(name)_count\(labelBlock) \(histogram.count)\n"
            }
        }
        buffer.append(contentsOf: text.utf8)
    }
}

/// Small helpers for the Prometheus text format.
public enum PrometheusText {
    /// `a="x",b="y"` with values escaped.
    public static func labels(_ labels: [(String, String)]) -> String {
        labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",")
    }

    static func escape(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out
    }

    static func number(_ value: Double) -> String {
        if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}
