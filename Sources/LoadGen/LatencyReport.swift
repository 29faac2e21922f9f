import APNs

/// End-to-end latency of one run (enqueue → APNs' answer), as the emulator measured it with its
/// HdrHistogram: the summary percentiles in ms, and the percentile curve for `PercentilePlot`.
public struct LatencyReport: Sendable, Equatable {
    public struct Point: Sendable, Equatable {
        /// 0…100.
        public var percentile: Double
        public var milliseconds: Double
        public init(percentile: Double, milliseconds: Double) {
            self.percentile = percentile
            self.milliseconds = milliseconds
        }
    }

    public var count: Int
    public var p50: Double
    public var p90: Double
    public var p99: Double
    public var p999: Double
    public var max: Double
    public var curve: [Point]

    public init(count: Int, p50: Double, p90: Double, p99: Double, p999: Double, max: Double, curve: [Point]) {
        self.count = count
        self.p50 = p50
        self.p90 = p90
        self.p99 = p99
        self.p999 = p999
        self.max = max
        self.curve = curve
    }

    /// Reads the emulator's `latency` object (`p50_ms`, …, `curve: [[percentile, ms], …]`).
    init?(scanner: JSONScanner, object: JSONScanner.Value) {
        guard object.kind == .object else { return nil }
        func number(_ name: StaticString) -> Double? { scanner.member(name, of: object).flatMap(scanner.double) }
        guard let count = number("count"), let p50 = number("p50_ms"), let p90 = number("p90_ms"), let p99 = number("p99_ms"),
              let p999 = number("p99_9_ms"), let max = number("max_ms") else { return nil }
        var points: [Point] = []
        if let curve = scanner.member("curve", of: object), curve.kind == .array {
            let numbers = LatencyReport.numbers(in: UnsafeBufferPointer(rebasing: scanner.bytes[curve.range]))
            var index = 0
            while index + 1 < numbers.count {
                points.append(Point(percentile: numbers[index], milliseconds: numbers[index + 1]))
                index += 2
            }
        }
        self.init(count: Int(count), p50: p50, p90: p90, p99: p99, p999: p999, max: max, curve: points)
    }

    /// Every number in a JSON array of numbers (nested arrays flattened), in order.
    static func numbers(in bytes: UnsafeBufferPointer<UInt8>) -> [Double] {
        var result: [Double] = []
        var current: [UInt8] = []
        func flush() {
            if !current.isEmpty, let value = Double(String(decoding: current, as: UTF8.self)) { result.append(value) }
            current.removeAll(keepingCapacity: true)
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "+"),
                 UInt8(ascii: "e"), UInt8(ascii: "E"):
                current.append(byte)
            default:
                flush()
            }
        }
        flush()
        return result
    }

    /// p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max, and the curve never falls.
    public var isMonotonic: Bool {
        let summary = [p50, p90, p99, p999, max]
        let curveRises = zip(curve, curve.dropFirst()).allSatisfy { $0.percentile <= $1.percentile && $0.milliseconds <= $1.milliseconds }
        return zip(summary, summary.dropFirst()).allSatisfy { $0 <= $1 } && curveRises
    }
}
