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
final class OutboxHandOver: Sendable {
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
    func claimOnInsert() -> TimeInterval? {
        state.withLock { $0.suspended } ? nil : insertLease
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
