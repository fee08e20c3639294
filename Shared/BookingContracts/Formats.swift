import Foundation

/// Text formats of the contract: local calendar dates `YYYY-MM-DD`, local
/// times `HH:mm`, UTC instants `2026-11-23T08:00:00Z`, free ranges
/// `HH:mm - HH:mm`.
public enum ContractFormat {
    /// Minutes of the booking grid.
    public static let gridMinutes = 15

    /// Minutes since local midnight of an `HH:mm` time (`00:00`…`23:59`), or
    /// nil when `text` is not exactly that format.
    public static func minutes(ofTime text: String) -> Int? {
        let u = Array(text.utf8)
        guard u.count == 5, u[2] == UInt8(ascii: ":"),
              let h = twoDigits(u[0], u[1]), let m = twoDigits(u[3], u[4]),
              h < 24, m < 60 else { return nil }
        return h * 60 + m
    }

    /// `HH:mm` for minutes since midnight (0…1439); clamps out-of-range values.
    public static func time(fromMinutes minutes: Int) -> String {
        let clamped = max(0, min(minutes, 23 * 60 + 59))
        return twoDigitString(clamped / 60) + ":" + twoDigitString(clamped % 60)
    }

    /// Whether an `HH:mm` time is on the 15-minute grid.
    public static func isOnGrid(_ time: String) -> Bool {
        guard let m = minutes(ofTime: time) else { return false }
        return m % gridMinutes == 0
    }

    /// Year, month, day of a `YYYY-MM-DD` date that exists in the Gregorian
    /// calendar, or nil.
    public static func calendarDate(_ text: String) -> (year: Int, month: Int, day: Int)? {
        let u = Array(text.utf8)
        guard u.count == 10, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-"),
              let y1 = twoDigits(u[0], u[1]), let y2 = twoDigits(u[2], u[3]),
              let month = twoDigits(u[5], u[6]), let day = twoDigits(u[8], u[9]) else { return nil }
        let year = y1 * 100 + y2
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year) else { return nil }
        return (year, month, day)
    }

    /// `YYYY-MM-DD` with four-digit year.
    public static func calendarDateString(year: Int, month: Int, day: Int) -> String {
        let y = String(year)
        return String(repeating: "0", count: max(0, 4 - y.count)) + y + "-" + twoDigitString(month) + "-"
            + twoDigitString(day)
    }

    /// The contract's UTC instant text, whole seconds: `2026-11-23T08:00:00Z`.
    /// Fractions of a second are dropped (rounded down).
    public static func timestamp(_ date: Date) -> String {
        // Day arithmetic, not `Calendar`: this runs for every instant every
        // event and reply carries, and Foundation's calendar costs
        // microseconds per call on Linux.
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        let day = CivilDays.day(ofSeconds: seconds)
        let (year, month, dayOfMonth) = CivilDays.civil(days: day)
        let second = Int(seconds - day * 86_400)
        return calendarDateString(year: year, month: month, day: dayOfMonth) + "T"
            + twoDigitString(second / 3600) + ":" + twoDigitString(second / 60 % 60) + ":" + twoDigitString(second % 60) + "Z"
    }

    /// Parses a UTC instant in the contract's form `YYYY-MM-DDTHH:mm:ssZ`;
    /// nil for anything else (offsets and fractions are not the contract's form).
    public static func parseTimestamp(_ text: String) -> Date? {
        let u = Array(text.utf8)
        guard u.count == 20, u[10] == UInt8(ascii: "T"), u[13] == UInt8(ascii: ":"),
              u[16] == UInt8(ascii: ":"), u[19] == UInt8(ascii: "Z"),
              let d = calendarDate(String(decoding: u[0..<10], as: UTF8.self)),
              let h = twoDigits(u[11], u[12]), let m = twoDigits(u[14], u[15]), let s = twoDigits(u[17], u[18]),
              h < 24, m < 60, s < 60 else { return nil }
        let days = CivilDays.days(year: d.year, month: d.month, day: d.day)
        return Date(timeIntervalSince1970: Double(days * 86_400 + Int64(h * 3600 + m * 60 + s)))
    }

    /// The instant of local `date` (`YYYY-MM-DD`) at local `time` (`HH:mm`)
    /// in the IANA zone `timeZone`; nil when any part is invalid. A local
    /// time that does not exist (skipped by a daylight-saving change) is
    /// moved forward by the length of the gap.
    public static func instant(date: String, time: String, timeZone: String) -> Date? {
        guard let d = calendarDate(date), let minutes = minutes(ofTime: time),
              let zone = TimeZone(identifier: timeZone) else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        return calendar.date(from: DateComponents(year: d.year, month: d.month, day: d.day,
                                                  hour: minutes / 60, minute: minutes % 60))
    }

    /// The local calendar date (`YYYY-MM-DD`) on which `instant` falls in `timeZone`.
    public static func localDate(of instant: Date, timeZone: String) -> String? {
        guard let zone = TimeZone(identifier: timeZone) else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let c = calendar.dateComponents([.year, .month, .day], from: instant)
        return calendarDateString(year: c.year!, month: c.month!, day: c.day!)
    }

    /// A free range as the legacy API writes it: `07:00 - 09:00`.
    public static func range(_ from: String, _ to: String) -> String { from + " - " + to }

    // MARK: Private

    private static func twoDigits(_ a: UInt8, _ b: UInt8) -> Int? {
        let zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")
        guard (zero...nine).contains(a), (zero...nine).contains(b) else { return nil }
        return Int(a - zero) * 10 + Int(b - zero)
    }

    private static func twoDigitString(_ n: Int) -> String { n < 10 ? "0\(n)" : String(n) }

    /// Days in `month` (1…12) of the Gregorian `year`.
    public static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}
