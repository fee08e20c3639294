import BookingContracts
import Foundation

/// Wall-clock arithmetic in an IANA zone, exact and independent of
/// `Calendar`'s choices: proleptic Gregorian days, and every instant at which
/// a local time occurs (none in a spring-forward gap, two in a fall-back
/// overlap).
enum LocalTime {
    /// Largest UNIX timestamp whose date still has a four-digit year:
    /// 9999-12-31T23:59:59Z.
    static let maxUnixSeconds: Int64 = DateSpec.maxUnixSeconds

    /// Days since 1970-01-01 of a proleptic Gregorian date.
    static func days(year: Int, month: Int, day: Int) -> Int64 { CivilDays.days(year: year, month: month, day: day) }

    /// The proleptic Gregorian date `days` after 1970-01-01.
    static func civil(days: Int64) -> (year: Int, month: Int, day: Int) { CivilDays.civil(days: days) }

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
        let d = civil(days: CivilDays.day(ofSeconds: seconds))
        return ContractFormat.calendarDateString(year: d.year, month: d.month, day: d.day)
    }
}
