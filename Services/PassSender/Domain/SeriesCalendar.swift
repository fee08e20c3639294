import BookingContracts
import Foundation

/// One occurrence of a series as the ledger knows it (spool e-mails only).
public struct SeriesOccurrence: Sendable, Equatable {
    /// The first snapshot seen: the instance the series' `RRULE` generates.
    public var original: Booking
    /// The newest snapshot (a reschedule, an update or a cancellation since).
    public var latest: Booking

    public init(original: Booking, latest: Booking) {
        self.original = original
        self.latest = latest
    }

    /// Whether the occurrence is where the series announced it.
    public var unmoved: Bool {
        latest.date == original.date && latest.start == original.start && latest.end == original.end
    }

    /// Whether it no longer takes place.
    public var gone: Bool { latest.status == .cancelled || latest.status == .rejected }
}

/// The iCalendar of a whole series (contract v1.1: "`UID` = series id
/// with `RRULE`, and `RECURRENCE-ID`/`EXDATE` for a change to one
/// occurrence").
///
/// The contract's events carry no recurrence rule (`series` has id, index,
/// count, version), so the rule is inferred from the occurrences' dates:
/// the first of monthly (same day of the month, months without it
/// skipped, as the handler books), every other week, weekly, weekdays,
/// daily whose instances from the first to the last date include every
/// occurrence; instances without an occurrence (skipped at booking) and
/// cancelled occurrences are `EXDATE`s; an occurrence moved since is an
/// override `VEVENT` with `RECURRENCE-ID`.
public enum SeriesCalendar {
    /// `RRULE` value and the local days (days since 1970-01-01) it generates.
    static func rule(for days: [Int64]) -> (rrule: String, generated: [Int64]) {
        let sorted = Array(Set(days)).sorted()
        guard let first = sorted.first, let last = sorted.last else { return ("FREQ=DAILY;COUNT=1", []) }
        let wanted = Set(sorted)
        var candidates: [(String, [Int64])] = []
        let f = CivilDays.civil(days: first)
        var monthly: [Int64] = []
        var (y, m) = (f.year, f.month)
        while true {
            let d = CivilDays.days(year: y, month: m, day: f.day)
            if d > last { break }
            if CivilDays.civil(days: d).day == f.day { monthly.append(d) }  // a month without that day
            (y, m) = m == 12 ? (y + 1, 1) : (y, m + 1)
        }
        candidates.append(("FREQ=MONTHLY;BYMONTHDAY=\(f.day)", monthly))
        candidates.append(("FREQ=WEEKLY;INTERVAL=2", Array(stride(from: first, through: last, by: 14))))
        candidates.append(("FREQ=WEEKLY", Array(stride(from: first, through: last, by: 7))))
        // 1970-01-01 was a Thursday: (days + 3) % 7 is 0 for Monday.
        let weekdays = Array(stride(from: first, through: last, by: 1)).filter { ((($0 + 3) % 7) + 7) % 7 < 5 }
        if ((first + 3) % 7 + 7) % 7 < 5 { candidates.append(("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", weekdays)) }
        candidates.append(("FREQ=DAILY", Array(stride(from: first, through: last, by: 1))))
        for (rule, generated) in candidates where wanted.isSubset(of: Set(generated)) {
            return (rule + ";COUNT=\(generated.count)", generated)
        }
        return ("FREQ=DAILY;COUNT=\(last - first + 1)", Array(stride(from: first, through: last, by: 1)))
    }

    /// `METHOD:REQUEST` for the whole series, to one attendee.
    public static func request(seriesId: String, occurrences: [SeriesOccurrence], attendeeName: String, attendeeEmail: String,
                               organizerEmail: String, organizerName: String, stamp: Date) -> String {
        let ordered = occurrences.sorted { $0.original.startsAt < $1.original.startsAt }
        guard let master = ordered.first?.original, let lastOne = ordered.last else { return "" }
        let days = ordered.compactMap { day($0.original.date) }
        let (rrule, generated) = rule(for: days)
        let booked = Set(ordered.filter { !$0.gone }.compactMap { day($0.original.date) })
        let excluded = generated.filter { !booked.contains($0) }
        let zone = master.timeZone
        let sequence = ordered.map { $0.latest.series?.version ?? 1 }.max() ?? 1
        let startsAt = ContractFormat.parseTimestamp(master.startsAt) ?? stamp
        let endsAt = ContractFormat.parseTimestamp(lastOne.latest.endsAt) ?? startsAt
        var lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//room-booking//pass-sender//EN", "CALSCALE:GREGORIAN",
                     "METHOD:REQUEST"]
        lines += PassCalendar.timeZone(zone, around: startsAt, endsAt)
        let people = [
            "ORGANIZER;CN=\(PassCalendar.parameter(organizerName)):mailto:\(organizerEmail)",
            "ATTENDEE;CN=\(PassCalendar.parameter(attendeeName));ROLE=REQ-PARTICIPANT;PARTSTAT=NEEDS-ACTION;RSVP=FALSE:mailto:\(attendeeEmail)",
        ]
        lines += ["BEGIN:VEVENT", "UID:" + PassCalendar.text(seriesId), "SEQUENCE:\(sequence)", "DTSTAMP:" + PassCalendar.utc(stamp),
                  "DTSTART;TZID=\(zone):" + PassCalendar.local(date: master.date, time: master.start),
                  "DTEND;TZID=\(zone):" + PassCalendar.local(date: master.date, time: master.end),
                  "RRULE:" + rrule]
        if !excluded.isEmpty {
            lines.append("EXDATE;TZID=\(zone):" + excluded.map { PassCalendar.local(date: dateText($0), time: master.start) }
                .joined(separator: ","))
        }
        lines += texts(ordered.first?.latest ?? master) + people + ["STATUS:CONFIRMED", "TRANSP:OPAQUE", "END:VEVENT"]
        for o in ordered where !o.gone && !o.unmoved {
            lines += ["BEGIN:VEVENT"]
            lines += instance(seriesId: seriesId, occurrence: o, zone: zone, masterStart: master.start, stamp: stamp)
            lines += texts(o.latest) + people + ["STATUS:CONFIRMED", "TRANSP:OPAQUE", "END:VEVENT"]
        }
        lines.append("END:VCALENDAR")
        return lines.map(PassCalendar.fold).joined(separator: "\r\n") + "\r\n"
    }

    /// `METHOD:REQUEST` (moved, or a pass after a change) or `METHOD:CANCEL`
    /// for one occurrence of a series the attendee holds: `UID` = series id,
    /// `RECURRENCE-ID` = the instance as the series generated it, `SEQUENCE`
    /// = the occurrence's booking version.
    public static func occurrence(method: String, seriesId: String, occurrence: SeriesOccurrence, masterStart: String,
                                  attendeeName: String, attendeeEmail: String, organizerEmail: String,
                                  organizerName: String, stamp: Date) -> String {
        let b = occurrence.latest
        let startsAt = ContractFormat.parseTimestamp(b.startsAt) ?? stamp
        let endsAt = ContractFormat.parseTimestamp(b.endsAt) ?? startsAt
        var lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//room-booking//pass-sender//EN", "CALSCALE:GREGORIAN",
                     "METHOD:\(method)"]
        lines += PassCalendar.timeZone(b.timeZone, around: startsAt, endsAt)
        lines += ["BEGIN:VEVENT"]
        lines += instance(seriesId: seriesId, occurrence: occurrence, zone: b.timeZone, masterStart: masterStart, stamp: stamp)
        lines += texts(b) + [
            "ORGANIZER;CN=\(PassCalendar.parameter(organizerName)):mailto:\(organizerEmail)",
            "ATTENDEE;CN=\(PassCalendar.parameter(attendeeName));ROLE=REQ-PARTICIPANT;PARTSTAT=NEEDS-ACTION;RSVP=FALSE:mailto:\(attendeeEmail)",
            method == "CANCEL" ? "STATUS:CANCELLED" : "STATUS:CONFIRMED", "TRANSP:OPAQUE", "END:VEVENT", "END:VCALENDAR",
        ]
        return lines.map(PassCalendar.fold).joined(separator: "\r\n") + "\r\n"
    }

    private static func instance(seriesId: String, occurrence o: SeriesOccurrence, zone: String, masterStart: String,
                                 stamp: Date) -> [String] {
        [
            "UID:" + PassCalendar.text(seriesId),
            "RECURRENCE-ID;TZID=\(zone):" + PassCalendar.local(date: o.original.date, time: masterStart),
            "SEQUENCE:\(o.latest.version)",
            "DTSTAMP:" + PassCalendar.utc(stamp),
            "DTSTART;TZID=\(zone):" + PassCalendar.local(date: o.latest.date, time: o.latest.start),
            "DTEND;TZID=\(zone):" + PassCalendar.local(date: o.latest.date, time: o.latest.end),
        ]
    }

    private static func texts(_ b: Booking) -> [String] {
        var lines = ["SUMMARY:" + PassCalendar.text(b.title), "LOCATION:" + PassCalendar.text(b.room)]
        if let d = b.description, !d.isEmpty { lines.append("DESCRIPTION:" + PassCalendar.text(d)) }
        return lines
    }

    static func day(_ date: String) -> Int64? {
        let p = date.split(separator: "-").compactMap { Int($0) }
        guard p.count == 3 else { return nil }
        return CivilDays.days(year: p[0], month: p[1], day: p[2])
    }

    static func dateText(_ day: Int64) -> String {
        let c = CivilDays.civil(days: day)
        return String(format: "%04d-%02d-%02d", c.year, c.month, c.day)
    }
}
