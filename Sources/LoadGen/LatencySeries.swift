import APNs

/// The emulator's latency timeline (`/_herald/timeline`, `LatencyTimeline`) as loadgen reads it:
/// the windows of one run, the stretches of time in which answers took longer than the threshold,
/// and the CSV `--timeline` writes.
public struct LatencySeries: Sendable, Equatable {
    public var windowMicros: Int64
    public var overMicros: Int64
    public var windows: [LatencyWindow]
    /// Windows the emulator's ring no longer held (a run longer than it keeps).
    public var windowsDropped: Int64 = 0

    public init(windowMicros: Int64, overMicros: Int64, windows: [LatencyWindow], windowsDropped: Int64 = 0) {
        self.windowMicros = windowMicros
        self.overMicros = overMicros
        self.windows = windows
        self.windowsDropped = windowsDropped
    }

    /// Reads the timeline JSON; nil when it is not one (or its arrays disagree in length).
    public init?(json: [UInt8]) {
        let parsed: LatencySeries? = json.withUnsafeBufferPointer { bytes in
            let scanner = JSONScanner(bytes)
            guard (try? scanner.validate()) != nil,
                  let window = scanner.rootMember("window_us").flatMap(scanner.int64), window > 0,
                  let over = scanner.rootMember("over_us").flatMap(scanner.int64),
                  let first = scanner.rootMember("first_start_us").flatMap(scanner.int64) else { return nil }
            func numbers(_ name: StaticString) -> [Int64]? {
                guard let array = scanner.rootMember(name) else { return nil }
                var values: [Int64] = []
                var valid = true
                do {
                    try scanner.forEachElement(of: array) { element in
                        if let value = scanner.int64(element), value >= 0 { values.append(value) } else { valid = false }
                    }
                } catch { return nil }
                return valid ? values : nil
            }
            guard let answered = numbers("answered"), let mean = numbers("mean_us"), let max = numbers("max_us"),
                  let overs = numbers("over"), mean.count == answered.count, max.count == answered.count,
                  overs.count == answered.count else { return nil }
            let windows = answered.indices.map { index in
                LatencyWindow(startMicros: first + Int64(index) * window, answered: Int(answered[index]),
                                       meanMicros: mean[index], maxMicros: max[index], over: Int(overs[index]))
            }
            let dropped = scanner.rootMember("windows_dropped").flatMap(scanner.int64) ?? 0
            return LatencySeries(windowMicros: window, overMicros: over, windows: windows, windowsDropped: dropped)
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// Only the windows from `startMicros` to `endMicros` (an attached emulator holds earlier runs too).
    public func between(_ startMicros: Int64, _ endMicros: Int64) -> LatencySeries {
        var copy = self
        copy.windows = windows.filter { $0.startMicros + windowMicros > startMicros && $0.startMicros <= endMicros }
        return copy
    }

    /// A stretch of windows with answers over the threshold (gaps of one window joined).
    public struct Stretch: Sendable, Equatable {
        public var startMicros: Int64
        public var endMicros: Int64
        /// Answers over the threshold in it, and the largest latency.
        public var over: Int
        public var maxMicros: Int64
    }

    /// Every stretch, the one with the most answers over the threshold first.
    public var stretches: [Stretch] {
        var found: [Stretch] = []
        var lastOver = -2
        for (index, window) in windows.enumerated() where window.over > 0 {
            if index - lastOver <= 2, var current = found.last {
                current.endMicros = window.startMicros + windowMicros
                current.over += window.over
                current.maxMicros = Swift.max(current.maxMicros, window.maxMicros)
                found[found.count - 1] = current
            } else {
                found.append(Stretch(startMicros: window.startMicros, endMicros: window.startMicros + windowMicros,
                                     over: window.over, maxMicros: window.maxMicros))
            }
            lastOver = index
        }
        return found.sorted { $0.over != $1.over ? $0.over > $1.over : $0.startMicros < $1.startMicros }
    }

    public var answered: Int { windows.reduce(0) { $0 + $1.answered } }
    public var over: Int { windows.reduce(0) { $0 + $1.over } }
    public var windowsWithOver: Int { windows.reduce(0) { $0 + ($1.over > 0 ? 1 : 0) } }

    /// One line per window: its start (since `originMicros`, and since the epoch), answers, mean
    /// and largest latency, and answers over the threshold.
    public func csv(originMicros: Int64) -> String {
        var text = "offset_ms,unix_ms,answered,mean_ms,max_ms,over_\(PercentText.trimmed(Double(overMicros) / 1000, digits: 3))ms\n"
        for window in windows {
            text += "\(PercentText.trimmed(Double(window.startMicros - originMicros) / 1000, digits: 3)),"
                + "\(PercentText.trimmed(Double(window.startMicros) / 1000, digits: 3)),\(window.answered),"
                + "\(PercentText.trimmed(Double(window.meanMicros) / 1000, digits: 3)),"
                + "\(PercentText.trimmed(Double(window.maxMicros) / 1000, digits: 3)),\(window.over)\n"
        }
        return text
    }
}
