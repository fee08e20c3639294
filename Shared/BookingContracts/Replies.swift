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
    /// A refused series (v1.1): the local dates of the occurrences that
    /// conflict (code 2000).
    public var conflictDates: [String]?
    /// A refused series (v1.1): the local date of the occurrence that
    /// breaks a room rule (11xx codes).
    public var date: String?
    /// A rate-limited request (1010, v1.2): milliseconds until the caller's
    /// next request would be admitted.
    public var retryAfterMs: Int?
    /// The room's quota of active bookings per requester (1113, v1.2).
    public var limit: Int?
    /// The closure a booking would fall into (1112, v1.2).
    public var closure: RoomClosure?

    /// Creates an error.
    public init(code: ErrorCode, text: String, field: String? = nil, conflicts: [String]? = nil,
                conflictDates: [String]? = nil, date: String? = nil, retryAfterMs: Int? = nil, limit: Int? = nil,
                closure: RoomClosure? = nil) {
        self.code = code
        self.text = text
        self.field = field
        self.conflicts = conflicts
        self.conflictDates = conflictDates
        self.date = date
        self.retryAfterMs = retryAfterMs
        self.limit = limit
        self.closure = closure
    }
}

/// The one reply to a command that had `reply_to`:
/// `{"ok":true,"booking":{…}}` (booking commands),
/// `{"ok":true,"room":{…}}` (`room.register`),
/// `{"ok":true,"replay":{…}}` (`booking.replay`),
/// `{"ok":true,"series":{…}}` (a recurring create or a cancel by series) or
/// `{"ok":false,"error":{…}}`.
public enum CommandReply: Codable, Sendable, Equatable {
    /// Success of a booking command: the booking after the change.
    case booking(Booking)
    /// Success of a booking command on a booking the caller reads busy
    /// (contract v1.2: an approver acting on a booking made without
    /// `user_id`): the booking after the change, times and status only.
    case bookingView(BookingView)
    /// Success of `room.register`: the room with defaults applied.
    case room(Room)
    /// Success of `booking.replay`: what was published.
    case replay(ReplaySummary)
    /// Success of a recurring `booking.create` (v1.1): the series.
    case series(SeriesBooked)
    /// Success of `booking.cancel` by `seriesId` (v1.1).
    case seriesCancelled(SeriesCancelled)
    /// Success of `room.close` (the closure and what it cancelled) or
    /// `room.reopen` (the closure removed, `cancelled` nil) (v1.2).
    case closure(ClosureReply)
    /// Failure.
    case error(ReplyError)

    /// A failure reply.
    public static func failure(_ code: ErrorCode, _ text: String, field: String? = nil,
                               conflicts: [String]? = nil) -> CommandReply {
        .error(ReplyError(code: code, text: text, field: field, conflicts: conflicts))
    }

    /// The `ok` member.
    /// The booking of a `.booking` reply, else nil.
    public var bookingValue: Booking? {
        if case .booking(let booking) = self { return booking }
        return nil
    }

    /// The room of a `.room` reply, else nil.
    public var roomValue: Room? {
        if case .room(let room) = self { return room }
        return nil
    }

    /// The error of an `.error` reply, else nil.
    public var errorValue: ReplyError? {
        if case .error(let error) = self { return error }
        return nil
    }

    public var isOK: Bool {
        if case .error = self { return false }
        return true
    }

    private enum CodingKeys: String, CodingKey {
        case ok, booking, room, replay, series, closure, error
    }

    /// Tells the two `series` replies apart.
    private enum SeriesKeys: String, CodingKey {
        case cancelled
    }

    /// Decodes by `ok`, then `booking` or `room`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if try c.decode(Bool.self, forKey: .ok) {
            if c.contains(.booking) {
                // In full, or (no title) the busy view.
                let view = try c.decode(BookingView.self, forKey: .booking)
                self = view.title == nil ? .bookingView(view) : .booking(try c.decode(Booking.self, forKey: .booking))
            } else if c.contains(.room) {
                self = .room(try c.decode(Room.self, forKey: .room))
            } else if c.contains(.replay) {
                self = .replay(try c.decode(ReplaySummary.self, forKey: .replay))
            } else if c.contains(.closure) {
                self = .closure(try ClosureReply(from: decoder))
            } else if c.contains(.series) {
                if try c.nestedContainer(keyedBy: SeriesKeys.self, forKey: .series).contains(.cancelled) {
                    self = .seriesCancelled(try c.decode(SeriesCancelled.self, forKey: .series))
                } else {
                    self = .series(try c.decode(SeriesBooked.self, forKey: .series))
                }
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
        case .bookingView(let view):
            try c.encode(true, forKey: .ok)
            try c.encode(view, forKey: .booking)
        case .room(let room):
            try c.encode(true, forKey: .ok)
            try c.encode(room, forKey: .room)
        case .replay(let summary):
            try c.encode(true, forKey: .ok)
            try c.encode(summary, forKey: .replay)
        case .series(let series):
            try c.encode(true, forKey: .ok)
            try c.encode(series, forKey: .series)
        case .seriesCancelled(let series):
            try c.encode(true, forKey: .ok)
            try c.encode(series, forKey: .series)
        case .closure(let reply):
            try c.encode(true, forKey: .ok)
            try reply.encode(to: encoder)
        case .error(let error):
            try c.encode(false, forKey: .ok)
            try c.encode(error, forKey: .error)
        }
    }
}
