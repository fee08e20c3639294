import BookingContracts
import Foundation
import Synchronization
import Tracing

/// The write side of one database engine, as ``CommitEngine`` drives it:
/// the serial queue that owns the write connection, and the connection.
///
/// Ownership: the write connection belongs to the writer queue. Everything
/// that writes — command groups, plain transactions, hand-over switches —
/// is queued with ``onWriterQueue(_:)`` and reaches the connection only
/// through ``withWriteConnection(_:)`` on that queue, so one group sees one
/// hand-over state from its start to its commit.
protocol CommitBackend: Sendable {
    associatedtype Connection: CommitConnection

    /// Queues `work` on the writer queue.
    func onWriterQueue(_ work: @escaping @Sendable () -> Void)
    /// On the writer queue: `body` with the write connection (connected
    /// when needed; throws when the database cannot be reached).
    func withWriteConnection<T>(_ body: (Connection) throws -> T) throws -> T
    /// On the writer queue, after a group committed and handed over.
    func groupCommitted()
    /// On the writer queue, after a write failed: the next use must not
    /// reuse a broken connection. `commands` is the size of the failed
    /// group, nil for a plain transaction or a hand-over switch.
    func writeFailed(_ error: any Error, commands: Int?)
    /// `db.system.name` in the store spans (``StoreSpans``).
    static var systemName: String { get }
}

/// The write connection inside ``CommitBackend/withWriteConnection(_:)``:
/// the few statements and transaction boundaries the commit engine needs,
/// in the engine's own dialect. Only valid on the writer queue.
protocol CommitConnection {
    associatedtype Transaction: QueuingTransaction

    /// Runs `body` in one write transaction that holds the write lock from
    /// its first statement (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: the
    /// advisory lock) and commits; throwing rolls it back.
    func inWriteTransaction<T>(_ body: () throws -> T) throws -> T
    /// Runs `body` in a savepoint. Its error rolls back to the savepoint
    /// and comes back as `.failure`; an error of the savepoint statements
    /// themselves is thrown (the connection is gone: the group fails).
    func inSavepoint<T>(_ body: () throws -> T) throws -> Result<T, any Error>
    /// A ``StoreTransaction`` on this connection whose new events get `claim`.
    func makeTransaction(claim: InsertClaim?) -> Transaction
    /// The inbox row of `key` in the sender's scope (or a migrated row), if any.
    func inboxEntry(_ key: InboxKey) throws -> InboxEntry?
    /// Stores `reply` as the answer to `key`.
    func insertInbox(_ key: InboxKey, commandType: String, reply: Data) throws
    /// Gives up this process's claims on `ids` (outside any transaction).
    func releaseClaims(_ ids: [Int64]) throws
    /// Whether a lone command's error is its own (a refused statement, a
    /// thrown body), not a failure of the connection or the transaction.
    func isCommandFailure(_ error: any Error) -> Bool
}

/// A ``StoreTransaction`` that keeps the events it queued claimed, for the
/// hand-over after its commit.
protocol QueuingTransaction: StoreTransaction {
    var events: QueuedEvents { get }
}

/// The claimed events one command queued, in order. Only touched on the
/// writer queue, inside its transaction.
final class QueuedEvents {
    var list: [OutboxEvent] = []
    /// Order keys this transaction knows no other process holds an
    /// unpublished event of: a booking it created (nobody else can have
    /// events of an id made here), or a key it has already checked. Their
    /// next events skip the check, a statement each on PostgreSQL.
    var clearKeys: Set<String> = []
    /// The trace of the command or transaction queuing them, stored with
    /// each row.
    var trace: StoredTrace?
    /// What to do once this command's or transaction's changes are
    /// committed (``StoreTransaction/afterCommit(_:)``); dropped with them
    /// when they roll back.
    var afterCommit: [() -> Void] = []
}

/// An inbox row as the commit engine reads it.
struct InboxEntry {
    let scope: String
    let commandType: String?
    let fingerprint: Int64?
    let reply: Data
}

/// What happens to the command queue (tests follow groups by it).
enum CommitEvent: Sendable, Equatable {
    /// A command was queued; `pending` wait for the next group.
    case queued(pending: Int)
    /// A group committed; `failed` of its commands were rolled back to
    /// their savepoints. Sent before the group's events are handed over.
    /// A lone command that failed is a group of one with one failed (its
    /// transaction rolled back, which is its savepoint's rollback).
    case committed(commands: Int, failed: Int)
    /// A group failed as a whole: nothing of it was stored.
    case failedGroup(commands: Int)
}

/// The booking handler's command protocol, written once for both stores:
/// group commit, a savepoint per command unless it is alone, the inbox
/// look-up and insert, the hand-over of committed events to this process's
/// relay, and resuming the callers.
///
/// - **Group commit.** Commands submitted while a group runs wait in
///   ``GroupCommitQueue`` and go into the next one: one commit and one hop
///   to the writer per group, with the same isolation — they still run one
///   after another under the write lock.
/// - **Own rollback.** In a group of several, each command runs in its own
///   savepoint: one that throws is rolled back alone and gets its error.
///   A command alone needs none (SQLite would copy every page it first
///   changes to a sub-journal; PostgreSQL would pay two round trips): if
///   it fails, its whole transaction rolls back, which undoes exactly what
///   the savepoint would have.
/// - **Inbox exact.** A command whose key is in the inbox gets the stored
///   reply and runs nothing; otherwise its reply is stored with its effect.
/// - **Hand-over after commit.** Claimed events reach ``OutboxHandOver``
///   only after the commit returned, before the callers are resumed. A
///   process that dies in between loses only the memory: the rows are in
///   the table, claimed for ``OutboxHandOver/insertLease``, and a relay's
///   table sweep publishes them once the lease has run out.
///
/// Threads: ``execute(key:commandType:_:)`` and the async methods may be
/// called from any task; every group and transaction runs on the backend's
/// writer queue, never on the cooperative pool, one at a time.
final class CommitEngine<Backend: CommitBackend>: Sendable {
    typealias Connection = Backend.Connection

    let backend: Backend
    /// Events committed by this process, handed to its relay in memory.
    let handOver: OutboxHandOver
    private let queue = GroupCommitQueue()
    private let observer = Mutex<(@Sendable (CommitEvent) -> Void)?>(nil)

    init(backend: Backend, handOver: OutboxHandOver) {
        self.backend = backend
        self.handOver = handOver
    }

    /// Sends every later ``CommitEvent`` to `observer` (tests).
    func observe(_ observer: (@Sendable (CommitEvent) -> Void)?) {
        self.observer.withLock { $0 = observer }
    }

    private func notify(_ event: @autoclosure () -> CommitEvent) {
        if let observer = observer.withLock({ $0 }) { observer(event()) }
    }

    /// See ``CommandStore/execute(key:commandType:_:)``.
    func execute(
        key: InboxKey?, commandType: String, _ body: @Sendable @escaping (any StoreTransaction) throws -> ReplyBody
    ) async throws -> StoreOutcome {
        let submitted = ContinuousClock.now
        defer { CommandStage.store.record(since: submitted) }
        // A span from the submit to the answer: the wait for the group and
        // the group's transaction. Its context goes with the events.
        return try await withSpan("store \(commandType)", ofKind: .internal) { span in
            if span.isRecording { span.attributes = StoredTrace.storeAttributes(commandType: commandType, system: Backend.systemName) }
            let trace = StoredTrace(span.context)
            return try await withCheckedThrowingContinuation { (promise: CheckedContinuation<StoreOutcome, any Error>) in
                let (lead, pending) = queue.submit(StoreJob(key: key, commandType: commandType, body: body, promise: promise,
                                                            trace: trace, submitted: submitted))
                notify(.queued(pending: pending))
                // The first command to find no group running starts one; the
                // drain ends when no command is waiting.
                if lead { backend.onWriterQueue { self.drain() } }
            }
        }
    }

    /// Runs one group, then queues itself again while commands wait, so
    /// other writer work (``onWriter(_:)``) is not starved under load.
    private func drain() {
        let group = queue.takeGroup()
        if group.isEmpty { return }
        defer { backend.onWriterQueue { self.drain() } }
        let started = group.recordStarted()
        var loneFailure: (any Error)?
        var loneConnection: Connection?
        do {
            let results = try backend.withWriteConnection { connection -> [Result<StoreOutcome, any Error>] in
                let claim = handOver.claimOnInsert()
                var events: [OutboxEvent] = []
                var afterCommit: [() -> Void] = []
                let results = try connection.inWriteTransaction { () throws -> [Result<StoreOutcome, any Error>] in
                    if group.count == 1 {
                        let tx = connection.makeTransaction(claim: claim)
                        tx.events.trace = group[0].trace
                        do {
                            let outcome = try Self.run(group[0], tx, connection)
                            events += tx.events.list
                            afterCommit += tx.events.afterCommit
                            return [.success(outcome)]
                        } catch {
                            loneFailure = error
                            loneConnection = connection
                            throw error
                        }
                    }
                    var results: [Result<StoreOutcome, any Error>] = []
                    results.reserveCapacity(group.count)
                    for job in group {
                        let tx = connection.makeTransaction(claim: claim)
                        tx.events.trace = job.trace
                        let result = try connection.inSavepoint { try Self.run(job, tx, connection) }
                        // Only the events of jobs kept: a job rolled back to
                        // its savepoint keeps none.
                        if case .success = result {
                            events += tx.events.list
                            afterCommit += tx.events.afterCommit
                        }
                        results.append(result)
                    }
                    return results
                }
                for action in afterCommit { action() }
                notify(.committed(commands: group.count, failed: results.count { if case .failure = $0 { true } else { false } }))
                handOver(events, connection)
                backend.groupCommitted()
                return results
            }
            group.recordCommitted(startedAt: started)
            for (job, result) in zip(group, results) { job.promise.resume(with: result) }
        } catch {
            // Asked after the rollback: a connection that broke under it
            // makes this a failure of the group.
            if let loneFailure, let loneConnection, loneConnection.isCommandFailure(loneFailure) {
                // The command failed, not the transaction or the
                // connection: as a failed command in a larger group.
                notify(.committed(commands: 1, failed: 1))
                group[0].promise.resume(throwing: loneFailure)
                return
            }
            // Nothing of the group committed (or the commit's outcome is
            // unknown: the redelivery finds the inbox row if it did).
            notify(.failedGroup(commands: group.count))
            backend.writeFailed(error, commands: group.count)
            for job in group { job.promise.resume(throwing: error) }
        }
    }

    /// One command in its transaction: the stored reply when its key is in
    /// the inbox, else its body's, stored with the key.
    private static func run(_ job: StoreJob, _ tx: Connection.Transaction, _ connection: Connection) throws -> StoreOutcome {
        if let key = job.key, let stored = try connection.inboxEntry(key) {
            return try key.answer(storedScope: stored.scope, storedType: stored.commandType,
                                  storedFingerprint: stored.fingerprint, storedReply: stored.reply,
                                  commandType: job.commandType)
        }
        let result = try job.body(tx)
        let json = try result.json ?? ContractJSON.encode(result.reply)
        if let key = job.key {
            try connection.insertInbox(key, commandType: job.commandType, reply: json)
        }
        return StoreOutcome(reply: result.reply, json: json, duplicate: false)
    }

    /// See ``CommandStore/transaction(_:)``: one write transaction on the
    /// writer queue, between command groups, its events handed over.
    func transaction<T: Sendable>(_ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T {
        try await withSpan("store transaction", ofKind: .internal) { span in
            if span.isRecording { span.attributes = StoredTrace.storeAttributes(commandType: nil, system: Backend.systemName) }
            let trace = StoredTrace(span.context)
            return try await plainTransaction(trace: trace, body)
        }
    }

    private func plainTransaction<T: Sendable>(trace: StoredTrace?,
                                               _ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T {
        try await onWriter { connection in
            let tx = connection.makeTransaction(claim: self.handOver.claimOnInsert())
            tx.events.trace = trace
            let result = try connection.inWriteTransaction { try body(tx) }
            for action in tx.events.afterCommit { action() }
            self.handOver(tx.events.list, connection)
            return result
        }
    }

    /// Runs `body` on the writer queue with the write connection, between
    /// command groups.
    func onWriter<T: Sendable>(_ body: @Sendable @escaping (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            backend.onWriterQueue {
                continuation.resume(with: Result {
                    do {
                        return try self.backend.withWriteConnection(body)
                    } catch {
                        self.backend.writeFailed(error, commands: nil)
                        throw error
                    }
                })
            }
        }
    }

    /// Called on the writer right after a commit (``OutboxHandOver/committed(_:)``).
    private func handOver(_ events: [OutboxEvent], _ connection: Connection) {
        // If this fails the rows wait for their lease to run out instead.
        if let overflow = handOver.committed(events) { try? connection.releaseClaims(overflow) }
    }

    // MARK: Hand-over switches

    /// See ``OutboxStore/suspendHandOver(releasing:)``. On the writer
    /// queue, between groups.
    func suspendHandOver(releasing failed: [Int64]) async throws {
        try await onWriter { connection in
            try connection.releaseClaims(failed + self.handOver.suspend())
        }
    }

    /// See ``OutboxStore/resumeHandOver()``.
    func resumeHandOver() async throws {
        try await onWriter { _ in self.handOver.resume() }
    }
}

/// A store built on a ``CommitEngine`` (tests observe its groups).
protocol CommitObservable {
    /// Sends every later ``CommitEvent`` of the store's engine to `observer`.
    func observeCommits(_ observer: (@Sendable (CommitEvent) -> Void)?)
}
