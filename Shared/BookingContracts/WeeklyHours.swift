/// A room's opening hours on one day (contract v1.2, "Availability
/// calendars"): open from `opens` to `closes` (minutes after local
/// midnight), or closed all day.
public enum DayHours: Sendable, Equatable {
    case open(opens: Int, closes: Int)
    case closed
}

/// `room.register`'s `hours`: per weekday `["HH:mm", "HH:mm"]`, or `null`
/// for closed; a weekday missing from the object uses the room's
/// `opens`/`closes`.
public enum WeeklyHours {
    /// The weekday keys, Monday first (ISO 8601 order).
    public static let keys = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    /// English names of the weekdays, in ``keys`` order, for texts.
    static let names = ["Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays"]

    /// The ISO weekday of a calendar date, 0 = Monday … 6 = Sunday.
    public static func weekdayIndex(year: Int, month: Int, day: Int) -> Int {
        // 1970-01-01 was a Thursday (index 3).
        let days = CivilDays.days(year: year, month: month, day: day)
        return Int(((days % 7) + 7 + 3) % 7)
    }

    /// The ISO weekday of `YYYY-MM-DD`, nil when it is not a date.
    public static func weekdayIndex(of date: String) -> Int? {
        guard let d = ContractFormat.calendarDate(date) else { return nil }
        return weekdayIndex(year: d.year, month: d.month, day: d.day)
    }

    /// `"closed on Saturdays"` for weekday index 5.
    public static func closedText(weekday: Int) -> String {
        "closed on \(names[max(0, min(6, weekday))])"
    }
}

extension Room {
    /// The room's hours on a weekday (``WeeklyHours/weekdayIndex(of:)``):
    /// `hours[key]` when the key is present (`null`: closed), else
    /// `opens`/`closes`. Times that do not parse count as closed (a stored
    /// room always passed validation).
    public func hours(weekday: Int) -> DayHours {
        let key = WeeklyHours.keys[max(0, min(6, weekday))]
        if let hours, let entry = hours[key] {
            guard let pair = entry, pair.count == 2, let opens = ContractFormat.minutes(ofTime: pair[0]),
                  let closes = ContractFormat.minutes(ofTime: pair[1]), opens < closes else { return .closed }
            return .open(opens: opens, closes: closes)
        }
        guard let opens = ContractFormat.minutes(ofTime: self.opens), let closes = ContractFormat.minutes(ofTime: self.closes),
              opens < closes else { return .closed }
        return .open(opens: opens, closes: closes)
    }

    /// The room's hours on the calendar date `YYYY-MM-DD` (closed when it
    /// is not a date).
    public func hours(on date: String) -> DayHours {
        guard let weekday = WeeklyHours.weekdayIndex(of: date) else { return .closed }
        return hours(weekday: weekday)
    }

    /// ``bufferMinutes`` as seconds (0 when none).
    public var bufferSeconds: Double { Double(bufferMinutes ?? 0) * 60 }
}
