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
    /// How many bookings one replayed message carries: absent or 1, one
    /// booking event per booking (the v1 stream); 2 to
    /// ``ReplayStream/maxBookingsPerMessage``, ``ReplayStream/pageType``
    /// messages of up to that many bookings each (see
    /// docs/contract/README.md, "Replay pages"). Anything else: 1100.
    public var bookingsPerMessage: Int?

    /// Creates the command.
    public init(queue: String, replayId: String? = nil, bookingsPerMessage: Int? = nil) {
        self.queue = queue
        self.replayId = replayId
        self.bookingsPerMessage = bookingsPerMessage
    }
}

/// The body of a ``ReplayStream/pageType`` message: the current state of
/// up to ``ReplayBookings/bookingsPerMessage`` bookings, in id order, each
/// exactly the `booking` member its one-booking replay event would carry.
/// The event type a consumer would have seen follows from each booking's
/// status (``ReplayStream/eventType(for:)``).
public struct ReplayPage: Codable, Sendable, Equatable {
    /// The bookings of this page.
    public var bookings: [Booking]

    /// Creates a page.
    public init(bookings: [Booking]) {
        self.bookings = bookings
    }

    /// A page body from bookings already encoded by ``ContractJSON``
    /// (the handler keeps each booking's JSON as stored): the same bytes
    /// ``ContractJSON`` writes for a ``ReplayPage`` of those bookings,
    /// without decoding and encoding every booking again.
    public static func body<C: Collection>(encodedBookings: C) -> [UInt8] where C.Element == [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(encodedBookings.reduce(14) { $0 + $1.count + 1 })
        body.append(contentsOf: #"{"bookings":["#.utf8)
        var first = true
        for booking in encodedBookings {
            if !first { body.append(UInt8(ascii: ",")) }
            first = false
            body.append(contentsOf: booking)
        }
        body.append(contentsOf: "]}".utf8)
        return body
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
    /// `type` of a message carrying several bookings (body ``ReplayPage``),
    /// sent instead of one event per booking when the request asks for
    /// ``ReplayBookings/bookingsPerMessage`` above 1.
    public static let pageType = "booking.replay.page"
    /// The most bookings one ``pageType`` message may carry.
    public static let maxBookingsPerMessage = 1_000
    /// The most bytes of booking JSON one ``pageType`` message carries: a
    /// page ends early rather than pass it (bookings with long
    /// descriptions and many attendees run to several KB each, and the
    /// broker refuses messages above its `max_message_size`, 1 MiB as
    /// shipped). A booking larger than this alone is a page of one, no
    /// larger than its single replay event would be.
    public static let maxPageBytes = 512 * 1024

    /// Splits `sizes` (each booking's encoded size, in order) into
    /// consecutive pages of at most `perPage` bookings and, unless a page
    /// holds a single booking, at most ``maxPageBytes`` bytes; returns each
    /// page's range of indices.
    public static func pages(sizes: [Int], perPage: Int, maxBytes: Int = maxPageBytes) -> [Range<Int>] {
        var pages: [Range<Int>] = []
        var start = 0, bytes = 0
        for (index, size) in sizes.enumerated() {
            if index > start && (index - start >= perPage || bytes + size + 1 > maxBytes) {
                pages.append(start..<index)
                start = index
                bytes = 0
            }
            bytes += size + 1
        }
        if start < sizes.count { pages.append(start..<sizes.count) }
        return pages
    }

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
