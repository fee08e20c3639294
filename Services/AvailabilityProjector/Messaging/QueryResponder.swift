import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport

/// Answers availability queries on `availability.queries` (RPC) through
/// the set's one request → reply loop (``QueryLoop``: foreign routing,
/// rate, `reply_to`, size, then the answer; replies `type` =
/// `availability.reply`). A query that cannot be parsed gets
/// `{"ok":false,"error":…}` and is acked, not dead-lettered.
public struct QueryResponder: Sendable {
    let engine: QueryEngine
    /// `REQUIRE_USER_ID`: queries without `user_id` get 2003.
    let requireUserID: Bool
    let loop: QueryLoop

    /// - Parameter limiter: `CALLER_RATE` for this instance.
    public init(connection: AMQPConnection, engine: QueryEngine, logger: Logger, requireUserID: Bool = false,
                limiter: CallerRateLimiter = CallerRateLimiter(rate: nil, exempt: [])) {
        self.engine = engine
        self.requireUserID = requireUserID
        let answer: @Sendable (AMQPDelivery, Caller) async throws -> QueryLoop.Answer = { [engine] delivery, caller in
            Self.answer(engine: engine, requireUserID: requireUserID, body: delivery.body, caller: caller)
        }
        loop = QueryLoop(connection: connection, queue: Topology.availabilityQueriesQueue,
                         replyType: MessageProperties.availabilityReplyType, appID: "availability-projector",
                         limiter: limiter, logger: logger, duration: ProjectorMetrics.amqpQueryDuration,
                         count: { ProjectorMetrics.queries.increment("amqp", $0) }, answer: answer)
    }

    public func service(prefetch: UInt16 = 64, concurrency: Int = 8) -> AMQPConsumerService {
        loop.service(prefetch: prefetch, concurrency: concurrency)
    }

    /// The reply body for a query body.
    public func answer(body: [UInt8]) -> (body: [UInt8], ok: Bool) {
        Self.answer(engine: engine, body: body)
    }

    static func answer(engine: QueryEngine, body: [UInt8]) -> (body: [UInt8], ok: Bool) {
        switch QueryEngine.parse(body: body) {
        case .success(let query): return (engine.replyJSON(query), true)
        case .failure(let error): return (QueryLoop.errorBody(error), false)
        }
    }

    /// The reply for a query from `caller`: 2003 when identities are
    /// required and it has none, else ``answer(body:)``.
    public func answer(body: [UInt8], caller: Caller) -> (body: [UInt8], ok: Bool) {
        Self.answer(engine: engine, requireUserID: requireUserID, body: body, caller: caller)
    }

    static func answer(engine: QueryEngine, requireUserID: Bool, body: [UInt8], caller: Caller) -> (body: [UInt8], ok: Bool) {
        if requireUserID, caller == .anonymous {
            let error = ReplyError(code: .notPermitted,
                                   text: "queries must carry the AMQP user_id property (REQUIRE_USER_ID is set)")
            return (QueryLoop.errorBody(error), false)
        }
        return answer(engine: engine, body: body)
    }

    func handle(_ delivery: AMQPDelivery) async {
        await loop.handle(delivery)
    }
}
