import AMQPClient
import BookingContracts
import Foundation
import Logging

/// Answers a request on its `reply_to` — the one way every service does it
/// (command replies, booking and availability queries, the projector's
/// rebuild): through the default exchange, persistent JSON, correlated by
/// the request's `correlation_id` (else its `message_id`), with this
/// service's `user_id` and `app_id`.
///
/// Mandatory, so a reply queue that vanished is noticed — except for
/// direct reply-to, which RabbitMQ delivers and still reports as
/// unroutable (it is no real queue). A reply nobody can receive (no such
/// queue, an unusable name) is logged and reported as undeliverable: the
/// request itself is done, so the caller acks it. Any other failure (no
/// confirm, connection lost) is thrown: the caller requeues the request.
public struct ReplySender: Sendable {
    let connection: AMQPConnection
    let appID: String

    /// What became of a reply.
    public enum Outcome: Sendable, Equatable {
        /// Published and confirmed.
        case sent
        /// The request had no `reply_to`: nothing to send.
        case noReplyTo
        /// The broker could not route it (the requester's queue is gone).
        case undeliverable
    }

    public init(connection: AMQPConnection, appID: String) {
        self.connection = connection
        self.appID = appID
    }

    /// Publishes `body` (`type`) as the reply to a request with `request`'s
    /// properties. `logger` is evaluated only when a line is written (a
    /// caller's per-message metadata costs nothing on the usual path).
    @discardableResult
    public func reply(_ body: [UInt8], type: String, to request: AMQPProperties,
                      logger: @autoclosure () -> Logger) async throws(AMQPError) -> Outcome {
        guard let replyTo = request.replyTo, !replyTo.isEmpty else { return .noReplyTo }
        let properties = AMQPProperties(
            contentType: MessageProperties.contentType, deliveryMode: .persistent,
            correlationID: MessageProperties.replyCorrelationID(correlationID: request.correlationID, messageID: request.messageID),
            timestamp: UInt64(Date().timeIntervalSince1970), type: type, userID: connection.user, appID: appID)
        do {
            try await connection.publish(body, exchange: "", routingKey: replyTo, properties: properties,
                                         mandatory: !replyTo.hasPrefix(MessageProperties.directReplyTo))
            return .sent
        } catch where error.code == .unroutable || error.code == .invalidArgument || error.code == .nacked {
            // Refused (`nacked`): the requester's queue is at a bound with
            // `reject-publish`, its own choice. Retrying would only repeat
            // the work (and, for a rate-limited caller, bypass the rate).
            logger().warning("reply could not be delivered", metadata: [
                "amqp.reply_to": .string(String(replyTo.prefix(255))), "reply.type": .string(type), "error": "\(error)"])
            return .undeliverable
        }
    }
}
