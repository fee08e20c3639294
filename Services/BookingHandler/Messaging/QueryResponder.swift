import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport
import Tracing

/// Answers `booking.get` and `booking.list` on `booking.queries` (RPC,
/// contract v1.1) with ``BookingReader``, through the set's one
/// request → reply loop (``QueryLoop``: foreign routing, rate, `reply_to`,
/// size, then the answer; replies `type` = `booking.reply`).
public struct QueryResponder: Sendable {
    let reader: BookingReader
    let loop: QueryLoop

    /// `type` of every reply.
    public static let replyType = MessageProperties.bookingReplyType
    private static let okSuffixReversed = Array(#""ok":true}"#.utf8.reversed())

    /// - Parameter limiter: `CALLER_RATE` for this instance (shared with
    ///   the command consumer: one bucket per caller for both).
    public init(connection: AMQPConnection, reader: BookingReader, logger: Logger,
                limiter: CallerRateLimiter = CallerRateLimiter(rate: nil, exempt: [])) {
        self.reader = reader
        let answer: @Sendable (AMQPDelivery, Caller) async throws -> QueryLoop.Answer = { [reader] delivery, caller in
            let reply = try await Self.answer(reader: reader, body: delivery.body, typeProperty: delivery.properties.type,
                                              routingKey: delivery.routingKey, caller: caller)
            // Keys are sorted in every reply, so `ok` comes last.
            return (reply, reply.reversed().starts(with: Self.okSuffixReversed))
        }
        loop = QueryLoop(connection: connection, queue: Topology.bookingQueriesQueue, replyType: Self.replyType,
                         appID: "booking-handler", limiter: limiter, logger: logger, duration: HandlerMetrics.queryDuration,
                         count: { HandlerMetrics.queries.increment($0 == "rejected" ? "refused" : $0) }, answer: answer)
    }

    public func service(prefetch: UInt16 = 32, concurrency: Int = 8) -> AMQPConsumerService {
        loop.service(prefetch: prefetch, concurrency: concurrency)
    }

    /// The body's `query` field, when it has one.
    private struct Named: Decodable {
        var query: String?
    }

    /// The reply body to one request from `caller`. Throws only for
    /// database errors.
    public func answer(body: [UInt8], typeProperty: String?, routingKey: String, caller: Caller) async throws -> [UInt8] {
        try await Self.answer(reader: reader, body: body, typeProperty: typeProperty, routingKey: routingKey, caller: caller)
    }

    static func answer(reader: BookingReader, body: [UInt8], typeProperty: String?, routingKey: String,
                       caller: Caller) async throws -> [UInt8] {
        let named = try? ContractJSON.decode(Named.self, from: body)
        guard let type = BookingQueryType.resolve(typeProperty: typeProperty, bodyQuery: named?.query, routingKey: routingKey) else {
            let name = typeProperty ?? named?.query ?? routingKey
            return try BookingReader.encoded(.error(ReplyError(
                code: .unknownCommand, text: "unknown query type '\(name.prefix(100))'; one of booking.get, booking.list, room.closures")))
        }
        if ContractLimits.hasNULString(body) {
            return try BookingReader.encoded(.error(ReplyError(code: .invalidField, text: ContractLimits.nulRefusal)))
        }
        do {
            return try await withReadSpan(type, store: reader.store) {
                switch type {
                case .get: return try BookingReader.encoded(try await reader.get(try ContractJSON.decode(GetBooking.self, from: body),
                                                                                 caller: caller))
                case .list: return try await reader.listReply(try ContractJSON.decode(ListBookings.self, from: body), caller: caller)
                case .closures:
                    return try BookingReader.encoded(try await reader.closures(try ContractJSON.decode(ListClosures.self, from: body),
                                                                               caller: caller))
                }
            }
        } catch let error as DecodingError {
            return try BookingReader.encoded(.error(ContractJSON.replyError(for: error)))
        }
    }

    /// One query's reads in a span `store read <query type>` under the
    /// consume span (``StoreSpans``): a query reads a few times (a booking,
    /// its room, a waitlist; a page's rows), all on committed state, so one
    /// span per query says how long the database took of the answer.
    private static func withReadSpan(_ type: BookingQueryType, store: any ReadStore,
                                     _ body: () async throws -> [UInt8]) async throws -> [UInt8] {
        try await withSpan("store read \(type.rawValue)", ofKind: .internal) { span in
            if span.isRecording {
                span.attributes = StoreSpans.attributes(system: store.systemName, operation: "read")
                span.attributes["booking.query.type"] = type.rawValue
            }
            return try await body()
        }
    }

    func handle(_ delivery: AMQPDelivery) async {
        await loop.handle(delivery)
    }
}
