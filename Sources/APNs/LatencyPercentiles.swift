/// End-to-end latency (enqueue → APNs' answer) as percentiles in ms, and a curve of
/// (percentile, ms) points for plots.
///
/// The APNs emulator fills it from its HdrHistogram (`LatencyRecorder.percentiles`) and writes
/// `json()` into its stats; the load generator reads that object back with
/// `init?(scanner:object:)` and reports and plots it. Values carry µs precision.
public struct LatencyPercentiles: Sendable, Equatable {
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
    /// Stamps later than their answer (another clock, or a broken producer): counted, not recorded.
    public var stampsInTheFuture = 0
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

    /// p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max, and the curve never falls.
    public var isMonotonic: Bool {
        let summary = [p50, p90, p99, p999, max]
        let curveRises = zip(curve, curve.dropFirst()).allSatisfy { $0.percentile <= $1.percentile && $0.milliseconds <= $1.milliseconds }
        return zip(summary, summary.dropFirst()).allSatisfy { $0 <= $1 } && curveRises
    }
}

// MARK: - The emulator's stats JSON

extension LatencyPercentiles {
    /// The summary as a JSON object, values in ms with exactly three decimals (µs):
    /// `{"count":…,"p50_ms":…,"p90_ms":…,"p99_ms":…,"p99_9_ms":…,"max_ms":…,"stamps_in_the_future":…,"curve":[[percentile,ms],…]}`.
    public func json() -> String {
        let points = curve.map { "[\($0.percentile),\(Self.decimal($0.milliseconds))]" }.joined(separator: ",")
        return "{\"count\":\(count),\"p50_ms\":\(Self.decimal(p50)),\"p90_ms\":\(Self.decimal(p90)),\"p99_ms\":\(Self.decimal(p99)),"
            + "\"p99_9_ms\":\(Self.decimal(p999)),\"max_ms\":\(Self.decimal(max)),\"stamps_in_the_future\":\(stampsInTheFuture),\"curve\":[\(points)]}"
    }

    /// Reads the object `json()` writes (`stamps_in_the_future` may be missing: 0); nil when a
    /// summary field is missing.
    public init?(scanner: JSONScanner, object: JSONScanner.Value) {
        guard object.kind == .object else { return nil }
        func number(_ name: StaticString) -> Double? { scanner.member(name, of: object).flatMap(scanner.double) }
        guard let count = number("count"), let p50 = number("p50_ms"), let p90 = number("p90_ms"), let p99 = number("p99_ms"),
              let p999 = number("p99_9_ms"), let max = number("max_ms") else { return nil }
        var points: [Point] = []
        if let curve = scanner.member("curve", of: object), curve.kind == .array {
            let numbers = Self.numbers(in: UnsafeBufferPointer(rebasing: scanner.bytes[curve.range]))
            var index = 0
            while index + 1 < numbers.count {
                points.append(Point(percentile: numbers[index], milliseconds: numbers[index + 1]))
                index += 2
            }
        }
        self.init(count: Int(count), p50: p50, p90: p90, p99: p99, p999: p999, max: max, curve: points)
        stampsInTheFuture = number("stamps_in_the_future").flatMap { Int(exactly: $0) } ?? 0
    }

    /// `milliseconds` as `whole.fff` (rounded to the µs; negative or non-finite values as 0).
    static func decimal(_ milliseconds: Double) -> String {
        let scaled = (milliseconds * 1000).rounded()
        let micros = scaled > 0 && scaled < 1.8e19 ? UInt64(scaled) : 0
        let whole = micros / 1000
        let fraction = micros % 1000
        return "\(whole)." + String(repeating: "0", count: fraction < 10 ? 2 : fraction < 100 ? 1 : 0) + "\(fraction)"
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
}

/// One window of an emulator's latency timeline (`/_herald/timeline`): the answers sent in it and
/// their enqueue-to-answer latency.
public struct LatencyWindow: Sendable, Equatable {
    /// Start of the window, µs since the epoch (the answer clock).
    public var startMicros: Int64
    public var answered: Int
    public var meanMicros: Int64
    public var maxMicros: Int64
    /// Answers whose latency exceeded the timeline's threshold.
    public var over: Int

    public init(startMicros: Int64, answered: Int, meanMicros: Int64, maxMicros: Int64, over: Int) {
        self.startMicros = startMicros
        self.answered = answered
        self.meanMicros = meanMicros
        self.maxMicros = maxMicros
        self.over = over
    }
}
