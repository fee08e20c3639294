/// A reply or gateway error code: 4 digits, as in the legacy room API.
///
/// Encodes as a bare JSON integer. Unknown values are kept (gateway codes
/// above 4000 are not enumerated).
public struct ErrorCode: RawRepresentable, Codable, Hashable, Sendable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    /// The numeric code.
    public let rawValue: Int

    /// Wraps any integer code.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Wraps any integer code.
    public init(_ rawValue: Int) { self.rawValue = rawValue }
    /// `let code: ErrorCode = 2000`.
    public init(integerLiteral value: Int) { self.rawValue = value }

    /// Decodes a bare integer.
    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(Int.self)
    }

    /// Encodes a bare integer.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    /// The number as text.
    public var description: String { String(rawValue) }

    /// 1000: the body is not valid JSON / not the expected shape.
    public static let invalidJSON = ErrorCode(1000)
    /// 1001: unknown command type.
    public static let unknownCommand = ErrorCode(1001)
    /// 1009: the idempotency key was already used by the same sender for a
    /// different command (another type or another body) — contract v1.1.
    public static let idempotencyKeyReused = ErrorCode(1009)
    /// 1010: too many commands or queries from this caller (v1.2);
    /// `retryAfterMs` says when to try again. Never stored in the inbox.
    public static let rateLimited = ErrorCode(1010)
    /// 1100: a field is missing or invalid (`field` names it).
    public static let invalidField = ErrorCode(1100)
    /// 1101: unknown room.
    public static let unknownRoom = ErrorCode(1101)
    /// 1102: outside the room's opening hours.
    public static let outsideOpeningHours = ErrorCode(1102)
    /// 1103: not on the 15-minute grid.
    public static let offGrid = ErrorCode(1103)
    /// 1104: end is not after start.
    public static let endNotAfterStart = ErrorCode(1104)
    /// 1105: start is in the past.
    public static let startInPast = ErrorCode(1105)
    /// 1106: more attendees than the room's capacity.
    public static let overCapacity = ErrorCode(1106)
    /// 1107: the start date is beyond the room's `horizonDays` (v1.1).
    public static let beyondHorizon = ErrorCode(1107)
    /// 1108: the duration is outside the room's `minMinutes`…`maxMinutes` (v1.1).
    public static let durationOutOfRange = ErrorCode(1108)
    /// 1110: attendee name invalid.
    public static let attendeeNameInvalid = ErrorCode(1110)
    /// 1111: attendee email invalid.
    public static let attendeeEmailInvalid = ErrorCode(1111)
    /// 1112: the room is closed then (v1.2); `closure` names the closure.
    public static let roomClosed = ErrorCode(1112)
    /// 1113: the requester's quota of active bookings in this room is used
    /// (v1.2); `limit` is the room's `maxActiveBookings`.
    public static let quotaExceeded = ErrorCode(1113)
    /// 3000: attendee phone number invalid.
    public static let attendeePhoneInvalid = ErrorCode(3000)
    /// 2000: overlaps an existing booking (`conflicts` lists them).
    public static let overlap = ErrorCode(2000)
    /// 2001: booking not found.
    public static let bookingNotFound = ErrorCode(2001)
    /// 2002: status change not allowed from the current status.
    public static let statusChangeNotAllowed = ErrorCode(2002)
    /// 2003: not permitted for this requester.
    public static let notPermitted = ErrorCode(2003)
    /// 2004: too late to change this booking (v1.1): inside the room's
    /// change cutoff, a reschedule of a booking that has started, or any
    /// change of one that has ended.
    public static let tooLateToChange = ErrorCode(2004)
    /// 2005: check-in not possible now (v1.1): earlier than 15 minutes
    /// before the start, after the end, or after the booking's release.
    public static let checkinNotPossible = ErrorCode(2005)

    /// Every code of the contract's table (without the open range > 4000).
    public static let allKnown: [ErrorCode] = [
        .invalidJSON, .unknownCommand, .idempotencyKeyReused, .rateLimited, .invalidField, .unknownRoom, .outsideOpeningHours, .offGrid,
        .endNotAfterStart, .startInPast, .overCapacity, .beyondHorizon, .durationOutOfRange, .roomClosed, .quotaExceeded, .attendeeNameInvalid,
        .attendeeEmailInvalid, .attendeePhoneInvalid, .overlap, .bookingNotFound, .statusChangeNotAllowed, .notPermitted,
        .tooLateToChange, .checkinNotPossible,
    ]

    /// Codes above 4000: the pass gateway failed to deliver the pass at `index`.
    public var isPassDeliveryFailure: Bool { rawValue > 4000 }

    /// The meaning from the contract's table, or nil for codes not in it.
    public var meaning: String? {
        switch rawValue {
        case 1000: "body is not valid JSON / not the expected shape"
        case 1001: "unknown command type"
        case 1009: "idempotency key already used for a different command"
        case 1010: "too many commands or queries from this caller"
        case 1100: "a field is missing or invalid"
        case 1101: "unknown room"
        case 1102: "outside the room's opening hours"
        case 1103: "not on the 15-minute grid"
        case 1104: "end is not after start"
        case 1105: "start is in the past"
        case 1106: "more attendees than the room's capacity"
        case 1107: "beyond the room's booking horizon"
        case 1108: "duration outside the room's limits"
        case 1110: "attendee name invalid"
        case 1111: "attendee email invalid"
        case 1112: "the room is closed then"
        case 1113: "the requester's quota of active bookings in this room is used"
        case 3000: "attendee phone number invalid"
        case 2000: "overlaps an existing booking"
        case 2001: "booking not found"
        case 2002: "status change not allowed from the current status"
        case 2003: "not permitted for this requester"
        case 2004: "too late to change this booking"
        case 2005: "check-in not possible now"
        case 4001...: "pass delivery failed"
        default: nil
        }
    }
}
