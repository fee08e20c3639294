import AMQPClient
import BookingContracts
import Foundation
import Logging
import Synchronization

/// The first look at every delivery to a queue outside systems write to
/// (`booking-handler.commands`, `booking.queries`, `availability.queries`),
/// before anything is decoded or looked up (contract v1.2):
///
/// 1. **Foreign routing.** An event of the contract routed into the queue
///    (``ForeignRouting``) is ignored: the caller acks it, and nothing is
///    executed, answered or dead-lettered. Counted per queue, logged at
///    most once a minute per queue (an outside binding may copy every
///    event of the set: a line each would flood the log).
/// 2. **Rate.** The caller takes a token (``CallerRateLimiter``); a
///    redelivery takes none (its first delivery paid), so a requeue after a
///    database error is never turned into a 1010.
public struct IntakeGate: Sendable {
    /// What to do with a delivery.
    public enum Verdict: Sendable, Equatable {
        /// Go on with it.
        case admit
        /// An event routed in from outside: ack it, nothing else.
        case foreign
        /// Over the caller's rate: answer 1010 (or dead-letter it when it
        /// cannot be answered), never execute it.
        case limited(retryAfterMs: Int)
    }

    /// The queue this gate stands before (metrics and logs).
    public let queue: String
    let limiter: CallerRateLimiter
    let logger: Logger
    private let lastLogged: LogThrottle

    public init(queue: String, limiter: CallerRateLimiter, logger: Logger) {
        self.queue = queue
        self.limiter = limiter
        self.logger = logger
        self.lastLogged = LogThrottle(interval: 60)
    }

    /// The verdict on `delivery`; counts and logs what it turns away.
    public func check(_ delivery: AMQPDelivery) -> Verdict {
        let p = delivery.properties
        if ForeignRouting.isForeign(typeProperty: p.type, routingKey: delivery.routingKey) {
            IntakeMetrics.foreign.increment(queue)
            if lastLogged.shouldLog(key: "foreign") {
                logger.warning("an event or a reply was routed into this queue (an exchange or queue binding, or a dead-letter exchange, made by an outside user?); ignored, acked, not answered", metadata: [
                    "amqp.queue": .string(queue), "amqp.exchange": .string(String(delivery.exchange.prefix(255))),
                    "amqp.routing_key": .string(String(delivery.routingKey.prefix(255))),
                    "event.type": .string(String(EventType.name(typeProperty: p.type, routingKey: delivery.routingKey).prefix(100))),
                    "note": "logged at most once a minute; foreign_messages_ignored_total counts every one",
                ])
            }
            return .foreign
        }
        if delivery.redelivered { return .admit }
        let caller = Caller(userID: p.userID)
        guard let wait = limiter.take(caller) else { return .admit }
        IntakeMetrics.limited.increment(queue)
        if lastLogged.shouldLog(key: "limited:" + (caller.name ?? "")) {
            logger.warning("caller over its rate (CALLER_RATE); deliveries refused with 1010", metadata: [
                "amqp.queue": .string(queue), "amqp.user_id": .string(caller.name ?? ""),
                "rate": .string(limiter.rate?.description ?? "off"),
                "note": "logged at most once a minute per caller; callers_rate_limited_total counts every one",
            ])
        }
        return .limited(retryAfterMs: wait)
    }

    /// The 1010 error for a wait of `ms`.
    public static func rateLimitedError(retryAfterMs ms: Int) -> ReplyError {
        ReplyError(code: .rateLimited, text: "too many commands or queries from this caller; try again in \(ms) ms",
                   retryAfterMs: ms)
    }
}

/// The counters of ``IntakeGate``, shared by every service.
public enum IntakeMetrics {
    /// Events routed into a command or query queue and ignored.
    public static let foreign = CounterFamily("foreign_messages_ignored_total", labels: "queue")
    /// Deliveries refused with 1010 (or dead-lettered as `rate-limited`).
    public static let limited = CounterFamily("callers_rate_limited_total", labels: "queue")
}

/// "At most once per `interval` per key", for log lines an outside party
/// could otherwise repeat at will.
final class LogThrottle: Sendable {
    private let interval: Double
    private let last = Mutex<[String: Double]>([:])

    init(interval: Double) {
        self.interval = interval
    }

    func shouldLog(key: String, now: Double = CallerRateLimiter.monotonicSeconds()) -> Bool {
        last.withLock { table in
            if let t = table[key], now - t < interval { return false }
            // Bounded: an attacker with many user names cannot grow it past this.
            if table.count >= 1000 { table = table.filter { now - $0.value < interval } }
            table[key] = now
            return true
        }
    }
}
