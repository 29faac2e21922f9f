/// Parses the durations operators type (`--older-than 7d`): whole numbers with a unit, s, m, h,
/// d or w, optionally chained (`1d12h`).
public enum DurationText {
    public static func milliseconds(_ text: String) -> Int64? {
        var total: Int64 = 0
        var number: Int64? = nil
        var sawUnit = false
        for character in text.lowercased() {
            if let digit = character.wholeNumberValue, character.isASCII {
                let (shifted, overflow) = (number ?? 0).multipliedReportingOverflow(by: 10)
                let (next, carry) = shifted.addingReportingOverflow(Int64(digit))
                if overflow || carry { return nil }
                number = next
                continue
            }
            let unit: Int64
            switch character {
            case "s": unit = 1_000
            case "m": unit = 60_000
            case "h": unit = 3_600_000
            case "d": unit = 86_400_000
            case "w": unit = 604_800_000
            default: return nil
            }
            guard let value = number else { return nil }
            let (product, overflow) = value.multipliedReportingOverflow(by: unit)
            let (sum, carry) = total.addingReportingOverflow(product)
            if overflow || carry { return nil }
            total = sum
            number = nil
            sawUnit = true
        }
        guard number == nil, sawUnit else { return nil }
        return total
    }
}
