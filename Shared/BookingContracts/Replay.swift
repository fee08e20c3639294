/// `booking.replay` body: ask the booking handler to publish the current
/// state of every room and booking to a queue the requester names (used to
/// rebuild the availability projector's read model).
///
/// Permission (see docs/contract/README.md, "Replay (booking.replay)"):
/// the command must come without `user_id` or from one of the handler's
/// `ADMIN_USERS`, and ``queue`` must start with ``ReplayStream/queuePrefix``
/// and exist; otherwise the reply is 2003 (1100 for a missing queue).
public struct ReplayBookings: Codable, Sendable, Equatable {
    /// The queue to publish to (through the default exchange); must start
    /// with `availability-projector.`.
    public var queue: String
    /// The requester's id for this replay; echoed in every replayed
    /// message's `x-replay-id` header, the end marker and the reply.
    /// The handler makes one up when absent.
    public var replayId: String?

    /// Creates the command.
    public init(queue: String, replayId: String? = nil) {
        self.queue = queue
        self.replayId = replayId
    }
}

/// What a replay published: the `replay` member of the reply
/// (`{"ok":true,"replay":{…}}`) and the body of the end marker
/// (`type` = `booking.replay.done`) that follows the last replayed message.
public struct ReplaySummary: Codable, Sendable, Equatable {
    /// ``ReplayBookings/replayId`` (or the one the handler chose).
    public var replayId: String
    /// The queue the state was published to.
    public var queue: String
    /// How many `room.registered` messages were published.
    public var rooms: Int
    /// How many booking messages were published (every booking, cancelled ones included).
    public var bookings: Int
    /// How many `room.closed` messages were published, one per stored
    /// closure (v1.2); nil from a handler before v1.2.
    public var closures: Int?

    /// Creates a summary.
    public init(replayId: String, queue: String, rooms: Int, bookings: Int, closures: Int? = nil) {
        self.replayId = replayId
        self.queue = queue
        self.rooms = rooms
        self.bookings = bookings
        self.closures = closures
    }
}

/// The message stream a `booking.replay` produces on the named queue:
/// one `room.registered` per room, one `room.closed` per stored closure
/// (v1.2), then one booking event per booking
/// (`type` by status: `booking.created` for pending, `booking.confirmed`
/// for confirmed, `booking.started` for inProgress, `booking.completed`
/// for completed, `booking.cancelled` for cancelled, `booking.rejected`
/// for rejected; the body is the
/// ordinary ``BookingEvent`` with the booking's current `version`), every
/// message with header ``replayIdHeader``; then one end marker of type
/// ``endType`` whose body is a ``ReplaySummary``.
public enum ReplayStream {
    /// Queues a replay may publish to start with this prefix: the
    /// projector's replay queue (and any `availability-projector.replay.*`),
    /// never its live event or control queues, where a replay would only be
    /// noise.
    public static let queuePrefix = "availability-projector.replay"
    /// Header carrying ``ReplayBookings/replayId`` on every replayed message.
    public static let replayIdHeader = "x-replay-id"
    /// `type` of the end marker (body ``ReplaySummary``).
    public static let endType = "booking.replay.done"

    /// The event type under which a booking in `status` is replayed.
    public static func eventType(for status: BookingStatus) -> EventType {
        switch status {
        case .pending, .held, .waitlisted: .bookingCreated
        case .confirmed: .bookingConfirmed
        case .inProgress: .bookingStarted
        case .completed: .bookingCompleted
        case .cancelled: .bookingCancelled
        case .rejected: .bookingRejected
        }
    }
}
