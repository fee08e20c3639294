import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics

/// The heart of the pass sender: sends claimed passes through the gateway
/// and turns each answer into ledger updates and follow-up messages.
///
/// Per gateway call (docs/pass-sender.md, "Retry semantics"):
/// - success: every pass of the call is delivered;
/// - code > 4000 at index i: passes before i delivered, pass i failed (back-off
///   retry, or `passes.failed` after the last attempt), passes after i are
///   sent again at once in the next call;
/// - another code (3000, 1xxx…): the input is wrong, not retried: the pass
///   at `index` goes to `passes.failed` and the others are sent again at
///   once; without an index a single pass goes to `passes.failed`, several
///   are sent again one by one to find the wrong one;
/// - transient (timeout, connection error, 5xx, 429, garbage): every pass of
///   the call is retried with back-off.
///
/// Each call's result is committed to the ledger (with its outbox messages)
/// before the next call, so the only passes that can be sent twice are
/// those of a call that was in progress when the process died.
public struct PassDispatcher: Sendable {
    let ledger: PassLedger
    let gateway: any PassGateway
    let settings: PassSenderSettings
    let logger: Logger
    let now: @Sendable () -> Date
    private let gatewayTimer = Timer(label: "pass_gateway_duration_seconds")

    public init(ledger: PassLedger, gateway: any PassGateway, settings: PassSenderSettings, logger: Logger,
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.ledger = ledger
        self.gateway = gateway
        self.settings = settings
        self.logger = logger
        self.now = now
    }

    /// What one message came to (for logs and tests).
    public struct Summary: Sendable, Equatable {
        public var dropped: DropReason?
        public var delivered: [Int] = []
        public var scheduled: [Int] = []
        public var failed: [Int] = []
        public var gatewayCalls = 0
    }

    /// Handles `booking.confirmed` / `booking.rescheduled`.
    public func handle(event booking: Booking) async throws -> Summary {
        try await run(admission: try await ledger.admit(event: booking))
    }

    /// Handles a retry message.
    public func handle(retry message: PassRetryMessage) async throws -> Summary {
        try await run(admission: try await ledger.admit(retry: message))
    }

    /// Handles `booking.cancelled`.
    public func handle(cancelled booking: Booking) async throws -> Int {
        let dropped = try await ledger.cancel(booking: booking)
        if dropped > 0 {
            Counter(label: "passes_dropped_total", dimensions: [("reason", "cancelled")]).increment(by: dropped)
        }
        return dropped
    }

    private func run(admission: Admission) async throws -> Summary {
        var summary = Summary()
        let booking: Booking
        var remaining: [PassWork]
        switch admission {
        case .dropped(let reason):
            summary.dropped = reason
            Counter(label: "pass_messages_dropped_total", dimensions: [("reason", reason.rawValue)]).increment()
            return summary
        case .proceed(let b, let work):
            booking = b
            remaining = work.sorted { $0.attendeeIndex < $1.attendeeIndex }
        }
        var oneByOne = false
        while !remaining.isEmpty {
            let batch = oneByOne ? [remaining[0]] : remaining
            let rest = Array(remaining.dropFirst(batch.count))
            let indexes = batch.map(\.attendeeIndex)
            let request = SendPassRequestBuilder.request(for: booking, attendeeIndexes: indexes)
            let started = DispatchTime.now()
            let outcome = await gateway.send(request, batch: PassBatch(bookingId: booking.id, version: booking.version,
                                                                       attendeeIndexes: indexes, booking: booking))
            gatewayTimer.recordInterval(since: started)
            Counter(label: "pass_gateway_requests_total", dimensions: [("outcome", outcome.label)]).increment()
            summary.gatewayCalls += 1

            var delivered: [PassWork] = []
            var failures: [(PassWork, code: Int?, text: String, permanent: Bool)] = []
            var again: [PassWork] = []
            switch outcome {
            case .success:
                delivered = batch
            case .passFailed(let i, let code, let text):
                delivered = Array(batch[..<i])
                failures = [(batch[i], code.rawValue, text, false)]
                again = Array(batch[(i + 1)...])
            case .rejected(let code, let text, let index?):
                failures = [(batch[index], code.rawValue, text, true)]
                again = batch.enumerated().filter { $0.offset != index }.map(\.element)
            case .rejected(let code, let text, nil):
                if batch.count == 1 {
                    failures = [(batch[0], code.rawValue, text, true)]
                } else {
                    oneByOne = true
                    again = batch
                }
            case .transient(let code, let text):
                failures = batch.map { ($0, code?.rawValue, text, false) }
            }
            if case .transient = outcome {} else if !failures.isEmpty || !again.isEmpty {
                logger.info("gateway call partly failed", metadata: [
                    "booking.id": .string(booking.id), "booking.version": "\(booking.version)",
                    "outcome": .string(outcome.label), "passes.delivered": "\(delivered.count)",
                ])
            }
            try await commit(booking: booking, delivered: delivered, failures: failures, summary: &summary)
            remaining = (again + rest).sorted { $0.attendeeIndex < $1.attendeeIndex }
        }
        return summary
    }

    private func commit(booking: Booking, delivered: [PassWork],
                        failures: [(PassWork, code: Int?, text: String, permanent: Bool)],
                        summary: inout Summary) async throws {
        guard !delivered.isEmpty || !failures.isEmpty else { return }
        let stamp = ContractFormat.timestamp(now())
        var outbox: [OutboxMessage] = []
        for work in delivered {
            let a = booking.attendees[work.attendeeIndex]
            let event = PassDelivered(eventId: RandomID.uuidString(), occurredAt: stamp, bookingId: booking.id,
                                      version: booking.version, attendeeIndex: work.attendeeIndex, name: a.name,
                                      email: a.email, phone: a.phone, channel: gateway.channel)
            outbox.append(OutboxMessage(exchange: Topology.eventsExchange, routingKey: EventType.passDelivered.rawValue,
                                        messageID: event.eventId, type: EventType.passDelivered.rawValue,
                                        body: [UInt8](try ContractJSON.encode(event)),
                                        headers: ["booking-id": .string(booking.id), "attendee-index": .int64(Int64(work.attendeeIndex))]))
        }
        var updates: [FailureUpdate] = []
        var retryGroups: [RetryDelay: [PassRetryMessage.Pass]] = [:]
        for (work, code, text, permanent) in failures {
            let attempts = work.attempts + 1
            let first = work.firstFailureAt ?? stamp
            let giveUp = permanent || attempts >= settings.maxAttempts
            updates.append(FailureUpdate(attendeeIndex: work.attendeeIndex, status: giveUp ? .failed : .scheduled,
                                         attempts: attempts, firstFailureAt: first, lastFailureAt: stamp,
                                         lastErrorCode: code, lastErrorText: text))
            let codeLabel = code.map(String.init) ?? "none"
            if giveUp {
                let a = booking.attendees[work.attendeeIndex]
                let failed = FailedPass(bookingId: booking.id, version: booking.version, attendeeIndex: work.attendeeIndex,
                                        name: a.name, email: a.email, phone: a.phone, attempts: attempts,
                                        firstFailureAt: first, lastFailureAt: stamp, lastErrorCode: code.map { ErrorCode(rawValue: $0) },
                                        lastErrorText: text.isEmpty ? "unknown error" : text, room: booking.room,
                                        date: booking.date, start: booking.start, end: booking.end, title: booking.title)
                outbox.append(OutboxMessage(exchange: Topology.defaultExchange, routingKey: Topology.passesFailedQueue,
                                            messageID: failed.passKey, type: Topology.passesFailedQueue,
                                            body: [UInt8](try ContractJSON.encode(failed)),
                                            headers: FailedPassHeaders.headers(for: failed)))
                let event = PassFailedEvent(eventId: RandomID.uuidString(), occurredAt: stamp, bookingId: booking.id,
                                            version: booking.version, attendeeIndex: work.attendeeIndex, name: a.name,
                                            email: a.email, phone: a.phone, channel: gateway.channel,
                                            errorCode: code.map { ErrorCode(rawValue: $0) }, errorText: failed.lastErrorText,
                                            attempts: attempts)
                outbox.append(OutboxMessage(exchange: Topology.eventsExchange, routingKey: EventType.passFailed.rawValue,
                                            messageID: event.eventId, type: EventType.passFailed.rawValue,
                                            body: [UInt8](try ContractJSON.encode(event)),
                                            headers: ["booking-id": .string(booking.id), "attendee-index": .int64(Int64(work.attendeeIndex))]))
                summary.failed.append(work.attendeeIndex)
                Counter(label: "passes_failed_total", dimensions: [("error_code", codeLabel)]).increment()
                logger.warning("pass given up; sent to passes.failed", metadata: [
                    "booking.id": .string(booking.id), "booking.version": "\(booking.version)",
                    "attendee.index": "\(work.attendeeIndex)", "attempts": "\(attempts)", "error.code": .string(codeLabel),
                    "error.text": .string(text),
                ])
            } else {
                retryGroups[settings.delay(afterAttempt: attempts), default: []].append(
                    PassRetryMessage.Pass(attendeeIndex: work.attendeeIndex, attempts: attempts, firstFailureAt: first,
                                          lastFailureAt: stamp, lastErrorCode: code, lastErrorText: text))
                summary.scheduled.append(work.attendeeIndex)
                Counter(label: "passes_retried_total", dimensions: [("error_code", codeLabel)]).increment()
            }
        }
        for (delay, passes) in retryGroups.sorted(by: { $0.key.milliseconds < $1.key.milliseconds }) {
            let message = PassRetryMessage(kind: .backoff, bookingId: booking.id, version: booking.version,
                                           booking: booking, passes: passes)
            outbox.append(OutboxMessage(exchange: Topology.defaultExchange, routingKey: PassQueues.delay(delay),
                                        messageID: RandomID.uuidString(), type: PassQueues.retryMessageType,
                                        body: [UInt8](try ContractJSON.encode(message)), headers: message.headers))
        }
        try await ledger.record(bookingId: booking.id, version: booking.version,
                                delivered: delivered.map(\.attendeeIndex), deliveredAt: stamp,
                                failures: updates, outbox: outbox)
        if !delivered.isEmpty {
            Counter(label: "passes_delivered_total", dimensions: [("channel", gateway.channel.rawValue)])
                .increment(by: delivered.count)
        }
        summary.delivered += delivered.map(\.attendeeIndex)
    }
}
