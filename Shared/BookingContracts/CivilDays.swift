/// Proleptic Gregorian day arithmetic (H. Hinnant's `days_from_civil` and
/// `civil_from_days`), exact for any year and independent of `Calendar`'s
/// choices. The booking handler and the projector both turn local dates
/// into instants and back with it, so they can never disagree on a date.
public enum CivilDays {
    /// Days since 1970-01-01 of a date.
    public static func days(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let m = Int64(month)
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + Int64(day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The date `days` after 1970-01-01.
    public static func civil(days: Int64) -> (year: Int, month: Int, day: Int) {
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

    /// Days since 1970-01-01 of the UTC-shifted second count `seconds`
    /// (floor division, correct before 1970).
    public static func day(ofSeconds seconds: Int64) -> Int64 {
        seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
    }
}
