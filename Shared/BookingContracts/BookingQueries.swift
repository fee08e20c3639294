import Foundation

/// Reading bookings (contract v1.1, "Reading bookings"): the requests the
/// booking handler answers on the queue ``Topology/bookingQueriesQueue``.
public enum BookingQueryType: String, CaseIterable, Codable, Sendable, Hashable {
    /// One booking by id. Body: ``GetBooking``.
    case get = "booking.get"
    /// Bookings in a window, filtered, paged. Body: ``ListBookings``.
    case list = "booking.list"
    /// A room's closures (v1.2). Body: ``ListClosures``.
    case closures = "room.closures"

    /// The request type of a delivery: the `type` property when present and
    /// not empty, else the body's `query` field, else the routing key (on
    /// the `booking.queries` exchange the routing key is the query type; on
    /// the default exchange it is the queue's name). Nil when none names a
    /// known query.
    public static func resolve(typeProperty: String?, bodyQuery: String?, routingKey: String) -> BookingQueryType? {
        if let typeProperty, !typeProperty.isEmpty { return BookingQueryType(rawValue: typeProperty) }
        if let bodyQuery, !bodyQuery.isEmpty { return BookingQueryType(rawValue: bodyQuery) }
        return BookingQueryType(rawValue: routingKey)
    }
}

/// `booking.get` body: `{"bookingId": "…"}`.
public struct GetBooking: Codable, Sendable, Equatable {
    /// The booking's id.
    public var bookingId: String
    /// The request type, when the body names it (`"booking.get"`).
    public var query: String?

    /// Creates the query.
    public init(bookingId: String, query: String? = nil) {
        self.bookingId = bookingId
        self.query = query
    }
}

/// `room.closures` body (v1.2): `{"room": "Berlin", "from": …, "to": …}`;
/// the closures of the room overlapping [from, to), in start order. Without
/// `from` and `to`, every closure that has not ended.
public struct ListClosures: Codable, Sendable, Equatable {
    /// The room's name.
    public var room: String
    /// Window start: an instant or a local date of the room.
    public var from: WindowBound?
    /// Window end (exclusive): an instant or a local date of the room.
    public var to: WindowBound?
    /// The request type, when the body names it (`"room.closures"`).
    public var query: String?

    /// Creates the query.
    public init(room: String, from: WindowBound? = nil, to: WindowBound? = nil, query: String? = nil) {
        self.room = room
        self.from = from
        self.to = to
        self.query = query
    }
}

/// A bound of a `booking.list` window: a UTC instant
/// (`2026-11-23T00:00:00Z`) or a local date (`2026-11-23`: the start of
/// that day in each room's own zone).
public enum WindowBound: Codable, Sendable, Equatable {
    /// An instant.
    case instant(Date)
    /// A calendar date `YYYY-MM-DD`, local to each booking's room.
    case date(String)

    /// Parses the wire form; nil when it is neither a UTC instant nor a real
    /// calendar date.
    public init?(text: String) {
        if let instant = ContractFormat.parseTimestamp(text) {
            self = .instant(instant)
        } else if ContractFormat.calendarDate(text) != nil {
            self = .date(text)
        } else {
            return nil
        }
    }

    /// The wire form.
    public var text: String {
        switch self {
        case .instant(let date): ContractFormat.timestamp(date)
        case .date(let text): text
        }
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let bound = WindowBound(text: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath,
                                                    debugDescription: "not a UTC instant or a YYYY-MM-DD date: \(text.prefix(60))"))
        }
        self = bound
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

/// `booking.list` body. `from` and `to` are required; a booking is listed
/// when it overlaps [from, to).
public struct ListBookings: Codable, Sendable, Equatable {
    /// Most bookings per page.
    public static let maxLimit = 1000
    /// Bookings per page when `limit` is not given.
    public static let defaultLimit = 100
    /// Longest window, in days.
    public static let maxWindowDays = 366

    /// Window start (inclusive).
    public var from: WindowBound
    /// Window end (exclusive).
    public var to: WindowBound
    /// Only this room.
    public var room: String?
    /// Only these statuses (as strings on the wire; an unknown one is 1100).
    public var status: [String]?
    /// Only bookings whose `requestedBy` is this broker user.
    public var requestedBy: String?
    /// Only bookings with an attendee of this e-mail address whose contact
    /// details the caller may see.
    public var attendeeEmail: String?
    /// Only occurrences of this series.
    public var seriesId: String?
    /// Page size, 1…``maxLimit``; default ``defaultLimit``.
    public var limit: Int?
    /// The `nextCursor` of the previous page.
    public var cursor: String?
    /// The request type, when the body names it (`"booking.list"`).
    public var query: String?

    /// Creates the query.
    public init(from: WindowBound, to: WindowBound, room: String? = nil, status: [String]? = nil,
                requestedBy: String? = nil, attendeeEmail: String? = nil, seriesId: String? = nil,
                limit: Int? = nil, cursor: String? = nil, query: String? = nil) {
        self.from = from
        self.to = to
        self.room = room
        self.status = status
        self.requestedBy = requestedBy
        self.attendeeEmail = attendeeEmail
        self.seriesId = seriesId
        self.limit = limit
        self.cursor = cursor
        self.query = query
    }
}

/// An attendee as read back by someone who may not see contact details:
/// `name` only (contract v1.1, privacy rule); with them, all three fields.
public struct AttendeeView: Codable, Sendable, Equatable {
    /// Display name.
    public var name: String
    /// E-mail; omitted when the reader may not see it.
    public var email: String?
    /// E.164 phone; omitted when the reader may not see it.
    public var phone: String?

    /// The attendee, with or without contact details.
    public init(_ attendee: Attendee, contacts: Bool) {
        name = attendee.name
        email = contacts ? attendee.email : nil
        phone = contacts ? attendee.phone : nil
    }
}

/// Which view of a booking a reader gets (contract v1.2, "Other callers'
/// bookings are free/busy only").
public enum BookingVisibility: Sendable, Equatable {
    /// Everything: the booking's requester, an approver of its room, an
    /// admin; anonymous callers and admins for bookings made without
    /// `user_id`.
    case full
    /// When and where only: `id`, `room`, the times, `status`, `version`,
    /// `series` — no title, description, attendees or requester.
    case busy
}

/// A booking as `booking.get` and `booking.list` answer: ``Booking`` in
/// full, or its busy view (``BookingVisibility/busy``: no title,
/// description, attendees, requester or cancel reason) for readers who are
/// not its requester, an approver of its room or an admin.
public struct BookingView: Codable, Sendable, Equatable {
    public var id: String
    public var room: String
    public var date: String
    public var start: String
    public var end: String
    public var timeZone: String
    public var startsAt: String
    public var endsAt: String
    /// Nil in the busy view.
    public var title: String?
    public var description: String?
    public var status: BookingStatus
    /// Nil in the busy view.
    public var attendees: [AttendeeView]?
    public var requestedBy: String?
    public var version: Int
    public var cancelReason: String?
    /// The series the booking is an occurrence of (v1.1).
    public var series: SeriesRef?
    /// When a hold lapses (v1.2); full view only.
    public var holdExpiresAt: String?
    /// A waitlisted booking's current place (v1.2); full view only.
    public var waitlist: WaitlistPlace?

    /// The view of `booking`; `contacts` false drops e-mail and phone.
    public init(_ booking: Booking, contacts: Bool) {
        id = booking.id
        room = booking.room
        date = booking.date
        start = booking.start
        end = booking.end
        timeZone = booking.timeZone
        startsAt = booking.startsAt
        endsAt = booking.endsAt
        title = booking.title
        description = booking.description
        status = booking.status
        attendees = booking.attendees.map { AttendeeView($0, contacts: contacts) }
        requestedBy = booking.requestedBy
        version = booking.version
        cancelReason = booking.cancelReason
        series = booking.series
        holdExpiresAt = booking.holdExpiresAt
        waitlist = booking.waitlist
    }

    /// The view of `booking` a reader with `visibility` gets.
    public init(_ booking: Booking, visibility: BookingVisibility) {
        switch visibility {
        case .full: self.init(booking, contacts: true)
        case .busy: self.init(busy: booking)
        }
    }

    /// The busy view: when and where, nothing about who or what.
    public init(busy booking: Booking) {
        id = booking.id
        room = booking.room
        date = booking.date
        start = booking.start
        end = booking.end
        timeZone = booking.timeZone
        startsAt = booking.startsAt
        endsAt = booking.endsAt
        status = booking.status
        version = booking.version
        series = booking.series
    }

    /// Whether this is a busy view (it has no title).
    public var isBusy: Bool { title == nil }
}

/// The reply to a booking query: `{"ok":true,"booking":{…}}` (get),
/// `{"ok":true,"bookings":[…],"nextCursor":"…"|null}` (list) or
/// `{"ok":false,"error":{…}}`.
public enum BookingQueryReply: Codable, Sendable, Equatable {
    /// `booking.get`.
    case booking(BookingView)
    /// `booking.list`: one page, and the cursor of the next (nil: last page).
    case bookings([BookingView], nextCursor: String?)
    /// `room.closures` (v1.2).
    case closures([RoomClosure])
    /// Failure.
    case error(ReplyError)

    private enum CodingKeys: String, CodingKey {
        case ok, booking, bookings, nextCursor, closures, error
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if try c.decode(Bool.self, forKey: .ok) {
            if c.contains(.booking) {
                self = .booking(try c.decode(BookingView.self, forKey: .booking))
            } else if c.contains(.closures) {
                self = .closures(try c.decode([RoomClosure].self, forKey: .closures))
            } else {
                self = .bookings(try c.decode([BookingView].self, forKey: .bookings),
                                 nextCursor: try c.decodeIfPresent(String.self, forKey: .nextCursor))
            }
        } else {
            self = .error(try c.decode(ReplyError.self, forKey: .error))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .booking(let b):
            try c.encode(true, forKey: .ok)
            try c.encode(b, forKey: .booking)
        case .bookings(let list, let cursor):
            try c.encode(true, forKey: .ok)
            try c.encode(list, forKey: .bookings)
            // The contract shows `"nextCursor": null` on the last page.
            if let cursor { try c.encode(cursor, forKey: .nextCursor) } else { try c.encodeNil(forKey: .nextCursor) }
        case .closures(let list):
            try c.encode(true, forKey: .ok)
            try c.encode(list, forKey: .closures)
        case .error(let e):
            try c.encode(false, forKey: .ok)
            try c.encode(e, forKey: .error)
        }
    }
}

/// A booking event as `booking.public` carries it (contract v1.2): the
/// busy view of the booking and of `previous` (times and status only);
/// owners read their details with `booking.get`.
public struct PublicBookingEvent: Codable, Sendable, Equatable {
    /// The event's id (the same as on `booking.events`).
    public var eventId: String
    /// UTC instant of the change.
    public var occurredAt: String
    /// The booking after the change, busy view.
    public var booking: BookingView
    /// The times and status before the change.
    public var previous: PublicSnapshot?
    /// As on the event: `true` on a release for want of check-in.
    public var released: Bool?
    /// As on the event: `true` on a promotion from the waitlist (v1.2).
    public var promoted: Bool?

    /// The public form of `event`.
    public init(_ event: BookingEvent) {
        eventId = event.eventId
        occurredAt = event.occurredAt
        booking = BookingView(busy: event.booking)
        previous = event.previous.map(PublicSnapshot.init)
        released = event.released
        promoted = event.promoted
    }
}

/// ``BookingSnapshot`` in the busy view: times and status only.
public struct PublicSnapshot: Codable, Sendable, Equatable {
    public var date: String
    public var start: String
    public var end: String
    public var startsAt: String
    public var endsAt: String
    public var status: BookingStatus

    /// The snapshot's times and status.
    public init(_ snapshot: BookingSnapshot) {
        date = snapshot.date
        start = snapshot.start
        end = snapshot.end
        startsAt = snapshot.startsAt
        endsAt = snapshot.endsAt
        status = snapshot.status
    }
}
