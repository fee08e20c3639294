import BookingContracts
import Foundation
import Synchronization

/// The iCalendar part (RFC 5545) of the spool e-mails, so calendar
/// programs import a pass as an event in the room's zone and update it in
/// place: `UID` is the booking id and `SEQUENCE` its version, so the pass
/// for version 2 (a reschedule) replaces the entry of version 1.
public enum PassCalendar {
    /// A `METHOD:REQUEST` calendar with one event for `booking`, addressed
    /// to one attendee. CRLF line ends, lines folded at 75 octets.
    public static func request(booking: Booking, attendeeName: String, attendeeEmail: String, organizerEmail: String,
                               organizerName: String, stamp: Date) -> String {
        calendar(method: "REQUEST", booking: booking, attendeeName: attendeeName, attendeeEmail: attendeeEmail,
                 organizerEmail: organizerEmail, organizerName: organizerName, stamp: stamp)
    }

    /// A `METHOD:CANCEL` calendar (RFC 5546 3.2.5) for `booking`: same `UID`,
    /// `SEQUENCE` = the version that cancelled it (or removed the attendee),
    /// `STATUS:CANCELLED`, so a calendar program removes the entry it has.
    public static func cancel(booking: Booking, attendeeName: String, attendeeEmail: String, organizerEmail: String,
                              organizerName: String, stamp: Date) -> String {
        calendar(method: "CANCEL", booking: booking, attendeeName: attendeeName, attendeeEmail: attendeeEmail,
                 organizerEmail: organizerEmail, organizerName: organizerName, stamp: stamp)
    }

    static func calendar(method: String, booking: Booking, attendeeName: String, attendeeEmail: String,
                         organizerEmail: String, organizerName: String, stamp: Date) -> String {
        var lines = [
            "BEGIN:VCALENDAR",
            "VERSION:2.0",
            "PRODID:-//room-booking//pass-sender//EN",
            "CALSCALE:GREGORIAN",
            "METHOD:\(method)",
        ]
        let startsAt = ContractFormat.parseTimestamp(booking.startsAt) ?? stamp
        let endsAt = ContractFormat.parseTimestamp(booking.endsAt) ?? startsAt
        lines += timeZone(booking.timeZone, around: startsAt, endsAt)
        lines += [
            "BEGIN:VEVENT",
            "UID:" + text(booking.id),
            "SEQUENCE:\(booking.version)",
            "DTSTAMP:" + utc(stamp),
            "DTSTART;TZID=\(booking.timeZone):" + local(date: booking.date, time: booking.start),
            "DTEND;TZID=\(booking.timeZone):" + local(date: booking.date, time: booking.end),
            "SUMMARY:" + text(booking.title),
            "LOCATION:" + text(booking.room),
        ]
        if let description = booking.description, !description.isEmpty { lines.append("DESCRIPTION:" + text(description)) }
        lines += [
            "ORGANIZER;CN=\(parameter(organizerName)):mailto:\(organizerEmail)",
            "ATTENDEE;CN=\(parameter(attendeeName));ROLE=REQ-PARTICIPANT;PARTSTAT=NEEDS-ACTION;RSVP=FALSE:mailto:\(attendeeEmail)",
            method == "CANCEL" ? "STATUS:CANCELLED" : "STATUS:CONFIRMED",
            "TRANSP:OPAQUE",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
        return lines.map(fold).joined(separator: "\r\n") + "\r\n"
    }

    /// `VTIMEZONE` for `zone` with every offset change from a year before
    /// the event to a year after it, each as its own observance with the
    /// exact onset (no `RRULE` to interpret), so a reader needs nothing but
    /// this part to place the event; a zone without changes gets one
    /// `STANDARD` observance.
    ///
    /// The window is widened to whole UTC days, so that every booking of a
    /// zone on the same days shares one cached answer: walking a zone's
    /// transitions through Foundation was a fifth of composing a pass.
    static func timeZone(_ zone: String, around start: Date, _ end: Date) -> [String] {
        let key = VTimeZoneKey(zone: zone, firstDay: Self.day(start), lastDay: Self.day(end))
        if let lines = vTimeZones.withLock({ $0[key] }) { return lines }
        let lines = computeTimeZone(zone, from: Date(timeIntervalSince1970: Double(key.firstDay - 366) * 86_400),
                                    to: Date(timeIntervalSince1970: Double(key.lastDay + 367) * 86_400))
        vTimeZones.withLock { cache in
            if cache.count >= 1024 { cache.removeAll(keepingCapacity: true) }  // bounded; refills from the current days
            cache[key] = lines
        }
        return lines
    }

    private struct VTimeZoneKey: Hashable {
        var zone: String
        var firstDay: Int
        var lastDay: Int
    }

    private static let vTimeZones = Mutex<[VTimeZoneKey: [String]]>([:])

    private static func day(_ date: Date) -> Int { Int((date.timeIntervalSince1970 / 86_400).rounded(.down)) }

    private static func computeTimeZone(_ zone: String, from first: Date, to last: Date) -> [String] {
        guard let tz = TimeZone(identifier: zone) else { return [] }
        var lines = ["BEGIN:VTIMEZONE", "TZID:\(zone)"]
        var cursor = first
        let start = first.addingTimeInterval(366 * 86_400)
        var observances = 0
        while let change = tz.nextDaylightSavingTimeTransition(after: cursor), change <= last {
            let before = tz.secondsFromGMT(for: change.addingTimeInterval(-1)), after = tz.secondsFromGMT(for: change)
            let kind = tz.isDaylightSavingTime(for: change) ? "DAYLIGHT" : "STANDARD"
            lines += [
                "BEGIN:\(kind)",
                // The onset in the local time in force before it.
                "DTSTART:" + wallClock(change, offset: before),
                "TZOFFSETFROM:" + offsetText(before),
                "TZOFFSETTO:" + offsetText(after),
                "TZNAME:" + ZoneAbbreviation.of(zone: zone, at: change),
                "END:\(kind)",
            ]
            observances += 1
            cursor = change
        }
        if observances == 0 {
            let offset = tz.secondsFromGMT(for: start)
            lines += ["BEGIN:STANDARD", "DTSTART:19700101T000000", "TZOFFSETFROM:" + offsetText(offset),
                      "TZOFFSETTO:" + offsetText(offset), "TZNAME:" + ZoneAbbreviation.of(zone: zone, at: start), "END:STANDARD"]
        }
        lines.append("END:VTIMEZONE")
        return lines
    }

    /// `20261123T090000` from the booking's local date and `HH:mm`.
    static func local(date: String, time: String) -> String {
        String(date.filter { $0 != "-" }) + "T" + String(time.filter { $0 != ":" }) + "00"
    }

    /// `20261123T080000Z`.
    static func utc(_ date: Date) -> String {
        wallClock(date, offset: 0) + "Z"
    }

    /// The local wall-clock time of `instant` at `offset` seconds east of UTC.
    static func wallClock(_ instant: Date, offset: Int) -> String {
        let seconds = Int64(instant.timeIntervalSince1970.rounded(.down)) + Int64(offset)
        let day = CivilDays.day(ofSeconds: seconds)
        let c = CivilDays.civil(days: day)
        let s = Int(seconds - day * 86_400)
        return String(format: "%04d%02d%02dT%02d%02d%02d", c.year, c.month, c.day, s / 3600, s / 60 % 60, s % 60)
    }

    /// `+0100`, `-0430`.
    static func offsetText(_ seconds: Int) -> String {
        let sign = seconds < 0 ? "-" : "+"
        let m = abs(seconds) / 60
        return String(format: "%@%02d%02d", sign, m / 60, m % 60)
    }

    /// A TEXT value (RFC 5545 3.3.11): backslash, `;`, `,` escaped, line breaks as `\n`.
    static func text(_ value: String) -> String {
        var out = ""
        for c in value {
            switch c {
            case "\\": out += "\\\\"
            case ";": out += "\\;"
            case ",": out += "\\,"
            case "\r\n", "\n", "\r": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    /// A parameter value: quoted (it may hold `:`, `;`, `,`); DQUOTE and
    /// control characters, which a quoted value may not contain, become spaces.
    static func parameter(_ value: String) -> String {
        "\"" + String(value.map { $0 == "\"" || $0.asciiValue.map { $0 < 0x20 } == true ? " " : $0 }) + "\""
    }

    /// Folds a content line at 75 octets (RFC 5545 3.1) without splitting a
    /// UTF-8 sequence: CRLF and one space before each continuation.
    static func fold(_ line: String) -> String {
        if line.utf8.count <= 75 { return line }
        var out = ""
        var used = 0
        for scalar in line.unicodeScalars {
            let size = UTF8.width(scalar)
            if used + size > 75 {
                out += "\r\n "
                used = 1
            }
            out.unicodeScalars.append(scalar)
            used += size
        }
        return out
    }
}
