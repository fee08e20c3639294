import BookingContracts
import Foundation

/// Wall-clock arithmetic in an IANA zone, exact and independent of
/// `Calendar`'s choices: proleptic Gregorian days, and every instant at which
/// a local time occurs (none in a spring-forward gap, two in a fall-back
/// overlap).
enum LocalTime {
    /// Largest UNIX timestamp whose date still has a four-digit year:
    /// 9999-12-31T23:59:59Z.
    static let maxUnixSeconds: Int64 = 253_402_300_799

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
    /// `days_from_civil`).
    static func days(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let m = Int64(month)
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + Int64(day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's
    /// `civil_from_days`).
    static func civil(days: Int64) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        return (Int(year), Int(month), Int(day))
    }

    /// Every instant at which the local wall time `minutes` after midnight of
    /// the given date occurs in `zone`, earliest first: one on an ordinary
    /// day, none inside a spring-forward gap, two inside a fall-back overlap.
    static func instants(year: Int, month: Int, day: Int, minutes: Int, zone: TimeZone) -> [Date] {
        // The wall time read as if it were UTC; the real instant is this
        // minus the zone's offset at that instant. Offsets are below 1 day,
        // so sampling the offsets around it finds every candidate.
        let wall = days(year: year, month: month, day: day) * 86_400 + Int64(minutes) * 60
        var offsets = Set<Int>()
        for step in -6...6 {
            let probe = Date(timeIntervalSince1970: TimeInterval(wall + Int64(step) * 6 * 3600))
            offsets.insert(zone.secondsFromGMT(for: probe))
        }
        var result: [Date] = []
        for offset in offsets {
            let candidate = wall - Int64(offset)
            let instant = Date(timeIntervalSince1970: TimeInterval(candidate))
            if zone.secondsFromGMT(for: instant) == offset { result.append(instant) }
        }
        return result.sorted()
    }

    /// The local calendar date (`YYYY-MM-DD`) on which `instant` falls in `zone`.
    static func localDate(of instant: Date, zone: TimeZone) -> String {
        let seconds = Int64(instant.timeIntervalSince1970.rounded(.down)) + Int64(zone.secondsFromGMT(for: instant))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let d = civil(days: days)
        return ContractFormat.calendarDateString(year: d.year, month: d.month, day: d.day)
    }
}
