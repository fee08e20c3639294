import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics

/// The one request → reply loop of the set's query responders (the
/// handler's `booking.queries`, the projector's `availability.queries`):
/// what every query goes through before and after its service answers it.
///
/// Per delivery, in this order:
/// 1. ``IntakeGate``: an event routed in from outside is acked and nothing
///    else; a caller over its rate gets 1010 (and nothing is read).
/// 2. `reply_to` (``ReplyAddress``): a forbidden one is dead-lettered,
///    unanswered, with the reason on its copy (``DeadLetterCopy``).
/// 3. The body's size (``ContractLimits/maxBodyBytes``): larger is 1000.
/// 4. `answer`: the service's reply body. A thrown error (database) requeues
///    the request after a pause; an unparseable request is the answer's
///    business (an error reply), not poison: a query changes nothing, so
///    there is nothing to retry or inspect later.
/// 5. The reply goes to `reply_to` with the request's `correlation_id`
///    (else its `message_id`), then the request is acked; a reply that
///    cannot be confirmed leaves the request for redelivery.
public struct QueryLoop: Sendable {
    /// A reply body and whether it says `"ok": true` (for metrics).
    public typealias Answer = (body: [UInt8], ok: Bool)

    let connection: AMQPConnection
    let queue: String
    let replyType: String
    /// The service's name: its replies' `app_id`, its dead-letter copies' `x-dead-lettered-by`.
    let appID: String
    let gate: IntakeGate
    let replies: ReplySender
    let logger: Logger
    let answer: @Sendable (_ delivery: AMQPDelivery, _ caller: Caller) async throws -> Answer
    let count: @Sendable (_ outcome: String) -> Void
    let duration: Timer?

    /// - Parameters:
    ///   - count: called once per delivery with its outcome: `ok`,
    ///     `rejected`, `reply-to-refused`, `rate-limited`, `foreign`,
    ///     `requeued`.
    ///   - duration: records delivery → ack of answered requests.
    public init(connection: AMQPConnection, queue: String, replyType: String, appID: String, limiter: CallerRateLimiter,
                logger: Logger, duration: Timer? = nil, count: @escaping @Sendable (_ outcome: String) -> Void,
                answer: @escaping @Sendable (_ delivery: AMQPDelivery, _ caller: Caller) async throws -> Answer) {
        self.connection = connection
        self.queue = queue
        self.replyType = replyType
        self.appID = appID
        self.gate = IntakeGate(queue: queue, limiter: limiter, logger: logger)
        self.replies = ReplySender(connection: connection, appID: appID)
        self.logger = logger
        self.answer = answer
        self.count = count
        self.duration = duration
    }

    /// The loop as a consumer of ``queue``.
    public func service(prefetch: UInt16, concurrency: Int) -> AMQPConsumerService {
        AMQPConsumerService(connection: connection, queue: queue, prefetch: prefetch,
                            concurrency: concurrency, logger: logger) { delivery in
            await handle(delivery)
        }
    }

    /// An error reply body.
    public static func errorBody(_ error: ReplyError) -> [UInt8] {
        (try? ContractJSON.encode(CommandReply.error(error))).map { [UInt8]($0) } ?? []
    }

    public func handle(_ delivery: AMQPDelivery) async {
        let started = DispatchTime.now()
        let caller = Caller(userID: delivery.properties.userID)
        let body: [UInt8]
        let ok: Bool
        switch gate.check(delivery) {
        case .foreign:
            count("foreign")
            try? await delivery.ack()
            return
        case .limited(let wait):
            count("rate-limited")
            if delivery.properties.replyTo?.isEmpty ?? true || ReplyAddress.refusal(delivery.properties.replyTo, caller: caller) != nil {
                // Nobody to tell, and a query changes nothing: acked.
                try? await delivery.ack()
                return
            }
            (body, ok) = (Self.errorBody(IntakeGate.rateLimitedError(retryAfterMs: wait)), false)
        case .admit:
            if let reason = ReplyAddress.refusal(delivery.properties.replyTo, caller: caller) {
                // Not answered: the reply would go into a queue the sender
                // may not write to. Dead-lettered for whoever investigates.
                count("reply-to-refused")
                await DeadLetterCopy.deadLetter(delivery, from: queue, reason: reason, by: appID, on: connection,
                                                logger: logger, what: "query with a forbidden reply_to dead-lettered")
                return
            }
            do {
                try ContractLimits.checkBody(delivery.body)
                (body, ok) = try await answer(delivery, caller)
            } catch let tooLarge as BodyTooLarge {
                (body, ok) = (Self.errorBody(ReplyError(code: .invalidJSON, text: tooLarge.description)), false)
            } catch {
                logger.error("query failed; requeued", metadata: ["amqp.queue": .string(queue), "error": "\(error)"])
                count("requeued")
                await delivery.requeueAfterPause()
                return
            }
            count(ok ? "ok" : "rejected")
        }
        do {
            try await replies.reply(body, type: replyType, to: delivery.properties, logger: logger)
        } catch {
            // Connection trouble: leave the request for redelivery, after a
            // pause so a broken reply path is not a hot loop.
            await delivery.requeueAfterPause()
            return
        }
        try? await delivery.ack()
        duration?.recordInterval(since: started)
    }
}
