/// A job's `deliver_at`: when it may be sent, as ms since the epoch.
///
/// Producers write either whole ms since the epoch (`1795510800000`) or RFC 3339 text
/// (`2026-11-24T09:00:00Z`, `2026-11-24T10:00:00.250+01:00`). Parsed on the worker's loop for
/// every job that carries the field, so no Foundation and no allocation: the bytes are read once.
/// Both forms must land within 0 … `JobLimits.maxTimestampMilliseconds` (the year 9999), like
/// Herald's other times, so the due time is always a valid retry-set score and no sum on it overflows.
public enum DeliverAt {
    /// The time `bytes` names, or nil when it is neither form or is out of range.
    public static func parse(_ text: String) -> Int64? { parse(Array(text.utf8)) }

    /// The time `bytes` names, or nil when it is neither form or is out of range.
    public static func parse(_ bytes: [UInt8]) -> Int64? {
        guard let first = bytes.first else { return nil }
        if first == 0x2B || first == 0x2D { return nil }  // no signs: a time is never before the epoch
        if let milliseconds = parseMilliseconds(bytes) { return milliseconds }
        return parseRFC3339(bytes)
    }

    /// Whole ms since the epoch: digits only, at most 15 of them (the year 9999 has 15).
    static func parseMilliseconds(_ bytes: [UInt8]) -> Int64? {
        guard bytes.count <= 15 else { return nil }
        var value: Int64 = 0
        for byte in bytes {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            value = value * 10 + Int64(byte - 0x30)
        }
        return value <= JobLimits.maxTimestampMilliseconds ? value : nil
    }

    /// `YYYY-MM-DD(T|t| )HH:MM:SS[.fraction](Z|z|±HH:MM)`. A leap second (`:60`) counts as the
    /// first ms of the next minute; fraction digits past the third are dropped (ms resolution).
    static func parseRFC3339(_ text: [UInt8]) -> Int64? {
        // The shortest form, "2026-11-24T09:00:00Z", has 20 bytes; a fraction longer than 64 digits is not a time.
        guard text.count >= 20, text.count <= 96 else { return nil }
        guard let year = number(text, 0, 4), text[4] == 0x2D, let month = number(text, 5, 2), text[7] == 0x2D,
              let day = number(text, 8, 2), text[10] == 0x54 || text[10] == 0x74 || text[10] == 0x20,
              let hour = number(text, 11, 2), text[13] == 0x3A, let minute = number(text, 14, 2), text[16] == 0x3A,
              let second = number(text, 17, 2) else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour <= 23, minute <= 59, second <= 60 else { return nil }
        var index = 19
        var fraction: Int64 = 0
        if text[index] == 0x2E {
            index += 1
            let start = index
            while index < text.count, text[index] >= 0x30, text[index] <= 0x39 {
                if index - start < 3 { fraction = fraction * 10 + Int64(text[index] - 0x30) }
                index += 1
            }
            guard index > start else { return nil }
            for _ in min(3, index - start)..<3 { fraction *= 10 }
        }
        guard index < text.count else { return nil }
        var offsetMinutes: Int64 = 0
        switch text[index] {
        case 0x5A, 0x7A:
            index += 1
        case 0x2B, 0x2D:
            guard index + 6 == text.count, let offsetHour = number(text, index + 1, 2), text[index + 3] == 0x3A,
                  let offsetMinute = number(text, index + 4, 2), offsetHour <= 23, offsetMinute <= 59 else { return nil }
            offsetMinutes = Int64(offsetHour * 60 + offsetMinute) * (text[index] == 0x2D ? -1 : 1)
            index += 6
        default:
            return nil
        }
        guard index == text.count else { return nil }
        let days = daysSinceEpoch(year: year, month: month, day: day)
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second) - offsetMinutes * 60
        let milliseconds = seconds * 1000 + fraction
        guard milliseconds >= 0, milliseconds <= JobLimits.maxTimestampMilliseconds else { return nil }
        return milliseconds
    }

    /// `count` ASCII digits at `start` as a number; nil if any is not a digit.
    @inline(__always)
    private static func number(_ text: [UInt8], _ start: Int, _ count: Int) -> Int? {
        var value = 0
        for index in start..<(start + count) {
            let byte = text[index]
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            value = value * 10 + Int(byte - 0x30)
        }
        return value
    }

    static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a proleptic Gregorian date (the civil-calendar algorithm: years
    /// counted from March so the leap day is last, 400-year eras of 146,097 days).
    static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let m = Int64(month)
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// `milliseconds` as RFC 3339 UTC text with ms (`2026-11-24T09:00:00.000Z`): what `herald
    /// stats` and the docs show, and the inverse the property tests check the parser against.
    public static func format(_ milliseconds: Int64) -> String {
        let clamped = max(0, min(milliseconds, JobLimits.maxTimestampMilliseconds))
        let days = clamped / 86_400_000
        let rest = clamped % 86_400_000
        // Inverse of daysSinceEpoch.
        let z = days + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(rest / 3_600_000, 2)):\(pad(rest / 60_000 % 60, 2)):"
            + "\(pad(rest / 1000 % 60, 2)).\(pad(rest % 1000, 3))Z"
    }
}
