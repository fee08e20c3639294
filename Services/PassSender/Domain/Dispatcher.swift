import AMQPClient
import BookingContracts
import BrokerObjects
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
    let metrics: PassSenderMetrics
    /// Bounds the gateway calls in flight (`PASS_GATEWAY_CONCURRENCY`),
    /// shared by both consumers.
    let slots: GatewaySlots

    public init(ledger: PassLedger, gateway: any PassGateway, settings: PassSenderSettings, logger: Logger,
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.init(ledger: ledger, gateway: gateway, settings: settings, logger: logger, now: now, metrics: .shared)
    }

    /// A dispatcher counting in `metrics` (tests: a table on a test factory).
    init(ledger: PassLedger, gateway: any PassGateway, settings: PassSenderSettings, logger: Logger,
         now: @escaping @Sendable () -> Date = { Date() }, metrics: PassSenderMetrics) {
        self.ledger = ledger
        self.gateway = gateway
        self.settings = settings
        self.logger = logger
        self.now = now
        self.metrics = metrics
        self.slots = GatewaySlots(limit: settings.gatewayConcurrency)
    }

    /// Gateway calls waiting for a slot now (``GatewaySlots``).
    public var waitingForGateway: Int { slots.waiting }

    /// What one message came to (for logs and tests).
    public struct Summary: Sendable, Equatable {
        public var dropped: DropReason?
        public var delivered: [Int] = []
        public var scheduled: [Int] = []
        public var failed: [Int] = []
        public var gatewayCalls = 0
        /// Notices delivered, by kind: recipient indexes (``NoticeJob/recipients``).
        public var notices: [NoticeKind: [Int]] = [:]
        /// What earlier messages of the booking left unpublished in the
        /// outbox, oldest first (found by the admission): published before
        /// ``outbox``, and on their own, so a failure among them stops the
        /// newer follow-ups from overtaking them.
        public var leftovers: [OutboxRow] = []
        /// The follow-up messages this message's gateway answers committed,
        /// in order: published before the message is acked, from here, so
        /// nothing is read back from the outbox per message.
        public var outbox: [OutboxRow] = []
    }

    /// Handles a booking event (`booking.confirmed`, `.rescheduled`,
    /// `.updated`, `.cancelled`, `.rejected`): the notices and passes it
    /// calls for, in order.
    public func handle(event type: EventType, booking: Booking, previous: BookingSnapshot?) async throws -> Summary {
        try await run(try await admitted { try await ledger.admitCollecting(event: type, booking: booking, previous: previous) })
    }

    /// Handles `booking.confirmed` / `booking.rescheduled` without `previous`
    /// (tests and callers of the v1 API): as a confirmation.
    public func handle(event booking: Booking) async throws -> Summary {
        try await handle(event: .bookingConfirmed, booking: booking, previous: nil)
    }

    /// Handles a retry message.
    public func handle(retry message: PassRetryMessage) async throws -> Summary {
        try await run(try await admitted { try await ledger.admitCollecting(retry: message) })
    }

    /// Runs an admission again while another instance sending to the same
    /// recipients holds their claim (``PassLedger/ClaimHeld``): the delivery
    /// stays with us meanwhile, so waiting costs no redelivery (quorum
    /// queues dead-letter a message requeued too often). The claimer
    /// finishes, or its lease runs out because it died; we look again every
    /// second until then.
    ///
    /// Returns the admission and the ledger's time just before it: its
    /// claims' lease runs from no earlier than that.
    private func admitted(_ admit: () async throws -> PassLedger.Admitted) async throws -> (PassLedger.Admitted, Date) {
        var logged = false
        while true {
            do {
                let before = ledger.now()
                return (try await admit(), before)
            } catch let held as PassLedger.ClaimHeld {
                if !logged {
                    logger.info("another pass sender instance is sending to these recipients; waiting for it",
                                metadata: ["booking.id": .string(held.bookingId), "claim.until": "\(held.until)"])
                    metrics.claimsWaited.increment()
                    logged = true
                }
                let left = held.until.timeIntervalSince(ledger.now())  // the ledger's clock, as the lease
                try await Task.sleep(for: .milliseconds(Int(max(0.05, min(1, left)) * 1000)))
            }
        }
    }

    private func run(_ admitted: (PassLedger.Admitted, Date)) async throws -> Summary {
        let (admitted, claimedAt) = admitted
        var summary = Summary()
        summary.leftovers = admitted.leftovers
        switch admitted.admission {
        case .dropped(let reason):
            summary.dropped = reason
            metrics.dropped.increment(reason.rawValue)
            return summary
        case .proceed(let jobs):
            var renewedAt = claimedAt
            for job in jobs { try await run(job: job, summary: &summary, renewedAt: &renewedAt) }
            return summary
        }
    }

    /// How long after its last renewal a claim can still go into a gateway
    /// call without one: the call (at most the gateway timeout) and the
    /// commit of its answer (``PassSenderSettings/answerCommitMargin``)
    /// must end before the lease does, or another instance could take the
    /// rows over and send them again.
    var renewAfter: TimeInterval {
        ledger.claimLease - PassSenderSettings.seconds(settings.gatewayTimeout) - PassSenderSettings.answerCommitMargin
    }

    /// Sends `job`'s work, one gateway call at a time, each holding one of
    /// ``slots`` (`PASS_GATEWAY_CONCURRENCY`) for the call (and the renewal
    /// before it, when one is due): the admission before and the commit
    /// after run outside, overlapping other messages' calls. `renewedAt` is
    /// when this message's claims were last renewed (admission, or a
    /// recorded answer that ended within the lease; `distantPast` when
    /// that is not known); a call later than ``renewAfter`` after it
    /// renews them first and leaves out the recipients it no longer
    /// claims.
    private func run(job: NoticeJob, summary: inout Summary, renewedAt: inout Date) async throws {
        let booking = job.booking
        var remaining = job.work.sorted { $0.attendeeIndex < $1.attendeeIndex }
        var oneByOne = false
        let email = { (w: PassWork) in PassLedger.normalised(job.recipients[w.attendeeIndex].email) }
        while !remaining.isEmpty {
            let batch = oneByOne ? [remaining[0]] : remaining
            let rest = Array(remaining.dropFirst(batch.count))
            let indexes = batch.map(\.attendeeIndex)
            let batchInfo = PassBatch(bookingId: booking.id, version: booking.version, attendeeIndexes: indexes,
                                      booking: booking, kind: job.kind, previous: job.previous)
            var lostWhileWaiting: Set<String> = []
            let called: GatewayOutcome? = try await slots.holding {
                let now = ledger.now()
                if now.timeIntervalSince(renewedAt) > renewAfter {
                    lostWhileWaiting = try await ledger.renewClaims(bookingId: booking.id, version: booking.version,
                                                                    kind: job.kind, emails: batch.map(email))
                    renewedAt = now
                    metrics.claimsRenewed.increment()
                    if !lostWhileWaiting.isEmpty { return nil }
                }
                let started = DispatchTime.now()
                let outcome = job.kind == .pass
                    ? await gateway.send(SendPassRequestBuilder.request(for: booking, attendeeIndexes: indexes), batch: batchInfo)
                    : await gateway.notify(NotifyRequestBuilder.request(for: job, indexes: indexes), batch: batchInfo)
                metrics.gatewayDuration.recordInterval(since: started)
                return outcome
            }
            guard let outcome = called else {
                // Another instance took these over (or finished them) while
                // this message waited for a slot: they are its now. The
                // rest goes on.
                logger.warning("recipients no longer claimed after a wait for a gateway slot (another pass sender instance took them over); leaving them to it", metadata: [
                    "booking.id": .string(booking.id), "booking.version": "\(booking.version)", "kind": .string(job.kind.rawValue),
                    "recipients.taken_over": "\(lostWhileWaiting.count)",
                ])
                metrics.claimsLost.increment()
                remaining = remaining.filter { !lostWhileWaiting.contains(email($0)) }
                continue
            }
            metrics.gatewayRequests.increment(outcome.label, job.kind.rawValue)
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
                    "booking.id": .string(booking.id), "booking.version": "\(booking.version)", "kind": .string(job.kind.rawValue),
                    "outcome": .string(outcome.label), "passes.delivered": "\(delivered.count)",
                ])
            }
            var taken: Set<String> = []
            // A commit that writes renews the lease of the rows we still
            // claim — all of them, if it ran before the lease could lapse.
            // record() fences only the failures it writes, so after a
            // commit that ended past the old lease nothing says the other
            // rows are still ours: the next call renews (and checks) first.
            let previousRenewal = renewedAt
            let committing = ledger.now()
            do {
                try await commit(job: job, delivered: delivered, failures: failures, summary: &summary)
                if !delivered.isEmpty || !failures.isEmpty {
                    renewedAt = ledger.now().timeIntervalSince(previousRenewal) < ledger.claimLease ? committing : .distantPast
                }
            } catch let lost as PassLedger.ClaimLost {
                // Our lease ran out during the call (it hung: a partition, a
                // stalled ledger) and another instance took these rows over.
                // They are its now: keep our deliveries, leave the rest.
                taken = lost.emails
                logger.warning("another pass sender instance took over recipients while our gateway call was in flight; leaving them to it", metadata: [
                    "booking.id": .string(booking.id), "booking.version": "\(booking.version)", "kind": .string(job.kind.rawValue),
                    "recipients.taken_over": "\(lost.emails.count)",
                ])
                metrics.claimsLost.increment()
                // Our lease ran out: whatever this commit renews, the next
                // call checks first which rows are still ours.
                renewedAt = .distantPast
                try await commit(job: job, delivered: delivered, failures: failures.filter { !taken.contains(email($0.0)) },
                                 summary: &summary)
            }
            remaining = (again + rest).filter { !taken.contains(email($0)) }
                .sorted { $0.attendeeIndex < $1.attendeeIndex }
        }
    }

    /// Commits one call's result. `pass.delivered`/`pass.failed` events are
    /// about passes (contract v1: their consumers know no kinds), so
    /// notices get neither; a notice given up goes to `passes.failed` with
    /// its `kind`.
    private func commit(job: NoticeJob, delivered: [PassWork],
                        failures: [(PassWork, code: Int?, text: String, permanent: Bool)],
                        summary: inout Summary) async throws {
        guard !delivered.isEmpty || !failures.isEmpty else { return }
        let booking = job.booking
        let list = job.recipients
        let isPass = job.kind == .pass
        let stamp = ContractFormat.timestamp(now())
        var outbox: [OutboxMessage] = []
        for work in delivered where isPass {
            let a = list[work.attendeeIndex]
            let event = PassDelivered(eventId: RandomID.uuidString(), occurredAt: stamp, bookingId: booking.id,
                                      version: booking.version, attendeeIndex: work.attendeeIndex, name: a.name,
                                      email: a.email, phone: a.phone, channel: gateway.channel)
            outbox.append(OutboxMessage(exchange: Topology.eventsExchange, routingKey: EventType.passDelivered.rawValue,
                                        messageID: event.eventId, type: EventType.passDelivered.rawValue,
                                        body: event.jsonBytes,
                                        headers: ["booking-id": .string(booking.id), "attendee-index": .int64(Int64(work.attendeeIndex))]))
        }
        var updates: [FailureUpdate] = []
        // Counted, logged and summed up only once the ledger took the result
        // (it may refuse it: ``PassLedger/ClaimLost``).
        var gaveUp: [Int] = [], scheduled: [Int] = []
        var afterCommit: [() -> Void] = []
        var retryGroups: [RetryDelay: [PassRetryMessage.Pass]] = [:]
        for (work, code, text, permanent) in failures {
            let attempts = work.attempts + 1
            let first = work.firstFailureAt ?? stamp
            let giveUp = permanent || attempts >= settings.maxAttempts
            updates.append(FailureUpdate(email: PassLedger.normalised(list[work.attendeeIndex].email),
                                         attendeeIndex: work.attendeeIndex, status: giveUp ? .failed : .scheduled,
                                         attempts: attempts, firstFailureAt: first, lastFailureAt: stamp,
                                         lastErrorCode: code, lastErrorText: text))
            let codeLabel = code.map(String.init) ?? "none"
            if giveUp {
                let a = list[work.attendeeIndex]
                let failed = FailedPass(bookingId: booking.id, version: booking.version, attendeeIndex: work.attendeeIndex,
                                        name: a.name, email: a.email, phone: a.phone, attempts: attempts,
                                        firstFailureAt: first, lastFailureAt: stamp, lastErrorCode: code.map { ErrorCode(rawValue: $0) },
                                        lastErrorText: text.isEmpty ? "unknown error" : text, room: booking.room,
                                        date: booking.date, start: booking.start, end: booking.end, title: booking.title,
                                        kind: job.kind)
                outbox.append(OutboxMessage(exchange: Topology.defaultExchange, routingKey: Topology.passesFailedQueue,
                                            messageID: failed.passKey, type: Topology.passesFailedQueue,
                                            body: [UInt8](try ContractJSON.encode(failed)),
                                            headers: FailedPassHeaders.headers(for: failed)))
                if isPass {
                let event = PassFailedEvent(eventId: RandomID.uuidString(), occurredAt: stamp, bookingId: booking.id,
                                            version: booking.version, attendeeIndex: work.attendeeIndex, name: a.name,
                                            email: a.email, phone: a.phone, channel: gateway.channel,
                                            errorCode: code.map { ErrorCode(rawValue: $0) }, errorText: failed.lastErrorText,
                                            attempts: attempts)
                outbox.append(OutboxMessage(exchange: Topology.eventsExchange, routingKey: EventType.passFailed.rawValue,
                                            messageID: event.eventId, type: EventType.passFailed.rawValue,
                                            body: [UInt8](try ContractJSON.encode(event)),
                                            headers: ["booking-id": .string(booking.id), "attendee-index": .int64(Int64(work.attendeeIndex))]))
                }
                gaveUp.append(work.attendeeIndex)
                let logger = self.logger, metrics = self.metrics
                afterCommit.append {
                    metrics.passesFailed.increment(codeLabel, job.kind.rawValue)
                    logger.warning("pass given up; sent to passes.failed", metadata: [
                        "booking.id": .string(booking.id), "booking.version": "\(booking.version)", "kind": .string(job.kind.rawValue),
                        "attendee.index": "\(work.attendeeIndex)", "attempts": "\(attempts)", "error.code": .string(codeLabel),
                        "error.text": .string(text),
                    ])
                }
            } else {
                retryGroups[settings.delay(afterAttempt: attempts), default: []].append(
                    PassRetryMessage.Pass(attendeeIndex: work.attendeeIndex, attempts: attempts, firstFailureAt: first,
                                          lastFailureAt: stamp, lastErrorCode: code, lastErrorText: text))
                scheduled.append(work.attendeeIndex)
                let metrics = self.metrics
                afterCommit.append { metrics.passesRetried.increment(codeLabel, job.kind.rawValue) }
            }
        }
        for (delay, passes) in retryGroups.sorted(by: { $0.key.milliseconds < $1.key.milliseconds }) {
            let message = PassRetryMessage(kind: .backoff, bookingId: booking.id, version: booking.version,
                                           booking: booking, passes: passes, notice: job.kind, previous: job.previous)
            outbox.append(OutboxMessage(exchange: Topology.defaultExchange, routingKey: PassQueues.delay(delay),
                                        messageID: RandomID.uuidString(), type: PassQueues.retryMessageType,
                                        body: [UInt8](try ContractJSON.encode(message)), headers: message.headers))
        }
        summary.outbox += try await ledger.record(bookingId: booking.id, version: booking.version, kind: job.kind,
                                                  delivered: delivered.map { PassLedger.normalised(list[$0.attendeeIndex].email) },
                                                  deliveredAt: stamp, failures: updates, outbox: outbox)
        for effect in afterCommit { effect() }
        summary.failed += gaveUp
        summary.scheduled += scheduled
        if !delivered.isEmpty {
            if isPass {
                metrics.passesDelivered.increment(gateway.channel.rawValue, by: delivered.count)
            } else {
                metrics.noticesDelivered.increment(job.kind.rawValue, by: delivered.count)
            }
        }
        if isPass {
            summary.delivered += delivered.map(\.attendeeIndex)
        } else {
            summary.notices[job.kind, default: []] += delivered.map(\.attendeeIndex)
        }
    }
}
