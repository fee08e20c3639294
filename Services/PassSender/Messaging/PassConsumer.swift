import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import ServiceSupport

/// Serialises work per key (booking id) inside the process: two messages of
/// the same booking are never handled at once, so the ledger's
/// `attempting` status always means "a previous process died here".
///
/// Holders take the key in the order they queued for it. A consumer's
/// concurrent tasks would queue in the order they happen to run, not the
/// order their deliveries came in; ``reserve(_:)`` takes the place in
/// delivery order, before the task runs, and ``lock(_:)-(Ticket)`` waits
/// for that place.
actor KeyedLock {
    /// A place in one key's queue, taken by ``reserve(_:)``. Its owner must
    /// ``lock(_:)-(Ticket)`` and then ``unlock(_:)`` it, or the key stays
    /// held for ever.
    struct Ticket: Sendable, Equatable {
        let key: String
        let number: UInt64
    }

    private struct Place {
        let number: UInt64
        /// Nil while the place is reserved and its owner has not come to wait.
        var waiter: CheckedContinuation<Void, Never>?
    }

    /// The place holding each held key.
    private var holder: [String: UInt64] = [:]
    private var queues: [String: [Place]] = [:]
    private var issued: UInt64 = 0

    private func nextNumber() -> UInt64 {
        issued += 1
        return issued
    }

    /// Takes the next place in `key`'s queue without waiting: the key is
    /// this ticket's at once if nobody holds it.
    func reserve(_ key: String) -> Ticket {
        let ticket = Ticket(key: key, number: nextNumber())
        if holder[key] == nil {
            holder[key] = ticket.number
        } else {
            queues[key, default: []].append(Place(number: ticket.number, waiter: nil))
        }
        return ticket
    }

    /// Waits until the key is this ticket's.
    func lock(_ ticket: Ticket) async {
        if holder[ticket.key] == ticket.number { return }
        await withCheckedContinuation { continuation in
            guard let index = queues[ticket.key]?.firstIndex(where: { $0.number == ticket.number }) else {
                preconditionFailure("a ticket of key \(ticket.key) that is neither holding nor queued")
            }
            queues[ticket.key]![index].waiter = continuation
        }
    }

    /// Takes the key after everyone queued for it so far.
    func lock(_ key: String) async {
        await lock(reserve(key))
    }

    func unlock(_ key: String) {
        guard var queue = queues[key], !queue.isEmpty else {
            holder[key] = nil
            return
        }
        let next = queue.removeFirst()
        queues[key] = queue.isEmpty ? nil : queue
        holder[key] = next.number  // ownership passes to the next place
        next.waiter?.resume()  // or its owner finds it held for it when it comes
    }

    /// How many owners wait for `key` (for tests).
    func waiting(_ key: String) -> Int { queues[key]?.filter { $0.waiter != nil }.count ?? 0 }
}

/// Handles deliveries of `pass-sender.events` and `pass-sender.retry`.
///
/// Per delivery: admit the message to the ledger (which also finds what
/// its outbox still holds for that booking); run the gateway calls (each
/// committed to the ledger with its follow-up messages); publish the
/// leftovers, then those follow-ups, with publisher confirms, in order;
/// queue the write that marks them published; only then ack (the mark is
/// not awaited: ``publish(_:waitForMark:)``). Poison (undecodable, unknown
/// type, untrusted sender, unusable retry) goes to `<queue>.dead` with the
/// reason on its copy (`DeadLetterCopy`), never requeued.
public struct PassConsumer: Sendable {
    /// How one delivery was settled (for the optional observer: tests, tracing).
    public struct Settled: Sendable {
        public enum Outcome: Sendable, Equatable {
            case acked
            case deadLettered(String)
            case requeued
        }
        /// `pass-sender.events` or `pass-sender.retry`.
        public var queue: String
        /// The event type, or `pass-sender.retry`.
        public var type: String
        public var bookingId: String?
        public var outcome: Outcome
        /// What the dispatcher did (nil for poison).
        public var summary: PassDispatcher.Summary?
    }

    let connection: AMQPConnection
    let dispatcher: PassDispatcher
    let ledger: PassLedger
    let logger: Logger
    let observer: (@Sendable (Settled) -> Void)?
    /// Booking events must come from the booking handler's broker user.
    let eventSender: SenderCheck
    /// Retry messages must come from this service's own user or an operator
    /// (`ADMIN_USERS`, `bookingctl passes failed retry`): they carry the
    /// phone numbers and e-mails to send to.
    let retrySender: SenderCheck
    private let locks = KeyedLock()

    /// - Parameter eventSender: whose booking events to act on; default
    ///   this connection's own user (the one-user embedded set).
    public init(connection: AMQPConnection, dispatcher: PassDispatcher, ledger: PassLedger, logger: Logger,
                eventSender: SenderCheck? = nil, retryOperators: Set<String> = [],
                observer: (@Sendable (Settled) -> Void)? = nil) {
        self.connection = connection
        self.dispatcher = dispatcher
        self.ledger = ledger
        self.logger = logger
        self.observer = observer
        self.eventSender = eventSender ?? SenderCheck(trustedUser: connection.user)
        self.retrySender = SenderCheck(trustedUser: connection.user, alsoTrusted: retryOperators)
    }

    /// The events consumer's first step (``AMQPConsumerService``'s
    /// `prepare`), run one delivery at a time in the order the broker
    /// delivered them: a usable booking event takes its place in its
    /// booking's queue here, so the concurrent step that handles it cannot
    /// be overtaken by a later event of the same booking (which would drop
    /// it as stale: an update overtaking a reschedule sends no pass for the
    /// new times). Anything else is handled by ``handleEvent(_:)``.
    public func prepareEvent(_ delivery: AMQPDelivery) async -> @Sendable (AMQPDelivery) async -> Void {
        let typeText = EventType.name(typeProperty: delivery.properties.type, routingKey: delivery.routingKey)
        guard eventSender.refusal(delivery.properties) == nil, let type = EventType(rawValue: typeText),
              Self.passEvents.contains(type), let event = Self.actionable(delivery.body), Self.usable(event.booking, type) else {
            return { await handleEvent($0) }
        }
        let ticket = await locks.reserve(event.booking.id)
        return { await process(type, event, $0, logger: deliveryLogger($0), ticket: ticket) }
    }

    /// The event in `body` as the pass sender acts on it: decoded, or — when
    /// the state before was a newer handler's status — decoded without its
    /// `previous`, as one before v1.1. Nil for poison and for a booking
    /// whose own status is unknown (acked without touching the ledger).
    static func actionable(_ body: [UInt8]) -> BookingEvent? {
        if let event = try? ContractJSON.decode(BookingEvent.self, from: body) { return event }
        guard UnknownStatus.probe(body) == nil, let readable = UnknownStatus.withoutUnknownPrevious(body) else { return nil }
        return try? ContractJSON.decode(BookingEvent.self, from: readable)
    }

    /// The event types the pass sender acts on.
    static let passEvents: Set<EventType> = [.bookingConfirmed, .bookingRescheduled, .bookingUpdated, .bookingCancelled,
                                             .bookingRejected]

    /// The id goes into message ids (`<id>:<version>:<index>`, at most 255
    /// bytes): a longer one could never be published.
    static func usable(_ booking: Booking, _ type: EventType) -> Bool {
        !booking.id.isEmpty && booking.id.utf8.count <= 128 && booking.version >= 1
            && (type == .bookingCancelled || type == .bookingRejected || !booking.attendees.isEmpty)
    }

    private func deliveryLogger(_ delivery: AMQPDelivery) -> Logger {
        var logger = self.logger
        logger[metadataKey: "amqp.message_id"] = delivery.properties.messageID.map { .string($0) }
        return logger
    }

    /// Handles one `pass-sender.events` delivery (taking its booking's
    /// lock when it gets there; ``prepareEvent(_:)`` keeps delivery order).
    public func handleEvent(_ delivery: AMQPDelivery) async {
        let logger = deliveryLogger(delivery)
        let typeText = EventType.name(typeProperty: delivery.properties.type, routingKey: delivery.routingKey)
        if let refusal = eventSender.refusal(delivery.properties) {
            await poison(delivery, from: Topology.passSenderEventsQueue, reason: refusal, logger: logger,
                         label: "untrusted-sender")
            observer?(Settled(queue: Topology.passSenderEventsQueue, type: typeText, bookingId: nil,
                              outcome: .deadLettered("untrusted sender"), summary: nil))
            return
        }
        if typeText == EventType.bookingSubmitted.rawValue {
            await acknowledgeSubmitted(delivery, logger: logger)
            return
        }
        guard let type = EventType(rawValue: typeText), Self.passEvents.contains(type) else {
            await poison(delivery, from: Topology.passSenderEventsQueue, reason: "unexpected event type '\(typeText.prefix(100))'",
                         logger: logger, label: "unknown")
            observer?(Settled(queue: Topology.passSenderEventsQueue, type: typeText, bookingId: nil,
                              outcome: .deadLettered("unexpected event type"), summary: nil))
            return
        }
        guard let event = Self.actionable(delivery.body) else {
            if let (bookingId, status) = UnknownStatus.probe(delivery.body) {
                // A newer handler's status (v1.1: ignored). Whether a pass
                // is due cannot be told from it; the ledger keeps the
                // booking's last known state.
                UnknownStatus.note(status, bookingId: bookingId, logger: logger)
                try? await delivery.ack()
                PassSenderMetrics.shared.messages.increment(type.rawValue, "unknown-status")
                observer?(Settled(queue: Topology.passSenderEventsQueue, type: type.rawValue,
                                  bookingId: String(bookingId.prefix(128)), outcome: .acked, summary: nil))
                return
            }
            // Poison: decoded once more, for the decoder's own words.
            var why = "unreadable"
            do { _ = try ContractJSON.decode(BookingEvent.self, from: delivery.body) } catch { why = "\(error)" }
            await poison(delivery, from: Topology.passSenderEventsQueue, reason: "body is not a booking event: \(why)",
                         logger: logger, label: type.rawValue)
            observer?(Settled(queue: Topology.passSenderEventsQueue, type: type.rawValue, bookingId: nil,
                              outcome: .deadLettered("body is not a booking event"), summary: nil))
            return
        }
        let booking = event.booking
        guard Self.usable(booking, type) else {
            await poison(delivery, from: Topology.passSenderEventsQueue,
                         reason: "booking event without id (1 to 128 bytes), version or attendees", logger: logger,
                         label: type.rawValue)
            observer?(Settled(queue: Topology.passSenderEventsQueue, type: type.rawValue, bookingId: String(booking.id.prefix(128)),
                              outcome: .deadLettered("booking event without id (1 to 128 bytes), version or attendees"), summary: nil))
            return
        }
        await process(type, event, delivery, logger: logger, ticket: nil)
    }

    /// Handles a usable booking event under its booking's lock: the place
    /// `ticket` reserved, or (nil) the next one.
    private func process(_ type: EventType, _ event: BookingEvent, _ delivery: AMQPDelivery, logger: Logger,
                         ticket: KeyedLock.Ticket?) async {
        var logger = logger
        let booking = event.booking
        logger[metadataKey: "booking.id"] = .string(booking.id)
        logger[metadataKey: "booking.version"] = "\(booking.version)"
        // A waiter's promotion (v1.2) is a confirmation like any other:
        // its pass goes out once, through the same ledger. The legacy
        // sendpass body has no place for the flag; the logs carry it.
        if event.promoted == true { logger[metadataKey: "booking.promoted"] = "true" }
        let eventLogger = logger
        await settle(delivery, queue: Topology.passSenderEventsQueue, bookingId: booking.id, ticket: ticket, logger: logger,
                     label: type.rawValue) { () async throws -> PassDispatcher.Summary? in
            let logger = eventLogger
            let summary = try await dispatcher.handle(event: type, booking: booking, previous: event.previous)
            log(summary, logger: logger)
            return summary
        }
    }

    /// `booking.submitted` (v1.2): a held or waitlisted booking now awaits
    /// its room's approvers. Nobody has a pass for it (held and waitlisted
    /// bookings get none) and none is due until the approval's
    /// `booking.confirmed`, so it is acknowledged without touching the
    /// ledger — bound deliberately, so that it is known here rather than
    /// dead-lettered as an unknown type should it arrive.
    private func acknowledgeSubmitted(_ delivery: AMQPDelivery, logger: Logger) async {
        let type = EventType.bookingSubmitted.rawValue
        // Only the id, for the log and the observer: the body is not acted on.
        let id = (try? ContractJSON.decode(BookingEvent.self, from: delivery.body))?.booking.id
        logger.debug("awaiting approval: no pass until it is confirmed",
                     metadata: ["booking.id": .string(id.map { String($0.prefix(128)) } ?? "?")])
        do {
            try await delivery.ack()
            PassSenderMetrics.shared.messages.increment(type, "no-pass")
        } catch {
            logger.warning("ack failed; the message will come again", metadata: ["error": "\(error)"])
        }
        observer?(Settled(queue: Topology.passSenderEventsQueue, type: type, bookingId: id.map { String($0.prefix(128)) },
                          outcome: .acked, summary: nil))
    }

    /// Handles one `pass-sender.retry` delivery.
    public func handleRetry(_ delivery: AMQPDelivery) async {
        var logger = deliveryLogger(delivery)
        if let refusal = retrySender.refusal(delivery.properties) {
            await poison(delivery, from: PassQueues.retry, reason: refusal, logger: logger, label: "untrusted-sender")
            observer?(Settled(queue: PassQueues.retry, type: PassQueues.retryMessageType, bookingId: nil,
                              outcome: .deadLettered("untrusted sender"), summary: nil))
            return
        }
        let message: PassRetryMessage
        do {
            message = try ContractJSON.decode(PassRetryMessage.self, from: delivery.body)
        } catch {
            await poison(delivery, from: PassQueues.retry, reason: "body is not a retry message: \(error)", logger: logger,
                         label: "retry")
            observer?(Settled(queue: PassQueues.retry, type: PassQueues.retryMessageType, bookingId: nil,
                              outcome: .deadLettered("body is not a retry message"), summary: nil))
            return
        }
        guard message.schemaVersion == PassRetryMessage.currentSchemaVersion else {
            await poison(delivery, from: PassQueues.retry, reason: "retry message schema version \(message.schemaVersion) is not supported",
                         logger: logger, label: "retry")
            observer?(Settled(queue: PassQueues.retry, type: PassQueues.retryMessageType, bookingId: message.bookingId,
                              outcome: .deadLettered("unsupported schema version"), summary: nil))
            return
        }
        logger[metadataKey: "booking.id"] = .string(message.bookingId)
        logger[metadataKey: "booking.version"] = "\(message.version)"
        logger[metadataKey: "retry.kind"] = .string(message.kind.rawValue)
        let retryLogger = logger
        await settle(delivery, queue: PassQueues.retry, bookingId: message.bookingId, logger: logger,
                     label: PassQueues.retryMessageType) { () async throws -> PassDispatcher.Summary? in
            let logger = retryLogger
            let summary = try await dispatcher.handle(retry: message)
            log(summary, logger: logger)
            return summary
        }
    }

    private func log(_ summary: PassDispatcher.Summary, logger: Logger) {
        if let reason = summary.dropped {
            logger.info("message dropped", metadata: ["reason": .string(reason.rawValue)])
        } else {
            logger.debug("passes handled", metadata: [
                "passes.delivered": "\(summary.delivered)",
                "notices.delivered": "\(summary.notices.map { "\($0.key.rawValue)=\($0.value.count)" }.sorted())", "passes.scheduled": "\(summary.scheduled)",
                "passes.failed": "\(summary.failed)", "gateway.calls": "\(summary.gatewayCalls)",
            ])
        }
    }

    /// Runs `work` under the booking's lock and publishes the follow-ups it
    /// returns (``PassDispatcher/Summary/leftovers``, then
    /// ``PassDispatcher/Summary/outbox``), then acks; on failure waits a
    /// moment and requeues. An unusable message is dead-lettered after the booking's
    /// leftovers are published (its admission, which would have returned
    /// them, threw).
    private func settle(_ delivery: AMQPDelivery, queue: String, bookingId: String, ticket: KeyedLock.Ticket? = nil,
                        logger: Logger, label: String, _ work: @Sendable () async throws -> PassDispatcher.Summary?) async {
        if let ticket { await locks.lock(ticket) } else { await locks.lock(bookingId) }
        let summary: PassDispatcher.Summary?
        do {
            do {
                summary = try await work()
            } catch let error as PassLedger.UnusableMessage {
                try await flush(bookingId: bookingId)
                throw error
            }
            // Leftovers on their own first: if one of them fails, the
            // newer follow-ups must not overtake it.
            try await publish(summary?.leftovers ?? [], waitForMark: false)
            try await publish(summary?.outbox ?? [], waitForMark: false)
            await locks.unlock(bookingId)
        } catch let error as PassLedger.UnusableMessage {
            await locks.unlock(bookingId)
            await poison(delivery, from: queue, reason: error.description, logger: logger, label: label)
            observer?(Settled(queue: queue, type: label, bookingId: bookingId, outcome: .deadLettered(error.description),
                              summary: nil))
            return
        } catch is CancellationError {
            // The graceful stop ran out of time while this message waited
            // for a gateway slot: it goes back having sent nothing more
            // (what it committed is kept; its claims are taken over once
            // their lease runs out).
            await locks.unlock(bookingId)
            logger.info("stopping: message given back to the queue before its gateway call")
            PassSenderMetrics.shared.messages.increment(label, "requeued")
            try? await delivery.nack(requeue: true)
            observer?(Settled(queue: queue, type: label, bookingId: bookingId, outcome: .requeued, summary: nil))
            return
        } catch {
            // What was committed but not published waits for the
            // redelivery (its admission finds it), not flushed here: a
            // flush is one batch, and a row that failed would be overtaken.
            await locks.unlock(bookingId)
            logger.error("message could not be finished; requeueing", metadata: ["error": "\(error)"])
            PassSenderMetrics.shared.messages.increment(label, "requeued")
            await delivery.requeueAfterPause()
            observer?(Settled(queue: queue, type: label, bookingId: bookingId, outcome: .requeued, summary: nil))
            return
        }
        do {
            try await delivery.ack()
            PassSenderMetrics.shared.messages.increment(label, "ok")
        } catch {
            logger.warning("ack failed; the message will come again and find its work done", metadata: ["error": "\(error)"])
        }
        observer?(Settled(queue: queue, type: label, bookingId: bookingId, outcome: .acked, summary: summary))
    }

    /// Dead-letters poison with `reason` on its copy (``DeadLetterCopy``).
    private func poison(_ delivery: AMQPDelivery, from queue: String, reason: String, logger: Logger, label: String) async {
        PassSenderMetrics.shared.messages.increment(label, "dead-lettered")
        await DeadLetterCopy.deadLetter(delivery, from: queue, reason: reason, by: "pass-sender", on: connection, logger: logger)
    }

    /// Flushes, booking by booking under its lock, outbox rows unpublished
    /// for more than `age` seconds (``OutboxSweep``). Failures are logged;
    /// the rows stay for the next sweep.
    func sweep(olderThan age: TimeInterval, logger: Logger) async {
        let bookings: [String]
        do {
            bookings = try await ledger.bookingsWithUnpublishedRows(createdBefore: ledger.now().timeIntervalSince1970 - age)
        } catch {
            logger.warning("could not look for unpublished outbox rows; trying again at the next sweep",
                           metadata: ["error": "\(error)"])
            return
        }
        guard !bookings.isEmpty else { return }
        var published = 0
        for bookingId in bookings {
            if Task.isCancelled { return }
            await locks.lock(bookingId)
            do {
                try await flush(bookingId: bookingId)
                published += 1
            } catch {
                logger.warning("could not publish a booking's left-behind outbox rows; trying again at the next sweep",
                               metadata: ["booking.id": .string(bookingId), "error": "\(error)"])
            }
            await locks.unlock(bookingId)
        }
        PassSenderMetrics.shared.outboxSwept.increment(by: published)
        logger.notice("published outbox rows left behind", metadata: [
            "bookings": "\(published)", "bookings.failed": "\(bookings.count - published)",
        ])
    }

    /// Publishes (with confirms, in order) the outbox messages not yet
    /// published for `bookingId` (nil: all, at start-up), and marks them
    /// published.
    public func flush(bookingId: String?) async throws {
        while true {
            // A booking's rows are read through the ledger's write queue,
            // behind any mark still queued for them (on SQLite a plain read
            // would not see it yet and publish them again).
            let rows = if let bookingId {
                try await ledger.unpublishedQueued(bookingId: bookingId, limit: 500)
            } else {
                try await ledger.unpublished(limit: 500)
            }
            guard !rows.isEmpty else { return }
            try await publish(rows, waitForMark: true)
            if rows.count < 500 { return }
        }
    }

    /// Publishes `rows` with confirms, in order, and marks the confirmed
    /// ones published; throws the first failure after marking. Without
    /// `waitForMark` the mark is queued ahead of every later ledger write but
    /// not awaited (``PassLedger/markPublishedSoon(_:onError:)``): the
    /// delivery is acked without one more commit, and the booking's next
    /// message, whose admission is queued later, finds them published.
    func publish(_ rows: [OutboxRow], waitForMark: Bool) async throws {
        guard !rows.isEmpty else { return }
        // user_id: consumers (this service's retry consumer among them)
        // trust only what the broker vouches this user published.
        let user = connection.user
        let results = await connection.publish(batch: rows.map {
            var properties = $0.message.properties
            properties.userID = user
            // Through the default exchange a message goes to one named
            // queue (a retry delay, `passes.failed`): if that queue is gone
            // the broker would confirm and drop it, and the pass would wait
            // as `scheduled` for ever. Mandatory, it comes back unroutable:
            // the row stays unpublished and is tried again, and logged.
            return AMQPClient.OutgoingMessage(body: $0.message.body, exchange: $0.message.exchange,
                                              routingKey: $0.message.routingKey, properties: properties,
                                              mandatory: $0.message.exchange == Topology.defaultExchange)
        })
        let confirmed = zip(rows, results).compactMap { $1 == nil ? $0.id : nil }
        if waitForMark {
            try await ledger.markPublished(confirmed)
        } else {
            let logger = self.logger
            ledger.markPublishedSoon(confirmed) { error in
                logger.warning("could not mark published outbox rows; they will be published once more",
                               metadata: ["outbox.rows": "\(confirmed.count)", "error": "\(error)"])
            }
        }
        if let failure = results.compactMap({ $0 }).first { throw failure }
    }
}
