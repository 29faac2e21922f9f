import APNs
import Glibc

/// A latency-percentile chart as hand-written SVG: x is the percentile on HdrHistogram's
/// "1/(1−p)" log scale (50%, 90%, 99%, 99.9%, 99.99% equally spaced), y the latency in ms.
/// The title and subtitle carry the run's conditions, so the picture stands on its own.
public enum PercentilePlot {
    static let width = 960.0
    static let height = 600.0
    static let left = 90.0
    static let right = 40.0
    static let top = 110.0
    static let bottom = 80.0

    /// The log-scale position of `percentile` (0…100): log10(1 / (1 − p)). 90% is 1, 99% is 2.
    public static func scale(percentile: Double) -> Double {
        guard percentile < 100 else { return .infinity }
        return log10(100 / (100 - percentile))
    }

    /// A "nice" upper bound for an axis that must reach `value`: 1, 2 or 5 times a power of ten.
    public static func niceCeiling(_ value: Double) -> Double {
        guard value > 0 else { return 1 }
        let magnitude = pow(10, floor(log10(value)))
        for step in [1.0, 2, 5, 10] where step * magnitude >= value { return step * magnitude }
        return 10 * magnitude
    }

    /// The whole SVG document.
    public static func svg(latency: LatencyPercentiles, title: String, subtitle: [String]) -> String {
        let points = latency.curve.filter { $0.percentile < 100 }
        let lastX = points.map { scale(percentile: $0.percentile) }.max() ?? 0
        let xMax = Swift.max(4, ceil(lastX))
        let yMax = niceCeiling(Swift.max(latency.max, points.map(\.milliseconds).max() ?? 0) * 1.05)
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        func px(_ percentile: Double) -> Double { left + scale(percentile: percentile) / xMax * plotWidth }
        func py(_ ms: Double) -> Double { top + plotHeight - ms / yMax * plotHeight }

        var svg = """
            <?xml version="1.0" encoding="UTF-8"?>
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif">
            <rect x="0" y="0" width="\(Int(width))" height="\(Int(height))" fill="white"/>
            <text x="\(Int(width / 2))" y="32" font-size="20" font-weight="bold" text-anchor="middle">\(escape(title))</text>

            """
        for (index, line) in subtitle.enumerated() {
            svg += "<text x=\"\(Int(width / 2))\" y=\"\(56 + index * 18)\" font-size=\"13\" fill=\"#444\" text-anchor=\"middle\">\(escape(line))</text>\n"
        }
        // Grid and y ticks.
        let yStep = yMax / 5
        for tick in 0...5 {
            let value = Double(tick) * yStep
            let y = format(py(value))
            svg += "<line x1=\"\(format(left))\" y1=\"\(y)\" x2=\"\(format(width - right))\" y2=\"\(y)\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(format(left - 8))\" y=\"\(y)\" font-size=\"12\" text-anchor=\"end\" dominant-baseline=\"middle\">\(milliseconds(value))</text>\n"
        }
        // x ticks: 0%, 90%, 99%, … as far as the axis goes, and 50%.
        var ticks: [(Double, String)] = [(0, "0%"), (50, "50%")]
        for decade in 1...Int(xMax) {
            let percentile = 100 - 100 / pow(10, Double(decade))
            ticks.append((percentile, percentText(percentile)))
        }
        for (percentile, label) in ticks {
            let x = format(px(percentile))
            svg += "<line x1=\"\(x)\" y1=\"\(format(top))\" x2=\"\(x)\" y2=\"\(format(top + plotHeight))\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(x)\" y=\"\(format(top + plotHeight + 20))\" font-size=\"12\" text-anchor=\"middle\">\(label)</text>\n"
        }
        // Axes and their labels.
        svg += """
            <line x1="\(format(left))" y1="\(format(top + plotHeight))" x2="\(format(width - right))" y2="\(format(top + plotHeight))" stroke="black"/>
            <line x1="\(format(left))" y1="\(format(top))" x2="\(format(left))" y2="\(format(top + plotHeight))" stroke="black"/>
            <text x="\(format(left + plotWidth / 2))" y="\(format(height - 22))" font-size="14" text-anchor="middle">Percentile (log scale of 1/(1−p))</text>
            <text x="22" y="\(format(top + plotHeight / 2))" font-size="14" text-anchor="middle" transform="rotate(-90 22 \(format(top + plotHeight / 2)))">Latency (ms)</text>

            """
        // The max, which sits at x = ∞: a dashed line across.
        let maxY = format(py(latency.max))
        svg += "<line x1=\"\(format(left))\" y1=\"\(maxY)\" x2=\"\(format(width - right))\" y2=\"\(maxY)\" stroke=\"#c0392b\" stroke-dasharray=\"6 4\"/>\n"
        svg += "<text x=\"\(format(width - right - 4))\" y=\"\(format(py(latency.max) - 6))\" font-size=\"12\" fill=\"#c0392b\" text-anchor=\"end\">max \(milliseconds(latency.max)) ms</text>\n"
        if !points.isEmpty {
            let path = points.map { "\(format(px($0.percentile))),\(format(py($0.milliseconds)))" }.joined(separator: " ")
            svg += "<polyline points=\"\(path)\" fill=\"none\" stroke=\"#1f6fb2\" stroke-width=\"2.5\"/>\n"
        }
        for (percentile, value, label) in [(50.0, latency.p50, "p50"), (90, latency.p90, "p90"), (99, latency.p99, "p99"), (99.9, latency.p999, "p99.9")]
        where scale(percentile: percentile) <= xMax && latency.count > 0 {
            let x = format(px(percentile)), y = format(py(value))
            svg += "<circle cx=\"\(x)\" cy=\"\(y)\" r=\"4\" fill=\"#1f6fb2\"/>\n"
            svg += "<text x=\"\(format(px(percentile)))\" y=\"\(format(py(value) - 12))\" font-size=\"12\" text-anchor=\"middle\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">\(label) \(milliseconds(value)) ms</text>\n"
        }
        svg += "<text x=\"\(format(width - right))\" y=\"\(format(height - 6))\" font-size=\"11\" fill=\"#666\" text-anchor=\"end\">\(PercentText.grouped(latency.count)) accepted notifications, HdrHistogram (3 significant digits)</text>\n"
        svg += "</svg>\n"
        return svg
    }

    static func percentText(_ percentile: Double) -> String {
        var text = PercentText.trimmed(percentile, digits: 5)
        if text.hasSuffix(".0") { text.removeLast(2) }
        return text + "%"
    }

    static func milliseconds(_ value: Double) -> String {
        value >= 100 ? String(Int(value.rounded())) : PercentText.trimmed(value, digits: value >= 10 ? 1 : 2)
    }

    static func format(_ value: Double) -> String { PercentText.trimmed(value, digits: 1) }

    /// Text made safe for XML character data and attributes.
    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(character)
            }
        }
        return out
    }
}

/// Numbers as people read them in reports: fixed decimals, trailing zeros dropped, thousands grouped.
public enum PercentText {
    /// `value` with at most `digits` decimals, trailing zeros removed (`2.50` → `2.5`, `3.00` → `3`).
    public static func trimmed(_ value: Double, digits: Int) -> String {
        guard value.isFinite else { return value > 0 ? "inf" : "-inf" }
        var text = fixed(value, digits: digits)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
        }
        return text
    }

    /// `value` with exactly `digits` decimals.
    public static func fixed(_ value: Double, digits: Int) -> String {
        guard value.isFinite else { return value > 0 ? "inf" : "-inf" }
        let scale = pow(10, Double(digits))
        let scaled = (abs(value) * scale).rounded()
        let whole = Int64(scaled / scale)
        let fraction = Int64(scaled - Double(whole) * scale)
        let sign = value < 0 && scaled > 0 ? "-" : ""
        guard digits > 0 else { return sign + String(whole) }
        let fractionText = String(fraction)
        return sign + String(whole) + "." + String(repeating: "0", count: Swift.max(0, digits - fractionText.count)) + fractionText
    }

    /// `1234567` → `1,234,567`.
    public static func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, character) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(character)
        }
        return (value < 0 ? "-" : "") + out
    }
}
