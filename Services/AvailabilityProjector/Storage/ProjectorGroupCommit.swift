import BookingContracts
import Foundation
import GRDB
import Synchronization

/// A change waiting for the writer, with whom to tell.
struct QueuedApply: Sendable {
    let change: ModelChange
    let onCommit: CommitObserver
    let continuation: CheckedContinuation<ApplyOutcome, any Error>
}

/// What ``ProjectorStore/apply(_:onCommit:)`` has queued for the writer.
///
/// Ownership: guarded by ``ProjectorStore/queued``. `writerQueued` is true
/// from the moment a writer job that will take `items` is queued until a
/// job finds nothing left, so exactly one such job is queued or running
/// at a time and no item waits without one.
struct QueuedApplies: Sendable {
    var items: [QueuedApply] = []
    var writerQueued = false
}

// MARK: Group commit
//
// Why: every booking event was a transaction of its own: BEGIN, the
// writes, COMMIT with its WAL frames and shared-memory locks (`fcntl`),
// and a hop to the writer's queue and back. Under load up to 32 events
// wait for the writer at once; they now share one transaction
// (docs/performance.md, "The projector commits waiting events
// together"). Order is kept: changes are applied, and their index updates
// and `onCommit` run, in the order they were queued.

extension ProjectorStore {
    /// At most this many changes share a transaction; more wait for the
    /// next writer job, so other writes (closures, a rebuild's swap) are
    /// not held behind an endless batch.
    static let maxChangesPerTransaction = 128

    /// Runs on the writer: applies what is queued, then queues another
    /// job if more came meanwhile.
    func applyQueued(_ db: Database) {
        let batch = queued.withLock { q -> [QueuedApply] in
            let taken = Array(q.items.prefix(Self.maxChangesPerTransaction))
            q.items.removeFirst(taken.count)
            return taken
        }
        if !batch.isEmpty {
            if !applyTogether(batch, db) {
                // A change failed and rolled the batch back: each alone,
                // so only the failing one fails (and is redelivered).
                for item in batch { _ = applyTogether([item], db) }
            }
        }
        let more = queued.withLock { q -> Bool in
            if q.items.isEmpty { q.writerQueued = false }
            return q.writerQueued
        }
        if more { pool.asyncWriteWithoutTransaction { db in self.applyQueued(db) } }
    }

    /// Applies `batch` in one transaction and resumes every caller; false
    /// (nobody resumed) when a change of a batch of several failed.
    private func applyTogether(_ batch: [QueuedApply], _ db: Database) -> Bool {
        let staging = rebuild.withLock { $0 != nil }
        var results: [(applied: Bool, days: Set<RoomDay>, touched: [RoomDay], room: Room?)] = []
        results.reserveCapacity(batch.count)
        do {
            try db.inTransaction(.immediate) {
                for item in batch {
                    if let fault = applyFault.withLock({ $0?(item.change) }) { throw fault }
                    results.append(try Self.apply(item.change, db, prefix: Self.live))
                    if staging {
                        // The rebuild's room-days are computed once, when it finishes.
                        _ = try Self.apply(item.change, db, prefix: Self.staging, recompute: false)
                    }
                }
                return .commit
            }
        } catch {
            if batch.count > 1 { return false }
            batch[0].continuation.resume(throwing: error)
            return true
        }
        applyTransactions.add(1, ordering: .relaxed)
        if staging { rebuild.withLock { $0?.liveEvents += batch.count } }
        // Days an earlier batch committed but could not put in the index:
        // read first, so this batch's changes are compared with what the
        // file holds; what that changed goes out ahead of the first change.
        try? repairIndex(db)
        for (item, result) in zip(batch, results) {
            do {
                // Its own first: taken before a throw, the repaired ones would be lost.
                let own = try updateIndex(db, days: result.days, room: result.room)
                let changes = takeUnannounced() + own
                item.onCommit(changes, result.applied ? Array(result.days) : [])
                item.continuation.resume(returning: ApplyOutcome(applied: result.applied, changes: changes,
                                                                 touched: result.touched))
            } catch {
                // Committed, but the index misses it: a redelivered event
                // is a no-op by version and would not update it, so the
                // days are kept for the next writer job to read again.
                staleDays.withLock { $0.formUnion(result.days) }
                item.continuation.resume(throwing: error)
            }
        }
        return true
    }

    /// Reads the room-days an index update missed (``staleDays``) into the
    /// index; what changed waits in ``unannounced`` for the next
    /// announcement. Throws when that fails; they stay missed for the next
    /// job. Runs on the writer.
    func repairIndex(_ db: Database) throws {
        let stale = staleDays.withLock { $0 }
        guard !stale.isEmpty else { return }
        let changes = try updateIndex(db, days: stale, room: nil)
        staleDays.withLock { $0.subtract(stale) }
        unannounced.withLock { $0 += changes }
    }

    /// The repaired room-days' changes not announced yet (and forgets
    /// them: the caller announces them). Runs on the writer.
    func takeUnannounced() -> [DayChange] {
        unannounced.withLock { pending in
            defer { pending = [] }
            return pending
        }
    }
}

extension ProjectorStore {
    /// Runs `body` as a job of the writer, in order with every commit, its
    /// index update and its announcements (which run on the writer too).
    ///
    /// Missed room-days are read into the index first (``repairIndex(_:)``);
    /// when that fails, so does the job, so that nothing is announced or
    /// acked on the strength of an index that misses a commit.
    func onWriter<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.writeWithoutTransaction { db in
            try self.repairIndex(db)
            return try body()
        }
    }
}

// MARK: Test hooks

extension ProjectorStore {
    /// Tests: occupies the writer until the returned function is called, so
    /// changes queue behind it and how they batch does not depend on timing.
    func holdWriter() async -> @Sendable () -> Void {
        let release = DispatchSemaphore(value: 0)
        await withCheckedContinuation { (started: CheckedContinuation<Void, Never>) in
            pool.asyncWriteWithoutTransaction { _ in
                started.resume()
                release.wait()
            }
        }
        return { release.signal() }
    }

    /// Tests: how many changes wait for the writer.
    var queuedChanges: Int { queued.withLock { $0.items.count } }
}
