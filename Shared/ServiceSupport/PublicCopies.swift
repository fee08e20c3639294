import AMQPClient
import Logging

/// The copies of events the set publishes on `booking.public`, the
/// exchange outside systems follow with queues of their own.
///
/// An outside system may declare its queue with `x-overflow:
/// reject-publish` (a queue argument wins over the `outside-queues`
/// policy's `drop-head`) and stop reading it. RabbitMQ then nacks every
/// publish routed to that queue — although it delivered the same message
/// to every other queue bound. Retrying such a copy would repeat it to
/// every well-behaved follower and hold up the publisher's events for the
/// whole set, at a stranger's will. So a nacked public copy counts as
/// published: refused by a queue whose owner chose to refuse, counted in
/// `public_copies_refused_total` and logged at most once a minute. No
/// queue of the set reads `booking.public`; their copies (on
/// `booking.events`) are confirmed on their own and retried as ever.
public struct PublicCopies: Sendable {
    /// The publishing service's logger.
    let logger: Logger
    private let throttle = LogThrottle(interval: 60)

    public init(logger: Logger) {
        self.logger = logger
    }

    /// Public copies the broker refused (`basic.nack`) and that were
    /// counted as published.
    public static let refused = CounterFamily("public_copies_refused_total", labels: "event")

    /// The outcome that counts for a public copy's confirm `result`: nil
    /// (published) for a nack, `result` otherwise (a lost connection is
    /// still retried).
    public func settle(_ result: AMQPError?, routingKey: String) -> AMQPError? {
        guard let result, result.code == .nacked else { return result }
        Self.refused.increment(routingKey)
        if throttle.shouldLog(key: "refused") {
            logger.warning("an outside queue bound to booking.public refused an event (its own reject-publish bound); counted as published, not retried", metadata: [
                "amqp.exchange": "booking.public", "event.type": .string(routingKey),
                "note": "logged at most once a minute; public_copies_refused_total counts every one",
            ])
        }
        return nil
    }
}
