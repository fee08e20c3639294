import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport

/// Answers availability queries and (v1.2) suggestion queries on
/// `availability.queries` (RPC) through
/// the set's one request → reply loop (``QueryLoop``: foreign routing,
/// rate, `reply_to`, size, then the answer; replies `type` =
/// `availability.reply`). Which query a delivery is: its `type` property
/// when set, else its routing key — `availability.suggest` is a
/// suggestion query, anything else (`availability.query`, the queue's
/// name through the default exchange) an availability query, as before
/// suggestions existed. A query that cannot be parsed gets
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
            Self.answer(engine: engine, requireUserID: requireUserID, body: delivery.body,
                        kind: Kind(typeProperty: delivery.properties.type, routingKey: delivery.routingKey), caller: caller)
        }
        loop = QueryLoop(connection: connection, queue: Topology.availabilityQueriesQueue,
                         replyType: MessageProperties.availabilityReplyType, appID: "availability-projector",
                         limiter: limiter, logger: logger, duration: ProjectorMetrics.amqpQueryDuration,
                         count: { ProjectorMetrics.queries.increment("amqp", $0) }, answer: answer)
    }

    public func service(prefetch: UInt16 = 64, concurrency: Int = 8) -> AMQPConsumerService {
        loop.service(prefetch: prefetch, concurrency: concurrency)
    }

    /// The two queries the projector answers.
    public enum Kind: Sendable, Equatable {
        /// `availability.query`: rooms and their free ranges.
        case availability
        /// `availability.suggest` (v1.2): room and time suggestions.
        case suggest

        /// The `type` property when set, else the routing key.
        public init(typeProperty: String?, routingKey: String) {
            let name = (typeProperty?.isEmpty ?? true) ? routingKey : typeProperty!
            self = name == SuggestContract.suggestKey ? .suggest : .availability
        }
    }

    /// The reply body for a query body.
    public func answer(body: [UInt8], kind: Kind = .availability) -> (body: [UInt8], ok: Bool) {
        Self.answer(engine: engine, body: body, kind: kind)
    }

    static func answer(engine: QueryEngine, body: [UInt8], kind: Kind) -> (body: [UInt8], ok: Bool) {
        switch kind {
        case .availability:
            switch QueryEngine.parse(body: body).flatMap(engine.replyBody) {
            case .success(let reply): return (reply, true)
            case .failure(let error): return (QueryLoop.errorBody(error), false)
            }
        case .suggest:
            switch QueryEngine.parseSuggest(body: body) {
            case .success(let query): return (engine.suggestJSON(query), true)
            case .failure(let error): return (QueryLoop.errorBody(error), false)
            }
        }
    }

    /// The reply for a query from `caller`: 2003 when identities are
    /// required and it has none, else ``answer(body:)``.
    public func answer(body: [UInt8], kind: Kind = .availability, caller: Caller) -> (body: [UInt8], ok: Bool) {
        Self.answer(engine: engine, requireUserID: requireUserID, body: body, kind: kind, caller: caller)
    }

    static func answer(engine: QueryEngine, requireUserID: Bool, body: [UInt8], kind: Kind,
                       caller: Caller) -> (body: [UInt8], ok: Bool) {
        if requireUserID, caller == .anonymous {
            let error = ReplyError(code: .notPermitted,
                                   text: "queries must carry the AMQP user_id property (REQUIRE_USER_ID is set)")
            return (QueryLoop.errorBody(error), false)
        }
        return answer(engine: engine, body: body, kind: kind)
    }

    func handle(_ delivery: AMQPDelivery) async {
        await loop.handle(delivery)
    }
}
