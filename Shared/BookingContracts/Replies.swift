/// The `error` object of a failed reply.
public struct ReplyError: Codable, Sendable, Equatable, Error {
    /// 4-digit code (``ErrorCode``).
    public var code: ErrorCode
    /// Human-readable text, e.g. `Berlin is already booked 09:00-10:00`.
    public var text: String
    /// The offending field (path such as `start` or `attendees[0].email`); omitted when nil.
    public var field: String?
    /// Ids of the conflicting bookings (code 2000); omitted when nil.
    public var conflicts: [String]?

    /// Creates an error.
    public init(code: ErrorCode, text: String, field: String? = nil, conflicts: [String]? = nil) {
        self.code = code
        self.text = text
        self.field = field
        self.conflicts = conflicts
    }
}

/// The one reply to a command that had `reply_to`:
/// `{"ok":true,"booking":{…}}` (booking commands),
/// `{"ok":true,"room":{…}}` (`room.register`),
/// `{"ok":true,"replay":{…}}` (`booking.replay`) or
/// `{"ok":false,"error":{…}}`.
public enum CommandReply: Codable, Sendable, Equatable {
    /// Success of a booking command: the booking after the change.
    case booking(Booking)
    /// Success of `room.register`: the room with defaults applied.
    case room(Room)
    /// Success of `booking.replay`: what was published.
    case replay(ReplaySummary)
    /// Failure.
    case error(ReplyError)

    /// A failure reply.
    public static func failure(_ code: ErrorCode, _ text: String, field: String? = nil,
                               conflicts: [String]? = nil) -> CommandReply {
        .error(ReplyError(code: code, text: text, field: field, conflicts: conflicts))
    }

    /// The `ok` member.
    public var isOK: Bool {
        if case .error = self { return false }
        return true
    }

    private enum CodingKeys: String, CodingKey {
        case ok, booking, room, replay, error
    }

    /// Decodes by `ok`, then `booking` or `room`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if try c.decode(Bool.self, forKey: .ok) {
            if c.contains(.booking) {
                self = .booking(try c.decode(Booking.self, forKey: .booking))
            } else if c.contains(.room) {
                self = .room(try c.decode(Room.self, forKey: .room))
            } else if c.contains(.replay) {
                self = .replay(try c.decode(ReplaySummary.self, forKey: .replay))
            } else {
                throw DecodingError.keyNotFound(
                    CodingKeys.booking,
                    .init(codingPath: c.codingPath, debugDescription: "ok reply without booking or room"))
            }
        } else {
            self = .error(try c.decode(ReplyError.self, forKey: .error))
        }
    }

    /// Encodes `ok` and exactly one of `booking`, `room`, `error`.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .booking(let booking):
            try c.encode(true, forKey: .ok)
            try c.encode(booking, forKey: .booking)
        case .room(let room):
            try c.encode(true, forKey: .ok)
            try c.encode(room, forKey: .room)
        case .replay(let summary):
            try c.encode(true, forKey: .ok)
            try c.encode(summary, forKey: .replay)
        case .error(let error):
            try c.encode(false, forKey: .ok)
            try c.encode(error, forKey: .error)
        }
    }
}
