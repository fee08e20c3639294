/// Command types: the AMQP `type` property of a command and its routing key
/// on ``Topology/commandsExchange``.
public enum CommandType: String, CaseIterable, Codable, Sendable, Hashable {
    /// Create or replace a room (upsert by name). Body: ``RegisterRoom``.
    case registerRoom = "room.register"
    /// Book a room. Body: ``CreateBooking``.
    case createBooking = "booking.create"
    /// pending → confirmed. Body: ``ConfirmBooking``.
    case confirmBooking = "booking.confirm"
    /// pending/confirmed → cancelled. Body: ``CancelBooking``.
    case cancelBooking = "booking.cancel"
    /// pending → rejected, by an approver or admin (v1.1). Body: ``RejectBooking``.
    case rejectBooking = "booking.reject"
    /// Move a booking. Body: ``RescheduleBooking``.
    case rescheduleBooking = "booking.reschedule"
    /// Change a booking's title, description or attendees (v1.1). Body: ``UpdateBooking``.
    case updateBooking = "booking.update"
    /// confirmed → inProgress: someone is in the room (v1.1). Body: ``CheckinBooking``.
    case checkinBooking = "booking.checkin"
    /// Publish the current state of every room and booking to a named
    /// `availability-projector.*` queue. Body: ``ReplayBookings``.
    case replayBookings = "booking.replay"
    /// Close a room for a while, cancelling what that covers (v1.2). Body: ``CloseRoom``.
    case closeRoom = "room.close"
    /// Remove a closure (v1.2). Body: ``ReopenRoom``.
    case reopenRoom = "room.reopen"

    /// The command type of a delivery: the `type` property when present and
    /// not empty, else the routing key. Returns nil when the chosen value is
    /// not a known command type (reply with ``ErrorCode/unknownCommand``).
    public static func resolve(typeProperty: String?, routingKey: String) -> CommandType? {
        if let typeProperty, !typeProperty.isEmpty { return CommandType(rawValue: typeProperty) }
        return CommandType(rawValue: routingKey)
    }
}

/// Event types: the AMQP `type` property of an event and its routing key on
/// ``Topology/eventsExchange``.
public enum EventType: String, CaseIterable, Codable, Sendable, Hashable {
    /// The name an event goes by: its `type` property, else (absent or
    /// empty) its routing key — the same rule as for commands. Consumers
    /// log and count by this text even when it names no known type.
    public static func name(typeProperty: String?, routingKey: String) -> String {
        if let typeProperty, !typeProperty.isEmpty { return typeProperty }
        return routingKey
    }

    /// A room was created or replaced. Body: ``RoomRegistered``.
    case roomRegistered = "room.registered"
    /// A room was closed for a while (v1.2). Body: ``RoomClosureEvent``.
    case roomClosed = "room.closed"
    /// A closure was removed (v1.2). Body: ``RoomClosureEvent``.
    case roomReopened = "room.reopened"
    /// A booking was created (pending or confirmed). Body: ``BookingEvent``.
    case bookingCreated = "booking.created"
    /// A pending booking was confirmed. Body: ``BookingEvent``.
    case bookingConfirmed = "booking.confirmed"
    /// A booking was cancelled. Body: ``BookingEvent``.
    case bookingCancelled = "booking.cancelled"
    /// A booking was moved. Body: ``BookingEvent``.
    case bookingRescheduled = "booking.rescheduled"
    /// A pending booking was rejected (v1.1). Body: ``BookingEvent``.
    case bookingRejected = "booking.rejected"
    /// A booking's title, description or attendees changed (v1.1). Body: ``BookingEvent``.
    case bookingUpdated = "booking.updated"
    /// A booking began: checked in, or started by itself at its start (v1.1). Body: ``BookingEvent``.
    case bookingStarted = "booking.started"
    /// An in-progress booking reached its end (v1.1). Body: ``BookingEvent``.
    case bookingCompleted = "booking.completed"
    /// A held or waitlisted booking now awaits approval (v1.2). Body: ``BookingEvent``.
    case bookingSubmitted = "booking.submitted"
    /// One attendee's pass was delivered. Body: ``PassDelivered``.
    case passDelivered = "pass.delivered"
    /// One attendee's pass was given up on. Body: ``PassFailedEvent``.
    case passFailed = "pass.failed"
    /// A room's free ranges on a date changed. Body: ``AvailabilityChanged``.
    case availabilityChanged = "availability.changed"

    /// True for the events whose body is a ``BookingEvent``.
    public var isBookingEvent: Bool {
        switch self {
        case .bookingCreated, .bookingConfirmed, .bookingCancelled, .bookingRescheduled, .bookingRejected,
             .bookingUpdated, .bookingStarted, .bookingCompleted, .bookingSubmitted: true
        default: false
        }
    }
}

/// AMQP message properties and headers of the contract, with the rules that
/// combine them.
public enum MessageProperties {
    /// `content_type` of every message.
    public static let contentType = "application/json"
    /// `delivery_mode` of every message: persistent.
    public static let persistentDeliveryMode: UInt8 = 2
    /// Header that carries the idempotency key of a command for clients that
    /// cannot set `message_id`.
    public static let idempotencyKeyHeader = "idempotency-key"
    /// The longest idempotency key, in UTF-8 bytes: what `message_id` (an
    /// AMQP short string) can hold; a longer header gets 1100.
    public static let maxIdempotencyKeyBytes = 255
    /// RabbitMQ's direct reply-to pseudo queue; a valid `reply_to`.
    public static let directReplyTo = "amq.rabbitmq.reply-to"
    /// `type` of a command reply (``CommandReply``).
    public static let replyType = "reply"
    /// `type` of a booking query's reply (`booking.get`, `booking.list`, `room.closures`).
    public static let bookingReplyType = "booking.reply"
    /// `type` of an availability reply (``AvailabilityReply``).
    public static let availabilityReplyType = "availability.reply"
    /// `type` of a `passes.failed` message (``FailedPass``).
    public static let failedPassType = "passes.failed"

    /// The idempotency key of a command: its `message_id`, else the
    /// `idempotency-key` header; nil (process every time) when neither is a
    /// non-empty string.
    public static func idempotencyKey(messageID: String?, idempotencyKeyHeader: String?) -> String? {
        if let messageID, !messageID.isEmpty { return messageID }
        if let idempotencyKeyHeader, !idempotencyKeyHeader.isEmpty { return idempotencyKeyHeader }
        return nil
    }

    /// The `correlation_id` of a reply: the command's `correlation_id` when it
    /// set one, else its `message_id` (nil when it had neither).
    public static func replyCorrelationID(correlationID: String?, messageID: String?) -> String? {
        if let correlationID, !correlationID.isEmpty { return correlationID }
        if let messageID, !messageID.isEmpty { return messageID }
        return nil
    }
}
