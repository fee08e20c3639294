import Foundation
import Metrics
import Synchronization

/// Group commit for the ledger: the write transactions that wait at one
/// moment run together in one database transaction — one commit, one
/// fsync (SQLite) or one WAL flush (PostgreSQL) — instead of one each.
///
/// How: a write is queued; when no transaction is running, one starts with
/// everything queued (at most ``maxBatch``); writes queued meanwhile wait
/// for the next one. There is no timer: a lone write starts at once, and
/// the batches grow only when writes arrive faster than commits finish.
///
/// What each caller keeps (docs/pass-sender.md, "Group commit"):
/// - **its own rollback**: a batch of several first runs its writes one
///   after the other with no savepoints (a savepoint is two statements per
///   write: two round trips on PostgreSQL, two statement parses and a
///   sub-journal on SQLite). If one of them throws, that transaction rolls
///   back whole and the batch runs again in a new one, each write in a
///   savepoint of its own: the one that throws is rolled back to it and
///   gets its error, the others go on. A write's body may therefore run
///   twice, the first run rolled back; bodies are database work only. A
///   lone write runs as before (throwing rolls the transaction back).
/// - **durability before return**: `write` returns only after the commit of
///   the transaction holding it has returned; callers ack, publish or call
///   a gateway only after that, as before.
/// - **all or nothing**: when the batch itself fails (BEGIN, a lock, a
///   savepoint statement, COMMIT, the connection under the savepoint run
///   or under a lone write), every write of it fails with that error and
///   none of it is kept; none of their callers gets a result, so none
///   acks. (A connection lost while a batch of several runs without
///   savepoints sends it to the savepoint run, on a new connection.)
/// - **its lock**: on PostgreSQL the batch takes every write's advisory
///   lock (ordered by hash, so batches of two instances never deadlock)
///   before the first write runs, and holds them to the commit.
///
/// Ownership: ``state`` is the only mutable state, behind its mutex; the
/// queued writes' bodies run on the engine's own thread (GRDB's writer
/// queue, ``PostgresWriter``'s queue), one batch at a time.
final class GroupCommit: Sendable {
    /// Runs `body` in one transaction after taking `lockKeys` (PostgreSQL;
    /// SQLite has one writer anyway); throwing rolls it all back.
    typealias Transaction = @Sendable (_ lockKeys: [String],
                                       _ body: @Sendable @escaping (any LedgerSQL) throws -> [(any Error)?]) async throws
        -> [(any Error)?]

    /// What happens to the queue (tests follow batches by it).
    enum Event: Sendable, Equatable {
        /// A write was queued; `pending` wait for the next transaction.
        case queued(pending: Int)
        /// A transaction starts with `writes` writes.
        case started(writes: Int)
        /// It committed (`failed` of its writes rolled back to their savepoints).
        case committed(writes: Int, failed: Int)
        /// It failed as a whole: every write of it failed.
        case failedBatch(writes: Int)
        /// A write of a batch run without savepoints threw: the batch was
        /// rolled back and runs again, each write in a savepoint.
        case rerunWithSavepoints(writes: Int)
        /// An ``idle()`` caller waits for the queue to run dry.
        case idleWaiting
    }

    /// Counts since start (tests, metrics).
    struct Stats: Sendable, Equatable {
        /// Batches (a batch run again with savepoints counts once).
        var transactions = 0
        var writes = 0
        var failedTransactions = 0
        var largestBatch = 0
        /// Batches run a second time, with savepoints, because a write threw.
        var reruns = 0
    }

    /// One write waiting for a transaction.
    struct Entry: Sendable {
        let lockKey: String?
        /// Runs the caller's statements and keeps their result.
        let apply: @Sendable (any LedgerSQL) throws -> Void
        /// Called once: nil after the commit, else the error.
        let settle: @Sendable ((any Error)?) -> Void
    }

    struct State: Sendable {
        var pending: [Entry] = []
        var running = false
        var stats = Stats()
        /// ``idle()`` callers, resumed when the queue runs dry.
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    let maxBatch: Int
    private let transaction: Transaction
    private let observer: (@Sendable (Event) -> Void)?
    private let state = Mutex(State())
    private let metrics: PassSenderMetrics

    init(maxBatch: Int = 256, observer: (@Sendable (Event) -> Void)? = nil, metrics: PassSenderMetrics = .shared,
         transaction: @escaping Transaction) {
        precondition(maxBatch >= 1)
        self.maxBatch = maxBatch
        self.observer = observer
        self.metrics = metrics
        self.transaction = transaction
    }

    var stats: Stats { state.withLock { $0.stats } }

    /// Runs `body` in the next transaction; returns its result once that
    /// transaction has committed.
    func write<T: Sendable>(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        let slot = ResultSlot<T>()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            enqueue(Entry(lockKey: lockKey, apply: { db in
                let value = try body(db)
                slot.value.withLock { $0 = value }
            }, settle: { error in
                if let error {
                    continuation.resume(throwing: error)
                } else if let value = slot.value.withLock({ $0.take() }) {
                    continuation.resume(returning: value)
                } else {
                    continuation.resume(throwing: GroupCommitLost())
                }
            }))
        }
    }

    /// Queues `body` for the next transaction and returns at once, without
    /// waiting for it; `settle` gets nil after its commit, else the error.
    /// The queue is first in, first out: a write queued after this one —
    /// ``write(lockKey:_:)`` or `submit` — runs after it, in the same
    /// transaction or a later one, so it sees what this one wrote.
    func submit(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> Void,
                settle: @escaping @Sendable ((any Error)?) -> Void) {
        enqueue(Entry(lockKey: lockKey, apply: body, settle: settle))
    }

    /// Returns once nothing is queued or running: what was submitted has
    /// been committed or has failed (closing the database waits for it).
    func idle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if !s.running && s.pending.isEmpty { return true }
                s.idleWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() } else { observer?(.idleWaiting) }
        }
    }

    private func enqueue(_ entry: Entry) {
        let (lead, pending) = state.withLock { s -> (Bool, Int) in
            s.pending.append(entry)
            if s.running { return (false, s.pending.count) }
            s.running = true
            return (true, s.pending.count)
        }
        observer?(.queued(pending: pending))
        if lead { Task { await self.drain() } }
    }

    /// Runs batches until the queue is empty.
    private func drain() async {
        while true {
            let (batch, idle): ([Entry]?, [CheckedContinuation<Void, Never>]) = state.withLock { s in
                guard !s.pending.isEmpty else {
                    s.running = false
                    defer { s.idleWaiters = [] }
                    return (nil, s.idleWaiters)
                }
                let n = min(maxBatch, s.pending.count)
                let batch = Array(s.pending.prefix(n))
                s.pending.removeFirst(n)
                return (batch, [])
            }
            guard let batch else {
                for waiter in idle { waiter.resume() }
                return
            }
            await run(batch)
        }
    }

    private func run(_ batch: [Entry]) async {
        observer?(.started(writes: batch.count))
        let keys = Array(Set(batch.compactMap(\.lockKey))).sorted()
        var outcome: Result<[(any Error)?], any Error>
        let writeThrew = Flag()
        do {
            outcome = .success(try await transaction(keys) { db in try Self.applyTogether(batch, db, writeThrew: writeThrew) })
        } catch {
            outcome = .failure(error)
        }
        let rerun = batch.count > 1 && writeThrew.isSet
        if rerun {
            // Rolled back whole because one write threw; which writes keep
            // their work is for the savepoints to say.
            observer?(.rerunWithSavepoints(writes: batch.count))
            metrics.ledgerReruns.increment()
            metrics.ledgerTransactions.increment()  // the first run's
            do {
                outcome = .success(try await transaction(keys) { db in try Self.applyIsolated(batch, db) })
            } catch {
                outcome = .failure(error)
            }
        }
        state.withLock { s in
            s.stats.transactions += 1
            s.stats.writes += batch.count
            s.stats.largestBatch = max(s.stats.largestBatch, batch.count)
            if rerun { s.stats.reruns += 1 }
            if case .failure = outcome { s.stats.failedTransactions += 1 }
        }
        metrics.ledgerTransactions.increment()
        metrics.ledgerBatchWrites.record(batch.count)
        switch outcome {
        case .success(let errors):
            observer?(.committed(writes: batch.count, failed: errors.count { $0 != nil }))
            for (entry, error) in zip(batch, errors) { entry.settle(error) }
        case .failure(let error):
            observer?(.failedBatch(writes: batch.count))
            for entry in batch { entry.settle(error) }
        }
    }

    /// Set by the engine's thread inside a transaction, read after it
    /// returned (the `await` orders the two).
    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    }

    /// The writes of one batch inside its transaction, without savepoints:
    /// the first that throws sets `writeThrew` and its error rolls the
    /// transaction back (for a lone write that is its answer; a batch of
    /// several runs again through ``applyIsolated(_:_:)``). The error
    /// itself goes up unchanged, so the engine still sees a broken
    /// connection for what it is.
    static func applyTogether(_ batch: [Entry], _ db: any LedgerSQL, writeThrew: Flag) throws -> [(any Error)?] {
        do {
            for entry in batch { try entry.apply(db) }
            // Which write a statement error belongs to does not matter
            // here: any error sends the batch to the savepoints.
            try db.flush()
        } catch {
            writeThrew.set()
            throw error
        }
        return Array(repeating: nil, count: batch.count)
    }

    /// The writes of one batch, each in a savepoint: one that throws is
    /// rolled back alone and keeps its error. An error of the savepoint
    /// statements themselves fails the batch.
    static func applyIsolated(_ batch: [Entry], _ db: any LedgerSQL) throws -> [(any Error)?] {
        var errors: [(any Error)?] = []
        errors.reserveCapacity(batch.count)
        // Flushed after every step: this path runs only after a failure,
        // and each error must be pinned on its own write.
        for entry in batch {
            try db.execute("SAVEPOINT ledger_write", [])
            try db.flush()
            do {
                try entry.apply(db)
                try db.flush()
            } catch {
                // Statements this write sent before it threw may have
                // failed too: theirs, not the batch's (the savepoint undoes them).
                try? db.flush()
                try db.execute("ROLLBACK TO SAVEPOINT ledger_write", [])
                try db.execute("RELEASE SAVEPOINT ledger_write", [])
                try db.flush()
                errors.append(error)
                continue
            }
            try db.execute("RELEASE SAVEPOINT ledger_write", [])
            try db.flush()
            errors.append(nil)
        }
        return errors
    }
}

/// Where a write's result waits for its commit.
private final class ResultSlot<T: Sendable>: Sendable {
    let value = Mutex<T?>(nil)
}

/// A write's transaction committed without its result (cannot happen: a
/// write that did not throw kept its result).
struct GroupCommitLost: Error, CustomStringConvertible {
    var description: String { "ledger group commit: a committed write lost its result" }
}
