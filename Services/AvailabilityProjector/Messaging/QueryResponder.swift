import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport

/// Answers availability queries on `availability.queries` (RPC): replies
/// to `reply_to` through the default exchange with the request's
/// `correlation_id` (else its `message_id`), `type` = `availability.reply`.
/// A query that cannot be parsed gets `{"ok":false,"error":…}` and is
/// acked, not dead-lettered: a query changes nothing, so there is nothing
/// to retry or inspect later, and the error reply tells the client.
public struct QueryResponder: Sendable {
    let connection: AMQPConnection
    let engine: QueryEngine
    let logger: Logger
    /// `REQUIRE_USER_ID`: queries without `user_id` get 2003.
    let requireUserID: Bool
    let replies: ReplySender

    public init(connection: AMQPConnection, engine: QueryEngine, logger: Logger, requireUserID: Bool = false) {
        self.connection = connection
        self.engine = engine
        self.logger = logger
        self.requireUserID = requireUserID
        self.replies = ReplySender(connection: connection, appID: "availability-projector")
    }

    public func service(prefetch: UInt16 = 64, concurrency: Int = 8) -> AMQPConsumerService {
        AMQPConsumerService(connection: connection, queue: Topology.availabilityQueriesQueue, prefetch: prefetch,
                            concurrency: concurrency, logger: logger) { delivery in
            await handle(delivery)
        }
    }

    /// The reply body for a query body.
    public func answer(body: [UInt8]) -> (body: [UInt8], ok: Bool) {
        switch QueryEngine.parse(body: body) {
        case .success(let query): return (engine.replyJSON(query), true)
        case .failure(let error):
            return ((try? ContractJSON.encode(CommandReply.error(error))).map { [UInt8]($0) } ?? [], false)
        }
    }

    /// The reply for a query from `caller`: 2003 when identities are
    /// required and it has none, else ``answer(body:)``.
    public func answer(body: [UInt8], caller: Caller) -> (body: [UInt8], ok: Bool) {
        if requireUserID, caller == .anonymous {
            let error = ReplyError(code: .notPermitted,
                                   text: "queries must carry the AMQP user_id property (REQUIRE_USER_ID is set)")
            return ((try? ContractJSON.encode(CommandReply.error(error))).map { [UInt8]($0) } ?? [], false)
        }
        return answer(body: body)
    }

    func handle(_ delivery: AMQPDelivery) async {
        let started = DispatchTime.now()
        let caller = Caller(userID: delivery.properties.userID)
        if let reason = ReplyAddress.refusal(delivery.properties.replyTo, caller: caller) {
            // Not answered: the reply would go into a queue the sender may
            // not write to. Dead-lettered (availability.queries.dead) for
            // whoever investigates.
            logger.warning("query with a forbidden reply_to dead-lettered", metadata: ["reason": .string(reason)])
            ProjectorMetrics.queries.increment("amqp", "reply-to-refused")
            try? await delivery.reject(requeue: false)
            return
        }
        let (body, ok) = answer(body: delivery.body, caller: caller)
        ProjectorMetrics.queries.increment("amqp", ok ? "ok" : "rejected")
        do {
            try await replies.reply(body, type: MessageProperties.availabilityReplyType, to: delivery.properties, logger: logger)
        } catch {
            // Connection trouble: leave the query for redelivery.
            try? await delivery.nack(requeue: true)
            return
        }
        try? await delivery.ack()
        ProjectorMetrics.amqpQueryDuration.recordInterval(since: started)
    }
}
