import BookingContracts
import Foundation

/// The booking handler's pure domain rules: validation of commands, the
/// status machine, authorisation and overlap. No I/O, no clock (callers pass
/// `now`), no database; every function is deterministic and thread-safe.
///
/// Failures are ``ReplyError``s ready for the reply: code, a human-readable
/// text and the offending `field` path (`start`, `attendees[1].email`, …).
public enum BookingRules: Sendable {
    /// Longest title, in UTF-8 bytes, after trimming (``ContractLimits``).
    public static let maxTitleBytes = ContractLimits.maxTitleBytes
    /// Longest description, in UTF-8 bytes, after trimming.
    public static let maxDescriptionBytes = ContractLimits.maxDescriptionBytes

    // MARK: Slot

    /// Resolves and validates the time slot of a booking in `room`.
    ///
    /// `date` (``DateSpec``: `YYYY-MM-DD`, `"today"`, or UNIX seconds → the
    /// local date that instant falls on in the room's zone), `start`/`end`
    /// local `HH:mm`. Checks, in this order, first failure wins:
    ///
    /// 1. format: 1100 with field `date`, `start` or `end` when malformed
    ///    (`2026-13-01`, `2026-02-30`, `9:00`, `25:00`; UNIX seconds outside
    ///    0…253402300799);
    /// 2. grid: 1103 with field `start` or `end` when off the 15-minute grid;
    /// 3. 1104 with field `end` when end is not after start;
    /// 4. opening hours: 1102 when outside that weekday's hours
    ///    (``Room/hours(weekday:)``: `hours` of the day, else
    ///    `room.opens...room.closes`; local; `end == closes` is fine); field
    ///    `start` when the start lies outside (before opening or at/after
    ///    closing), else `end`; field `date` when the room is closed that
    ///    weekday;
    /// 5. 1100 with field `start` or `end` when that local time does not exist
    ///    on that date (a spring-forward gap; only possible for a room that
    ///    is open at night);
    /// 6. 1105 with field `start` when the start is in the past
    ///    (`startsAt <= now`).
    ///
    /// Daylight-saving days are ordinary days: 07:00–19:00 local is always
    /// bookable, and the instants are exact in the room's zone (2026-03-29
    /// 09:00 Europe/Berlin = 07:00Z, 2026-10-25 09:00 = 08:00Z). A local time
    /// that occurs twice (fall-back overlap) means its first occurrence.
    ///
    /// A room whose own `timeZone`, `opens` or `closes` is invalid (never the
    /// case for rooms that passed ``validateRoom(_:)``) gives 1100 with field
    /// `room`.
    public static func slot(room: Room, date: DateSpec, start: String, end: String, now: Date)
        -> Result<BookingSlot, ReplyError>
    {
        guard let zone = TimeZone(identifier: room.timeZone) else {
            return .failure(ReplyError(code: .invalidField,
                                       text: "room \(room.name) has an unknown time zone \"\(room.timeZone)\"",
                                       field: "room"))
        }
        guard let defaultOpens = ContractFormat.minutes(ofTime: room.opens),
              let defaultCloses = ContractFormat.minutes(ofTime: room.closes), defaultOpens < defaultCloses else {
            return .failure(ReplyError(code: .invalidField,
                                       text: "room \(room.name) has invalid opening hours \(room.opens)-\(room.closes)",
                                       field: "room"))
        }

        // 1. Format.
        let localDate: String
        switch resolveDate(date, zone: zone, now: now) {
        case .success(let text): localDate = text
        case .failure(let error): return .failure(error)
        }
        guard let day = ContractFormat.calendarDate(localDate) else {
            return .failure(ReplyError(code: .invalidField, text: "date \"\(localDate)\" is not a calendar date",
                                       field: "date"))
        }
        guard let startMinutes = ContractFormat.minutes(ofTime: start) else {
            return .failure(malformedTime("start", start))
        }
        guard let endMinutes = ContractFormat.minutes(ofTime: end) else {
            return .failure(malformedTime("end", end))
        }

        // 2. Grid.
        let grid = ContractFormat.gridMinutes
        if startMinutes % grid != 0 {
            return .failure(ReplyError(code: .offGrid,
                                       text: "start \(start) is not on the \(grid)-minute grid", field: "start"))
        }
        if endMinutes % grid != 0 {
            return .failure(ReplyError(code: .offGrid,
                                       text: "end \(end) is not on the \(grid)-minute grid", field: "end"))
        }

        // 3. End after start.
        if endMinutes <= startMinutes {
            return .failure(ReplyError(code: .endNotAfterStart,
                                       text: "end \(end) is not after start \(start)", field: "end"))
        }

        // 4. Opening hours of that weekday.
        let weekday = WeeklyHours.weekdayIndex(year: day.year, month: day.month, day: day.day)
        guard case .open(let opens, let closes) = room.hours(weekday: weekday) else {
            return .failure(ReplyError(code: .outsideOpeningHours,
                                       text: "\(room.name) is \(WeeklyHours.closedText(weekday: weekday)) (\(localDate))",
                                       field: "date"))
        }
        if startMinutes < opens || startMinutes >= closes || endMinutes > closes {
            let field = (startMinutes < opens || startMinutes >= closes) ? "start" : "end"
            return .failure(ReplyError(
                code: .outsideOpeningHours,
                text: "\(start)-\(end) is outside the opening hours of \(room.name) (\(ContractFormat.time(fromMinutes: opens))-\(ContractFormat.time(fromMinutes: closes)))",
                field: field))
        }

        // 5. Instants; local times in a spring-forward gap do not exist.
        guard let startsAt = LocalTime.instants(year: day.year, month: day.month, day: day.day,
                                                minutes: startMinutes, zone: zone).first else {
            return .failure(nonexistent("start", start, date: localDate, zone: room.timeZone))
        }
        guard let endsAt = LocalTime.instants(year: day.year, month: day.month, day: day.day,
                                              minutes: endMinutes, zone: zone).first else {
            return .failure(nonexistent("end", end, date: localDate, zone: room.timeZone))
        }

        // 6. Past.
        if startsAt <= now {
            return .failure(ReplyError(code: .startInPast,
                                       text: "start \(localDate) \(start) \(room.timeZone) is in the past",
                                       field: "start"))
        }

        // 7. Room policies (v1.1): how far ahead, in calendar days of the
        // room's zone (a DST day is one day like any other) …
        if let horizon = room.horizonDays, case .success(let today) = resolveDate(.today, zone: zone, now: now),
           let todayParts = ContractFormat.calendarDate(today) {
            let ahead = CivilDays.days(year: day.year, month: day.month, day: day.day)
                - CivilDays.days(year: todayParts.year, month: todayParts.month, day: todayParts.day)
            if ahead > Int64(horizon) {
                return .failure(ReplyError(
                    code: .beyondHorizon,
                    text: "\(localDate) is \(ahead) days ahead; \(room.name) takes bookings at most \(horizon) days ahead",
                    field: "date"))
            }
        }
        // … and how long, in real elapsed minutes (a slot across the DST
        // change lasts what passes, not what the clock faces say).
        let minutes = Int((endsAt.timeIntervalSince(startsAt) / 60).rounded())
        if let least = room.minMinutes, minutes < least {
            return .failure(ReplyError(code: .durationOutOfRange,
                                       text: "\(minutes) minutes is shorter than \(room.name)'s minimum of \(least)",
                                       field: "end"))
        }
        if let most = room.maxMinutes, minutes > most {
            return .failure(ReplyError(code: .durationOutOfRange,
                                       text: "\(minutes) minutes is longer than \(room.name)'s maximum of \(most)",
                                       field: "end"))
        }

        return .success(BookingSlot(date: localDate, start: start, end: end, timeZone: room.timeZone,
                                    startsAt: startsAt, endsAt: endsAt))
    }

    /// The local calendar date `date` names in `timeZone` when processed at
    /// `now`: the text itself for `YYYY-MM-DD` (if it is a real day), the
    /// room's local date at `now` for `"today"`, at that instant for UNIX
    /// seconds. 1100 with field `date` for an invalid date, UNIX seconds
    /// outside 0…253402300799 or an unknown zone.
    public static func localDate(_ date: DateSpec, timeZone: String, now: Date) -> Result<String, ReplyError> {
        guard let zone = TimeZone(identifier: timeZone) else {
            return .failure(ReplyError(code: .invalidField, text: "unknown time zone \"\(timeZone)\"", field: "date"))
        }
        return resolveDate(date, zone: zone, now: now)
    }

    // MARK: Overlap

    /// Two slots of one room overlap when
    /// `a.startsAt < b.endsAt && b.startsAt < a.endsAt`: sharing an instant of
    /// time, not just a boundary (back-to-back bookings do not overlap).
    public static func overlaps(_ a: BookingSlot, _ b: (startsAt: Date, endsAt: Date)) -> Bool {
        a.startsAt < b.endsAt && b.startsAt < a.endsAt
    }

    // MARK: Text

    /// Checks and normalises the texts of `booking.create`.
    ///
    /// The title must be non-empty after trimming whitespace and at most
    /// ``maxTitleBytes`` UTF-8 bytes (1100, field `title`); the description at
    /// most ``maxDescriptionBytes`` bytes (1100, field `description`).
    /// Returns both trimmed; a description that is blank becomes nil.
    ///
    /// Bytes, not characters: a letter with a thousand combining marks is
    /// one character but 2,001 bytes (see ``ContractLimits``).
    public static func text(title: String, description: String?)
        -> Result<(title: String, description: String?), ReplyError>
    {
        let trimmedTitle = title.trimmingWhitespace()
        if trimmedTitle.isEmpty {
            return .failure(ReplyError(code: .invalidField, text: "title must not be empty", field: "title"))
        }
        if trimmedTitle.utf8.count > maxTitleBytes {
            return .failure(ReplyError(code: .invalidField,
                                       text: "title is longer than \(maxTitleBytes) bytes (UTF-8)", field: "title"))
        }
        var trimmedDescription = description?.trimmingWhitespace()
        if let text = trimmedDescription {
            if text.utf8.count > maxDescriptionBytes {
                return .failure(ReplyError(code: .invalidField,
                                           text: "description is longer than \(maxDescriptionBytes) bytes (UTF-8)",
                                           field: "description"))
            }
            if text.isEmpty { trimmedDescription = nil }
        }
        return .success((title: trimmedTitle, description: trimmedDescription))
    }

    /// Longest free-text `reason` (`booking.cancel`), in UTF-8 bytes.
    public static let maxReasonBytes = ContractLimits.maxReasonBytes

    /// Checks the `reason` of `booking.cancel`: at most ``maxReasonBytes``
    /// UTF-8 bytes (1100, field `reason`); nil when fine or absent. Kept
    /// as given otherwise.
    public static func reason(_ reason: String?) -> ReplyError? {
        guard let reason, reason.utf8.count > maxReasonBytes else { return nil }
        return ReplyError(code: .invalidField, text: "reason is longer than \(maxReasonBytes) bytes (UTF-8)",
                          field: "reason")
    }

    // MARK: booking.create

    /// Everything ``CreateBooking`` needs except the overlap check (which
    /// needs the database), in this order: the room must exist (1101, field
    /// `room`, the text names it), then ``text(title:description:)``,
    /// ``slot(room:date:start:end:now:)``, ``attendees(_:capacity:)`` with
    /// the room's capacity. The status is `.pending` when the room requires
    /// approval, else `.confirmed`.
    public static func validateCreate(_ command: CreateBooking, room: Room?, now: Date)
        -> Result<ValidatedCreate, ReplyError>
    {
        guard let room else {
            return .failure(ReplyError(code: .unknownRoom, text: "unknown room \"\(command.room)\"", field: "room"))
        }
        if case .failure(let error) = SeriesRules.conflictPolicy(command.onConflict, hasRecurrence: command.recurrence != nil) {
            return .failure(error)
        }
        let options: HoldOptions
        switch holdOptions(command) {
        case .failure(let error): return .failure(error)
        case .success(let value): options = value
        }
        let texts: (title: String, description: String?)
        switch text(title: command.title, description: command.description) {
        case .success(let value): texts = value
        case .failure(let error): return .failure(error)
        }
        let resolvedSlot: BookingSlot
        switch slot(room: room, date: command.date, start: command.start, end: command.end, now: now) {
        case .success(let value): resolvedSlot = value
        case .failure(let error): return .failure(error)
        }
        let people: [Attendee]
        switch attendees(command.attendees, capacity: room.capacity) {
        case .success(let value): people = value
        case .failure(let error): return .failure(error)
        }
        var valid = ValidatedCreate(room: room, slot: resolvedSlot, title: texts.title,
                                    description: texts.description, attendees: people,
                                    status: initialStatus(requiresApproval: room.requiresApproval))
        if let minutes = options.holdMinutes {
            valid.status = .held
            valid.holdExpiresAt = holdExpiry(now: now, minutes: minutes, startsAt: resolvedSlot.startsAt)
        }
        valid.waitlist = options.waitlist
        return .success(valid)
    }

    /// The status a new booking starts in: `.pending` when the room requires
    /// approval, else `.confirmed`.
    public static func initialStatus(requiresApproval: Bool) -> BookingStatus {
        requiresApproval ? .pending : .confirmed
    }

    // MARK: Private

    static func resolveDate(_ date: DateSpec, zone: TimeZone, now: Date) -> Result<String, ReplyError> {
        switch date {
        case .calendarDate(let text):
            guard ContractFormat.calendarDate(text) != nil else {
                return .failure(ReplyError(code: .invalidField,
                                           text: "date \"\(text)\" is not a calendar date (YYYY-MM-DD)",
                                           field: "date"))
            }
            return .success(text)
        case .today:
            return .success(LocalTime.localDate(of: now, zone: zone))
        case .unixSeconds(let seconds):
            guard (0...LocalTime.maxUnixSeconds).contains(seconds) else {
                return .failure(ReplyError(code: .invalidField,
                                           text: "date \(seconds) is out of range for UNIX seconds",
                                           field: "date"))
            }
            return .success(LocalTime.localDate(of: Date(timeIntervalSince1970: TimeInterval(seconds)), zone: zone))
        }
    }

    private static func malformedTime(_ field: String, _ value: String) -> ReplyError {
        ReplyError(code: .invalidField, text: "\(field) \"\(value)\" is not a time HH:mm (00:00-23:59)", field: field)
    }

    private static func nonexistent(_ field: String, _ value: String, date: String, zone: String) -> ReplyError {
        ReplyError(code: .invalidField,
                   text: "\(field) \(value) does not exist on \(date) in \(zone) (daylight-saving change)",
                   field: field)
    }
}
