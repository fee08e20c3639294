/// `room.register` body: create or replace a room (upsert by ``name``).
///
/// Only ``name`` and ``capacity`` are required; everything else is optional
/// and gets the defaults of ``Room`` through ``resolved()``. Also the element
/// type of the `ROOMS_FILE` JSON array.
public struct RegisterRoom: Codable, Sendable, Equatable {
    /// Unique room name (the upsert key), e.g. `Berlin`.
    public var name: String
    /// Free text, e.g. `2nd floor`.
    public var location: String?
    /// Equipment tags, e.g. `["beamer", "tv"]`.
    public var equipment: [String]?
    /// Free text, e.g. `22m2`.
    public var size: String?
    /// Maximum number of attendees (≥ 1).
    public var capacity: Int
    /// Image URLs, at most 3 (``Room/maxImages``).
    public var images: [String]?
    /// IANA time zone; default `Europe/Berlin`.
    public var timeZone: String?
    /// Local opening time `HH:mm`; default `07:00`.
    public var opens: String?
    /// Local closing time `HH:mm`; default `19:00`.
    public var closes: String?
    /// Bookings start `pending` and need `booking.confirm`; default false.
    public var requiresApproval: Bool?
    /// Broker users who may confirm pending bookings of the room (v1.1).
    public var approvers: [String]?
    /// Room policies (v1.1): see ``Room/horizonDays`` and the others.
    public var horizonDays: Int?
    /// ``Room/minMinutes``.
    public var minMinutes: Int?
    /// ``Room/maxMinutes``.
    public var maxMinutes: Int?
    /// ``Room/changeCutoffMinutes``.
    public var changeCutoffMinutes: Int?
    /// ``Room/autoReleaseMinutes``.
    public var autoReleaseMinutes: Int?
    /// ``Room/hours`` (v1.2).
    public var hours: [String: [String]?]?
    /// ``Room/bufferMinutes`` (v1.2).
    public var bufferMinutes: Int?
    /// ``Room/maxActiveBookings`` (v1.2).
    public var maxActiveBookings: Int?

    /// Creates a command; omitted fields get defaults on ``resolved()``.
    public init(name: String, location: String? = nil, equipment: [String]? = nil, size: String? = nil,
                capacity: Int, images: [String]? = nil, timeZone: String? = nil, opens: String? = nil,
                closes: String? = nil, requiresApproval: Bool? = nil, approvers: [String]? = nil,
                horizonDays: Int? = nil, minMinutes: Int? = nil, maxMinutes: Int? = nil,
                changeCutoffMinutes: Int? = nil, autoReleaseMinutes: Int? = nil,
                hours: [String: [String]?]? = nil, bufferMinutes: Int? = nil, maxActiveBookings: Int? = nil) {
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
        self.approvers = approvers
        self.horizonDays = horizonDays
        self.minMinutes = minMinutes
        self.maxMinutes = maxMinutes
        self.changeCutoffMinutes = changeCutoffMinutes
        self.autoReleaseMinutes = autoReleaseMinutes
        self.hours = hours
        self.bufferMinutes = bufferMinutes
        self.maxActiveBookings = maxActiveBookings
    }

    /// The room with the contract's defaults applied. Does not validate.
    public func resolved() -> Room {
        Room(name: name, location: location, equipment: equipment ?? [], size: size, capacity: capacity,
             images: images ?? [], timeZone: timeZone ?? Room.defaultTimeZone, opens: opens ?? Room.defaultOpens,
             closes: closes ?? Room.defaultCloses, requiresApproval: requiresApproval ?? false, approvers: approvers,
             horizonDays: horizonDays, minMinutes: minMinutes, maxMinutes: maxMinutes,
             changeCutoffMinutes: changeCutoffMinutes, autoReleaseMinutes: autoReleaseMinutes, hours: hours,
             bufferMinutes: bufferMinutes, maxActiveBookings: maxActiveBookings)
    }
}

/// An attendee as a client sends it: all three fields required, kept as given
/// (the phone is normalised to E.164 into ``Attendee`` by the handler).
public struct AttendeeInput: Codable, Sendable, Equatable {
    /// Display name.
    public var name: String
    /// E-mail address.
    public var email: String
    /// Phone number in any common notation; without a country code it is German.
    public var phone: String

    /// Creates an attendee input.
    public init(name: String, email: String, phone: String) {
        self.name = name
        self.email = email
        self.phone = phone
    }
}

/// `booking.create` body.
public struct CreateBooking: Codable, Sendable, Equatable {
    /// Room name.
    public var room: String
    /// Local date (or `"today"` / UNIX seconds).
    public var date: DateSpec
    /// Local start `HH:mm`, on the 15-minute grid.
    public var start: String
    /// Local end `HH:mm`, on the grid, after ``start``.
    public var end: String
    /// Title shown on the passes; required and non-empty.
    public var title: String
    /// Optional longer text.
    public var description: String?
    /// At least one attendee, at most the room's capacity.
    public var attendees: [AttendeeInput]
    /// Books a series (v1.1): ``date`` is the first occurrence's date.
    public var recurrence: Recurrence?
    /// `"reject"` (default) or `"skip"` (``ConflictPolicy``); only with
    /// ``recurrence``.
    public var onConflict: String?
    /// Book the slot as `held` for a few minutes (v1.2); not with
    /// ``recurrence`` or ``ifTaken``.
    public var hold: HoldRequest?
    /// `"waitlist"` (``IfTaken``): wait when the slot is taken (v1.2).
    public var ifTaken: String?

    /// Creates the command.
    public init(room: String, date: DateSpec, start: String, end: String, title: String,
                description: String? = nil, attendees: [AttendeeInput], recurrence: Recurrence? = nil,
                onConflict: String? = nil, hold: HoldRequest? = nil, ifTaken: String? = nil) {
        self.room = room
        self.date = date
        self.start = start
        self.end = end
        self.title = title
        self.description = description
        self.attendees = attendees
        self.recurrence = recurrence
        self.onConflict = onConflict
        self.hold = hold
        self.ifTaken = ifTaken
    }
}

/// `booking.confirm` body: pending → confirmed.
public struct ConfirmBooking: Codable, Sendable, Equatable {
    /// The booking's ``Booking/id``.
    public var bookingId: String

    /// Creates the command.
    public init(bookingId: String) { self.bookingId = bookingId }
}

/// `booking.cancel` body: pending/confirmed → cancelled.
public struct CancelBooking: Codable, Sendable, Equatable {
    /// The booking's ``Booking/id``.
    public var bookingId: String
    /// Optional free text; becomes ``Booking/cancelReason``.
    public var reason: String?

    /// Creates the command.
    public init(bookingId: String, reason: String? = nil) {
        self.bookingId = bookingId
        self.reason = reason
    }
}

/// `booking.reject` body (v1.1): pending → rejected, by one of the room's
/// approvers or an admin.
public struct RejectBooking: Codable, Sendable, Equatable {
    /// The booking's ``Booking/id``.
    public var bookingId: String
    /// Optional free text; becomes ``Booking/cancelReason``.
    public var reason: String?

    /// Creates the command.
    public init(bookingId: String, reason: String? = nil) {
        self.bookingId = bookingId
        self.reason = reason
    }
}

/// `booking.reschedule` body: move a booking; same checks as create, passes
/// are sent again.
public struct RescheduleBooking: Codable, Sendable, Equatable {
    /// The booking's ``Booking/id``.
    public var bookingId: String
    /// New local date (or `"today"` / UNIX seconds).
    public var date: DateSpec
    /// New local start `HH:mm`.
    public var start: String
    /// New local end `HH:mm`.
    public var end: String

    /// Creates the command.
    public init(bookingId: String, date: DateSpec, start: String, end: String) {
        self.bookingId = bookingId
        self.date = date
        self.start = start
        self.end = end
    }
}

/// `booking.update` body (v1.1): the given fields replace the old ones,
/// checked with the create rules; status and time stay. Attendees are
/// identified by their normalised e-mail address, not by position.
public struct UpdateBooking: Codable, Sendable, Equatable {
    /// The booking's ``Booking/id``.
    public var bookingId: String
    /// New title, when given.
    public var title: String?
    /// New description, when given (`""` removes it).
    public var description: String?
    /// The new attendee list, when given (all create rules, capacity included).
    public var attendees: [AttendeeInput]?

    /// Creates the command.
    public init(bookingId: String, title: String? = nil, description: String? = nil, attendees: [AttendeeInput]? = nil) {
        self.bookingId = bookingId
        self.title = title
        self.description = description
        self.attendees = attendees
    }
}

/// `booking.checkin` body (v1.1): confirmed → inProgress, from 15 minutes
/// before the start until the end; required in rooms with
/// ``Room/autoReleaseMinutes``.
public struct CheckinBooking: Codable, Sendable, Equatable {
    /// The booking's ``Booking/id``.
    public var bookingId: String

    /// Creates the command.
    public init(bookingId: String) {
        self.bookingId = bookingId
    }
}

/// Any command body, tagged with its type.
public enum Command: Sendable, Equatable {
    /// `room.register`.
    case registerRoom(RegisterRoom)
    /// `booking.create`.
    case createBooking(CreateBooking)
    /// `booking.confirm`.
    case confirmBooking(ConfirmBooking)
    /// `booking.cancel`.
    case cancelBooking(CancelBooking)
    /// `booking.reject`.
    case rejectBooking(RejectBooking)
    /// `booking.reschedule`.
    case rescheduleBooking(RescheduleBooking)
    /// `booking.update`.
    case updateBooking(UpdateBooking)
    /// `booking.checkin`.
    case checkinBooking(CheckinBooking)
    /// `booking.replay`.
    case replayBookings(ReplayBookings)
    /// `booking.cancel` with `seriesId` (v1.1).
    case cancelSeries(CancelSeries)
    /// `room.close` (v1.2).
    case closeRoom(CloseRoom)
    /// `room.reopen` (v1.2).
    case reopenRoom(ReopenRoom)

    /// The command's type.
    public var type: CommandType {
        switch self {
        case .registerRoom: .registerRoom
        case .createBooking: .createBooking
        case .confirmBooking: .confirmBooking
        case .cancelBooking, .cancelSeries: .cancelBooking
        case .rejectBooking: .rejectBooking
        case .rescheduleBooking: .rescheduleBooking
        case .updateBooking: .updateBooking
        case .checkinBooking: .checkinBooking
        case .replayBookings: .replayBookings
        case .closeRoom: .closeRoom
        case .reopenRoom: .reopenRoom
        }
    }

    /// Decodes a body of the given type. Throws ``BodyTooLarge`` for a body
    /// over ``ContractLimits/maxBodyBytes`` (256 KiB), checked before any
    /// decoding so an oversized body costs nothing but its length, else
    /// `DecodingError`. Map either with ``ContractJSON/replyError(for:)``
    /// (1000 for the first: like any body that cannot be decoded, it is
    /// not a command the handler can run).
    public static func decode(type: CommandType, body: [UInt8]) throws -> Command {
        try ContractLimits.checkBody(body)
        switch type {
        case .registerRoom: return .registerRoom(try ContractJSON.decode(RegisterRoom.self, from: body))
        case .createBooking: return .createBooking(try ContractJSON.decode(CreateBooking.self, from: body))
        case .confirmBooking: return .confirmBooking(try ContractJSON.decode(ConfirmBooking.self, from: body))
        case .cancelBooking:
            // By `seriesId` (v1.1) when it names one, else by `bookingId`.
            if (try? ContractJSON.decode(CancelTarget.self, from: body))?.seriesId != nil {
                return .cancelSeries(try ContractJSON.decode(CancelSeries.self, from: body))
            }
            return .cancelBooking(try ContractJSON.decode(CancelBooking.self, from: body))
        case .rejectBooking: return .rejectBooking(try ContractJSON.decode(RejectBooking.self, from: body))
        case .rescheduleBooking:
            return .rescheduleBooking(try ContractJSON.decode(RescheduleBooking.self, from: body))
        case .updateBooking: return .updateBooking(try ContractJSON.decode(UpdateBooking.self, from: body))
        case .checkinBooking: return .checkinBooking(try ContractJSON.decode(CheckinBooking.self, from: body))
        case .replayBookings: return .replayBookings(try ContractJSON.decode(ReplayBookings.self, from: body))
        case .closeRoom: return .closeRoom(try ContractJSON.decode(CloseRoom.self, from: body))
        case .reopenRoom: return .reopenRoom(try ContractJSON.decode(ReopenRoom.self, from: body))
        }
    }

    /// The JSON body of this command.
    public func encodedBody() throws -> [UInt8] {
        switch self {
        case .registerRoom(let c): [UInt8](try ContractJSON.encode(c))
        case .createBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .confirmBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .cancelBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .rejectBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .rescheduleBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .updateBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .checkinBooking(let c): [UInt8](try ContractJSON.encode(c))
        case .replayBookings(let c): [UInt8](try ContractJSON.encode(c))
        case .cancelSeries(let c): [UInt8](try ContractJSON.encode(c))
        case .closeRoom(let c): [UInt8](try ContractJSON.encode(c))
        case .reopenRoom(let c): [UInt8](try ContractJSON.encode(c))
        }
    }

    /// Which kind of `booking.cancel` a body is.
    private struct CancelTarget: Decodable {
        var seriesId: String?
    }
}
