import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport

/// Answers `booking.get` and `booking.list` on `booking.queries` (RPC,
/// contract v1.1) with ``BookingReader``: replies to `reply_to` through the
/// default exchange with the request's `correlation_id` (else its
/// `message_id`), `type` = `booking.reply`.
///
/// As with availability queries, a request that cannot be parsed is
/// answered with the error and acked, not dead-lettered: a query changes
/// nothing, so there is nothing to retry, and the reply tells the client.
/// Only a request whose `reply_to` the sender may not use is dead-lettered
/// (`booking.queries.dead`), unanswered. A database error requeues the
/// request.
public struct QueryResponder: Sendable {
    let connection: AMQPConnection
    let reader: BookingReader
    let logger: Logger
    let replies: ReplySender

    /// `type` of every reply.
    public static let replyType = "booking.reply"
    private static let okSuffixReversed = Array(#""ok":true}"#.utf8.reversed())

    public init(connection: AMQPConnection, reader: BookingReader, logger: Logger) {
        self.connection = connection
        self.reader = reader
        self.logger = logger
        self.replies = ReplySender(connection: connection, appID: "booking-handler")
    }

    public func service(prefetch: UInt16 = 32, concurrency: Int = 8) -> AMQPConsumerService {
        AMQPConsumerService(connection: connection, queue: Topology.bookingQueriesQueue, prefetch: prefetch,
                            concurrency: concurrency, logger: logger) { delivery in
            await handle(delivery)
        }
    }

    /// The body's `query` field, when it has one.
    private struct Named: Decodable {
        var query: String?
    }

    /// The reply body to one request from `caller`. Throws only for
    /// database errors.
    public func answer(body: [UInt8], typeProperty: String?, routingKey: String, caller: Caller) async throws -> [UInt8] {
        let named = try? ContractJSON.decode(Named.self, from: body)
        guard let type = BookingQueryType.resolve(typeProperty: typeProperty, bodyQuery: named?.query, routingKey: routingKey) else {
            let name = typeProperty ?? named?.query ?? routingKey
            return try BookingReader.encoded(.error(ReplyError(
                code: .unknownCommand, text: "unknown query type '\(name.prefix(100))'; one of booking.get, booking.list")))
        }
        do {
            switch type {
            case .get: return try BookingReader.encoded(try await reader.get(try ContractJSON.decode(GetBooking.self, from: body), caller: caller))
            case .list: return try await reader.listReply(try ContractJSON.decode(ListBookings.self, from: body), caller: caller)
            }
        } catch let error as DecodingError {
            return try BookingReader.encoded(.error(ContractJSON.replyError(for: error)))
        }
    }

    func handle(_ delivery: AMQPDelivery) async {
        let started = DispatchTime.now()
        let caller = Caller(userID: delivery.properties.userID)
        if let reason = ReplyAddress.refusal(delivery.properties.replyTo, caller: caller) {
            logger.warning("booking query with a forbidden reply_to dead-lettered", metadata: ["reason": .string(reason)])
            HandlerMetrics.queries.increment("reply-to-refused")
            try? await delivery.reject(requeue: false)
            return
        }
        let reply: [UInt8]
        do {
            reply = try await answer(body: delivery.body, typeProperty: delivery.properties.type,
                                     routingKey: delivery.routingKey, caller: caller)
        } catch {
            logger.error("booking query failed; requeued", metadata: ["error": "\(error)"])
            await delivery.requeueAfterPause()
            return
        }
        // Keys are sorted in every reply, so `ok` comes last.
        let ok = reply.reversed().starts(with: Self.okSuffixReversed)
        HandlerMetrics.queries.increment(ok ? "ok" : "refused")
        do {
            try await replies.reply(reply, type: Self.replyType, to: delivery.properties, logger: logger)
        } catch {
            try? await delivery.nack(requeue: true)
            return
        }
        try? await delivery.ack()
        HandlerMetrics.queryDuration.recordInterval(since: started)
    }
}
