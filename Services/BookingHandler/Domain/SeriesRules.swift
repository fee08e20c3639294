import BookingContracts
import Foundation

/// Recurring bookings (contract v1.1, "Recurring bookings"): which local
/// dates a recurrence names, and a series checked occurrence by occurrence.
/// Pure, like ``BookingRules``: no clock, no database.
public enum SeriesRules {
    /// Largest reply to a recurring `booking.create`. Replies carry every
    /// occurrence, and the broker refuses messages over 1 MiB
    /// (`max_message_size`); this leaves room for the cancel by `seriesId`
    /// of the same occurrences, each with a reason of up to 1,000 bytes.
    public static let maxReplyBytes = 600_000

    /// The local dates of `recurrence` starting at `first` (`YYYY-MM-DD`),
    /// in order, or the 1100 that names the bad field.
    ///
    /// - `daily` every day, `weekly` every 7 and `biweekly` every 14 days
    ///   from `first`;
    /// - `weekdays` every Monday to Friday on or after `first` (a series
    ///   asked for from a Saturday starts on Monday);
    /// - `monthly` the day of the month of `first` in every month that has
    ///   it (from the 31st: January, March, May, …);
    /// - `until` is inclusive; `count` counts the dates generated.
    ///
    /// At most ``Recurrence/maxOccurrences``; more, or none, is 1100.
    public static func dates(first: String, recurrence: Recurrence) -> Result<[String], ReplyError> {
        func invalid(_ field: String, _ text: String) -> Result<[String], ReplyError> {
            .failure(ReplyError(code: .invalidField, text: text, field: field))
        }
        guard let frequency = Recurrence.Frequency(rawValue: recurrence.frequency) else {
            return invalid("recurrence.frequency", "recurrence.frequency must be one of "
                           + Recurrence.Frequency.allCases.map(\.rawValue).joined(separator: ", "))
        }
        guard let start = ContractFormat.calendarDate(first) else {
            return invalid("date", "date \"\(first)\" is not a calendar date")
        }
        let max = Recurrence.maxOccurrences
        var lastDay = Int64.max
        var wanted = max + 1  // one more than allowed: finding it means too many
        switch (recurrence.until, recurrence.count) {
        case (nil, nil):
            return invalid("recurrence", "recurrence needs until (a date) or count")
        case (.some, .some):
            return invalid("recurrence", "recurrence takes until or count, not both")
        case (let until?, nil):
            guard let u = ContractFormat.calendarDate(until) else {
                return invalid("recurrence.until", "recurrence.until \"\(until.prefix(40))\" is not a calendar date (YYYY-MM-DD)")
            }
            lastDay = CivilDays.days(year: u.year, month: u.month, day: u.day)
            guard lastDay >= CivilDays.days(year: start.year, month: start.month, day: start.day) else {
                return invalid("recurrence.until", "recurrence.until \(until) is before the first date \(first)")
            }
        case (nil, let count?):
            guard (1...max).contains(count) else {
                return invalid("recurrence.count", "recurrence.count must be 1 to \(max), got \(count)")
            }
            wanted = count
        }
        var dates: [String] = []
        func add(_ days: Int64) {
            let c = CivilDays.civil(days: days)
            dates.append(ContractFormat.calendarDateString(year: c.year, month: c.month, day: c.day))
        }
        let firstDay = CivilDays.days(year: start.year, month: start.month, day: start.day)
        switch frequency {
        case .daily, .weekly, .biweekly, .weekdays:
            let step: Int64 = frequency == .weekly ? 7 : frequency == .biweekly ? 14 : 1
            var day = firstDay
            while dates.count < wanted, day <= lastDay {
                // 1970-01-01 was a Thursday: (days + 4) mod 7 is 0 on Sundays.
                let weekday = ((day + 4) % 7 + 7) % 7
                if frequency != .weekdays || (weekday != 0 && weekday != 6) { add(day) }
                day += step
            }
        case .monthly:
            var (year, month) = (start.year, start.month)
            // Twelve months without the day cannot happen; the bound only
            // keeps a far `until` from looping long.
            while dates.count < wanted, year <= start.year + 100 {
                if start.day <= ContractFormat.daysIn(month: month, year: year) {
                    let day = CivilDays.days(year: year, month: month, day: start.day)
                    if day > lastDay { break }
                    add(day)
                }
                month += 1
                if month > 12 { (year, month) = (year + 1, 1) }
            }
        }
        if dates.count > max {
            return invalid("recurrence.until", "the recurrence has more than \(max) occurrences; end it earlier or give a count")
        }
        if dates.isEmpty {
            return invalid("recurrence", "the recurrence has no occurrence between \(first) and \(recurrence.until ?? first)")
        }
        return .success(dates)
    }

    /// `onConflict`: `"reject"` when absent; only with a recurrence.
    public static func conflictPolicy(_ text: String?, hasRecurrence: Bool) -> Result<ConflictPolicy, ReplyError> {
        guard let text else { return .success(.reject) }
        guard hasRecurrence else {
            return .failure(ReplyError(code: .invalidField, text: "onConflict is only for a series (with recurrence)",
                                       field: "onConflict"))
        }
        guard let policy = ConflictPolicy(rawValue: text) else {
            return .failure(ReplyError(code: .invalidField, text: "onConflict must be \"reject\" or \"skip\"", field: "onConflict"))
        }
        return .success(policy)
    }

    /// A recurring `booking.create` checked with every rule that needs no
    /// database: the body once (texts, attendees, recurrence — any failure
    /// refuses the series), then each occurrence's slot on its own local
    /// date (hours in the room's zone on that date, grid, past, horizon,
    /// durations).
    public static func plan(_ command: CreateBooking, room: Room?, now: Date) -> Result<SeriesPlan, ReplyError> {
        guard let recurrence = command.recurrence else {
            return .failure(ReplyError(code: .invalidField, text: "recurrence is missing", field: "recurrence"))
        }
        let policy: ConflictPolicy
        switch conflictPolicy(command.onConflict, hasRecurrence: true) {
        case .failure(let error): return .failure(error)
        case .success(let p): policy = p
        }
        let options: HoldOptions
        switch BookingRules.holdOptions(command) {
        case .failure(let error): return .failure(error)
        case .success(let value): options = value
        }
        guard let room else {
            return .failure(ReplyError(code: .unknownRoom, text: "unknown room \"\(command.room)\"", field: "room"))
        }
        guard let zone = TimeZone(identifier: room.timeZone) else {
            return .failure(ReplyError(code: .invalidField, text: "room \(room.name) has an unknown time zone", field: "room"))
        }
        let texts: (title: String, description: String?)
        switch BookingRules.text(title: command.title, description: command.description) {
        case .success(let value): texts = value
        case .failure(let error): return .failure(error)
        }
        let people: [Attendee]
        switch BookingRules.attendees(command.attendees, capacity: room.capacity) {
        case .success(let value): people = value
        case .failure(let error): return .failure(error)
        }
        let first: String
        switch BookingRules.resolveDate(command.date, zone: zone, now: now) {
        case .success(let text): first = text
        case .failure(let error): return .failure(error)
        }
        let dates: [String]
        switch Self.dates(first: first, recurrence: recurrence) {
        case .success(let d): dates = d
        case .failure(let error): return .failure(error)
        }
        var occurrences: [SeriesPlan.Occurrence] = []
        occurrences.reserveCapacity(dates.count)
        for date in dates {
            let slot = BookingRules.slot(room: room, date: .calendarDate(date), start: command.start, end: command.end, now: now)
            if case .failure(let error) = slot, policy == .reject {
                var refusal = error
                refusal.date = date
                refusal.text = "\(date): \(error.text)"
                return .failure(refusal)
            }
            occurrences.append(SeriesPlan.Occurrence(date: date, slot: slot))
        }
        var plan = SeriesPlan(room: room, recurrence: recurrence, policy: policy, title: texts.title,
                              description: texts.description, attendees: people,
                              status: BookingRules.initialStatus(requiresApproval: room.requiresApproval),
                              occurrences: occurrences)
        plan.waitlist = options.waitlist
        return .success(plan)
    }

    /// The 2000 that refuses a series with `"reject"`: every conflicting
    /// booking and every occurrence date that conflicts.
    public static func conflictRefusal(room: Room, conflicts: [(date: String, ids: [String])]) -> ReplyError {
        var ids: [String] = []
        for entry in conflicts { for id in entry.ids where !ids.contains(id) { ids.append(id) } }
        let dates = conflicts.map(\.date)
        let more = dates.count > 1 ? " (and \(dates.count - 1) more date\(dates.count > 2 ? "s" : ""))" : ""
        return ReplyError(code: .overlap, text: "\(room.name) is already booked on \(dates[0])\(more); nothing was booked",
                          field: "start", conflicts: ids, conflictDates: dates)
    }
}

/// A recurring `booking.create` after ``SeriesRules/plan(_:room:now:)``:
/// everything but the overlap checks, which need the write transaction.
public struct SeriesPlan: Sendable {
    /// One date of the recurrence: its slot, or why it breaks a room rule
    /// (only with `"skip"`; with `"reject"` the plan is refused instead).
    public struct Occurrence: Sendable {
        public let date: String
        public let slot: Result<BookingSlot, ReplyError>
    }

    public let room: Room
    public let recurrence: Recurrence
    public let policy: ConflictPolicy
    public let title: String
    public let description: String?
    public let attendees: [Attendee]
    /// Each new occurrence's status (pending in rooms that need approval).
    public let status: BookingStatus
    public let occurrences: [Occurrence]
    /// `"ifTaken": "waitlist"` (v1.2): an occurrence refused only for a
    /// conflict is booked as `waitlisted` instead of refused or skipped.
    public var waitlist: Bool = false
}
