/// How a series repeats (contract v1.1, "Recurring bookings"): every
/// occurrence is an ordinary booking on its own local date.
public struct Recurrence: Codable, Sendable, Equatable {
    /// The repetition (``Frequency``); kept as text so an unknown value
    /// gets a 1100 naming `recurrence.frequency`, not a shapeless 1000.
    public var frequency: String
    /// The last local date an occurrence may fall on (inclusive),
    /// `YYYY-MM-DD`; exactly one of ``until`` and ``count``.
    public var until: String?
    /// How many occurrences the recurrence generates (1…366).
    public var count: Int?

    /// Creates a recurrence.
    public init(frequency: String, until: String? = nil, count: Int? = nil) {
        self.frequency = frequency
        self.until = until
        self.count = count
    }

    /// Creates a recurrence of a known frequency.
    public init(_ frequency: Frequency, until: String? = nil, count: Int? = nil) {
        self.init(frequency: frequency.rawValue, until: until, count: count)
    }

    /// The repetitions of the contract.
    public enum Frequency: String, Sendable, CaseIterable {
        /// Every day.
        case daily
        /// Monday to Friday (local dates); Saturdays and Sundays are not occurrences.
        case weekdays
        /// Every 7 days.
        case weekly
        /// Every 14 days.
        case biweekly
        /// The same day of every month; months without that day are skipped.
        case monthly
    }

    /// Most occurrences a series may have.
    public static let maxOccurrences = 366
}

/// What `booking.create` does with occurrences that conflict or break a
/// room rule (contract v1.1).
public enum ConflictPolicy: String, Codable, Sendable, CaseIterable {
    /// One such occurrence refuses the whole series; nothing is booked.
    case reject
    /// Those occurrences are skipped and listed; the rest are booked.
    case skip
}

/// The `series` object every occurrence of a series carries.
public struct SeriesRef: Codable, Sendable, Equatable {
    /// The series id (assigned by the handler).
    public var id: String
    /// 0-based position among the booked occurrences, in date order.
    public var index: Int
    /// How many occurrences were booked (skipped dates are not counted):
    /// the number of bookings a consumer will see announced for the series.
    public var count: Int
    /// Grows with every change of the series as a whole (a cancel by
    /// `seriesId`); a change of one occurrence changes only its booking's
    /// `version`.
    public var version: Int

    /// Creates a reference.
    public init(id: String, index: Int, count: Int, version: Int) {
        self.id = id
        self.index = index
        self.count = count
        self.version = version
    }
}

/// An occurrence `booking.create` with `"onConflict": "skip"` did not book.
public struct SkippedOccurrence: Codable, Sendable, Equatable {
    /// The occurrence's local date.
    public var date: String
    /// Why: 2000 (overlap) or the 11xx code of the room rule it breaks.
    public var code: ErrorCode
    /// The same in words.
    public var text: String
    /// The conflicting bookings (code 2000).
    public var conflicts: [String]?
    /// The occurrence a cancel by `seriesId` left alone (code 2004).
    public var bookingId: String?

    /// Creates an entry.
    public init(date: String, code: ErrorCode, text: String, conflicts: [String]? = nil, bookingId: String? = nil) {
        self.date = date
        self.code = code
        self.text = text
        self.conflicts = conflicts
        self.bookingId = bookingId
    }
}

/// The reply's `series` to a recurring `booking.create`.
public struct SeriesBooked: Codable, Sendable, Equatable {
    /// The series id.
    public var id: String
    /// The recurrence as given.
    public var recurrence: Recurrence
    /// 1.
    public var version: Int
    /// One booking per booked occurrence, in date order.
    public var bookings: [Booking]
    /// The occurrences not booked (`"skip"` only), in date order.
    public var skipped: [SkippedOccurrence]

    /// Creates a reply body.
    public init(id: String, recurrence: Recurrence, version: Int, bookings: [Booking], skipped: [SkippedOccurrence]) {
        self.id = id
        self.recurrence = recurrence
        self.version = version
        self.bookings = bookings
        self.skipped = skipped
    }
}

/// The reply's `series` to `booking.cancel` by `seriesId`.
public struct SeriesCancelled: Codable, Sendable, Equatable {
    /// The series id.
    public var id: String
    /// The series' version after the cancel.
    public var version: Int
    /// The occurrences this command cancelled, in date order (empty when
    /// none was left to cancel), each in the caller's view (contract v1.2:
    /// an approver ending occurrences in progress of a series it sees busy
    /// gets them busy).
    public var cancelled: [BookingView]
    /// Occurrences on or after `from` that are still active but too late
    /// to cancel (2004, the room's change cutoff); ended ones are not listed.
    public var skipped: [SkippedOccurrence]

    /// Creates a reply body.
    public init(id: String, version: Int, cancelled: [BookingView], skipped: [SkippedOccurrence] = []) {
        self.id = id
        self.version = version
        self.cancelled = cancelled
        self.skipped = skipped
    }
}

/// `booking.cancel` by `seriesId` (contract v1.1): every occurrence on or
/// after `from` (a local date in the room's zone), all when absent.
public struct CancelSeries: Codable, Sendable, Equatable {
    /// The series.
    public var seriesId: String
    /// First local date to cancel, `YYYY-MM-DD`; nil: every occurrence.
    public var from: String?
    /// Optional free text; becomes each occurrence's ``Booking/cancelReason``.
    public var reason: String?
    /// Present only in a malformed command that names both a booking and
    /// a series (refused with 1100).
    public var bookingId: String?

    /// Creates the command.
    public init(seriesId: String, from: String? = nil, reason: String? = nil, bookingId: String? = nil) {
        self.seriesId = seriesId
        self.from = from
        self.reason = reason
        self.bookingId = bookingId
    }
}
