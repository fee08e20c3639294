import Foundation
import Logging
import PostgresSupport
import Synchronization
import Testing
import TestSupport
@testable import PassSender

/// The ledger's group commit (``GroupCommit``): writes waiting together
/// share one transaction; each returns only after that transaction
/// committed; a batch that fails fails every write in it and keeps none;
/// a write that throws inside a batch is rolled back alone.
///
/// Batches are made deterministic without timing: the first transaction is
/// held until the test has seen the other writes queued behind it. The
/// waits for an event have no deadline of their own; the suite's time limit
/// is theirs: an event that never comes fails its test (the cancelled
/// stream ends, ``awaitEvent(_:_:)`` records it) instead of hanging the run.
@Suite("Group commit", .timeLimit(.minutes(1)))
struct GroupCommitTests {
    // MARK: In-memory engine

    /// Statements go to the open transaction; COMMIT makes them visible.
    /// Savepoints as SQLite and PostgreSQL treat them.
    final class FakeStore: Sendable {
        struct State {
            var committed: [String] = []
            var open: [String] = []
            var savepoint: Int?
            /// `SAVEPOINT` statements run (committed or not).
            var savepoints = 0
            var transactions = 0
            var lockKeys: [[String]] = []
        }
        let state = Mutex(State())
        var committed: [String] { state.withLock { $0.committed } }
    }

    struct FakeSQL: LedgerSQL {
        let store: FakeStore
        func execute(_ sql: String, _ arguments: [SQLValue]) throws {
            store.state.withLock { s in
                switch sql {
                case "SAVEPOINT ledger_write":
                    s.savepoint = s.open.count
                    s.savepoints += 1
                case "ROLLBACK TO SAVEPOINT ledger_write": s.open.removeSubrange(s.savepoint!...)
                case "RELEASE SAVEPOINT ledger_write": s.savepoint = nil
                default: if case .text(let v)? = arguments.first { s.open.append(v) }
                }
            }
        }
        func rows(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow] { [] }
    }

    struct CommitFailed: Error, Equatable {}
    struct WriteFailed: Error, Equatable { let name: String }

    /// A group commit on a ``FakeStore`` whose first transaction waits for
    /// `releaseFirst`, and whose transactions numbered in `failing` fail at
    /// COMMIT (after running every write).
    struct Fixture {
        let store: FakeStore
        let group: GroupCommit
        let events: AsyncStream<GroupCommit.Event>
        let releaseFirst: @Sendable () -> Void

        init(failing: Set<Int> = [], metrics: PassSenderMetrics = .shared) {
            let store = FakeStore()
            self.store = store
            let (events, sink) = AsyncStream<GroupCommit.Event>.makeStream()
            let (gate, open) = AsyncStream<Void>.makeStream()
            self.events = events
            releaseFirst = { open.yield() }
            group = GroupCommit(observer: { sink.yield($0) }, metrics: metrics) { keys, body in
                let n = store.state.withLock { s in
                    s.transactions += 1
                    s.lockKeys.append(keys)
                    return s.transactions
                }
                if n == 1 { for await _ in gate { break } }
                do {
                    let result = try body(FakeSQL(store: store))
                    if failing.contains(n) { throw CommitFailed() }
                    store.state.withLock { s in
                        s.committed += s.open
                        s.open = []
                    }
                    return result
                } catch {
                    store.state.withLock { $0.open = [] }
                    throw error
                }
            }
        }

        /// Writes `name` (and returns it); throws after writing when `fail`.
        func write(_ name: String, fail: Bool = false) async throws -> String {
            try await group.write(lockKey: "booking-\(name)") { db in
                try db.execute("INSERT", [.text(name)])
                if fail { throw WriteFailed(name: name) }
                return name
            }
        }
    }

    /// Waits for `event` on `iterator`.
    static func awaitEvent(_ iterator: inout AsyncStream<GroupCommit.Event>.Iterator, _ event: GroupCommit.Event) async {
        while let next = await iterator.next() {
            if next == event { return }
        }
        Issue.record("event stream ended before \(event)")
    }

    /// Starts write "a" and holds its transaction; queues `names` behind it,
    /// in that order. Returns the tasks of "a" and of `names`, once all are queued.
    static func queueBehindFirst(_ f: Fixture, _ names: [String], failing: Set<String> = [],
                                 check: @escaping @Sendable (String) -> Void = { _ in })
        async -> (first: Task<String, any Error>, rest: [Task<String, any Error>]) {
        var events = f.events.makeAsyncIterator()
        let first = Task { try await f.write("a") }
        await awaitEvent(&events, .started(writes: 1))
        // One at a time: tasks started together reach the queue in any
        // order, and the batch runs its writes in queue order.
        var rest: [Task<String, any Error>] = []
        for (index, name) in names.enumerated() {
            rest.append(Task {
                let result = try await f.write(name, fail: failing.contains(name))
                check(name)
                return result
            })
            await awaitEvent(&events, .queued(pending: index + 1))
        }
        return (first, rest)
    }

    @Test func writesWaitingTogetherShareOneTransactionAndReturnOnlyAfterItsCommit() async throws {
        let f = Fixture()
        let names = (1...9).map { "w\($0)" }
        let store = f.store
        let seenUncommitted = LockedBox<[String]>([])
        let (first, rest) = await Self.queueBehindFirst(f, names) { name in
            // Back from `write`: its transaction has committed.
            if !store.committed.contains(name) { seenUncommitted.withLock { $0.append(name) } }
        }
        f.releaseFirst()
        #expect(try await first.value == "a")
        var results: [String] = []
        for task in rest { results.append(try await task.value) }
        #expect(results == names)
        #expect(seenUncommitted.withLock { $0 } == [])
        #expect(f.store.committed == ["a"] + names)
        // 10 writes, 2 transactions: "a" alone, then the 9 that waited for it.
        let stats = f.group.stats
        #expect(stats.transactions == 2 && stats.writes == 10 && stats.largestBatch == 9 && stats.failedTransactions == 0)
        // The batch took every write's lock, each once, in order.
        #expect(f.store.state.withLock { $0.lockKeys } == [["booking-a"], names.map { "booking-\($0)" }.sorted()])
        // No write threw: no savepoints, no second run.
        #expect(f.store.state.withLock { $0.savepoints } == 0 && stats.reruns == 0)
    }

    @Test func aBatchThatFailsFailsEveryWriteInItAndKeepsNone() async throws {
        let f = Fixture(failing: [2])
        let names = ["b", "c", "d", "e"]
        let (first, rest) = await Self.queueBehindFirst(f, names)
        f.releaseFirst()
        #expect(try await first.value == "a")
        for task in rest {
            await #expect(throws: CommitFailed.self) { try await task.value }
        }
        #expect(f.store.committed == ["a"])
        #expect(f.group.stats.failedTransactions == 1)
        // The queue goes on: the next write gets a transaction of its own.
        #expect(try await f.write("f") == "f")
        #expect(f.store.committed == ["a", "f"])
    }

    @Test func aWriteThatThrowsInABatchIsRolledBackAloneTheOthersCommit() async throws {
        let f = Fixture()
        let names = ["b", "c", "d"]
        let (first, rest) = await Self.queueBehindFirst(f, names, failing: ["c"])
        f.releaseFirst()
        _ = try await first.value
        #expect(try await rest[0].value == "b")
        await #expect(throws: WriteFailed(name: "c")) { try await rest[1].value }
        #expect(try await rest[2].value == "d")
        #expect(f.store.committed == ["a", "b", "d"])
        #expect(f.group.stats.transactions == 2 && f.group.stats.failedTransactions == 0)
        // The batch ran without savepoints, was rolled back when "c" threw,
        // and ran again with one savepoint per write: "b" (in both runs) is
        // committed once.
        #expect(f.group.stats.reruns == 1)
        #expect(f.store.state.withLock { ($0.transactions, $0.savepoints) } == (3, 3))
    }

    @Test func aLoneWriteThatThrowsRollsItsTransactionBack() async throws {
        let f = Fixture()
        f.releaseFirst()
        await #expect(throws: WriteFailed(name: "a")) { try await f.write("a", fail: true) }
        #expect(f.store.committed == [])
        #expect(try await f.write("b") == "b")
        #expect(f.store.committed == ["b"])
    }

    /// `submit` (how the consumer marks outbox rows published) returns at
    /// once; a write queued after it runs after it, in the same transaction;
    /// `idle()` (closing the ledger) waits for it.
    @Test func aSubmittedWriteReturnsAtOnceRunsBeforeLaterWritesAndIdleWaitsForIt() async throws {
        let f = Fixture()
        var events = f.events.makeAsyncIterator()
        let first = Task { try await f.write("a") }
        await Self.awaitEvent(&events, .started(writes: 1))
        let settled = LockedBox<[String]>([])
        f.group.submit(lockKey: nil, { db in try db.execute("INSERT", [.text("mark")]) },
                       settle: { error in settled.withLock { $0.append(error == nil ? "committed" : "\(error!)") } })
        // Back at once, though the transaction before it is still held.
        #expect(settled.withLock { $0 }.isEmpty && f.store.committed.isEmpty)
        let idle = Task { await f.group.idle(); return f.store.committed }
        // Waiting (not returned at once) while the first transaction is held.
        await Self.awaitEvent(&events, .idleWaiting)
        let later = Task { try await f.write("b") }
        await Self.awaitEvent(&events, .queued(pending: 2))
        f.releaseFirst()
        _ = try await first.value
        #expect(try await later.value == "b")
        #expect(f.store.committed == ["a", "mark", "b"], "first in, first out")
        #expect(settled.withLock { $0 } == ["committed"])
        #expect(await idle.value == ["a", "mark", "b"], "idle returned only after the queue ran dry")
        #expect(f.group.stats.transactions == 2 && f.group.stats.largestBatch == 2)
        await f.group.idle()  // nothing queued: at once
    }

    // MARK: Real engines

    /// A database of `kind` whose group commit reports to `observer`
    /// (``Engines`` opens one with a second connection beside it).
    static func open(_ kind: LedgerKind, directory: URL, url: String,
                     observer: @escaping @Sendable (GroupCommit.Event) -> Void) async throws
        -> (database: any LedgerDatabase, group: GroupCommit) {
        switch kind {
        case .sqlite:
            let db = try SQLiteLedgerDatabase(path: directory.appendingPathComponent("l.sqlite").path, maxBatch: 256,
                                              observer: observer)
            return (db, db.groupCommit)
        case .postgres:
            let db = try await PostgresLedgerDatabase.open(settings: PostgresSettings(url: url), logger: Logger(label: "gc-test"),
                                                           waitSeconds: 0, maxBatch: 256, observer: observer)
            return (db, db.groupCommit)
        }
    }

    /// A database of `kind` with its group commit's events, and a second
    /// one on the same file / schema (another connection) to check what is
    /// committed. ``close()`` closes both and removes the directory.
    struct Engines {
        let dir: TemporaryDirectory
        let database: any LedgerDatabase
        let group: GroupCommit
        let other: any LedgerDatabase
        let events: AsyncStream<GroupCommit.Event>

        init(_ kind: LedgerKind, schemaPrefix: String) async throws {
            dir = try TemporaryDirectory("gc")
            let url = try TestPostgres.url(schemaPrefix: schemaPrefix)
            let (events, sink) = AsyncStream<GroupCommit.Event>.makeStream()
            self.events = events
            (database, group) = try await GroupCommitTests.open(kind, directory: dir.url, url: url) { sink.yield($0) }
            other = try await kind.database(directory: dir.url, url: url)
        }

        func close() async {
            await database.close()
            await other.close()
            dir.remove()
        }
    }

    /// Starts a write of booking "a" that holds the engine's transaction
    /// (on its thread) until `gate` is signalled, and returns once that
    /// transaction has started: writes queued now wait for the next one.
    static func holdTransaction(_ database: any LedgerDatabase, _ iterator: inout AsyncStream<GroupCommit.Event>.Iterator) async
        -> (gate: DispatchSemaphore, write: Task<Void, any Error>) {
        let gate = DispatchSemaphore(value: 0)
        let write = Task {
            try await database.write(lockKey: "a") { db in
                gate.wait()
                try Self.insertBooking(db, "a")
            }
        }
        await awaitEvent(&iterator, .started(writes: 1))
        return (gate, write)
    }

    static func insertBooking(_ db: any LedgerSQL, _ id: String) throws {
        try db.execute("INSERT INTO booking (id, latestVersion, cancelled, timesVersion, updatedAt) VALUES (?, 1, ?, 1, 0)",
                       id, false)
    }

    static func exists(_ database: any LedgerDatabase, _ id: String) async throws -> Bool {
        try await database.read { db in try db.row("SELECT id FROM booking WHERE id = ?", id) != nil }
    }

    @Test(arguments: LedgerKind.allCases)
    func concurrentLedgerWritesShareTransactionsAndAreCommittedBeforeTheyReturn(_ kind: LedgerKind) async throws {
        let engines = try await Engines(kind, schemaPrefix: "gc")
        let (database, group, other) = (engines.database, engines.group, engines.other)
        var iterator = engines.events.makeAsyncIterator()

        // "a" holds the engine's transaction (on its thread) until the
        // others are queued behind it.
        let (gate, first) = await Self.holdTransaction(database, &iterator)
        let names = (1...8).map { "w\($0)" }
        let notVisible = LockedBox<[String]>([])
        let tasks = names.map { name in
            Task {
                try await database.write(lockKey: name) { db in
                    try Self.insertBooking(db, name)
                    if name == "w4" { throw WriteFailed(name: name) }
                }
                // Back from `write`: another connection sees it.
                if (try await Self.exists(other, name)) == false { notVisible.withLock { $0.append(name) } }
            }
        }
        await Self.awaitEvent(&iterator, .queued(pending: names.count))
        gate.signal()
        try await first.value
        for (name, task) in zip(names, tasks) {
            if name == "w4" {
                await #expect(throws: WriteFailed(name: "w4")) { try await task.value }
            } else {
                try await task.value
            }
        }
        #expect(notVisible.withLock { $0 } == [])
        #expect(try await Self.exists(other, "a"))
        #expect((try await Self.exists(other, "w4")) == false)
        // The 8 waiting writes: one batch, run again with savepoints after
        // w4 threw (w4 rolled back to its savepoint).
        #expect(group.stats.transactions == 2 && group.stats.writes == 9 && group.stats.largestBatch == 8)
        #expect(group.stats.reruns == 1)
        await engines.close()
    }

    /// A statement the database refuses (a duplicate key) fails its own
    /// write only, alone or in a batch. On PostgreSQL `execute` does not
    /// wait for its answer (``PendingStatements``), so this is where the
    /// error must still reach the write that sent it: the batch runs
    /// without savepoints, fails, and runs again with them.
    @Test(arguments: LedgerKind.allCases)
    func aStatementTheDatabaseRefusesFailsOnlyItsOwnWrite(_ kind: LedgerKind) async throws {
        let engines = try await Engines(kind, schemaPrefix: "gcdup")
        let (database, group, other) = (engines.database, engines.group, engines.other)
        var iterator = engines.events.makeAsyncIterator()
        try await database.write(lockKey: "dup") { db in try Self.insertBooking(db, "dup") }
        // Alone: the error is the write's answer, nothing of it is kept.
        do {
            try await database.write(lockKey: "dup") { db in
                try db.execute("UPDATE booking SET updatedAt = 1 WHERE id = ?", "dup")
                try Self.insertBooking(db, "dup")
            }
            Issue.record("a duplicate key was stored")
        } catch {
            #expect(StoreErrors.isUniqueViolation(error), "\(StoreErrors.describe(error))")
        }
        #expect(try await other.read { db in try db.row("SELECT updatedAt FROM booking WHERE id = ?", "dup")?.double("updatedAt") } == 0)
        // Past the two lone writes' events, so what follows sees only the batch's.
        await Self.awaitEvent(&iterator, .failedBatch(writes: 1))

        let (gate, first) = await Self.holdTransaction(database, &iterator)
        // "e" sends a statement the database refuses, then throws before
        // anything waited for it: its refusal is still its own.
        let names = ["b", "dup", "d", "e"]
        let tasks = names.map { name in
            Task {
                try await database.write(lockKey: name) { db in
                    if name == "e" {
                        try Self.insertBooking(db, "dup")
                        throw WriteFailed(name: "e")
                    }
                    try Self.insertBooking(db, name)
                }
            }
        }
        await Self.awaitEvent(&iterator, .queued(pending: names.count))
        gate.signal()
        try await first.value
        try await tasks[0].value
        do {
            try await tasks[1].value
            Issue.record("a duplicate key was stored")
        } catch {
            #expect(StoreErrors.isUniqueViolation(error), "\(StoreErrors.describe(error))")
        }
        try await tasks[2].value
        await #expect(throws: (any Error).self) { try await tasks[3].value }
        await Self.awaitEvent(&iterator, .rerunWithSavepoints(writes: 4))
        for name in ["a", "b", "d"] { #expect(try await Self.exists(other, name)) }
        #expect(group.stats.reruns == 1 && group.stats.failedTransactions == 1)
        await engines.close()
    }

    /// SQLite: commits are fsynced (`synchronous = FULL`, 2) on the writer,
    /// not GRDB's WAL default NORMAL (1), which does not sync at commit.
    @Test func theSQLiteWriterSyncsEveryCommit() async throws {
        let dir = try TemporaryDirectory("gc")
        defer { dir.remove() }
        let database = try SQLiteLedgerDatabase(path: dir.appending("l.sqlite").path)
        let level = try await database.write(lockKey: nil) { db in try db.rows("PRAGMA synchronous", []).first?.int("synchronous") }
        #expect(level == 2)
    }

    /// PostgreSQL: the connection dies under a batch (the server ends it):
    /// every write of the batch fails and none of them is kept; the next
    /// write reconnects.
    @Test func aBatchWhoseConnectionDiesFailsEveryWriteAndKeepsNone() async throws {
        let engines = try await Engines(.postgres, schemaPrefix: "gcdie")
        let (database, group, other) = (engines.database, engines.group, engines.other)
        var iterator = engines.events.makeAsyncIterator()
        let (gate, first) = await Self.holdTransaction(database, &iterator)
        let names = ["b", "c", "d"]
        let tasks = names.map { name in
            Task {
                try await database.write(lockKey: name) { db in
                    try Self.insertBooking(db, name)
                    if name == "c" { try db.execute("SELECT pg_terminate_backend(pg_backend_pid())", []) }
                }
            }
        }
        await Self.awaitEvent(&iterator, .queued(pending: names.count))
        gate.signal()
        try await first.value
        for task in tasks {
            await #expect(throws: (any Error).self) { try await task.value }
        }
        await Self.awaitEvent(&iterator, .failedBatch(writes: 3))
        for name in names { #expect((try await Self.exists(other, name)) == false) }
        #expect(try await Self.exists(other, "a"))
        #expect(group.stats.failedTransactions == 1)
        try await database.write(lockKey: "e") { db in try Self.insertBooking(db, "e") }
        #expect(try await Self.exists(other, "e"))
        await engines.close()
    }
}
