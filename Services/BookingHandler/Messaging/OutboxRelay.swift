import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Publishes the outbox to `booking.events` with confirms, in commit order
/// (hence per-booking order), and marks events published only after the
/// broker confirmed them. Events committed before a crash go out after
/// restart.
///
/// Two sources: the events this process just committed, handed over in
/// memory already claimed (``BookingStore/takeCommitted(limit:)``: no
/// database read per round), and — at start and every second — the table,
/// for events whose claim ran out or was released (a failed round, a
/// process that died: ``BookingStore/claimOutbox(limit:lease:)``).
///
/// Woken by ``kick()`` after each command and otherwise every second.
public final class OutboxRelay: Service, Sendable {
    private let store: BookingStore
    private let connection: AMQPConnection
    private let logger: Logger
    private let batchSize: Int
    private let wakeups: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation
    private let published = Counter(label: "booking_events_published_total")
    private let backlog = Gauge(label: "booking_outbox_backlog")

    /// How long published events and inbox entries are kept (`INBOX_RETENTION_DAYS`).
    private let retention: TimeInterval
    private let lastPrune = Mutex<ContinuousClock.Instant?>(nil)
    /// Whether the next round also claims from the table (start, ticks).
    private let sweepDue = Atomic<Bool>(true)

    public init(store: BookingStore, connection: AMQPConnection, logger: Logger, batchSize: Int = 256,
                retention: TimeInterval = 7 * 86_400) {
        self.retention = retention
        self.store = store
        self.connection = connection
        self.logger = logger
        self.batchSize = batchSize
        (wakeups, wake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Asks for a round now (cheap; coalesces).
    public func kick() {
        wake.yield()
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
                    while await publishRound() == batchSize {}
                    await pruneHourly()
                }
            } onGracefulShutdown: {
                wake.finish()
            }
            group.cancelAll()
        }
        // One last round so events of commands handled during shutdown go out.
        while await publishRound() == batchSize {}
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

    /// Publishes one batch; returns how many events it claimed.
    @discardableResult
    public func publishRound() async -> Int {
        var events = store.takeCommitted(limit: batchSize)
        if events.count < batchSize, sweepDue.exchange(false, ordering: .relaxed) {
            do {
                events += try await store.claimOutbox(limit: batchSize - events.count, lease: BookingStore.claimLease)
                // Outbox id order is commit order, so per-booking order holds
                // across both sources.
                events.sort { $0.id < $1.id }
            } catch {
                sweepDue.store(true, ordering: .relaxed)
                logger.error("outbox read failed", metadata: ["error": "\(error)"])
            }
        }
        guard !events.isEmpty else {
            backlog.record(0)
            return 0
        }
        // One ordered batch: the events reach the channel in outbox order
        // (commit order, so per booking too), all in flight at once.
        let outcomes = await connection.publish(batch: events.map { event in
            (body: event.body, exchange: Topology.eventsExchange, routingKey: event.routingKey,
             properties: AMQPProperties.persistentJSON(type: event.routingKey, messageID: event.messageID))
        })
        let results = zip(events, outcomes).map { ($0.id, $1) }
        let ok = results.filter { $0.1 == nil }.map(\.0)
        let failed = results.filter { $0.1 != nil }.map(\.0)
        do {
            try await store.markPublished(ok)
            try await store.releaseClaims(failed)
            // The next round takes the released events back from the table
            // together with newer ones, in order.
            if !failed.isEmpty { sweepDue.store(true, ordering: .relaxed) }
        } catch {
            logger.error("outbox update failed; events will be published again", metadata: ["error": "\(error)"])
        }
        published.increment(by: ok.count)
        if let firstError = results.compactMap(\.1).first {
            logger.warning("events not confirmed; retrying", metadata: ["failed": "\(failed.count)", "error": "\(firstError)"])
            try? await Task.sleep(for: .milliseconds(200))
        }
        return events.count
    }
}
