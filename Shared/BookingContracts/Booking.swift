/// A room with every default applied: what `room.registered` and a
/// `room.register` reply carry.
public struct Room: Codable, Sendable, Equatable {
    /// Default ``timeZone``.
    public static let defaultTimeZone = "Europe/Berlin"
    /// Default ``opens``.
    public static let defaultOpens = "07:00"
    /// Default ``closes``.
    public static let defaultCloses = "19:00"
    /// Most ``images`` a room may have.
    public static let maxImages = 3

    /// Unique name.
    public var name: String
    /// Free text; omitted when not set.
    public var location: String?
    /// Equipment tags; `[]` when none.
    public var equipment: [String]
    /// Free text; omitted when not set.
    public var size: String?
    /// Maximum attendees.
    public var capacity: Int
    /// Image URLs (≤ 3); `[]` when none.
    public var images: [String]
    /// IANA time zone.
    public var timeZone: String
    /// Local opening time `HH:mm`.
    public var opens: String
    /// Local closing time `HH:mm`.
    public var closes: String
    /// Whether new bookings start `pending`.
    public var requiresApproval: Bool
    /// Broker users (AMQP `user_id`) who may confirm pending bookings of
    /// this room (contract v1.1, "Room policies"); omitted when none.
    public var approvers: [String]?
    /// A booking's local start date is at most this many calendar days
    /// after today in the room's zone (1107); omitted: no limit.
    public var horizonDays: Int?
    /// Shortest booking in real elapsed minutes (1108); omitted: no limit.
    public var minMinutes: Int?
    /// Longest booking in real elapsed minutes (1108); omitted: no limit.
    public var maxMinutes: Int?
    /// Reschedule and cancel of a booking that has not started are refused
    /// later than this before its start, admins excepted (2004); omitted:
    /// no cutoff.
    public var changeCutoffMinutes: Int?
    /// Check-in required (`booking.checkin`); a confirmed booking nobody
    /// checked in is released this many minutes after its start (v1.1);
    /// omitted: bookings start by themselves.
    public var autoReleaseMinutes: Int?
    /// Opening hours per weekday (v1.2): keys `mon`…`sun`, each
    /// `["HH:mm", "HH:mm"]` or `null` (closed that day); a weekday not named
    /// uses ``opens``/``closes``. Omitted when not set (``hours(weekday:)``).
    public var hours: [String: [String]?]?
    /// Two blocking bookings of the room are at least this many minutes
    /// apart (v1.2); omitted: none.
    public var bufferMinutes: Int?
    /// One requester (`user_id`) may hold at most this many bookings of
    /// the room that have not ended (v1.2, 1113); admins excepted;
    /// omitted: no limit.
    public var maxActiveBookings: Int?

    /// Creates a room; defaults as in the contract.
    public init(name: String, location: String? = nil, equipment: [String] = [], size: String? = nil,
                capacity: Int, images: [String] = [], timeZone: String = Room.defaultTimeZone,
                opens: String = Room.defaultOpens, closes: String = Room.defaultCloses,
                requiresApproval: Bool = false, approvers: [String]? = nil, horizonDays: Int? = nil,
                minMinutes: Int? = nil, maxMinutes: Int? = nil, changeCutoffMinutes: Int? = nil,
                autoReleaseMinutes: Int? = nil, hours: [String: [String]?]? = nil, bufferMinutes: Int? = nil,
                maxActiveBookings: Int? = nil) {
        self.name = name
        self.location = location
        self.equipment = equipment
        self.size = size
        self.capacity = capacity
        self.images = images
        self.timeZone = timeZone
        self.opens = opens
        self.closes = closes
        self.requiresApproval = requiresApproval
        self.approvers = approvers.flatMap { $0.isEmpty ? nil : $0 }
        self.horizonDays = horizonDays
        self.minMinutes = minMinutes
        self.maxMinutes = maxMinutes
        self.changeCutoffMinutes = changeCutoffMinutes
        self.autoReleaseMinutes = autoReleaseMinutes
        self.hours = hours
        self.bufferMinutes = bufferMinutes
        self.maxActiveBookings = maxActiveBookings
    }
}

/// Booking status.
public enum BookingStatus: String, Codable, Sendable, Hashable, CaseIterable {
    /// Waiting for `booking.confirm` (room has `requiresApproval`).
    case pending
    /// Booked.
    case confirmed
    /// Under way: checked in, or started by itself at its start (v1.1).
    case inProgress
    /// Reached its end while in progress (v1.1); final.
    case completed
    /// Cancelled; final.
    case cancelled
    /// Rejected by an approver or admin while pending (v1.1); final.
    case rejected
    /// Reserved for a few minutes until its requester confirms it
    /// (``Booking/holdExpiresAt``, v1.2); blocks the slot, gets no pass.
    case held
    /// Waiting for a taken slot (v1.2): blocks nothing, gets no pass, and
    /// is promoted when the slot comes free.
    case waitlisted
}

/// An attendee as stored and published: the phone is E.164 (`+491701234567`).
public struct Attendee: Codable, Sendable, Equatable {
    /// Display name.
    public var name: String
    /// E-mail address.
    public var email: String
    /// E.164 phone number.
    public var phone: String

    /// Creates an attendee.
    public init(name: String, email: String, phone: String) {
        self.name = name
        self.email = email
        self.phone = phone
    }
}

/// A booking as events and replies carry it.
public struct Booking: Codable, Sendable, Equatable {
    /// Opaque unique id, assigned by the booking handler.
    public var id: String
    /// Room name.
    public var room: String
    /// Local calendar date `YYYY-MM-DD` in ``timeZone``.
    public var date: String
    /// Local start `HH:mm`.
    public var start: String
    /// Local end `HH:mm`.
    public var end: String
    /// The room's IANA zone at booking time.
    public var timeZone: String
    /// Start instant, UTC, `2026-11-23T08:00:00Z` (``ContractFormat/timestamp(_:)``).
    public var startsAt: String
    /// End instant, UTC, same form.
    public var endsAt: String
    /// Title.
    public var title: String
    /// Longer text; omitted when not given.
    public var description: String?
    /// Current status.
    public var status: BookingStatus
    /// Attendees (≥ 1), phones normalised.
    public var attendees: [Attendee]
    /// The broker `user_id` of the creating command; omitted when it had none.
    public var requestedBy: String?
    /// 1 on creation, +1 with every change.
    public var version: Int
    /// The `reason` of `booking.cancel` or `booking.reject`: why the booking
    /// ended; only on cancelled and rejected bookings, omitted when none was
    /// given. The handler's timers write `"released: nobody checked in"`
    /// and `"expired"`.
    public var cancelReason: String?
    /// The series this booking is an occurrence of (v1.1); omitted for a
    /// single booking.
    public var series: SeriesRef?
    /// When a `held` booking lapses unless confirmed (v1.2): the earlier
    /// of its creation plus the hold's minutes and its start; omitted
    /// otherwise (kept after the hold ends, as a record).
    public var holdExpiresAt: String?
    /// Where a `waitlisted` booking stands (v1.2). Only in replies and
    /// reads, computed when they are answered; never stored or published.
    public var waitlist: WaitlistPlace?

    /// Creates a booking.
    public init(id: String, room: String, date: String, start: String, end: String, timeZone: String,
                startsAt: String, endsAt: String, title: String, description: String? = nil,
                status: BookingStatus, attendees: [Attendee], requestedBy: String? = nil, version: Int,
                cancelReason: String? = nil, series: SeriesRef? = nil, holdExpiresAt: String? = nil,
                waitlist: WaitlistPlace? = nil) {
        self.id = id
        self.room = room
        self.date = date
        self.start = start
        self.end = end
        self.timeZone = timeZone
        self.startsAt = startsAt
        self.endsAt = endsAt
        self.title = title
        self.description = description
        self.status = status
        self.attendees = attendees
        self.requestedBy = requestedBy
        self.version = version
        self.cancelReason = cancelReason
        self.series = series
        self.holdExpiresAt = holdExpiresAt
        self.waitlist = waitlist
    }
}
