import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import ServiceSupport
import Synchronization

/// Publishes the outbox to `booking.events` with confirms, in commit order
/// (hence per-booking order), and marks events published only after the
/// broker confirmed them. Events committed before a crash go out after
/// restart.
///
/// Two sources: the events this process just committed, handed over in
/// memory already claimed (``OutboxStore/takeCommitted(limit:)``: no
/// database read per round), and the table
/// (``OutboxStore/claimOutbox(limit:lease:)``) — at start, every second
/// (claims that ran out: a process that died), and for as long as
/// hand-over is suspended after a failed publish, until the relay has
/// caught up. See ``startRound(fromTable:)`` and ``publishAll()`` for how
/// the order is kept.
///
/// Woken by ``kick()`` after each command and otherwise every second.
public final class OutboxRelay: Service, Sendable {
    private let store: any OutboxStore
    private let connection: AMQPConnection
    private let logger: Logger
    /// Settles the confirms of the `booking.public` copies (``PublicCopies``).
    private let publicCopies: PublicCopies
    private let batchSize: Int
    private let wakeups: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    /// How long published events and inbox entries are kept (`INBOX_RETENTION_DAYS`).
    private let retention: TimeInterval
    private let lastPrune = Mutex<ContinuousClock.Instant?>(nil)
    /// Whether the next round also claims from the table (start, ticks).
    private let sweepDue = Atomic<Bool>(true)

    public init(store: any OutboxStore, connection: AMQPConnection, logger: Logger, batchSize: Int = 256,
                retention: TimeInterval = 7 * 86_400) {
        self.retention = retention
        self.store = store
        self.connection = connection
        self.logger = logger
        self.publicCopies = PublicCopies(logger: logger)
        self.batchSize = batchSize
        (wakeups, wake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// How long a round waits after its wake-up when commands finish
    /// faster than rounds publish (a kick came while a round was running),
    /// so that it takes the events of the commands finishing around the
    /// same time in one publish instead of one round per command. Measured
    /// (alternating runs of `benchmarks booking`): pipelined +3–10 %.
    /// A kick that finds the relay idle — a lone command — is served at
    /// once: the wait gathers nothing then and only delays the events
    /// (docs/performance.md, "The relay gathers only under load").
    static let gatherDelay = Duration.milliseconds(2)

    /// Rounds started and not yet finished (``kick()`` reads it).
    private let busy = Atomic<Int>(0)
    /// A kick came while a round was publishing: the next round gathers.
    private let kickedWhileBusy = Atomic<Bool>(false)

    /// Asks for a round now (cheap; coalesces).
    public func kick() {
        if busy.load(ordering: .relaxed) > 0 { kickedWhileBusy.store(true, ordering: .relaxed) }
        wake.yield()
    }

    /// How soon the table is swept again while this process has events
    /// waiting behind another process's (see ``OutboxStore/queuedBehindOthers``).
    static let behindOthersPoll = Duration.milliseconds(20)
    private let sweepSoonPending = Atomic<Bool>(false)

    /// A sweep in ``behindOthersPoll`` (one pending at a time).
    private func sweepSoon() {
        guard !sweepSoonPending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let wake = self.wake
        Task {
            try? await Task.sleep(for: Self.behindOthersPoll)
            self.sweepSoonPending.store(false, ordering: .releasing)
            self.sweepDue.store(true, ordering: .relaxed)
            wake.yield()
        }
    }

    public func run() async throws {
        let wake = self.wake
        wake.yield()  // publish what a previous run left behind
        await withTaskGroup(of: Void.self) { group in
            // A tick every second catches events whose kick went to another
            // process, or that failed and were released.
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    self.sweepDue.store(true, ordering: .relaxed)
                    wake.yield()
                }
            }
            await withGracefulShutdownHandler {
                for await _ in wakeups {
                    if kickedWhileBusy.exchange(false, ordering: .relaxed) { try? await Task.sleep(for: Self.gatherDelay) }
                    await publishAll()
                    if store.queuedBehindOthers { sweepSoon() }
                    await pruneHourly()
                }
            } onGracefulShutdown: {
                wake.finish()
            }
            group.cancelAll()
        }
        // Last rounds so events of commands handled during shutdown go out
        // (what is left stays in the table for the next start).
        await publishAll()
        await inFlight.drain()
    }

    private func pruneHourly() async {
        let now = ContinuousClock.now
        let due = lastPrune.withLock { last -> Bool in
            if let last, now - last < .seconds(3600) { return false }
            last = now
            return true
        }
        guard due else { return }
        do {
            try await store.prune(olderThan: retention)
        } catch {
            logger.error("pruning inbox and outbox failed", metadata: ["error": "\(error)"])
        }
    }

    /// What one round did.
    public struct Round: Sendable {
        /// Events taken (from memory and the table).
        public var count: Int
        /// Whether publishing or the outbox update failed.
        public var failed: Bool
    }

    /// How many rounds of events taken from memory may await their
    /// confirms at once. A round used to start only after the previous one
    /// was confirmed and marked; under load an event then waited for the
    /// broker's confirm of the round before it (a quorum queue's durable
    /// write) before it was even sent (docs/performance.md, "The outbox relay's rounds overlap").
    static let maxRoundsInFlight = 4

    /// Memory rounds awaiting their confirms, oldest first.
    private let inFlight = InFlightTasks<Round>()

    /// Rounds until one takes less than a batch or fails (then the next
    /// kick or tick tries again, so neither a broker outage nor shutdown
    /// spins here).
    ///
    /// Rounds from memory overlap: the next one is sent while earlier ones
    /// await their confirms (up to ``maxRoundsInFlight``). The channel keeps
    /// their order, so commit order holds as before; a round that fails
    /// suspends hand-over when its confirms come, and rounds already sent
    /// after it are confirmed or fail on their own — a newer event of a
    /// booking can then arrive before the failed older one is sent again,
    /// which the contract allows (consumers keep the highest version), as
    /// it already happened within one batch. Rounds that read the table
    /// (a sweep, or hand-over suspended) wait until nothing is in flight
    /// and run alone, as before: rows a round in flight still claims would
    /// otherwise be read back, and ``resume()`` needs everything confirmed.
    private func publishAll() async {
        while true {
            // Decided once, before any waiting: a tick, `sweepSoon` or a
            // round in flight that fails may change the state meanwhile,
            // and a round that was not drained for must not read the table.
            let fromTable = store.handOverSuspended || sweepDue.load(ordering: .relaxed)
            if fromTable {
                await inFlight.drain()
            } else {
                await inFlight.waitForRoom(Self.maxRoundsInFlight)
            }
            guard let pending = await startRound(fromTable: fromTable) else { return }
            if pending.fromTable {
                let round = await finishRound(pending)
                if round.failed || round.count < batchSize { return }
            } else {
                let count = pending.events.count
                inFlight.add(Task { await self.finishRound(pending) })
                if count < batchSize { return }
            }
        }
    }

    /// A round handed to the connection, its confirms to come.
    private struct PendingRound: Sendable {
        var events: [OutboxEvent]
        /// The index in `events` of each message sent.
        var owners: [Int]
        /// Whether each message sent is a `booking.public` copy.
        var publicCopy: [Bool]
        var confirmations: PendingConfirmations
        /// Hand-over was suspended when the round began.
        var suspended: Bool
        /// The round read the table.
        var fromTable: Bool
    }

    /// Takes one batch and hands it to the connection (nil: nothing to
    /// publish, or the table read failed).
    ///
    /// Sources, in this order: the table when `fromTable` (hand-over
    /// suspended or a sweep due: claims run out or released, a process that
    /// died; the caller has drained every round in flight), then — only if
    /// the table had less than a batch and hand-over is on — the events this
    /// process committed, from memory. Sweeping first is what keeps commit
    /// order: rows left in the table are older than anything handed over
    /// after them. A failed publish suspends hand-over (``OutboxStore/suspendHandOver(releasing:)``);
    /// a table read that comes back short with everything confirmed resumes it.
    private func startRound(fromTable: Bool) async -> PendingRound? {
        // Read now: a memory round is decided without draining, and a round
        // in flight may have suspended hand-over since (then it takes nothing).
        let suspended = store.handOverSuspended
        var events: [OutboxEvent] = []
        if fromTable {
            sweepDue.store(false, ordering: .relaxed)
            do {
                events = try await store.claimOutbox(limit: batchSize, lease: StoreRules.claimLease)
            } catch {
                sweepDue.store(true, ordering: .relaxed)
                logger.error("outbox read failed", metadata: ["error": "\(error)"])
                return nil
            }
            if events.count == batchSize { sweepDue.store(true, ordering: .relaxed) }
        }
        if !suspended && events.count < batchSize {
            events += store.takeCommitted(limit: batchSize - events.count)
        }
        // Outbox id order is commit order (per booking too), across sources
        // and across processes sharing the database.
        events.sort { $0.id < $1.id }
        // What this round found waiting (all of it unless the round is full).
        HandlerMetrics.outboxBacklog.record(events.count)
        guard !events.isEmpty else {
            if suspended && fromTable { await resume() }
            return nil
        }
        // One ordered batch: the events reach the channel in that order, all
        // in flight at once.
        // user_id = this service's broker user: consumers of booking.events
        // trust only events the broker vouches came from the handler.
        let publisher = connection.user
        // Booking events also go to booking.public without contact details
        // (v1.1), right after their booking.events copy: an event counts as
        // published only when both are confirmed, so a failure repeats both
        // (at-least-once on each exchange, in order per booking).
        var messages: [OutgoingMessage] = []
        var owners: [Int] = []
        var publicCopy: [Bool] = []
        // One place appends, so the three arrays stay index for index.
        func send(_ body: [UInt8], to exchange: String, _ event: OutboxEvent, owner: Int,
                  _ properties: AMQPProperties) {
            messages.append(Self.message(body, to: exchange, event, properties))
            owners.append(owner)
            publicCopy.append(exchange == Topology.publicExchange)
        }
        for (index, event) in events.enumerated() {
            let properties = AMQPProperties.persistentJSON(type: event.routingKey, messageID: event.messageID, userID: publisher)
            send(event.body, to: Topology.eventsExchange, event, owner: index, properties)
            if let type = EventType(rawValue: event.routingKey), type.isBookingEvent {
                // The value when this process made the event, else the body.
                guard let value = event.value ?? (try? ContractJSON.decode(BookingEvent.self, from: event.body)) else {
                    logger.error("booking event unreadable; not published to booking.public",
                                 metadata: ["event.id": .string(event.messageID)])
                    continue
                }
                send(value.publicJSON, to: Topology.publicExchange, event, owner: index, properties)
            }
            if event.routingKey == EventType.roomClosed.rawValue || event.routingKey == EventType.roomReopened.rawValue {
                // Closures hold nothing private: the same body on
                // booking.public (contract v1.2).
                send(event.body, to: Topology.publicExchange, event, owner: index, properties)
            }
        }
        busy.add(1, ordering: .relaxed)
        return PendingRound(events: events, owners: owners, publicCopy: publicCopy, confirmations: connection.startPublishing(batch: messages),
                            suspended: suspended, fromTable: fromTable)
    }

    /// One message of a round. It carries the trace its event was queued
    /// in (``OutboxEvent/traceParent``), which the publish continues with
    /// a span of its own (the relay's task has no trace of its own); a
    /// `booking.public` copy never carries the caller's `tracestate`.
    static func message(_ body: [UInt8], to exchange: String, _ event: OutboxEvent,
                        _ properties: AMQPProperties) -> OutgoingMessage {
        var properties = properties
        let outside = exchange == Topology.publicExchange
        if let traceParent = event.traceParent {
            properties.headers[MessageTracing.traceParentHeader] = .string(traceParent)
            if !outside, let traceState = event.traceState {
                properties.headers[MessageTracing.traceStateHeader] = .string(traceState)
            }
        }
        return OutgoingMessage(body: body, exchange: exchange, routingKey: event.routingKey, properties: properties,
                               traceState: outside ? .drop : .propagate)
    }

    /// Waits for a round's confirms, then marks what was confirmed and
    /// gives back what was not.
    private func finishRound(_ pending: PendingRound) async -> Round {
        defer { busy.subtract(1, ordering: .relaxed) }
        let events = pending.events, suspended = pending.suspended
        let confirmations = await pending.confirmations.confirmations()
        var outcomes = [AMQPError?](repeating: nil, count: events.count)
        for (i, (owner, confirmed)) in zip(pending.owners, confirmations).enumerated() {
            // A public copy refused by an outside queue counts as published.
            let result = pending.publicCopy[i] ? publicCopies.settle(confirmed, routingKey: events[owner].routingKey) : confirmed
            if result != nil { outcomes[owner] = outcomes[owner] ?? result }
        }
        let results = zip(events, outcomes).map { ($0.id, $1) }
        let ok = results.filter { $0.1 == nil }.map(\.0)
        let failed = results.filter { $0.1 != nil }.map(\.0)
        HandlerMetrics.eventsPublished.increment(by: ok.count)
        do {
            try await store.markPublished(ok)
            if !failed.isEmpty {
                if suspended {
                    try await store.releaseClaims(failed)
                } else {
                    try await store.suspendHandOver(releasing: failed)
                }
            }
        } catch {
            logger.error("outbox update failed; events will be published again", metadata: ["error": "\(error)"])
            return Round(count: events.count, failed: true)
        }
        if let firstError = results.compactMap(\.1).first {
            logger.warning("events not confirmed; retrying from the table", metadata: ["failed": "\(failed.count)", "error": "\(firstError)"])
            try? await Task.sleep(for: .milliseconds(200))
            return Round(count: events.count, failed: true)
        }
        // Only a table round (run alone) may switch back to memory.
        if pending.fromTable && suspended && events.count < batchSize { await resume() }
        return Round(count: events.count, failed: false)
    }

    /// Back to memory after catching up with the table; the next round
    /// sweeps once more first, for rows inserted before the switch.
    private func resume() async {
        do {
            try await store.resumeHandOver()
            sweepDue.store(true, ordering: .relaxed)
            logger.info("outbox relay caught up; taking new events from memory again")
        } catch {
            logger.error("could not resume the outbox hand-over", metadata: ["error": "\(error)"])
        }
    }
}
