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
///
/// Threads: commands and plain transactions run through ``CommitEngine`` on
/// ``SQLiteWriter``'s serial queue; reads use GRDB's reader pool; the
/// outbox statements of the relay use GRDB's writer directly (they hold no
/// hand-over state); WAL checkpoints run on ``WALCheckpointer``'s queue.
/// The schema is in `SQLiteSchema.swift`, the command statements in
/// `SQLiteTransaction.swift`.
public final class SQLiteBookingStore: BookingStore {
    let pool: DatabasePool
    /// Rooms as last read, for validating commands before their transaction.
    let rooms = RoomCache()
    /// Group commit, the inbox and the hand-over, on the writer queue.
    let commits: CommitEngine<SQLiteWriter>
    /// Events committed by this process, handed to its relay in memory.
    var handOver: OutboxHandOver { commits.handOver }
    public var systemName: String? { SQLiteWriter.systemName }

    /// GRDB closes the pool when the store is released.
    public func close() async {}

    /// Opens (creating and migrating as needed) the database at `path`.
    /// `insertLease` and `committedCapacity` are for tests.
    public init(path: String, insertLease: TimeInterval = 5, committedCapacity: Int = 10_000) throws {
        let handOver = OutboxHandOver(insertLease: insertLease, capacity: committedCapacity)
        var configuration = Configuration()
        // Another process holding the write lock makes us wait, not fail.
        configuration.busyMode = .timeout(15)
        configuration.prepareDatabase { db in
            // WAL + FULL: a command's commit is on disk before its reply,
            // its events and its ack (set again on the writer below).
            try db.execute(sql: "PRAGMA synchronous = FULL")
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
                // Checkpoints are run by ``WALCheckpointer``, off the
                // writer; this high mark is only a backstop.
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
        // GRDB's DatabasePool sets `synchronous = NORMAL` on its writer when
        // it turns WAL on, after `prepareDatabase`: without this the writer
        // runs NORMAL, and an answered, acked booking can be lost to a power
        // cut or an OS crash (not to a process crash). Group commit shares the fsync
        // among the commands of one transaction (docs/performance.md).
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        commits = CommitEngine(backend: SQLiteWriter(pool: pool, rooms: rooms, checkpoints: try WALCheckpointer(path: path)),
                               handOver: handOver)
    }

    public typealias Outcome = StoreOutcome

    /// See ``CommitEngine``: group commit, a savepoint per command unless
    /// it is alone, the inbox, the hand-over.
    public func execute(
        key: InboxKey?, commandType: String, _ body: @Sendable @escaping (any StoreTransaction) throws -> ReplyBody
    ) async throws -> Outcome {
        try await commits.execute(key: key, commandType: commandType, body)
    }

    /// Runs `body` in one IMMEDIATE write transaction (no inbox involved).
    public func transaction<T: Sendable>(_ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T {
        try await commits.transaction(body)
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

    public func replayBookingJSON(after id: String?, limit: Int) async throws -> [(id: String, json: [UInt8])] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, json FROM booking WHERE id > ? ORDER BY id LIMIT ?",
                             arguments: [id ?? "", limit]).map { row in
                let json: Data = row[1]
                return (id: row[0], json: [UInt8](json))
            }
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

    public func waiters(room: String) async throws -> [Booking] {
        try await pool.read { db in
            try Data.fetchAll(db, sql: "SELECT json FROM booking WHERE room = ? AND status = 'waitlisted' ORDER BY queuedAt, id",
                              arguments: [room])
                .map { try ContractJSON.decode(Booking.self, from: $0) }
        }
    }

    public func closures(room: String, from: Date, to: Date) async throws -> [RoomClosure] {
        try await pool.read { db in
            try Data.fetchAll(db, sql: "SELECT json FROM closure WHERE room = ? AND fromAt < ? AND toAt > ? ORDER BY fromAt, id",
                              arguments: [room, Int64(to.timeIntervalSince1970), Int64(from.timeIntervalSince1970)])
                .map { try ContractJSON.decode(RoomClosure.self, from: $0) }
        }
    }

    public func replayClosures() async throws -> [RoomClosure] {
        try await pool.read { db in
            try Data.fetchAll(db, sql: "SELECT json FROM closure ORDER BY room, fromAt, id")
                .map { try ContractJSON.decode(RoomClosure.self, from: $0) }
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

    public var handOverSuspended: Bool {
        handOver.suspended
    }

    public var queuedBehindOthers: Bool {
        handOver.recentlyQueuedBehindOthers
    }

    /// Switches hand-over off after a failed publish: gives up the claims on
    /// `failed` and on every event still waiting in memory, so the relay
    /// reads all of them back from the table in id (commit) order, before
    /// anything newer. Runs on the writer queue, between groups.
    public func suspendHandOver(releasing failed: [Int64]) async throws {
        try await commits.suspendHandOver(releasing: failed)
    }

    /// Switches hand-over back on once the relay has caught up with the
    /// table. Events inserted unclaimed before this are older than every
    /// event handed over after it; the relay sweeps the table once more
    /// before taking from memory, so they still go first.
    public func resumeHandOver() async throws {
        try await commits.resumeHandOver()
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
                    SELECT id, routingKey, messageId, body, traceParent, traceState FROM outbox
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
                                body: [UInt8](row["body"] as Data), traceParent: row["traceParent"], traceState: row["traceState"])
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
            try db.execute(sql: "DELETE FROM booking_version WHERE \(StoreRules.prunableVersionsCondition) ?",
                           arguments: [now - StoreRules.cursorLifetime])
        }
    }
}

extension SQLiteBookingStore: CommitObservable {
    func observeCommits(_ observer: (@Sendable (CommitEvent) -> Void)?) {
        commits.observe(observer)
    }
}
