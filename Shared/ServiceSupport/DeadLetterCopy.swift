import AMQPClient
import BookingContracts
import Foundation
import Logging

/// A poison delivery's copy in `<queue>.dead` that says why.
///
/// A plain reject dead-letters a message too, but RabbitMQ's `x-death`
/// then only says `rejected`. A service re-publishes it instead to
/// ``Topology/deadLetterExchange`` with its own queue's name as routing key
/// (bound to `<queue>.dead`), the reason in `x-death-reason`, and acks the
/// original once the broker confirmed the copy. `bookingctl failed` reads
/// the reason from a copy whose `user_id` is a service's
/// (`FailedMessage`); on anyone else's message the header is the sender's
/// own and is ignored.
///
/// The copy carries this service's `user_id` and no `expiration`: RabbitMQ
/// refuses a publish whose `user_id` is not the connection's user, so
/// copying another sender's would fail (and redeliver the poison for ever),
/// and an expiration would let the dead copy vanish. Both originals are
/// kept in headers (`x-original-user-id`, `x-original-expiration`), the
/// sender's identity for whoever looks.
public enum DeadLetterCopy {
    /// The headers a copy gets from the service (set only from the real
    /// delivery: a sender could put any of them on its own message).
    public static let serviceHeaders = ["x-original-user-id", "x-original-expiration", "x-death-reason", "x-error-code",
                                        "x-original-routing-key", "x-original-exchange", "x-dead-lettered-by",
                                        "x-dead-lettered-at"]

    /// Dead-letters poison `delivery`, consumed from `queue`: its copy with
    /// `reason` (``publish(_:from:reason:code:by:alsoKeep:on:)``), then the
    /// ack. When the dead-letter queue refuses the copy (at its bound) or
    /// the copy cannot be published, a reject leaves the message to
    /// RabbitMQ's own dead-lettering (`x-death` says `rejected`; the reason
    /// is then only in the warning). Never a requeue: poison cannot loop.
    ///
    /// Writes one warning, `what` with `reason` and the delivery's
    /// `amqp.message_id` (`logger`'s metadata besides).
    public static func deadLetter(_ delivery: AMQPDelivery, from queue: String, reason: String, code: Int? = nil,
                                  by service: String, on connection: AMQPConnection, logger: Logger,
                                  what: Logger.Message = "poison message dead-lettered") async {
        var metadata: Logger.Metadata = ["reason": .string(reason)]
        if let id = delivery.properties.messageID { metadata["amqp.message_id"] = .string(id) }
        do {
            if try await publish(delivery, from: queue, reason: reason, code: code, by: service, on: connection) {
                logger.warning(what, metadata: metadata)
                do {
                    try await delivery.ack()
                } catch {
                    // It comes again and is copied once more: two copies, nothing lost.
                    logger.warning("ack of a dead-lettered message failed; it will come again",
                                   metadata: ["error": "\(error)"])
                }
                return
            }
            metadata["dead_letter.copy"] = "refused: the dead-letter queue is at its bound; rejected instead"
        } catch {
            metadata["dead_letter.copy"] = .string("not published (\(error)); rejected instead, without the reason on it")
        }
        logger.warning(what, metadata: metadata)
        try? await delivery.reject(requeue: false)
    }

    /// Says the sender's headers were left out of a copy (set only by the service).
    static let droppedHeader = "x-original-headers-dropped"

    /// `text` cut to at most `limit` bytes of UTF-8, between scalars: a
    /// reason quoting a sender's text stays small enough for the frame
    /// however that text is made.
    static func cut(_ text: String, toBytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var used = 0
        var kept = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            used += UTF8.width(scalar)
            if used > limit { break }
            kept.append(scalar)
        }
        return String(kept)
    }

    /// Publishes the copy of `delivery`, consumed from `queue`, and waits
    /// for the broker's confirm.
    ///
    /// - Parameters:
    ///   - code: the contract's error code the sender was answered with, if any.
    ///   - service: who dead-lettered it (`x-dead-lettered-by`).
    ///   - alsoKeep: sender headers that must survive when the sender's
    ///     headers leave no room for the service's (the copy then goes
    ///     without the others, saying so, rather than not at all).
    /// - Returns: false when the dead-letter queue refused the copy (a
    ///   negative confirm: it is at its bound); throws when the copy could
    ///   not be confirmed at all.
    public static func publish(_ delivery: AMQPDelivery, from queue: String, reason: String, code: Int? = nil,
                               by service: String, alsoKeep: [String] = [],
                               on connection: AMQPConnection) async throws -> Bool {
        var properties = delivery.properties
        for header in serviceHeaders + [droppedHeader] { properties.headers[header] = nil }
        if let original = properties.userID { properties.headers["x-original-user-id"] = .string(original) }
        if let original = properties.expiration { properties.headers["x-original-expiration"] = .string(original) }
        properties.userID = connection.user
        properties.expiration = nil
        properties.headers["x-death-reason"] = .string(Self.cut(reason, toBytes: 1000))
        if let code { properties.headers["x-error-code"] = .int64(Int64(code)) }
        properties.headers["x-original-routing-key"] = .string(delivery.routingKey)
        properties.headers["x-original-exchange"] = .string(delivery.exchange)
        properties.headers["x-dead-lettered-by"] = .string(service)
        // When it failed: the copy is a plain publish, so RabbitMQ adds no
        // x-death of its own, and any x-death it carries is the sender's.
        properties.headers["x-dead-lettered-at"] = .string(ContractFormat.timestamp(Date()))
        properties.deliveryMode = .persistent
        func send(_ properties: AMQPProperties) async throws(AMQPError) {
            try await connection.publish(delivery.body, exchange: Topology.deadLetterExchange,
                                         routingKey: Topology.deadLetterRoutingKey(for: queue),
                                         properties: properties, mandatory: true)
        }
        do {
            do {
                try await send(properties)
            } catch where error.code == .invalidArgument {
                // The sender's headers filled the frame and the service's no
                // longer fit (the layer refuses before anything is sent).
                var headers: AMQPTable = [droppedHeader: "too large to copy"]
                for key in serviceHeaders + alsoKeep { headers[key] = properties.headers[key] }
                properties.headers = headers
                try await send(properties)
            }
            return true
        } catch {
            // Only this publish's nack means "the queue is full".
            if error.code == .nacked { return false }
            throw error
        }
    }
}
