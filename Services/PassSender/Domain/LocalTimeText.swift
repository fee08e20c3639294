import BookingContracts
import Foundation
import Synchronization

/// What a person reads about a booking's time: local to the room, with the
/// zone's abbreviation — `Mon 23 Nov 2026, 09:00–10:30 CET` — never UTC
/// (contract v1.1, "Notifications to attendees").
public enum LocalTimeText {
    /// The booking's local date and times (its own `date`, `start`, `end`,
    /// which the handler resolved in the room's zone) with the
    /// abbreviation in force at the start; when the end falls on the other
    /// side of a clock change, each time gets its own.
    public static func when(_ booking: Booking) -> String {
        let day = dayText(booking.date)
        guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
              let endsAt = ContractFormat.parseTimestamp(booking.endsAt) else {
            return "\(day), \(booking.start)–\(booking.end) \(booking.timeZone)"
        }
        let first = ZoneAbbreviation.of(zone: booking.timeZone, at: startsAt)
        let last = ZoneAbbreviation.of(zone: booking.timeZone, at: endsAt)
        if first == last { return "\(day), \(booking.start)–\(booking.end) \(first)" }
        return "\(day), \(booking.start) \(first)–\(booking.end) \(last)"
    }

    /// `Mon 23 Nov 2026` for `2026-11-23`.
    public static func dayText(_ date: String) -> String {
        guard let d = ContractFormat.calendarDate(date) else { return date }
        let days = CivilDays.days(year: d.year, month: d.month, day: d.day)
        // 1970-01-01 was a Thursday.
        let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][Int(((days % 7) + 7) % 7)]
        let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][d.month - 1]
        return "\(weekday) \(d.day) \(month) \(d.year)"
    }
}

/// Time zone abbreviations as the IANA database names them (`CET`, `CEST`,
/// `EST`, `+03`).
///
/// Why not `TimeZone.abbreviation(for:)`: on Linux, Foundation answers
/// `GMT+1` for Europe/Berlin. The names are in the system's tzdata: the
/// footer of each TZif file (RFC 8536, section 3.3) is a POSIX TZ string
/// such as `CET-1CEST,M3.5.0,M10.5.0/3`, naming the standard and the
/// daylight-saving abbreviation with their offsets. The one whose offset
/// Foundation reports for the instant is the one in force (which also
/// gets zones with negative DST, such as Europe/Dublin, right). Without a
/// readable file, Foundation's form is the fallback.
public enum ZoneAbbreviation {
    /// Parsed footers by zone name (nil: none usable).
    private static let footers = Mutex<[String: Footer?]>([:])
    /// Where tzdata lives (Debian: package `tzdata`).
    static let zoneInfoDirectory = "/usr/share/zoneinfo"

    /// The abbreviation of `zone` at `instant`.
    public static func of(zone: String, at instant: Date) -> String {
        guard let tz = TimeZone(identifier: zone) else { return zone }
        let offset = tz.secondsFromGMT(for: instant)
        if let footer = footer(zone) {
            if footer.standardOffset == offset { return footer.standard }
            if let daylight = footer.daylight, footer.daylightOffset == offset { return daylight }
        }
        return tz.abbreviation(for: instant) ?? zone
    }

    struct Footer: Equatable {
        var standard: String
        /// Seconds east of UTC.
        var standardOffset: Int
        var daylight: String?
        var daylightOffset: Int?
    }

    private static func footer(_ zone: String) -> Footer? {
        if let cached = footers.withLock({ $0[zone] }) { return cached }
        // Zone names are IANA identifiers (validated when the room was
        // registered); never follow anything that climbs out of the directory.
        var parsed: Footer?
        if !zone.contains(".."), let data = FileManager.default.contents(atPath: "\(zoneInfoDirectory)/\(zone)") {
            parsed = footer(tzif: [UInt8](data))
        }
        footers.withLock { $0[zone] = parsed }
        return parsed
    }

    /// The footer of a TZif file: the text between its last two newlines.
    static func footer(tzif bytes: [UInt8]) -> Footer? {
        guard bytes.count > 2, bytes.starts(with: Array("TZif".utf8)), bytes.last == UInt8(ascii: "\n"),
              let start = bytes.dropLast().lastIndex(of: UInt8(ascii: "\n")) else { return nil }
        return parse(String(decoding: bytes[(start + 1)..<(bytes.count - 1)], as: UTF8.self))
    }

    /// Parses the names and offsets of a POSIX TZ string
    /// (`std offset [dst [offset] [,rule]]`).
    static func parse(_ text: String) -> Footer? {
        var rest = Substring(text)
        guard let standard = name(&rest), let stdPosix = offset(&rest) else { return nil }
        // POSIX offsets count west of UTC: CET-1 is UTC+1.
        let standardOffset = -stdPosix
        guard let daylight = name(&rest) else { return Footer(standard: standard, standardOffset: standardOffset) }
        let daylightOffset = offset(&rest).map { -$0 } ?? standardOffset + 3600
        return Footer(standard: standard, standardOffset: standardOffset, daylight: daylight, daylightOffset: daylightOffset)
    }

    /// `CET` (three or more letters) or `<+03>` (anything in angle brackets).
    private static func name(_ s: inout Substring) -> String? {
        if s.first == "<" {
            guard let close = s.firstIndex(of: ">") else { return nil }
            let name = String(s[s.index(after: s.startIndex)..<close])
            s = s[s.index(after: close)...]
            return name.isEmpty ? nil : name
        }
        let letters = s.prefix { $0.isASCII && $0.isLetter }
        guard letters.count >= 3 else { return nil }
        s = s.dropFirst(letters.count)
        return String(letters)
    }

    /// `[+-]hh[:mm[:ss]]` in seconds.
    private static func offset(_ s: inout Substring) -> Int? {
        var sign = 1
        if s.first == "+" || s.first == "-" {
            sign = s.first == "-" ? -1 : 1
            s = s.dropFirst()
        }
        var parts: [Int] = []
        while parts.count < 3 {
            let digits = s.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, let value = Int(digits) else { break }
            parts.append(value)
            s = s.dropFirst(digits.count)
            guard s.first == ":" else { break }
            s = s.dropFirst()
        }
        guard let hours = parts.first else { return nil }
        return sign * (hours * 3600 + (parts.count > 1 ? parts[1] * 60 : 0) + (parts.count > 2 ? parts[2] : 0))
    }
}
