/// Body of `booking.created`, `booking.confirmed`, `booking.cancelled`,
/// `booking.rescheduled`: the whole booking after the change.
///
/// Consumers drop an event whose `booking.version` is not newer than the
/// one they already have.
public struct BookingEvent: Codable, Sendable, Equatable {
    /// Unique event id; also the message's `message_id`.
    public var eventId: String
    /// UTC instant of the change, `2026-11-22T10:00:00Z`.
    public var occurredAt: String
    /// The booking after the change.
    public var booking: Booking
    /// The booking's fields as they were before this change (v1.1); absent
    /// on a booking's first `booking.created` and the `booking.confirmed`
    /// published with it at version 1, and on replayed state.
    public var previous: BookingSnapshot?
    /// `true` on the `booking.cancelled` of a booking released because
    /// nobody checked in (v1.1, ``Room/autoReleaseMinutes``); absent
    /// otherwise.
    public var released: Bool?
    /// `true` on the `booking.confirmed` (or `booking.submitted`) of a
    /// waitlisted booking promoted because its slot came free (v1.2);
    /// absent otherwise.
    public var promoted: Bool?

    /// Creates the event.
    public init(eventId: String, occurredAt: String, booking: Booking, previous: BookingSnapshot? = nil,
                released: Bool? = nil, promoted: Bool? = nil) {
        self.eventId = eventId
        self.occurredAt = occurredAt
        self.booking = booking
        self.previous = previous
        self.released = released
        self.promoted = promoted
    }
}

/// What a booking event's `previous` carries (contract v1.1): the fields a
/// change can touch, as they were before it.
public struct BookingSnapshot: Codable, Sendable, Equatable {
    /// Local date before the change.
    public var date: String
    /// Local start before the change.
    public var start: String
    /// Local end before the change.
    public var end: String
    /// Start instant before the change.
    public var startsAt: String
    /// End instant before the change.
    public var endsAt: String
    /// Title before the change.
    public var title: String
    /// Description before the change; omitted when there was none.
    public var description: String?
    /// Attendees before the change.
    public var attendees: [Attendee]
    /// Status before the change.
    public var status: BookingStatus

    /// The snapshot of `booking`.
    public init(_ booking: Booking) {
        date = booking.date
        start = booking.start
        end = booking.end
        startsAt = booking.startsAt
        endsAt = booking.endsAt
        title = booking.title
        description = booking.description
        attendees = booking.attendees
        status = booking.status
    }
}

/// Body of `room.registered`: the room with every default applied.
public struct RoomRegistered: Codable, Sendable, Equatable {
    /// Unique event id; also the message's `message_id`.
    public var eventId: String
    /// UTC instant.
    public var occurredAt: String
    /// The room as now registered.
    public var room: Room

    /// Creates the event.
    public init(eventId: String, occurredAt: String, room: Room) {
        self.eventId = eventId
        self.occurredAt = occurredAt
        self.room = room
    }
}

/// How a pass left the pass sender.
public enum PassChannel: String, Codable, Sendable, Hashable, CaseIterable {
    /// Sent through the sendpass gateway (`PASS_GATEWAY_URL`).
    case gateway
    /// Written to `$DATA_DIR/outbox/` (no gateway configured).
    case outbox
}

/// Body of `pass.delivered`: one attendee's pass for one booking version was
/// delivered.
public struct PassDelivered: Codable, Sendable, Equatable {
    /// Unique event id; also the message's `message_id`.
    public var eventId: String
    /// UTC instant of delivery.
    public var occurredAt: String
    /// ``Booking/id``.
    public var bookingId: String
    /// ``Booking/version`` the pass was made for.
    public var version: Int
    /// 0-based index into ``Booking/attendees``.
    public var attendeeIndex: Int
    /// Attendee name.
    public var name: String
    /// Attendee e-mail.
    public var email: String
    /// Attendee E.164 phone.
    public var phone: String
    /// Where it went; omitted when unknown.
    public var channel: PassChannel?

    /// Creates the event.
    public init(eventId: String, occurredAt: String, bookingId: String, version: Int, attendeeIndex: Int,
                name: String, email: String, phone: String, channel: PassChannel? = nil) {
        self.eventId = eventId
        self.occurredAt = occurredAt
        self.bookingId = bookingId
        self.version = version
        self.attendeeIndex = attendeeIndex
        self.name = name
        self.email = email
        self.phone = phone
        self.channel = channel
    }

    /// `<bookingId>:<version>:<attendeeIndex>`: identifies one pass.
    public var passKey: String { "\(bookingId):\(version):\(attendeeIndex)" }
}

/// Body of `pass.failed`: one attendee's pass was given up on after
/// ``attempts`` attempts (published together with the ``FailedPass`` on
/// `passes.failed`).
public struct PassFailedEvent: Codable, Sendable, Equatable {
    /// Unique event id; also the message's `message_id`.
    public var eventId: String
    /// UTC instant it was given up.
    public var occurredAt: String
    /// ``Booking/id``.
    public var bookingId: String
    /// ``Booking/version`` the pass was made for.
    public var version: Int
    /// 0-based index into ``Booking/attendees``.
    public var attendeeIndex: Int
    /// Attendee name.
    public var name: String
    /// Attendee e-mail.
    public var email: String
    /// Attendee E.164 phone.
    public var phone: String
    /// Where it was tried; omitted when unknown.
    public var channel: PassChannel?
    /// The gateway's last error code; omitted when the last attempt got none
    /// (network error, HTTP error without a JSON error body).
    public var errorCode: ErrorCode?
    /// The last error's text.
    public var errorText: String
    /// Attempts made (≥ 1).
    public var attempts: Int

    /// Creates the event.
    public init(eventId: String, occurredAt: String, bookingId: String, version: Int, attendeeIndex: Int,
                name: String, email: String, phone: String, channel: PassChannel? = nil,
                errorCode: ErrorCode?, errorText: String, attempts: Int) {
        self.eventId = eventId
        self.occurredAt = occurredAt
        self.bookingId = bookingId
        self.version = version
        self.attendeeIndex = attendeeIndex
        self.name = name
        self.email = email
        self.phone = phone
        self.channel = channel
        self.errorCode = errorCode
        self.errorText = errorText
        self.attempts = attempts
    }

    /// `<bookingId>:<version>:<attendeeIndex>`: identifies one pass.
    public var passKey: String { "\(bookingId):\(version):\(attendeeIndex)" }
}

/// Body of `availability.changed`: a room's free ranges on one local date.
public struct AvailabilityChanged: Codable, Sendable, Equatable {
    /// Unique event id; also the message's `message_id`.
    public var eventId: String
    /// UTC instant.
    public var occurredAt: String
    /// Room name.
    public var room: String
    /// Local date `YYYY-MM-DD`.
    public var date: String
    /// The room's IANA zone.
    public var timeZone: String
    /// Free ranges `HH:mm - HH:mm`, merged, in order; `[]` when fully booked.
    public var avail: [String]

    /// Creates the event.
    public init(eventId: String, occurredAt: String, room: String, date: String, timeZone: String,
                avail: [String]) {
        self.eventId = eventId
        self.occurredAt = occurredAt
        self.room = room
        self.date = date
        self.timeZone = timeZone
        self.avail = avail
    }
}

/// Any event body, tagged with its type.
public enum Event: Sendable, Equatable {
    /// `room.registered`.
    case roomRegistered(RoomRegistered)
    /// `booking.created` / `.confirmed` / `.cancelled` / `.rescheduled` (the type is kept).
    case booking(EventType, BookingEvent)
    /// `pass.delivered`.
    case passDelivered(PassDelivered)
    /// `pass.failed`.
    case passFailed(PassFailedEvent)
    /// `availability.changed`.
    case availabilityChanged(AvailabilityChanged)
    /// `room.closed` / `room.reopened` (v1.2; the type is kept).
    case roomClosure(EventType, RoomClosureEvent)

    /// The event's type.
    public var type: EventType {
        switch self {
        case .roomRegistered: .roomRegistered
        case .booking(let type, _): type
        case .passDelivered: .passDelivered
        case .passFailed: .passFailed
        case .availabilityChanged: .availabilityChanged
        case .roomClosure(let type, _): type
        }
    }

    /// The event's id.
    public var eventId: String {
        switch self {
        case .roomRegistered(let e): e.eventId
        case .booking(_, let e): e.eventId
        case .passDelivered(let e): e.eventId
        case .passFailed(let e): e.eventId
        case .availabilityChanged(let e): e.eventId
        case .roomClosure(_, let e): e.eventId
        }
    }

    /// Decodes a body of the given type (routing key or `type` property).
    public static func decode(type: EventType, body: [UInt8]) throws -> Event {
        switch type {
        case .roomRegistered: return .roomRegistered(try ContractJSON.decode(RoomRegistered.self, from: body))
        case .bookingCreated, .bookingConfirmed, .bookingCancelled, .bookingRescheduled, .bookingRejected, .bookingUpdated,
             .bookingStarted, .bookingCompleted, .bookingSubmitted:
            return .booking(type, try ContractJSON.decode(BookingEvent.self, from: body))
        case .passDelivered: return .passDelivered(try ContractJSON.decode(PassDelivered.self, from: body))
        case .passFailed: return .passFailed(try ContractJSON.decode(PassFailedEvent.self, from: body))
        case .availabilityChanged:
            return .availabilityChanged(try ContractJSON.decode(AvailabilityChanged.self, from: body))
        case .roomClosed, .roomReopened:
            return .roomClosure(type, try ContractJSON.decode(RoomClosureEvent.self, from: body))
        }
    }

    /// The JSON body of this event.
    public func encodedBody() throws -> [UInt8] {
        switch self {
        case .roomRegistered(let e): [UInt8](try ContractJSON.encode(e))
        case .booking(_, let e): [UInt8](try ContractJSON.encode(e))
        case .passDelivered(let e): [UInt8](try ContractJSON.encode(e))
        case .passFailed(let e): [UInt8](try ContractJSON.encode(e))
        case .availabilityChanged(let e): [UInt8](try ContractJSON.encode(e))
        case .roomClosure(_, let e): [UInt8](try ContractJSON.encode(e))
        }
    }
}
