import APNs

/// Enqueue-to-answer latency over time: for each window of `windowMicros` of the answer clock, how
/// many notifications were answered, their mean and largest latency, and how many took longer than
/// `overMicros`. A percentile over a whole run cannot tell a tail spread evenly over it from one
/// burst of a few hundred milliseconds; this can (`herald loadgen --timeline`).
///
/// Bounded: the last `capacity` windows are kept (at 10 ms, about 11 minutes); older ones are
/// overwritten and counted in `windowsDropped`. Windows in which nothing was answered stay in the
/// series with 0 answers: a stall shows as a gap. Owned by `MockAPNsServer` (loop-confined),
/// recorded beside `LatencyRecorder` when the emulator measures latency.
public struct LatencyTimeline: Sendable {
    public let windowMicros: Int64
    public let overMicros: Int64
    public let capacity: Int
    private var answered: [UInt32]
    private var sumMicros: [UInt64]
    private var maxMicros: [UInt32]
    private var over: [UInt32]
    /// Window numbers (answer time ÷ `windowMicros`): the first recorded and the latest.
    private var first: Int64 = -1
    private var last: Int64 = -1
    /// Windows overwritten because the series outgrew `capacity`, and answers too old to place.
    public private(set) var windowsDropped: Int64 = 0
    public private(set) var answersDropped = 0

    public static let defaultCapacity = 65_536

    public init(windowMicros: Int64 = 10_000, overMicros: Int64 = 5_000, capacity: Int = LatencyTimeline.defaultCapacity) {
        self.windowMicros = max(1, windowMicros)
        self.overMicros = max(0, overMicros)
        self.capacity = max(1, capacity)
        answered = Array(repeating: 0, count: self.capacity)
        sumMicros = Array(repeating: 0, count: self.capacity)
        maxMicros = Array(repeating: 0, count: self.capacity)
        over = Array(repeating: 0, count: self.capacity)
    }

    /// Records one answer sent at `nowMicros` for a notification stamped `stampMicros` (a stamp
    /// later than the answer counts as 0, as `LatencyRecorder` counts one within a millisecond).
    public mutating func record(stampMicros: Int64, nowMicros: Int64) {
        guard nowMicros >= 0 else { answersDropped += 1; return }
        let window = nowMicros / windowMicros
        if first < 0 {
            first = window
            last = window
        } else if window > last {
            // Empty the slots of the windows skipped (a stall) and of the new one: at most all of them.
            let skipped = window - last
            for step in 1...min(skipped, Int64(capacity)) { clear(slot(last + step)) }
            if window - first >= Int64(capacity) {
                let oldest = max(first, last - Int64(capacity) + 1)
                windowsDropped += (window - Int64(capacity) + 1) - oldest
            }
            last = window
        } else if window <= last - Int64(capacity) || window < first {
            // Older than what the ring holds (the clock stepped back): not placed, counted.
            answersDropped += 1
            return
        }
        let index = slot(window)
        let latency = UInt64(max(0, nowMicros.subtractingReportingOverflow(stampMicros).partialValue))
        answered[index] &+= 1
        sumMicros[index] &+= latency
        let clamped = UInt32(min(latency, UInt64(UInt32.max)))
        if clamped > maxMicros[index] { maxMicros[index] = clamped }
        if latency > UInt64(overMicros) { over[index] &+= 1 }
    }

    /// The windows held, oldest first, from the first answer to the latest.
    public var windows: [LatencyWindow] {
        guard first >= 0 else { return [] }
        let oldest = max(first, last - Int64(capacity) + 1)
        return (oldest...last).map { number in
            let index = slot(number)
            let count = Int(answered[index])
            return LatencyWindow(startMicros: number * windowMicros, answered: count,
                          meanMicros: count == 0 ? 0 : Int64(sumMicros[index] / UInt64(count)),
                          maxMicros: Int64(maxMicros[index]), over: Int(over[index]))
        }
    }

    /// The series as JSON: parallel arrays, one element per window (the stats port serves it at
    /// `/_herald/timeline`).
    public var json: String {
        let held = windows
        func list(_ values: (LatencyWindow) -> Int64) -> String { "[" + held.map { String(values($0)) }.joined(separator: ",") + "]" }
        return "{\"window_us\":\(windowMicros),\"over_us\":\(overMicros),\"first_start_us\":\(held.first?.startMicros ?? 0),"
            + "\"windows_dropped\":\(windowsDropped),\"answers_dropped\":\(answersDropped),"
            + "\"answered\":\(list { Int64($0.answered) }),\"mean_us\":\(list(\.meanMicros)),"
            + "\"max_us\":\(list(\.maxMicros)),\"over\":\(list { Int64($0.over) })}"
    }

    private func slot(_ window: Int64) -> Int { Int(window % Int64(capacity)) }

    private mutating func clear(_ index: Int) {
        answered[index] = 0
        sumMicros[index] = 0
        maxMicros[index] = 0
        over[index] = 0
    }
}
