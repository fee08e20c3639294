/// A room closed from one instant to another (contract v1.2, "Availability
/// calendars"): holidays, maintenance. Bookings overlapping it are refused
/// (1112) and those it covered when it was made were cancelled.
public struct RoomClosure: Codable, Sendable, Equatable, Hashable {
    /// The closure's id (`room.reopen` names it).
    public var id: String
    /// The room's name.
    public var room: String
    /// First instant closed, UTC (`…Z`), on the 15-minute grid.
    public var from: String
    /// First instant open again, UTC (`…Z`), exclusive.
    public var to: String
    /// Why, e.g. `holidays`; cancelled bookings carry `room closed: <reason>`.
    public var reason: String

    /// Creates a closure.
    public init(id: String, room: String, from: String, to: String, reason: String) {
        self.id = id
        self.room = room
        self.from = from
        self.to = to
        self.reason = reason
    }
}

/// `room.close` body: close a room. `from` and `to` are instants on the
/// 15-minute grid or local dates (`YYYY-MM-DD`, the start of that day in the
/// room's zone: `to` is exclusive).
public struct CloseRoom: Codable, Sendable, Equatable {
    /// The room's name.
    public var room: String
    /// Start: an instant (`…Z` or with offset) or a local date.
    public var from: String
    /// End (exclusive): an instant or a local date.
    public var to: String
    /// Why; required, 1 to ``ContractLimits/maxReasonBytes`` bytes.
    public var reason: String

    /// Creates a command.
    public init(room: String, from: String, to: String, reason: String) {
        self.room = room
        self.from = from
        self.to = to
        self.reason = reason
    }
}

/// `room.reopen` body: remove a closure (cancelled bookings stay cancelled).
public struct ReopenRoom: Codable, Sendable, Equatable {
    /// The room's name.
    public var room: String
    /// The closure's id, as `room.close` answered it.
    public var closureId: String

    /// Creates a command.
    public init(room: String, closureId: String) {
        self.room = room
        self.closureId = closureId
    }
}

/// The members of a `room.close` or `room.reopen` reply beside `ok`:
/// `{"ok": true, "closure": {…}, "cancelled": [ …bookings, in the
/// caller's view… ]}`; `room.reopen` answers the closure it removed, without
/// `cancelled`.
public struct ClosureReply: Codable, Sendable, Equatable {
    /// The closure stored (close) or removed (reopen).
    public var closure: RoomClosure
    /// The bookings the closure cancelled or ended, after the change, each
    /// in the caller's view (``BookingView``); nil for `room.reopen`.
    public var cancelled: [BookingView]?

    /// Creates a reply.
    public init(closure: RoomClosure, cancelled: [BookingView]?) {
        self.closure = closure
        self.cancelled = cancelled
    }
}

/// Body of `room.closed` and `room.reopened`.
public struct RoomClosureEvent: Codable, Sendable, Equatable {
    /// Unique event id; also the message's `message_id`.
    public var eventId: String
    /// UTC instant.
    public var occurredAt: String
    /// The closure made or removed.
    public var closure: RoomClosure

    /// Creates the event.
    public init(eventId: String, occurredAt: String, closure: RoomClosure) {
        self.eventId = eventId
        self.occurredAt = occurredAt
        self.closure = closure
    }
}
