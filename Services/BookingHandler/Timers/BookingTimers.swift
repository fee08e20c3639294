import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// What one timer step did.
public enum TimerStep: Sendable, Equatable {
    /// `transition` was applied to the booking; it is now at `version`.
    case applied(bookingID: String, transition: TimedTransition, version: Int)
    /// Nothing was due yet under the room's current policy: the booking's
    /// timer moved to `due` (a release after the start), or was cleared.
    case deferred(bookingID: String, due: Date?)
    /// The row could not be read; its timer was cleared so it does not
    /// block the others (logged as an error).
    case unreadable(bookingID: String, error: String)
    /// Applying the transition failed several rounds in a row (its room
    /// row unreadable, a waiter read during promotion, a constraint): the
    /// timer was moved a few seconds on, so the rows due behind it are
    /// applied meanwhile, and it is tried again then (logged as an error).
    case postponed(bookingID: String, error: String)
}

extension CommandProcessor {
    /// Applies the earliest due timer at `now()`, if any, in one
    /// transaction: re-reads the booking and its room under the write lock
    /// and applies the transition only if the booking's status and times
    /// still call for it (contract v1.1, "Timers"). Several handler
    /// processes on one database serialise on that lock, and the first to
    /// apply a transition changes the status the next one reads: each
    /// transition commits at most once. Nil when nothing is due.
    ///
    /// A step that fails throws (the round ends; the next, a second later,
    /// tries again), unless the same booking's step has now failed
    /// ``timerFailuresBeforePostponing`` times in a row in `failures`: then
    /// its timer is moved ``timerRetryDelay`` on (only if no one moved it
    /// meanwhile) and the step is `.postponed`, so a row that keeps failing
    /// (its room's row unreadable, say) no longer comes first in every
    /// round and stops every timer behind it, in every room.
    public func applyDueTimer(failures: TimerFailures = TimerFailures()) async throws -> TimerStep? {
        let now = self.now()
        let picked = PickedRow()
        do {
            let step = try await applyDueTimer(now: now, picked: picked)
            if let (id, _) = picked.row.withLock({ $0 }) { failures.clear(id) }
            return step
        } catch {
            guard let (id, stored) = picked.row.withLock({ $0 }),
                  failures.record(id) >= Self.timerFailuresBeforePostponing else { throw error }
            let original = error
            do {
                try await store.transaction { tx in
                    try tx.postponeDue(bookingID: id, from: stored, to: now.addingTimeInterval(Self.timerRetryDelay))
                }
            } catch {
                // The database is away: the round ends on the step's own error.
                throw original
            }
            failures.clear(id)
            return .postponed(bookingID: id, error: "\(error)")
        }
    }

    /// How far a timer whose step keeps failing is moved on.
    static let timerRetryDelay: TimeInterval = 5
    /// Failures in a row of one booking's step before it is moved on: a
    /// passing fault (a lost connection, a lock) is retried in the next
    /// round, in due order.
    static let timerFailuresBeforePostponing = 3

    private func applyDueTimer(now: Date, picked: PickedRow) async throws -> TimerStep? {
        try await store.transaction { [self] tx -> TimerStep? in
            guard let (id, stored) = try tx.earliestDue(at: now) else { return nil }
            picked.row.withLock { $0 = (id, stored) }
            let booking: Booking
            do {
                guard let found = try tx.booking(id: id) else { return nil }
                booking = found
            } catch let error as DecodingError {
                // Only a row that cannot be read is given up; any other
                // error (I/O, locks) fails the round, which runs again
                // (and a step failing round after round is moved on):
                // clearing the timer then would stop the booking's life.
                try tx.setDue(bookingID: id, nil)
                return .unreadable(bookingID: id, error: "\(error)")
            }
            guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
                  let endsAt = ContractFormat.parseTimestamp(booking.endsAt) else {
                try tx.setDue(bookingID: id, nil)
                return .unreadable(bookingID: id, error: "unreadable instants \(booking.startsAt)-\(booking.endsAt)")
            }
            let room = try tx.room(named: booking.room)
            guard let next = BookingRules.nextTransition(status: booking.status, startsAt: startsAt, endsAt: endsAt,
                                                         room: room,
                                                         holdExpiresAt: booking.holdExpiresAt.flatMap(ContractFormat.parseTimestamp)) else {
                try tx.setDue(bookingID: id, nil)
                return .deferred(bookingID: id, due: nil)
            }
            // Not due yet — or due later than the stored time said (a
            // release comes after the start the row was filed under): file it
            // under its real time, so that after downtime it is applied in
            // due order with the others, not ahead of them.
            if next.due > now || StoreRules.dueSeconds(next.due) > stored {
                try tx.setDue(bookingID: id, next.due)
                return .deferred(bookingID: id, due: next.due)
            }
            var changed = booking
            changed.status = next.transition.status
            if let reason = next.transition.reason { changed.cancelReason = reason }
            let encoded = try record(changed, from: booking, event: next.transition.event, tx, now: now,
                                     released: next.transition == .release)
            if next.transition == .lapse {
                let metrics = waitlistMetrics
                tx.afterCommit { metrics.holdsExpired.increment() }
            }
            // A cancelled hold, a release or a rejection frees time, and an
            // end frees a place of its requester's quota: the room's waiters
            // are offered it in this transaction (v1.2).
            if [.cancelled, .rejected, .completed].contains(next.transition.status) {
                try promoteWaiters(room: booking.room, tx, now: now)
            }
            return .applied(bookingID: id, transition: next.transition, version: encoded.booking.version)
        }
    }
}

/// The booking whose timer a step picked and the due time it read, known
/// to the caller also when the step's transaction failed.
final class PickedRow: Sendable {
    let row = Mutex<(id: String, stored: Int64)?>(nil)
}

/// How often each booking's timer step has failed in a row (one per
/// ``BookingTimers`` loop), so that only a step that keeps failing is
/// moved on (``CommandProcessor/applyDueTimer(failures:)``).
public final class TimerFailures: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    public init() {}

    /// Counts a failure of `id`'s step; returns how many in a row.
    func record(_ id: String) -> Int {
        counts.withLock { counts in
            // Ids another process then applied are never cleared here: bounded.
            if counts.count > 1_000 { counts.removeAll() }
            counts[id, default: 0] += 1
            return counts[id]!
        }
    }

    func clear(_ id: String) { _ = counts.withLock { $0.removeValue(forKey: id) } }
}

/// The booking handler's durable timers: start, end, release and expiry
/// of bookings (contract v1.1, "Booking lifecycle").
///
/// Durable because the timers are the booking rows themselves: each row
/// keeps when its next transition may be due (`nextDueAt`, written in the
/// same transaction as the booking), and this loop asks the database, not
/// its memory, what is due. Nothing is lost by a crash or `kill -9`; after
/// downtime the missed transitions are applied one by one in due order
/// (the earliest first, a booking that missed both its start and its end
/// gets both, in that order). Every handler process runs the loop; see
/// ``CommandProcessor/applyDueTimer()`` for why that applies each
/// transition once.
///
/// Polls every ``interval`` (1 s): a transition is applied within about
/// that of its due time while any handler runs (the contract asks for 5 s).
/// Polling rather than sleeping until the next due time, because another
/// process may create a booking due sooner than anything this one knows.
public final class BookingTimers: Service, Sendable {
    private let processor: CommandProcessor
    private let relay: OutboxRelay
    private let logger: Logger
    private let interval: Duration
    private let failures = TimerFailures()

    /// At most this many steps per round before yielding to the sleep; a
    /// backlog after downtime continues in the next round.
    static let roundLimit = 1_000

    /// - Parameter interval: how long the loop sleeps when nothing is due.
    public init(processor: CommandProcessor, relay: OutboxRelay, logger: Logger, interval: Duration = .seconds(1)) {
        self.processor = processor
        self.relay = relay
        self.logger = logger
        self.interval = interval
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                await round()
                try? await Task.sleep(for: interval)
            }
        }
    }

    /// Applies every timer due now (up to ``roundLimit``); returns how many
    /// transitions it applied. Database errors end the round (logged); the
    /// next round tries again.
    @discardableResult
    public func round() async -> Int {
        var count = 0
        do {
            for _ in 0..<Self.roundLimit {
                guard let step = try await processor.applyDueTimer(failures: failures) else { break }
                switch step {
                case .applied(let id, let transition, let version):
                    count += 1
                    HandlerMetrics.timerTransitions.increment()
                    relay.kick()
                    logger.info("booking \(transition.event.rawValue.dropFirst("booking.".count)) by its timer",
                                metadata: ["booking.id": .string(id), "booking.version": "\(version)",
                                           "transition": .string(transition.rawValue)])
                case .deferred:
                    continue
                case .unreadable(let id, let error):
                    logger.error("booking row unreadable; its timer is cleared, the booking needs an operator",
                                 metadata: ["booking.id": .string(id), "error": .string(error)])
                case .postponed(let id, let error):
                    logger.error("a booking's timed transition failed; tried again in \(Int(CommandProcessor.timerRetryDelay)) s, the others go on",
                                 metadata: ["booking.id": .string(id), "error": .string(error)])
                }
            }
        } catch {
            logger.error("applying due timers failed; retrying in the next round", metadata: ["error": "\(error)"])
        }
        return count
    }
}
