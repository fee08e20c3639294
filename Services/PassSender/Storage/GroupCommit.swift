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
/// - **its own rollback**: in a batch of several, each write runs in a
///   savepoint of its own; one that throws is rolled back to it and gets its
///   error, the others go on. A lone write runs as before (throwing rolls
///   the transaction back).
/// - **durability before return**: `write` returns only after the commit of
///   the transaction holding it has returned; callers ack, publish or call
///   a gateway only after that, as before.
/// - **all or nothing**: when the batch itself fails (BEGIN, a lock, a
///   savepoint statement, COMMIT, the connection), every write of it fails
///   with that error and none of it is kept; none of their callers gets a
///   result, so none acks.
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
        /// An ``idle()`` caller waits for the queue to run dry.
        case idleWaiting
    }

    /// Counts since start (tests, metrics).
    struct Stats: Sendable, Equatable {
        var transactions = 0
        var writes = 0
        var failedTransactions = 0
        var largestBatch = 0
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
        let outcome: Result<[(any Error)?], any Error>
        do {
            outcome = .success(try await transaction(keys) { db in try Self.apply(batch, db) })
        } catch {
            outcome = .failure(error)
        }
        state.withLock { s in
            s.stats.transactions += 1
            s.stats.writes += batch.count
            s.stats.largestBatch = max(s.stats.largestBatch, batch.count)
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

    /// The writes of one batch inside its transaction. A lone write throws
    /// (rolling the transaction back, as a transaction of its own did);
    /// several run in savepoints, and one that throws is rolled back alone.
    /// An error of the savepoint statements themselves fails the batch.
    static func apply(_ batch: [Entry], _ db: any LedgerSQL) throws -> [(any Error)?] {
        if batch.count == 1 {
            try batch[0].apply(db)
            return [nil]
        }
        var errors: [(any Error)?] = []
        errors.reserveCapacity(batch.count)
        for entry in batch {
            try db.execute("SAVEPOINT ledger_write", [])
            do {
                try entry.apply(db)
            } catch {
                try db.execute("ROLLBACK TO SAVEPOINT ledger_write", [])
                try db.execute("RELEASE SAVEPOINT ledger_write", [])
                errors.append(error)
                continue
            }
            try db.execute("RELEASE SAVEPOINT ledger_write", [])
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
