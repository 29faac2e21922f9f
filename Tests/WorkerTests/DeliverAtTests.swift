import PropertyBased
import Queue
import Testing

/// `deliver_at` parsing (Sources/Queue/DeliverAt.swift): both forms, every calendar day from 1970
/// to 9999, offsets and fractions, and the values it must refuse.
@Suite
struct DeliverAtTests {
    static let maxMilliseconds = JobLimits.maxTimestampMilliseconds

    /// Days from 1970-01-01 counted the slow way (year by year, month by month): an independent
    /// reference for the parser's calendar arithmetic.
    static func referenceDays(year: Int, month: Int, day: Int) -> Int64 {
        func leap(_ y: Int) -> Bool { y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) }
        var days: Int64 = 0
        for y in 1970..<year { days += leap(y) ? 366 : 365 }
        let lengths = [31, leap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        for m in 0..<(month - 1) { days += Int64(lengths[m]) }
        return days + Int64(day - 1)
    }

    static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// Any ms in range, written as RFC 3339 UTC and parsed back, is the same ms.
    @Test func formattedTimesParseBack() async {
        await propertyCheck(count: 2_000, input: Gen.int64(in: 0...Self.maxMilliseconds)) { milliseconds in
            #expect(DeliverAt.parse(DeliverAt.format(milliseconds)) == milliseconds, "\(DeliverAt.format(milliseconds))")
            #expect(DeliverAt.parse(String(milliseconds)) == milliseconds)
        }
    }

    /// Any calendar date and time (years 1970…9999, leap days included) parses to the reference's
    /// count of days and seconds, with a fraction of 1 to 9 digits cut to ms.
    @Test func calendarDatesMatchTheReference() async {
        await propertyCheck(count: 1_500, input: Gen.int(in: 1970...9999), Gen.int(in: 1...12), Gen.int(in: 1...31),
                            Gen.int(in: 0...86_399), Gen.int(in: 0...999_999_999), Gen.int(in: 0...9)) { year, month, day, second, nanos, digits in
            let lengths = [31, (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
            let text = "\(Self.pad(year, 4))-\(Self.pad(month, 2))-\(Self.pad(day, 2))T\(Self.pad(second / 3600, 2)):"
                + "\(Self.pad(second / 60 % 60, 2)):\(Self.pad(second % 60, 2))"
                + (digits == 0 ? "" : "." + String(Self.pad(nanos, 9).prefix(digits))) + "Z"
            let parsed = DeliverAt.parse(text)
            guard day <= lengths[month - 1] else {
                #expect(parsed == nil, "\(text) is not a date")
                return
            }
            let fraction = digits == 0 ? 0 : Int64(nanos / 1_000_000) / [1, 100, 10, 1, 1, 1, 1, 1, 1, 1][digits] * [1, 100, 10, 1, 1, 1, 1, 1, 1, 1][digits]
            let expected = (Self.referenceDays(year: year, month: month, day: day) * 86_400 + Int64(second)) * 1000 + fraction
            #expect(parsed == expected, "\(text)")
        }
    }

    /// A local time with an offset names the same instant as UTC minus the offset.
    @Test func offsetsShiftToUTC() async {
        await propertyCheck(count: 1_000, input: Gen.int64(in: 86_400_000...(Self.maxMilliseconds - 86_400_000)),
                            Gen.int(in: -(23 * 60 + 59)...(23 * 60 + 59))) { milliseconds, offset in
            let local = DeliverAt.format(milliseconds + Int64(offset) * 60_000)
            let sign = offset < 0 ? "-" : "+"
            let text = local.dropLast() + sign + Self.pad(abs(offset) / 60, 2) + ":" + Self.pad(abs(offset) % 60, 2)
            #expect(DeliverAt.parse(String(text)) == milliseconds, "\(text)")
        }
    }

    /// Random bytes are refused or, when they happen to be a time, land in range; never a crash.
    @Test func randomBytesNeverCrashOrLeaveTheRange() async {
        let alphabet = Array("0123456789-:.TZz+ tx".utf8)
        await propertyCheck(count: 3_000, input: Gen.int(in: 0...(alphabet.count - 1)).array(of: 0...40)) { picks in
            if let value = DeliverAt.parse(picks.map { alphabet[$0] }) {
                #expect(value >= 0 && value <= Self.maxMilliseconds)
            }
        }
    }

    @Test func examplesFromTheDocs() {
        #expect(DeliverAt.parse("2026-11-24T09:00:00Z") == 1_795_510_800_000)
        #expect(DeliverAt.parse("2026-11-24T10:00:00+01:00") == 1_795_510_800_000)
        #expect(DeliverAt.parse("2026-11-24T04:00:00.250-05:00") == 1_795_510_800_250)
        #expect(DeliverAt.parse("2026-11-24 09:00:00z") == 1_795_510_800_000)
        #expect(DeliverAt.parse("1795510800000") == 1_795_510_800_000)
        #expect(DeliverAt.parse("0") == 0)
        #expect(DeliverAt.parse("1970-01-01T00:00:00Z") == 0)
        #expect(DeliverAt.parse("9999-12-31T23:59:59.999Z") == Self.maxMilliseconds)
        #expect(DeliverAt.parse(String(Self.maxMilliseconds)) == Self.maxMilliseconds)
        // A leap second is the first ms of the next minute.
        #expect(DeliverAt.parse("2016-12-31T23:59:60Z") == DeliverAt.parse("2017-01-01T00:00:00Z"))
        #expect(DeliverAt.parse("2024-02-29T12:00:00Z") != nil)
        #expect(DeliverAt.format(1_795_510_800_250) == "2026-11-24T09:00:00.250Z")
    }

    @Test func badValuesAreRefused() {
        for bad in ["", "tomorrow", "-5", "+5", " 5", "5 ", "1e3", "0x10", "1795510800000.5", String(Self.maxMilliseconds + 1),
                    "9999999999999999", "2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z",
                    "2026-04-31T00:00:00Z", "2026-11-24T24:00:00Z", "2026-11-24T09:60:00Z", "2026-11-24T09:00:61Z",
                    "2026-11-24T09:00:00", "2026-11-24T09:00:00+0100", "2026-11-24T09:00:00+24:00", "2026-11-24T09:00:00+01:60",
                    "2026-11-24T09:00:00.Z", "2026-11-24T09:00Z", "2026-11-24", "26-11-24T09:00:00Z", "2026-11-24X09:00:00Z",
                    "2026-11-24T09:00:00ZZ", "1969-12-31T23:59:59Z", "1970-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01",
                    "10000-01-01T00:00:00Z", "２026-11-24T09:00:00Z"] {
            #expect(DeliverAt.parse(bad) == nil, "\(bad) must be refused")
        }
    }
}
