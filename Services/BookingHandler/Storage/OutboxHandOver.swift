import Foundation
import Synchronization

/// The hand-over of committed events from a store's writer to this
/// process's relay, in memory, and the policy of when it is off. Shared by
/// both stores: only the SQL that releases claims differs.
///
/// New events are inserted already claimed by this process for
/// ``insertLease`` seconds and, once committed, queued here in commit order;
/// the relay takes them without a database round trip. Hand-over is
/// suspended after a failed publish or when more than ``capacity`` events
/// wait (confirms slower than commands for long): everything waiting is then
/// released to the table, new events are inserted unclaimed, and the relay
/// reads the table in id order until it has caught up.
///
/// Order per booking across processes: each event carries an order key
/// (`booking:<id>`, `room:<name>`) and claims carry their owner (``owner``).
/// A new event is inserted claimed only when no older unpublished event of
/// its key is held by another process (or by nobody); otherwise it waits
/// unclaimed in the table, and a table read claims an event only when no
/// older event of its key is unpublished. So two handlers writing the
/// same booking one after the other publish its events in commit order,
/// the second one's within a sweep (a second) after the first's confirm.
final class OutboxHandOver: Sendable {
    /// This process's name on its claims (`claimedBy`): a random id per
    /// store, so a restarted process does not mistake its predecessor's
    /// claims for its own.
    let owner = UUID().uuidString

    /// How long a new event stays claimed by the process that wrote it. Its
    /// relay normally publishes it within milliseconds; the lease only has
    /// to cover that, and it is what events of a process killed between
    /// commit and publish wait before a restarted (or another) handler
    /// sends them. A publish slower than this (broker trouble) may be
    /// repeated by another process: at-least-once, dropped by version.
    let insertLease: TimeInterval
    /// At most this many committed events wait in memory for the relay.
    let capacity: Int
    private let state = Mutex(Waiting())

    private struct Waiting {
        var events: [OutboxEvent] = []
        var ids: Set<Int64> = []
        var suspended = false
    }

    init(insertLease: TimeInterval, capacity: Int) {
        self.insertLease = insertLease
        self.capacity = capacity
    }

    /// The claim new events get, or nil (unclaimed) while hand-over is
    /// suspended. Read on the writer at the start of a transaction.
    func claimOnInsert() -> InsertClaim? {
        state.withLock { $0.suspended } ? nil : InsertClaim(lease: insertLease, owner: owner, handOver: self)
    }

    /// How long after an event was queued behind another process's the
    /// relay keeps sweeping the table at short intervals: the other
    /// process normally publishes within milliseconds, and a 1 s tick per
    /// event would make a burst of updates alternating between instances
    /// leave a second apart each.
    static let behindOthersWindow = Duration.seconds(2)
    private let lastBehindOthers = Mutex<ContinuousClock.Instant?>(nil)

    /// Called by a transaction that queued an event behind another
    /// process's unpublished one (rolled back or not: a needless sweep is
    /// harmless).
    func queuedBehindOthers() {
        lastBehindOthers.withLock { $0 = .now }
    }

    /// Whether an event was queued behind another process's recently.
    var recentlyQueuedBehindOthers: Bool {
        lastBehindOthers.withLock { last in last.map { ContinuousClock.now - $0 < Self.behindOthersWindow } ?? false }
    }

    /// Whether the relay must read the table instead of memory.
    var suspended: Bool { state.withLock { $0.suspended } }

    /// Ids of the events waiting in memory (a table read skips them: they go
    /// out from here, not twice).
    var waitingIDs: Set<Int64> { state.withLock { $0.ids } }

    /// Called on the writer right after a commit with the new (claimed)
    /// events in commit order. Returns the ids to release to the table when
    /// this overflows ``capacity`` (hand-over is then suspended), else nil.
    func committed(_ events: [OutboxEvent]) -> [Int64]? {
        guard !events.isEmpty else { return nil }
        return state.withLock { state -> [Int64]? in
            if state.events.count + events.count <= capacity {
                state.events += events
                for event in events { state.ids.insert(event.id) }
                return nil
            }
            let ids = state.events.map(\.id) + events.map(\.id)
            state = Waiting(suspended: true)
            return ids
        }
    }

    /// Suspends hand-over; returns the ids that were waiting, to release.
    func suspend() -> [Int64] {
        state.withLock { state -> [Int64] in
            let ids = state.events.map(\.id)
            state = Waiting(suspended: true)
            return ids
        }
    }

    /// Switches hand-over back on (the relay has caught up with the table).
    func resume() {
        state.withLock { $0.suspended = false }
    }

    /// Takes up to `limit` waiting events, oldest first.
    func take(limit: Int) -> [OutboxEvent] {
        state.withLock { state in
            let taken = Array(state.events.prefix(limit))
            state.events.removeFirst(taken.count)
            for event in taken { state.ids.remove(event.id) }
            return taken
        }
    }
}

/// How a transaction's new events are claimed: for `lease` seconds, by
/// `owner` — unless an older unpublished event of the same order key is
/// not `owner`'s, in which case the new one waits unclaimed behind it.
struct InsertClaim: Sendable {
    let lease: TimeInterval
    let owner: String
    /// Told when an event is queued behind another process's.
    let handOver: OutboxHandOver
}
