import BookingContracts
import Foundation
import GRDB
import ServiceSupport
import Synchronization

/// The booking handler's SQLite store (GRDB, WAL), the embedded default for
/// one machine: rooms, bookings, the
/// inbox of processed commands and the outbox of events to publish.
///
/// Every command runs in one IMMEDIATE write transaction that takes the
/// database's write lock first, then reads, checks and writes. That is what
/// makes overlap checks safe when several handler processes share the file:
/// SQLite serialises the transactions, so two of them can never both see a
/// slot free.
public final class SQLiteBookingStore: BookingStore {
    let pool: DatabasePool
    private let batch = GroupCommitQueue()
    /// Rooms as last read, for validating commands before their transaction.
    let rooms = RoomCache()
    /// Events committed by this process, handed to its relay in memory.
    let handOver: OutboxHandOver

    /// Opens (creating and migrating as needed) the database at `path`.
    /// `insertLease` and `committedCapacity` are for tests.
    /// GRDB closes the pool when the store is released.
    public func close() async {}

    public init(path: String, insertLease: TimeInterval = 5, committedCapacity: Int = 10_000) throws {
        handOver = OutboxHandOver(insertLease: insertLease, capacity: committedCapacity)
        var configuration = Configuration()
        // Another process holding the write lock makes us wait, not fail.
        configuration.busyMode = .timeout(15)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")  // WAL: durable at checkpoint, safe on crash
            // SQLite's temporary files in memory: with the default, the
            // handler created, wrote and unlinked a file in /var/tmp
            // (`etilqs_*`) for about every third booking — strace: 136 in
            // 3 s at ~130 bookings/s; about 3 % of its CPU in open, access,
            // unlink and close (docs/performance.md, "A lone command").
            // Durability is not involved: such files only live within one
            // statement or transaction.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            if !db.configuration.readonly {
                // 16 MiB of page cache for the writer instead of SQLite's
                // 2 MiB: the booking table and its indexes outgrow 2 MiB
                // within tens of thousands of bookings, and every miss is a
                // pread system call. (Readers are rare and keep the default.)
                try db.execute(sql: "PRAGMA cache_size = -16384")
                // Checkpoints are run by `checkpointer`, off the writer (see
                // checkpointSoon()); this high mark is only a backstop.
                try db.execute(sql: "PRAGMA wal_autocheckpoint = 10000")
            }
        }
        // Processes that open a fresh database together must not migrate
        // it together (FileLock explains why).
        pool = try FileLock.withExclusive(path: path + ".migrating") {
            let pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
            return pool
        }
        var checkpointConfiguration = Configuration()
        checkpointConfiguration.busyMode = .timeout(15)
        checkpointConnection = try DatabaseQueue(path: path, configuration: checkpointConfiguration)
    }

    // MARK: Checkpoints

    /// A connection of its own for WAL checkpoints, on its own queue.
    ///
    /// Why: with SQLite's automatic checkpoint the commit that crosses the
    /// mark copies the WAL into the database and fsyncs it, inside the
    /// write lock, while every waiting command waits (a sixth of the
    /// writer's time in `benchmarks store`). A PASSIVE checkpoint on
    /// another connection runs beside the writer instead: SQLite lets
    /// writers append to the WAL while it copies.
    private let checkpointConnection: DatabaseQueue
    private let checkpointer = DispatchQueue(label: "booking-store.checkpoint")
    private let checkpointState = Mutex((running: false, last: ContinuousClock.now))
    /// At most this often.
    static let checkpointInterval = Duration.milliseconds(250)

    /// Called by the writer after each commit: starts a checkpoint unless one
    /// is running or the last began less than ``checkpointInterval`` ago.
    private func checkpointSoon() {
        let now = ContinuousClock.now
        let start = checkpointState.withLock { state -> Bool in
            guard !state.running, now - state.last >= Self.checkpointInterval else { return false }
            state = (true, now)
            return true
        }
        guard start else { return }
        checkpointer.async { [self] in
            // A failure (busy, I/O) leaves the WAL to the next attempt.
            _ = try? checkpointConnection.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            checkpointState.withLock { $0.running = false }
        }
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "room") { t in
                t.primaryKey("name", .text)
                t.column("json", .blob).notNull()
                t.column("updatedAt", .double).notNull()
            }
            try db.create(table: "booking") { t in
                t.primaryKey("id", .text)
                t.column("room", .text).notNull()
                t.column("status", .text).notNull()
                t.column("startsAt", .integer).notNull()  // unix seconds
                t.column("endsAt", .integer).notNull()
                t.column("version", .integer).notNull()
                t.column("json", .blob).notNull()
            }
            try db.create(index: "booking_room_time", on: "booking", columns: ["room", "startsAt"])
            try db.create(table: "inbox") { t in
                t.primaryKey("key", .text)
                t.column("commandType", .text)
                t.column("reply", .blob).notNull()
                t.column("createdAt", .double).notNull()
            }
            try db.create(table: "outbox") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("routingKey", .text).notNull()
                t.column("messageId", .text).notNull()
                t.column("body", .blob).notNull()
                t.column("createdAt", .double).notNull()
                t.column("claimedUntil", .double)
                t.column("publishedAt", .double)
            }
            try db.create(index: "outbox_pending", on: "outbox", columns: ["publishedAt", "id"])
        }
        // Idempotency keys scoped by sender (contract v1.1): the key alone
        // let one user read or pre-empt another's replies. Old rows get the
        // scope of the booking their reply shows (``InboxKey/migratedScope(ofReply:)``),
        // so a redelivery across the upgrade is still answered, not run twice.
        migrator.registerMigration("v2-inbox-scope") { db in
            try db.execute(sql: """
                CREATE TABLE inbox_scoped (
                    scope TEXT NOT NULL,
                    key TEXT NOT NULL,
                    commandType TEXT,
                    fingerprint INTEGER,
                    reply BLOB NOT NULL,
                    createdAt DOUBLE NOT NULL,
                    PRIMARY KEY (scope, key)
                ) WITHOUT ROWID
                """)
            let insert = try db.makeStatement(sql: """
                INSERT OR IGNORE INTO inbox_scoped (scope, key, commandType, fingerprint, reply, createdAt)
                VALUES (?, ?, ?, NULL, ?, ?)
                """)
            let rows = try Row.fetchCursor(db, sql: "SELECT key, commandType, reply, createdAt FROM inbox")
            while let row = try rows.next() {
                let reply: Data = row["reply"]
                let key: String = row["key"]
                let commandType: String? = row["commandType"]
                let createdAt: Double = row["createdAt"]
                try insert.execute(arguments: [InboxKey.migratedScope(ofReply: reply), key, commandType, reply, createdAt])
            }
            try db.execute(sql: "DROP TABLE inbox; ALTER TABLE inbox_scoped RENAME TO inbox")
        }
        // Durable timers (contract v1.1, "Booking lifecycle"): each booking
        // row keeps when its next time-driven transition may be due
        // (``BookingRules/earliestDue(status:startsAt:endsAt:)``); a partial
        // index holds only the rows that have one, so finding the earliest
        // is one index step however long the history. Existing bookings get
        // theirs now: the ones whose times have passed are applied, in due
        // order, as soon as the upgraded handler runs.
        migrator.registerMigration("v3-timers") { db in
            try db.execute(sql: """
                ALTER TABLE booking ADD COLUMN nextDueAt INTEGER;
                UPDATE booking SET nextDueAt = startsAt WHERE status IN ('pending', 'confirmed');
                UPDATE booking SET nextDueAt = endsAt WHERE status = 'inProgress';
                CREATE INDEX booking_due ON booking (nextDueAt, id) WHERE nextDueAt IS NOT NULL;
                """)
        }
        // Reading bookings (contract v1.1): every version of every booking,
        // in commit order (`seq`, the rowid), with the `seq` that superseded
        // it (`until`). A `booking.list` cursor fixes a `seq` at its first
        // page and reads the versions visible then (seq ≤ S < until) on
        // every later page, in whichever handler process answers it: the
        // snapshot rule of the contract without holding a transaction open.
        migrator.registerMigration("v4-booking-versions") { db in
            try db.execute(sql: """
                CREATE TABLE booking_version (
                    seq INTEGER PRIMARY KEY,
                    id TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    room TEXT NOT NULL,
                    status TEXT NOT NULL,
                    startsAt INTEGER NOT NULL,
                    endsAt INTEGER NOT NULL,
                    requestedBy TEXT,
                    json BLOB NOT NULL,
                    until INTEGER,
                    supersededAt DOUBLE
                );
                CREATE INDEX booking_version_time ON booking_version (startsAt, id);
                CREATE INDEX booking_version_room_time ON booking_version (room, startsAt, id);
                CREATE INDEX booking_version_current ON booking_version (id) WHERE until IS NULL;
                INSERT INTO booking_version (id, version, room, status, startsAt, endsAt, requestedBy, json)
                    SELECT id, version, room, status, startsAt, endsAt,
                           json_extract(CAST(json AS TEXT), '$.requestedBy'), json
                    FROM booking ORDER BY rowid;
                """)
        }
        // Recurring bookings (contract v1.1): a series row (its version
        // grows with every change of the series as a whole), and each
        // occurrence's series id on the booking and its versions, so a
        // cancel by `seriesId` and a `booking.list` by `seriesId` are index
        // ranges.
        migrator.registerMigration("v5-series") { db in
            try db.execute(sql: """
                CREATE TABLE series (
                    id TEXT PRIMARY KEY,
                    room TEXT NOT NULL,
                    requestedBy TEXT,
                    recurrence BLOB NOT NULL,
                    onConflict TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    count INTEGER NOT NULL,
                    createdAt DOUBLE NOT NULL
                );
                ALTER TABLE booking ADD COLUMN seriesId TEXT;
                CREATE INDEX booking_series ON booking (seriesId, startsAt) WHERE seriesId IS NOT NULL;
                ALTER TABLE booking_version ADD COLUMN seriesId TEXT;
                CREATE INDEX booking_version_series ON booking_version (seriesId, startsAt, id) WHERE seriesId IS NOT NULL;
                """)
        }
        // Order per booking across processes sharing the file (see
        // ``OutboxHandOver``): each event's order key and each claim's owner.
        migrator.registerMigration("v6-outbox-order") { db in
            try db.execute(sql: """
                ALTER TABLE outbox ADD COLUMN orderKey TEXT;
                ALTER TABLE outbox ADD COLUMN claimedBy TEXT;
                CREATE INDEX outbox_pending_key ON outbox (orderKey, id) WHERE publishedAt IS NULL;
                """)
        }
        // Fewer B-trees per command (docs/performance.md, seventh round).
        // `AUTOINCREMENT` wrote a page of `sqlite_sequence` in every
        // transaction that queued an event; a plain rowid is `MAX(id) + 1`,
        // which never reuses an id as long as the newest row stays — so
        // ``prune(olderThan:)`` keeps it, and the highest id ever handed out
        // (the old sequence, which may be above every row left) is kept here
        // as a published placeholder row. Ids are never reused: a relay that
        // marks an id late must not mark a newer event. And `outbox_pending`
        // held every row ever queued, published or not; it now holds only
        // the unpublished ones, as on PostgreSQL, and stays a page or two.
        migrator.registerMigration("v7-outbox-rowid") { db in
            try db.execute(sql: """
                CREATE TABLE outbox_rowid (
                    id INTEGER PRIMARY KEY,
                    routingKey TEXT NOT NULL,
                    messageId TEXT NOT NULL,
                    body BLOB NOT NULL,
                    createdAt DOUBLE NOT NULL,
                    claimedUntil DOUBLE,
                    publishedAt DOUBLE,
                    orderKey TEXT,
                    claimedBy TEXT
                );
                INSERT INTO outbox_rowid (id, routingKey, messageId, body, createdAt, claimedUntil, publishedAt, orderKey, claimedBy)
                    SELECT id, routingKey, messageId, body, createdAt, claimedUntil, publishedAt, orderKey, claimedBy FROM outbox;
                INSERT INTO outbox_rowid (id, routingKey, messageId, body, createdAt, publishedAt)
                    SELECT seq, '', '', x'', 0, 0 FROM sqlite_sequence
                    WHERE name = 'outbox' AND seq > (SELECT IFNULL(MAX(id), 0) FROM outbox);
                DROP TABLE outbox;
                ALTER TABLE outbox_rowid RENAME TO outbox;
                CREATE INDEX outbox_pending ON outbox (id) WHERE publishedAt IS NULL;
                CREATE INDEX outbox_pending_key ON outbox (orderKey, id) WHERE publishedAt IS NULL;
                """)
        }
        return migrator
    }

    public typealias Outcome = StoreOutcome

    /// Runs a command: when `key` is already in the inbox (in the sender's
    /// scope), returns its stored reply — or 1009 when the sender used it
    /// for a different command — and does nothing else; otherwise runs
    /// `body` and stores its effect, its events and its reply in the same
    /// transaction.
    ///
    /// Commands submitted while a transaction is running are grouped into
    /// the next one (group commit), each inside its own savepoint (a
    /// command alone in its group needs none): one commit and one hop to
    /// the writer per group instead of per command, with the same
    /// isolation — they still run one after another under the write lock.
    public func execute(
        key: InboxKey?, commandType: String, _ body: @Sendable @escaping (any StoreTransaction) throws -> ReplyBody
    ) async throws -> Outcome {
        let submitted = ContinuousClock.now
        defer { CommandStage.store.record(since: submitted) }
        return try await withCheckedThrowingContinuation { (promise: CheckedContinuation<Outcome, any Error>) in
            let lead = batch.submit(StoreJob(key: key, commandType: commandType, body: body, promise: promise, submitted: submitted))
            // The first command to find no group running starts one; the
            // drain ends when no command is waiting.
            if lead { writer.async { self.drain() } }
        }
    }

    /// Runs the groups. A plain serial queue calling GRDB's synchronous
    /// API: one thread hop in and one (the continuation) out per group,
    /// where a task awaiting GRDB's async API took four.
    private let writer = DispatchQueue(label: "booking-store.writer")

    /// Runs one group, then queues itself again while commands wait, so
    /// other writer work (``onWriter(_:)``) is not starved under load.
    private func drain() {
        do {
            let group = batch.takeGroup()
            if group.isEmpty { return }
            defer { writer.async { self.drain() } }
            let started = group.recordStarted()
            do {
                let results = try pool.writeWithoutTransaction { db -> [Result<Outcome, any Error>] in
                    var results: [Result<Outcome, any Error>] = []
                    var events: [OutboxEvent] = []
                    let claim = claimOnInsert()
                    try db.inTransaction(.immediate) {
                        for job in group {
                            do {
                                var outcome: Outcome!
                                let tx = SQLiteTransaction(db: db, rooms: rooms, claim: claim)
                                if group.count == 1 {
                                    // Alone: no savepoint, for inside one SQLite copies
                                    // every page it first changes to a sub-journal; if
                                    // the command fails, its whole transaction rolls back.
                                    outcome = try Self.run(job, tx)
                                } else {
                                    try db.inSavepoint {
                                        outcome = try Self.run(job, tx)
                                        return .commit
                                    }
                                }
                                // Only the events of jobs kept (a job whose savepoint
                                // rolled back, or a lone job that failed, has none here).
                                events += tx.events.list
                                results.append(.success(outcome))
                            } catch {
                                if group.count == 1 { throw error }
                                results.append(.failure(error))
                            }
                        }
                        return .commit
                    }
                    self.handOver(events, db)
                    self.checkpointSoon()
                    return results
                }
                group.recordCommitted(startedAt: started)
                for (job, result) in zip(group, results) { job.promise.resume(with: result) }
            } catch {
                // The commit failed, or the group's only command did:
                // nothing of the group was stored.
                for job in group { job.promise.resume(throwing: error) }
            }
        }
    }

    private static func run(_ job: StoreJob, _ tx: SQLiteTransaction) throws -> Outcome {
        let db = tx.db
        if let key = job.key,
           let row = try Row.fetchOne(db.cachedStatement(sql: """
               SELECT scope, commandType, fingerprint, reply FROM inbox
               WHERE key = ? AND scope IN (?, '\(InboxKey.legacyScope)') ORDER BY scope = '\(InboxKey.legacyScope)' LIMIT 1
               """), arguments: [key.key, key.scope]) {
            return try key.answer(storedScope: row["scope"], storedType: row["commandType"], storedFingerprint: row["fingerprint"],
                                  storedReply: row["reply"], commandType: job.commandType)
        }
        let result = try job.body(tx)
        let json = try result.json ?? ContractJSON.encode(result.reply)
        if let key = job.key {
            try db.cachedStatement(sql: """
                INSERT INTO inbox (scope, key, commandType, fingerprint, reply, createdAt) VALUES (?, ?, ?, ?, ?, ?)
                """).execute(arguments: [key.scope, key.key, job.commandType, key.fingerprint, json, Date().timeIntervalSince1970])
        }
        return Outcome(reply: result.reply, json: json, duplicate: false)
    }

    /// Runs `body` in one IMMEDIATE write transaction (no inbox involved).
    public func transaction<T: Sendable>(_ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T {
        try await onWriter { db in
            var result: T?
            let tx = SQLiteTransaction(db: db, rooms: self.rooms, claim: self.claimOnInsert())
            try db.inTransaction(.immediate) {
                result = try body(tx)
                return .commit
            }
            self.handOver(tx.events.list, db)
            return result!
        }
    }

    /// Runs `body` on the writer queue, between command groups. Everything
    /// that inserts events or switches the hand-over runs here, so a group
    /// sees one hand-over state from start to commit.
    private func onWriter<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            writer.async { [pool] in
                continuation.resume(with: Result { try pool.writeWithoutTransaction(body) })
            }
        }
    }

    // MARK: Reads

    /// The room as this process last read it, and its stored
    /// JSON; no database access. Possibly stale: whoever uses it checks the
    /// JSON against the row inside the transaction
    /// (``StoreTransaction/roomJSON(named:)``).
    public func cachedRoom(named name: String) -> CachedRoom? {
        rooms.get(name)
    }

    /// Every room with the instant it was last registered (for `booking.replay`).
    public func replayRooms() async throws -> [(room: Room, updatedAt: Date)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT json, updatedAt FROM room ORDER BY name").map { row in
                (try ContractJSON.decode(Room.self, from: row["json"] as Data),
                 Date(timeIntervalSince1970: row["updatedAt"]))
            }
        }
    }

    /// Up to `limit` bookings (every status) with ids after `id`, in id
    /// order: one page of a `booking.replay`. Pages are separate reads, so a
    /// booking changed meanwhile may appear in a newer version than its
    /// neighbours; its live event carries the same or a newer version.
    public func replayBookings(after id: String?, limit: Int) async throws -> [Booking] {
        try await pool.read { db in
            try Data.fetchAll(db, sql: "SELECT json FROM booking WHERE id > ? ORDER BY id LIMIT ?",
                              arguments: [id ?? "", limit]).map { try ContractJSON.decode(Booking.self, from: $0) }
        }
    }

    /// One booking as committed, or nil.
    public func booking(id: String) async throws -> Booking? {
        try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT json FROM booking WHERE id = ?", arguments: [id])
                .map { try ContractJSON.decode(Booking.self, from: $0) }
        }
    }

    // MARK: Reading bookings

    /// The newest committed version's `seq`: the snapshot a first page fixes.
    public func snapshotSeq() async throws -> Int64 {
        try await pool.read { db in try Int64.fetchOne(db, sql: "SELECT MAX(seq) FROM booking_version") ?? 0 }
    }

    /// The booking versions visible at snapshot `seq` (committed at or
    /// before it, not yet superseded then) overlapping [`from`, `to`), in
    /// (`startsAt`, `id`) order after `after`, at most `limit`; filtered by
    /// room, statuses and requester when given. `from`/`to` are the widest
    /// instants of the window (callers narrow date windows per zone).
    public func listVersions(at seq: Int64, from: Date, to: Date, room: String?, statuses: [BookingStatus]?,
                             requestedBy: String?, seriesId: String?, after: (startsAt: Int64, id: String)?, limit: Int)
        async throws -> [ListedVersion]
    {
        let start = Int64(from.timeIntervalSince1970.rounded(.down)), end = Int64(to.timeIntervalSince1970.rounded(.up))
        var sql = """
            SELECT id, room, json_extract(j, '$.timeZone'), startsAt, endsAt, requestedBy, j,
                   json_set(j, '$.attendees', json((SELECT json_group_array(json_remove(value, '$.email', '$.phone'))
                                                    FROM json_each(j, '$.attendees'))))
            FROM (SELECT id, room, startsAt, endsAt, requestedBy, CAST(json AS TEXT) AS j FROM booking_version
            WHERE seq <= ? AND (until IS NULL OR until > ?)
              AND startsAt < ? AND endsAt > ? AND startsAt > ?
            """
        var arguments: [any DatabaseValueConvertible] = [seq, seq, end, start, start - StoreRules.longestBooking]
        if let room {
            sql += " AND room = ?"
            arguments.append(room)
        }
        if let statuses {
            sql += " AND status IN (\(databaseQuestionMarks(count: statuses.count)))"
            arguments += statuses.map(\.rawValue)
        }
        if let requestedBy {
            sql += " AND requestedBy = ?"
            arguments.append(requestedBy)
        }
        if let seriesId {
            sql += " AND seriesId = ?"
            arguments.append(seriesId)
        }
        if let after {
            sql += " AND (startsAt > ? OR (startsAt = ? AND id > ?))"
            arguments += [after.startsAt, after.startsAt, after.id]
        }
        sql += " ORDER BY startsAt, id LIMIT ?) ORDER BY startsAt, id"
        arguments.append(limit)
        let statement = sql, values = StatementArguments(arguments)
        return try await pool.read { db in
            var rows: [ListedVersion] = []
            let cursor = try Row.fetchCursor(db.cachedStatement(sql: statement), arguments: values)
            while let row = try cursor.next() {
                rows.append(ListedVersion(id: row[0], room: row[1], timeZone: row[2], startsAt: row[3], endsAt: row[4],
                                          requestedBy: row[5], json: Self.bytes(row, 6), redactedJSON: Self.bytes(row, 7)))
            }
            return rows
        }
    }

    /// Column `index` (TEXT) as UTF-8 bytes, copied once.
    private static func bytes(_ row: Row, _ index: Int) -> [UInt8] {
        (try? row.withUnsafeData(atIndex: index) { data in data.map { [UInt8]($0) } ?? [] }) ?? []
    }

    /// The rooms by name, for the readers' privacy rule (approvers).
    public func room(named name: String) async throws -> Room? {
        // Always the row, never the cache: a stale approver list would show
        // contact details to someone no longer entitled to them.
        try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT json FROM room WHERE name = ?", arguments: [name])
                .map { try ContractJSON.decode(Room.self, from: $0) }
        }
    }

    /// Counts, for tests and metrics.
    public func counts() async throws -> (rooms: Int, bookings: Int, inbox: Int, outboxPending: Int) {
        try await pool.read { db in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM room") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM booking") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM inbox") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE publishedAt IS NULL") ?? 0)
        }
    }

    // MARK: Outbox

    private func claimOnInsert() -> InsertClaim? {
        handOver.claimOnInsert()
    }

    public var handOverSuspended: Bool {
        handOver.suspended
    }

    public var queuedBehindOthers: Bool {
        handOver.recentlyQueuedBehindOthers
    }

    /// Called on the writer right after a commit (``OutboxHandOver/committed(_:)``).
    private func handOver(_ events: [OutboxEvent], _ db: Database) {
        // If this fails the rows wait for their lease to run out instead.
        if let overflow = handOver.committed(events) { try? Self.release(overflow, db) }
    }

    /// Switches hand-over off after a failed publish: gives up the claims on
    /// `failed` and on every event still waiting in memory, so the relay
    /// reads all of them back from the table in id (commit) order, before
    /// anything newer. Runs on the writer queue, between groups.
    public func suspendHandOver(releasing failed: [Int64]) async throws {
        try await onWriter { db in
            try Self.release(failed + self.handOver.suspend(), db)
        }
    }

    /// Switches hand-over back on once the relay has caught up with the
    /// table. Events inserted unclaimed before this are older than every
    /// event handed over after it; the relay sweeps the table once more
    /// before taking from memory, so they still go first.
    public func resumeHandOver() async throws {
        try await onWriter { _ in self.handOver.resume() }
    }

    private static func release(_ ids: [Int64], _ db: Database) throws {
        for chunk in stride(from: 0, to: ids.count, by: 500).map({ ids[$0..<min($0 + 500, ids.count)] }) {
            try db.execute(sql: "UPDATE outbox SET claimedUntil = NULL, claimedBy = NULL WHERE id IN (\(databaseQuestionMarks(count: chunk.count)))",
                           arguments: StatementArguments(Array(chunk)))
        }
    }

    /// Takes up to `limit` of the events committed by this process, oldest
    /// first: the relay's usual source, without a database round trip. They
    /// were claimed when inserted, so no other relay publishes them within
    /// the lease.
    public func takeCommitted(limit: Int) -> [OutboxEvent] {
        handOver.take(limit: limit)
    }

    /// Claims up to `limit` unpublished events, oldest first, for `lease`
    /// seconds, so that concurrent relays (several handler processes) do
    /// not publish the same event at the same time. A claim that expires
    /// (its relay died) is taken over. This is how events committed by a
    /// process that died, or that released them after a failed publish, go
    /// out; a live process's new events arrive through ``takeCommitted(limit:)``.
    public func claimOutbox(limit: Int, lease: TimeInterval) async throws -> [OutboxEvent] {
        try await pool.writeWithoutTransaction { db in
            var events: [OutboxEvent] = []
            try db.inTransaction(.immediate) {
                let now = Date().timeIntervalSince1970
                let rows = try Row.fetchAll(db, sql: """
                    SELECT id, routingKey, messageId, body FROM outbox
                    WHERE publishedAt IS NULL AND (claimedUntil IS NULL OR claimedUntil < ?)
                      AND NOT EXISTS (SELECT 1 FROM outbox older
                                      WHERE older.orderKey = outbox.orderKey AND older.publishedAt IS NULL
                                        AND older.id < outbox.id)
                    ORDER BY id LIMIT ?
                    """, arguments: [now, limit])
                // Events still waiting in this process's memory (lease run out
                // while the broker was away) go out from there, not twice.
                let waiting = handOver.waitingIDs
                events = rows.map { row in
                    OutboxEvent(id: row["id"], routingKey: row["routingKey"], messageID: row["messageId"],
                                body: [UInt8](row["body"] as Data))
                }.filter { !waiting.contains($0.id) }
                if !events.isEmpty {
                    let ids = events.map(\.id)
                    try db.execute(sql: "UPDATE outbox SET claimedUntil = ?, claimedBy = ? WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                                   arguments: StatementArguments([now + lease, handOver.owner] + ids.map { $0 as (any DatabaseValueConvertible) }))
                }
                return .commit
            }
            return events
        }
    }

    /// Marks events published (after the broker confirmed them).
    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            try db.execute(sql: "UPDATE outbox SET publishedAt = ?, claimedUntil = NULL, claimedBy = NULL WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                           arguments: StatementArguments([Date().timeIntervalSince1970] + ids.map { $0 as (any DatabaseValueConvertible) }))
        }
    }

    /// Gives claims back (publish failed) so the next round retries them.
    public func releaseClaims(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            try db.execute(sql: "UPDATE outbox SET claimedUntil = NULL, claimedBy = NULL WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                           arguments: StatementArguments(ids))
        }
    }

    /// Deletes published events and inbox entries older than `age` seconds
    /// (the relay calls it hourly), so neither table grows without bound.
    /// A command redelivered after its inbox entry is gone runs again.
    public func prune(olderThan age: TimeInterval, now date: Date) async throws {
        let now = date.timeIntervalSince1970
        let cutoff = now - age
        try await pool.write { db in
            // Rows are looked at in id order up to the first one created
            // after the cutoff (ids grow with time; a row a clock step put
            // out of order waits for a later prune), so a prune reads what
            // it deletes, not the week it keeps — there is no index on
            // `publishedAt`, which would cost every mark a page. A row
            // dated more than a day ahead (written by a clock running fast)
            // is not a stopping point, or it would hold back every row after
            // it until real time caught up. The newest row stays, published
            // or not: ids are `MAX(id) + 1` (no AUTOINCREMENT, see the v7
            // migration) and must not be reused.
            try db.execute(sql: """
                DELETE FROM outbox
                WHERE id < IFNULL((SELECT id FROM outbox WHERE createdAt >= ?1 AND createdAt <= ?2 ORDER BY id LIMIT 1),
                                  (SELECT MAX(id) FROM outbox))
                  AND publishedAt IS NOT NULL AND publishedAt < ?1
                """, arguments: [cutoff, now + 86_400])
            try db.execute(sql: "DELETE FROM inbox WHERE createdAt < ?", arguments: [cutoff])
            // Versions no open cursor can still need.
            try db.execute(sql: "DELETE FROM booking_version WHERE until IS NOT NULL AND supersededAt < ?",
                           arguments: [now - StoreRules.cursorLifetime])
        }
    }
}

/// Decoded rooms keyed by name, each with the JSON it came from, so a
/// command neither decodes its room again nor waits for the database to
/// validate against it. Only ever a hint: readers compare the JSON with the
/// row (another process may have re-registered the room).
final class RoomCache: Sendable {
    private let entries = Mutex<[String: CachedRoom]>([:])
    /// Rooms are a catalog, not user data; the bound only guards memory
    /// against a runaway registrar.
    static let capacity = 10_000

    func get(_ name: String) -> CachedRoom? {
        entries.withLock { $0[name] }
    }

    func put(_ entry: CachedRoom) {
        entries.withLock { entries in
            if entries.count >= Self.capacity, entries[entry.room.name] == nil { entries.removeAll(keepingCapacity: true) }
            entries[entry.room.name] = entry
        }
    }
}

/// ``StoreTransaction`` on the SQLite write transaction.
struct SQLiteTransaction: StoreTransaction {
    let db: Database
    let rooms: RoomCache
    /// How new events are claimed by this process, nil for unclaimed
    /// (hand-over suspended).
    var claim: InsertClaim? = nil
    /// The events this transaction queued, handed to the relay after commit.
    let events = EventList()

    final class EventList {
        var list: [OutboxEvent] = []
    }

    /// The room's stored JSON, exactly as written.
    public func roomJSON(named name: String) throws -> Data? {
        try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM room WHERE name = ?"), arguments: [name])
    }

    /// The room, decoded once per distinct stored JSON.
    public func room(named name: String) throws -> Room? {
        guard let data = try roomJSON(named: name) else { return nil }
        if let cached = rooms.get(name), cached.json == data { return cached.room }
        let room = try ContractJSON.decode(Room.self, from: data)
        rooms.put(CachedRoom(room: room, json: data))
        return room
    }

    public func upsertRoom(_ room: Room) throws {
        let json = try ContractJSON.encode(room)
        try db.cachedStatement(sql: """
            INSERT INTO room (name, json, updatedAt) VALUES (?, ?, ?)
            ON CONFLICT(name) DO UPDATE SET json = excluded.json, updatedAt = excluded.updatedAt
            """).execute(arguments: [room.name, json, Date().timeIntervalSince1970])
        // Bookings waiting for a check-in were given their release time by
        // the old policy; back to their start, so the timer re-evaluates
        // them under the new one (started at once if check-in is no longer
        // required, released on the new schedule otherwise).
        try db.cachedStatement(sql: """
            UPDATE booking SET nextDueAt = startsAt WHERE room = ? AND status = 'confirmed' AND nextDueAt > startsAt
            """).execute(arguments: [room.name])
        // Not cached here: a rolled-back transaction would leave the cache
        // ahead of the row. The next read caches it.
    }

    public func booking(id: String) throws -> Booking? {
        guard let data = try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM booking WHERE id = ?"), arguments: [id]) else { return nil }
        return try ContractJSON.decode(Booking.self, from: data)
    }

    /// Ids of the room's pending, confirmed and inProgress bookings
    /// overlapping [startsAt, endsAt).
    ///
    /// The lower bound on `startsAt` is implied by ``longestBooking`` and
    /// keeps the index range to about two days; without it every earlier
    /// booking of the room was scanned, a cost growing with history.
    public func conflicts(room: String, startsAt: Date, endsAt: Date, excluding: String? = nil) throws -> [String] {
        let start = Int64(startsAt.timeIntervalSince1970), end = Int64(endsAt.timeIntervalSince1970)
        return try String.fetchAll(db.cachedStatement(sql: """
            SELECT id FROM booking
            WHERE room = ? AND startsAt > ? AND startsAt < ? AND endsAt > ? AND status IN ('pending', 'confirmed', 'inProgress') AND id != ?
            ORDER BY startsAt
            """), arguments: [room, start - StoreRules.longestBooking, end, start, excluding ?? ""])
    }

    /// Inserts or replaces a booking, stored as its already encoded JSON,
    /// with the due time of its timer
    /// (``BookingRules/earliestDue(status:startsAt:endsAt:)``).
    public func save(_ encoded: EncodedBooking, startsAt: Date, endsAt: Date) throws {
        let booking = encoded.booking
        let due = BookingRules.earliestDue(status: booking.status, startsAt: startsAt, endsAt: endsAt)
        try db.cachedStatement(sql: """
            INSERT INTO booking (id, room, status, startsAt, endsAt, version, json, nextDueAt, seriesId) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET room = excluded.room, status = excluded.status, startsAt = excluded.startsAt,
              endsAt = excluded.endsAt, version = excluded.version, json = excluded.json, nextDueAt = excluded.nextDueAt,
              seriesId = excluded.seriesId
            """).execute(arguments: [booking.id, booking.room, booking.status.rawValue, Int64(startsAt.timeIntervalSince1970),
                             Int64(endsAt.timeIntervalSince1970), booking.version, encoded.json,
                             due.map { StoreRules.dueSeconds($0) }, booking.series?.id])
        // The version for readers (``BookingStore/listVersions``): appended,
        // and the one it replaces closed at its seq.
        try db.cachedStatement(sql: """
            INSERT INTO booking_version (id, version, room, status, startsAt, endsAt, requestedBy, json, seriesId)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [booking.id, booking.version, booking.room, booking.status.rawValue,
                                     Int64(startsAt.timeIntervalSince1970), Int64(endsAt.timeIntervalSince1970),
                                     booking.requestedBy, encoded.json, booking.series?.id])
        let seq = db.lastInsertedRowID
        if booking.version > 1 {
            try db.cachedStatement(sql: """
                UPDATE booking_version SET until = ?, supersededAt = ? WHERE id = ? AND until IS NULL AND seq < ?
                """).execute(arguments: [seq, Date().timeIntervalSince1970, booking.id, seq])
        }
    }

    // MARK: Series

    /// Records a new series (version 1).
    public func insertSeries(id: String, room: String, requestedBy: String?, recurrence: Recurrence,
                             onConflict: ConflictPolicy, count: Int, now: Date) throws {
        try db.cachedStatement(sql: """
            INSERT INTO series (id, room, requestedBy, recurrence, onConflict, version, count, createdAt)
            VALUES (?, ?, ?, ?, ?, 1, ?, ?)
            """).execute(arguments: [id, room, requestedBy, try ContractJSON.encode(recurrence), onConflict.rawValue, count,
                                     now.timeIntervalSince1970])
    }

    public func series(id: String) throws -> SeriesRow? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, room, requestedBy, version, count FROM series WHERE id = ?
            """), arguments: [id]) else { return nil }
        return SeriesRow(id: row[0], room: row[1], requestedBy: row[2], version: row[3], count: row[4])
    }

    public func setSeriesVersion(id: String, _ version: Int) throws {
        try db.cachedStatement(sql: "UPDATE series SET version = ? WHERE id = ?").execute(arguments: [version, id])
    }

    /// Every occurrence of the series, in start order.
    public func bookings(seriesId: String) throws -> [Booking] {
        try Data.fetchAll(db.cachedStatement(sql: "SELECT json FROM booking WHERE seriesId = ? ORDER BY startsAt, id"),
                          arguments: [seriesId]).map { try ContractJSON.decode(Booking.self, from: $0) }
    }

    // MARK: Timers

    /// The booking whose timer is due earliest at `now` (ties by id), or nil.
    public func earliestDue(at now: Date) throws -> (id: String, due: Int64)? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, nextDueAt FROM booking WHERE nextDueAt IS NOT NULL AND nextDueAt <= ? ORDER BY nextDueAt, id LIMIT 1
            """), arguments: [Int64(now.timeIntervalSince1970.rounded(.down))]) else { return nil }
        return (row[0], row[1])
    }

    /// Moves a booking's timer to `due` (nil: none) without changing the booking.
    public func setDue(bookingID: String, _ due: Date?) throws {
        try db.cachedStatement(sql: "UPDATE booking SET nextDueAt = ? WHERE id = ?")
            .execute(arguments: [due.map { StoreRules.dueSeconds($0) }, bookingID])
    }

    /// Queues an event for the relay, in this transaction. Normally the row
    /// is claimed by this process from the start (``OutboxHandOver/insertLease``)
    /// and after the commit the event reaches this process's relay in
    /// memory; while hand-over is suspended it is left unclaimed for the
    /// relay's table reads.
    public func enqueue(routingKey: String, messageID: String, body: Data, orderKey: String?, value: BookingEvent?) throws {
        let now = Date().timeIntervalSince1970
        // Behind an older unpublished event of the same key that another
        // process holds (or nobody does), the new one waits unclaimed (see
        // ``OutboxHandOver``). The write transaction is IMMEDIATE: what
        // another process committed before is visible here.
        var claim = self.claim
        if let held = claim, let orderKey, try Bool.fetchOne(db.cachedStatement(sql: """
            SELECT 1 FROM outbox WHERE orderKey = ? AND publishedAt IS NULL AND claimedBy IS NOT ? LIMIT 1
            """), arguments: [orderKey, held.owner]) != nil {
            held.handOver.queuedBehindOthers()
            claim = nil
        }
        try db.cachedStatement(sql: """
            INSERT INTO outbox (routingKey, messageId, body, createdAt, claimedUntil, claimedBy, orderKey) VALUES (?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [routingKey, messageID, body, now, claim.map { now + $0.lease }, claim?.owner, orderKey])
        if claim != nil {
            events.list.append(OutboxEvent(id: db.lastInsertedRowID, routingKey: routingKey, messageID: messageID,
                                           body: [UInt8](body), value: value))
        }
    }
}
