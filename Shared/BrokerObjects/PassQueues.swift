import AMQPClient
import BookingContracts

/// The pass sender's private broker objects (all names start with
/// `pass-sender.`, as the contract requires), see docs/pass-sender.md.
public enum PassQueues {
    /// Work queue of retry messages: the delay queues dead-letter into it
    /// when a message's TTL is over, and `bookingctl passes failed retry`
    /// publishes into it directly. Quorum, dead-letters poison to
    /// `booking.dead-letter` → `pass-sender.retry.dead` like a contract
    /// service queue.
    public static let retry = "pass-sender.retry"
    /// `pass-sender.retry.delay.<label>`: one quorum queue per configured
    /// delay, `x-message-ttl` = the delay, dead-lettering (at-least-once)
    /// through the default exchange into ``retry``. Nothing consumes them.
    public static func delay(_ delay: RetryDelay) -> String { "pass-sender.retry.delay.\(delay.label)" }
    /// Audit trail of passes an operator discarded (`bookingctl passes failed
    /// discard`): the `passes.failed` message with the reason in headers.
    public static let discarded = "pass-sender.discarded"
    /// The AMQP `type` of a retry message.
    public static let retryMessageType = "pass-sender.retry"

    /// Everything the pass sender declares: the contract's exchanges,
    /// `pass-sender.events` (+ `.dead`), `passes.failed`, and its own queues
    /// for the given delays.
    public static func declarations(delays: [RetryDelay]) -> [TopologyItem] {
        var items = ContractTopology.declarations(queues: [Topology.passSenderEventsQueue, Topology.passesFailedQueue])
        items += ownQueues(delays: delays)
        return items
    }

    /// The `pass-sender.*` queues alone (bookingctl declares these without
    /// delay queues, which it never touches).
    public static func ownQueues(delays: [RetryDelay]) -> [TopologyItem] {
        var items: [TopologyItem] = [
            .queue(QueueDeclaration(retry, type: .quorum, deadLetterExchange: Topology.deadLetterExchange,
                                    deadLetterRoutingKey: Topology.deadLetterRoutingKey(for: retry),
                                    deliveryLimit: Topology.serviceQueueDeliveryLimit)),
            .queue(QueueDeclaration(Topology.deadLetterQueue(for: retry), type: .quorum)),
            .binding(QueueBinding(queue: Topology.deadLetterQueue(for: retry), exchange: Topology.deadLetterExchange,
                                  routingKey: Topology.deadLetterRoutingKey(for: retry))),
            .queue(QueueDeclaration(discarded, type: .quorum)),
        ]
        var seen = Set<RetryDelay>()
        for d in delays where seen.insert(d).inserted {
            items.append(.queue(QueueDeclaration(
                delay(d), type: .quorum, deadLetterExchange: Topology.defaultExchange, deadLetterRoutingKey: retry,
                messageTTLMilliseconds: d.milliseconds,
                arguments: ["x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"])))
        }
        return items
    }
}

/// A retry message's headers, for the management UI (the message itself
/// is a format of the contracts: `BookingContracts.PassRetryMessage`).
extension PassRetryMessage {
    /// Headers that make a retry message readable in the management UI.
    public var headers: AMQPTable {
        [
            "booking-id": .string(bookingId),
            "booking-version": .int64(Int64(version)),
            "attendee-indexes": .string(passes.map { String($0.attendeeIndex) }.joined(separator: ",")),
            "attempts": .int64(Int64(passes.map(\.attempts).max() ?? 0)),
            "retry-kind": .string(kind.rawValue),
            "notice-kind": .string(noticeKind.rawValue),
        ]
    }
}

/// Headers of a `passes.failed` message (shown in RabbitMQ's management UI).
public enum FailedPassHeaders {
    /// The headers for `failed`: every field of the body except room details
    /// other than the room name and date.
    public static func headers(for failed: FailedPass) -> AMQPTable {
        var h: AMQPTable = [
            "booking-id": .string(failed.bookingId),
            "booking-version": .int64(Int64(failed.version)),
            "notice-kind": .string(failed.noticeKind.rawValue),
            "attendee-index": .int64(Int64(failed.attendeeIndex)),
            "attendee-name": .string(failed.name),
            "attendee-email": .string(failed.email),
            "attendee-phone": .string(failed.phone),
            "attempts": .int64(Int64(failed.attempts)),
            "first-failure-at": .string(failed.firstFailureAt),
            "last-failure-at": .string(failed.lastFailureAt),
            "last-error-text": .string(failed.lastErrorText),
            "room": .string(failed.room),
            "date": .string(failed.date),
        ]
        if let code = failed.lastErrorCode { h["last-error-code"] = .int64(Int64(code.rawValue)) }
        return h
    }
}
