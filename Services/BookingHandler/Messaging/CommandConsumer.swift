import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport

/// Handles deliveries from `booking-handler.commands`: runs each command,
/// publishes its reply, dead-letters poison, and only then acks.
///
/// Ordering of effects per delivery (at-least-once, no duplicate effect):
/// 1. the command's effect, its events (outbox) and its reply (inbox) are
///    committed in one transaction;
/// 2. the reply is published to `reply_to` and confirmed;
/// 3. the delivery is acked.
/// A crash anywhere before 3 redelivers the command; the inbox then
/// answers it with the stored reply and changes nothing.
public struct CommandConsumer: Sendable {
    let connection: AMQPConnection
    let processor: CommandProcessor
    let relay: OutboxRelay
    let logger: Logger
    /// Replays under way, one per requester.
    let replays = ReplayGate()
    /// Most messages per second one replay publishes (``ReplayPacer``).
    let replayRate: Int
    /// Answers on `reply_to`.
    let replies: ReplySender
    /// Foreign routing and `CALLER_RATE`, before anything is decoded.
    let gate: IntakeGate

    /// - Parameter replayRate: the most messages per second one replay
    ///   publishes (`REPLAY_MAX_RATE`), so a replay cannot crowd out
    ///   commands on the broker, the disk or this process.
    ///   - limiter: `CALLER_RATE` of this instance (default: no limit).
    public init(connection: AMQPConnection, processor: CommandProcessor, relay: OutboxRelay, logger: Logger,
                replayRate: Int = ReplayPacer.defaultRate, limiter: CallerRateLimiter = CallerRateLimiter(rate: nil, exempt: [])) {
        self.connection = connection
        self.processor = processor
        self.relay = relay
        self.logger = logger
        self.replayRate = replayRate
        self.replies = ReplySender(connection: connection, appID: "booking-handler")
        self.gate = IntakeGate(queue: Topology.handlerCommandsQueue, limiter: limiter, logger: logger)
    }

    /// The consumer as a service. Up to `concurrency` commands are in
    /// progress at once: their database transactions still run one at a
    /// time (SQLite's write lock, which is what keeps overlap checks and
    /// the inbox exact), but replies, confirms and acks overlap. Commands a
    /// client sends without waiting for the previous reply may therefore be
    /// applied in a different order than sent — as with several handler
    /// processes; clients that need an order wait for each reply.
    public func service(prefetch: UInt16 = 64, concurrency: Int = 64) -> AMQPConsumerService {
        AMQPConsumerService(connection: connection, queue: Topology.handlerCommandsQueue, prefetch: prefetch,
                            concurrency: concurrency, logger: logger) { delivery in
            await handle(delivery)
        }
    }

    public func handle(_ delivery: AMQPDelivery) async {
        let started = DispatchTime.now()
        let running = ContinuousClock.now
        CommandStage.dispatch.record(since: delivery.receivedAt, now: running)
        let p = delivery.properties
        var log = LogContext(base: logger, messageID: p.messageID, correlationID: p.correlationID,
                             commandType: p.type ?? delivery.routingKey)
        // A bounded label: the resolved command type, never client text.
        let typeLabel = CommandType.resolve(typeProperty: p.type, routingKey: delivery.routingKey)?.rawValue ?? "unknown"
        switch gate.check(delivery) {
        case .admit: break
        case .foreign:
            // An event copied in by an outside binding: never executed,
            // answered or dead-lettered (contract v1.2).
            HandlerMetrics.commands.increment("event", "foreign")
            try? await delivery.ack()
            return
        case .limited(let wait):
            await refuseOverRate(delivery, retryAfterMs: wait, typeLabel: typeLabel, log: log)
            return
        }
        let command = IncomingCommand(
            body: delivery.body, typeProperty: p.type, routingKey: delivery.routingKey, messageID: p.messageID,
            idempotencyKeyHeader: p.headers[MessageProperties.idempotencyKeyHeader]?.stringValue, userID: p.userID,
            replyTo: p.replyTo)

        let result: ProcessingResult
        do {
            result = try await processor.process(command)
            CommandStage.process.record(since: running)
        } catch {
            // Database trouble: requeue and let the broker redeliver (the
            // queue's delivery limit dead-letters a command that never works).
            log.write(.error, "command failed; requeueing", metadata: ["error": "\(error)"])
            HandlerMetrics.commands.increment(typeLabel, "requeued")
            await delivery.requeueAfterPause()
            return
        }

        do {
            switch result {
            case .handled(let reply, let type, let duplicate, let json):
                if case .booking(let booking) = reply { log.bookingID = booking.id }
                if case .error(let error) = reply { log.errorCode = error.code.rawValue }
                let replying = ContinuousClock.now
                try await sendReply(json.map { [UInt8]($0) } ?? [UInt8](try ContractJSON.encode(reply)), to: delivery, log: log)
                let acking = ContinuousClock.now
                CommandStage.reply.record(since: replying, now: acking)
                try await delivery.ack()
                CommandStage.ack.record(since: acking)
                if !duplicate { relay.kick() }
                let outcome = duplicate ? "duplicate" : (reply.isOK ? "ok" : (replyCode(reply) == 2003 ? "refused" : "rejected"))
                HandlerMetrics.commands.increment(type.rawValue, outcome)
                log.write(.info, duplicate ? "repeated command answered from the inbox" : "command handled",
                          metadata: ["outcome": .string(outcome)])
            case .poison(let reply, let reason):
                try await sendReply([UInt8](try ContractJSON.encode(reply)), to: delivery, log: log)
                if try await deadLetter(delivery, reason: reason, code: replyCode(reply)) {
                    try await delivery.ack()
                    HandlerMetrics.commands.increment(typeLabel, "dead-lettered")
                    log.write(.warning, "poison command dead-lettered", metadata: ["reason": .string(reason)])
                } else {
                    await leaveToBrokerDeadLettering(delivery, typeLabel: typeLabel, log: log)
                }
            case .refused(let reason):
                // Not executed and not answered: the reply would have gone
                // into a queue the sender may not write to.
                if try await deadLetter(delivery, reason: reason, code: ErrorCode.notPermitted.rawValue) {
                    try await delivery.ack()
                    HandlerMetrics.commands.increment(typeLabel, "reply-to-refused")
                    log.write(.warning, "command with a forbidden reply_to dead-lettered, not executed",
                              metadata: ["reason": .string(reason), "amqp.user_id": .string(p.userID ?? "")])
                } else {
                    await leaveToBrokerDeadLettering(delivery, typeLabel: typeLabel, log: log)
                }
            case .replay(let request):
                let reply: CommandReply
                let requester = Caller(userID: p.userID)
                if replays.begin(requester) {
                    defer { replays.end(requester) }
                    do {
                        reply = .replay(try await replay(request, logger: log.logger))
                    } catch let error as ReplyError {
                        reply = .error(error)
                    }
                } else {
                    reply = .failure(.notPermitted, "a replay requested by \(requester) is already running; one at a time")
                }
                try await sendReply([UInt8](try ContractJSON.encode(reply)), to: delivery, log: log)
                try await delivery.ack()
                let outcome = reply.isOK ? "ok" : "rejected"
                HandlerMetrics.commands.increment(typeLabel, outcome)
                log.write(.info, "replay handled", metadata: ["outcome": .string(outcome)])
            }
        } catch {
            // The reply, the dead-letter copy or a replay's page could not be
            // confirmed (the connection was lost, or a replay's target queue
            // refused): requeue after a pause, not at once, so a broken path
            // is not a hot loop; the command comes back and the inbox
            // replays the stored reply (a replay runs again, and consumers
            // drop the versions they already have).
            log.write(.warning, "could not finish command; it will be redelivered", metadata: ["error": "\(error)"])
            HandlerMetrics.commands.increment(typeLabel, "requeued")
            await delivery.requeueAfterPause()
        }
        HandlerMetrics.commandDuration.recordInterval(since: started)
    }

    /// How many bookings one ordered, confirmed batch of a replay holds
    /// (at least one whole page of ``ReplayBookings/bookingsPerMessage``).
    static let replayPage = 500

    /// Publishes the current state to `request.queue` through the default
    /// exchange: every room, every closure, every booking (read in pages of
    /// ``replayPage``, each confirmed before the next is read; one event
    /// per booking, or ``ReplayStream/pageType`` messages when the request
    /// asks for several bookings per message), then the end marker. Throws
    /// a `ReplyError` when the queue does not exist, an `AMQPError` when the broker did not confirm (the command
    /// is then redelivered and replays again — consumers drop versions they
    /// already have).
    func replay(_ request: ReplayBookings, logger: Logger) async throws -> ReplaySummary {
        let queue = request.queue
        let replayId = request.replayId ?? RandomID.uuidString()
        // Checked by ``CommandProcessor`` (1100 out of range); clamped so a
        // caller of this method alone cannot send a page the contract forbids.
        // With REPLAY_MAX_RATE, nothing goes out in steps larger than one
        // second of it — rooms, closures and bookings in chunks of `rate`,
        // pages of at most `rate` bookings — so consecutive messages are
        // at most about a second apart. Larger steps leave gaps of
        // step/rate seconds, which a projector's stall bound
        // (REBUILD_STALL_TIMEOUT, 120 s) takes for a dead replay at a low
        // rate: 500 bookings at 4/s, or 2,000 rooms at 10/s.
        let step = replayRate > 0 ? replayRate : Int.max
        let perMessage = min(max(1, request.bookingsPerMessage ?? 1), ReplayStream.maxBookingsPerMessage, step)
        do {
            _ = try await connection.queueInfo(queue)
        } catch {
            throw ReplyError(code: .invalidField, text: "queue '\(queue.prefix(255))' does not exist", field: "queue")
        }
        let headers: AMQPTable = [ReplayStream.replayIdHeader: .string(replayId)]
        func message(_ type: String, _ body: [UInt8]) -> OutgoingMessage {
            var properties = AMQPProperties.persistentJSON(type: type, messageID: RandomID.uuidString(), headers: headers)
            properties.appID = "booking-handler"
            properties.userID = connection.user
            return OutgoingMessage(body: body, routingKey: queue, properties: properties)
        }
        func message(_ type: String, _ body: Data) -> OutgoingMessage { message(type, [UInt8](body)) }
        func publish(_ batch: [OutgoingMessage]) async throws {
            guard !batch.isEmpty else { return }
            if let error = await connection.publish(batch: batch).compactMap({ $0 }).first { throw error }
        }
        let now = ContractFormat.timestamp(Date())
        var pacer = ReplayPacer(rate: replayRate, start: ContinuousClock.now, itemsPerMessage: perMessage)
        let rooms = try await processor.store.replayRooms()
        for chunk in rooms.chunks(of: step) {
            try await publish(try chunk.map { entry in
                message(EventType.roomRegistered.rawValue, try ContractJSON.encode(
                    RoomRegistered(eventId: RandomID.uuidString(), occurredAt: ContractFormat.timestamp(entry.updatedAt),
                                   room: entry.room)))
            })
            try await pace(&pacer, sent: chunk.count, queue: queue)
        }
        // Closures after their rooms, before the bookings (v1.2): a
        // projector rebuilt from the replay knows every closed time.
        let closures = try await processor.store.replayClosures()
        for chunk in closures.chunks(of: step) {
            try await publish(try chunk.map { closure in
                message(EventType.roomClosed.rawValue, try ContractJSON.encode(
                    RoomClosureEvent(eventId: RandomID.uuidString(), occurredAt: now, closure: closure)))
            })
            try await pace(&pacer, sent: chunk.count, queue: queue)
        }
        var bookings = 0
        var after: String?
        // Whole pages per read: 500 bookings, or one page when pages are
        // larger; no more than one second of REPLAY_MAX_RATE.
        let readSize = perMessage * max(1, min(Self.replayPage, step) / perMessage)
        while true {
            let count: Int
            if perMessage == 1 {
                let page = try await processor.store.replayBookings(after: after, limit: readSize)
                if page.isEmpty { break }
                try await publish(try page.map { booking in
                    message(ReplayStream.eventType(for: booking.status).rawValue, try ContractJSON.encode(
                        BookingEvent(eventId: RandomID.uuidString(), occurredAt: now, booking: booking)))
                })
                count = page.count
                after = page.last?.id
            } else {
                // The stored JSON goes out as it is: a page costs the handler
                // a read and a copy, not a decode and an encode per booking.
                let rows = try await processor.store.replayBookingJSON(after: after, limit: readSize)
                if rows.isEmpty { break }
                try await publish(ReplayStream.pages(sizes: rows.map(\.json.count), perPage: perMessage).map { range in
                    message(ReplayStream.pageType, ReplayPage.body(encodedBookings: rows[range].lazy.map(\.json)))
                })
                count = rows.count
                after = rows.last?.id
            }
            bookings += count
            // Paced (``ReplayPacer``): no faster than the projector takes it,
            // and no faster than REPLAY_MAX_RATE when set.
            try await pace(&pacer, sent: count, queue: queue)
        }
        let summary = ReplaySummary(replayId: replayId, queue: queue, rooms: rooms.count, bookings: bookings,
                                    closures: closures.count)
        try await publish([message(ReplayStream.endType, try ContractJSON.encode(summary))])
        logger.info("replayed state", metadata: ["replay.id": .string(replayId), "amqp.queue": .string(queue),
                                                 "rooms": "\(rooms.count)", "closures": "\(closures.count)",
                                                 "bookings": "\(bookings)", "bookings_per_message": "\(perMessage)"])
        return summary
    }

    /// A command over its caller's rate: not executed, not stored in the
    /// inbox (a retry with the same key is a fresh try); answered 1010 when
    /// it may be, else dead-lettered as `rate-limited` so that nothing is
    /// dropped silently. Acked either way. When neither could be confirmed
    /// it is rejected, not requeued: a redelivery takes no token, so a
    /// requeue would let the command run after all (a caller can make its
    /// own reply queue refuse the 1010); the queue's dead-lettering keeps it.
    private func refuseOverRate(_ delivery: AMQPDelivery, retryAfterMs: Int, typeLabel: String, log: LogContext) async {
        let p = delivery.properties
        let error = IntakeGate.rateLimitedError(retryAfterMs: retryAfterMs)
        do {
            if let replyTo = p.replyTo, !replyTo.isEmpty, ReplyAddress.refusal(replyTo, caller: Caller(userID: p.userID)) == nil {
                try await sendReply([UInt8](try ContractJSON.encode(CommandReply.error(error))), to: delivery, log: log)
            } else if try await !deadLetter(delivery, reason: "rate-limited", code: ErrorCode.rateLimited.rawValue) {
                await leaveToBrokerDeadLettering(delivery, typeLabel: typeLabel, log: log)
                return
            }
            try await delivery.ack()
            HandlerMetrics.commands.increment(typeLabel, "rate-limited")
        } catch {
            log.write(.warning, "could not answer a rate-limited command; rejected into the dead-letter queue, not run",
                      metadata: ["error": "\(error)"])
            HandlerMetrics.commands.increment(typeLabel, "rate-limited")
            try? await delivery.reject(requeue: false)
        }
    }

    private func replyCode(_ reply: CommandReply) -> Int {
        if case .error(let error) = reply { return error.code.rawValue }
        return 0
    }

    /// Publishes the reply to `reply_to` (``ReplySender``).
    private func sendReply(_ body: [UInt8], to delivery: AMQPDelivery, log: LogContext) async throws {
        try await replies.reply(body, type: MessageProperties.replyType, to: delivery.properties, logger: log.logger)
    }

    /// Re-publishes a poison command to `booking.dead-letter` (routed to
    /// `booking-handler.commands.dead`) with the reason in headers
    /// (``DeadLetterCopy``); a plain nack would dead-letter it too, but
    /// without saying why. The idempotency key survives a copy whose
    /// sender's headers had to be dropped: a retry of the dead letter must
    /// run as the same command.
    ///
    /// - Returns: false when the dead-letter queue refused the copy (a
    ///   negative confirm: it is at its bound); throws when the copy could
    ///   not be confirmed at all.
    private func deadLetter(_ delivery: AMQPDelivery, reason: String, code: Int) async throws -> Bool {
        try await DeadLetterCopy.publish(delivery, from: Topology.handlerCommandsQueue, reason: reason, code: code,
                                         by: "booking-handler", alsoKeep: [MessageProperties.idempotencyKeyHeader],
                                         on: connection)
    }

    /// The dead-letter queue refused the handler's copy (at its bound).
    /// Rejected, not requeued: the queue's own dead-lettering
    /// (`at-least-once`, policy `set-consumed-queues`) keeps the message in
    /// this queue until the dead-letter queue has room. A requeue after a
    /// pause held a consumer slot for a second per delivery, so a stranger's
    /// trickle of poison could stall every caller's commands once the
    /// dead-letter queue was full.
    private func leaveToBrokerDeadLettering(_ delivery: AMQPDelivery, typeLabel: String, log: LogContext) async {
        log.write(.warning, "the dead-letter queue refused the copy (at its bound); rejected to the broker's own dead-lettering")
        HandlerMetrics.commands.increment(typeLabel, "dead-letter-refused")
        try? await delivery.reject(requeue: false)
    }
}

/// A command's log metadata, attached only when a line is written: at
/// `LOG_LEVEL=warning` most commands write none, and setting logger
/// metadata per command was about 3 % of the handler's CPU (each key set on
/// a `StreamLogHandler` re-renders all of them). Write lines with
/// ``write(_:_:metadata:)``, which checks the level first; pass
/// ``logger`` only where it is evaluated lazily.
struct LogContext {
    let base: Logger
    let messageID: String?
    let correlationID: String?
    let commandType: String
    var bookingID: String?
    var errorCode: Int?

    /// The command's metadata.
    var metadata: Logger.Metadata {
        var metadata: Logger.Metadata = ["command.type": .string(commandType)]
        if let messageID { metadata["amqp.message_id"] = .string(messageID) }
        if let correlationID { metadata["amqp.correlation_id"] = .string(correlationID) }
        if let bookingID { metadata["booking.id"] = .string(bookingID) }
        if let errorCode { metadata["error.code"] = .stringConvertible(errorCode) }
        return metadata
    }

    /// `base` with the command's metadata (set at once: rendered once).
    var logger: Logger {
        var logger = base
        logger.handler.metadata.merge(metadata) { _, new in new }
        return logger
    }

    /// Writes a line at `level` with the command's metadata and `extra`;
    /// nothing is built when the level is off.
    func write(_ level: Logger.Level, _ message: @autoclosure () -> Logger.Message,
               metadata extra: @autoclosure () -> Logger.Metadata = [:]) {
        guard base.logLevel <= level else { return }
        base.log(level: level, message(), metadata: metadata.merging(extra()) { _, new in new })
    }
}

extension Array {
    /// The elements in consecutive slices of at most `size` (at least 1);
    /// none for an empty array.
    func chunks(of size: Int) -> [ArraySlice<Element>] {
        let size = Swift.max(1, size)
        return stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
