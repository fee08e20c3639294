import Foundation
import GRDB
import ServiceSupport

/// The ledger in SQLite (WAL) through GRDB: `$DATA_DIR/pass-sender.sqlite`.
/// Several instances may share the file on one host (one writer at a time).
///
/// Writes go through ``GroupCommit``: those waiting at one moment share one
/// transaction on GRDB's writer queue (one WAL fsync for all of them).
/// Reads run on the pool's readers and see committed transactions only.
public final class SQLiteLedgerDatabase: LedgerDatabase {
    let pool: DatabasePool
    let groupCommit: GroupCommit

    /// Opens (creating and migrating as needed) the file at `path`.
    public convenience init(path: String) throws {
        try self.init(path: path, maxBatch: 256, observer: nil)
    }

    /// `maxBatch`: most writes per transaction; `observer`: the group
    /// commit's events (tests).
    init(path: String, maxBatch: Int, observer: (@Sendable (GroupCommit.Event) -> Void)?) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(15)
        configuration.prepareDatabase { db in
            // WAL + FULL: a commit is on disk before we call the gateway or ack.
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        // Instances that open a fresh ledger together must not migrate it
        // together (FileLock explains why).
        pool = try FileLock.withExclusive(path: path + ".migrating") {
            let pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
            return pool
        }
        // GRDB's DatabasePool sets `synchronous = NORMAL` on its writer when
        // it turns WAL on, after `prepareDatabase`: without this the writer
        // ran NORMAL (no fsync at commit; a commit could be lost to a power
        // cut or an OS crash, though not to a process crash).
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        let pool = self.pool
        groupCommit = GroupCommit(maxBatch: maxBatch, observer: observer) { _, body in
            try await pool.write { db in try body(GRDBLedgerSQL(db: db)) }
        }
    }

    public func write<T: Sendable>(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await groupCommit.write(lockKey: lockKey, body)
    }

    public func read<T: Sendable>(_ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await pool.read { db in try body(GRDBLedgerSQL(db: db)) }
    }

    public func submit(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> Void,
                       settle: @escaping @Sendable ((any Error)?) -> Void) {
        groupCommit.submit(lockKey: lockKey, body, settle: settle)
    }

    /// Waits for queued writes (``submit(lockKey:_:settle:)``); the pool
    /// closes when it is released.
    public var systemName: String { StoreSpans.sqlite }

    /// Nil: instances on one SQLite file share this host's clock.
    public func readServerClock(_ local: @escaping @Sendable () -> Date) async throws -> ServerClockReading? { nil }

    public func close() async {
        await groupCommit.idle()
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "booking") { t in
                t.primaryKey("id", .text)
                t.column("latestVersion", .integer).notNull()
                t.column("cancelled", .boolean).notNull().defaults(to: false)
                t.column("updatedAt", .double).notNull()
            }
            try db.create(table: "snapshot") { t in
                t.column("bookingId", .text).notNull()
                t.column("version", .integer).notNull()
                t.column("json", .blob).notNull()
                t.primaryKey(["bookingId", "version"])
            }
            try db.create(table: "pass") { t in
                t.column("bookingId", .text).notNull()
                t.column("version", .integer).notNull()
                t.column("attendeeIndex", .integer).notNull()
                t.column("status", .text).notNull()
                t.column("attempts", .integer).notNull()
                t.column("firstFailureAt", .text)
                t.column("lastFailureAt", .text)
                t.column("lastErrorCode", .integer)
                t.column("lastErrorText", .text)
                t.column("retryToken", .text)
                t.column("deliveredAt", .text)
                t.column("updatedAt", .double).notNull()
                t.primaryKey(["bookingId", "version", "attendeeIndex"])
            }
            try db.create(table: "outbox") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("bookingId", .text).notNull()
                t.column("exchange", .text).notNull()
                t.column("routingKey", .text).notNull()
                t.column("messageId", .text).notNull()
                t.column("type", .text).notNull()
                t.column("body", .blob).notNull()
                t.column("headers", .blob).notNull()
                t.column("createdAt", .double).notNull()
                t.column("publishedAt", .double)
            }
            try db.create(index: "outbox_pending", on: "outbox", columns: ["bookingId", "publishedAt"])
        }
        migrator.registerMigration("v2-notices", migrate: LedgerMigrationV2.migrate)
        migrator.registerMigration("v3-series", migrate: LedgerMigrationV3.migrate)
        migrator.registerMigration("v4-claims", migrate: LedgerMigrationV4.migrate)
        migrator.registerMigration("v5-outbox-rowid", migrate: LedgerMigrationV5.migrate)
        return migrator
    }
}

/// GRDB's `Database` as ``LedgerSQL``. Statements are prepared once per
/// connection and SQL text (GRDB's statement cache): the ledger's SQL is a
/// few dozen constant strings, and parsing them again for every call was
/// a fifth of the pass sender's CPU time (docs/performance.md).
struct GRDBLedgerSQL: LedgerSQL {
    let db: Database

    func execute(_ sql: String, _ arguments: [SQLValue]) throws {
        try db.cachedStatement(sql: sql).execute(arguments: Self.statementArguments(arguments))
    }

    func rows(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow] {
        let statement = try db.cachedStatement(sql: sql)
        // Column names folded once per query, shared by its rows.
        let columns = statement.columnNames.map(SQLRow.fold)
        var rows: [SQLRow] = []
        let cursor = try Row.fetchCursor(statement, arguments: Self.statementArguments(arguments))
        while let row = try cursor.next() {
            rows.append(SQLRow(foldedColumns: columns, values: row.databaseValues.map(Self.value)))
        }
        return rows
    }

    /// `arguments` for GRDB, through its initialiser of optional
    /// existentials. Why not `StatementArguments([DatabaseValue])`: that
    /// initialiser maps with the key path `\.databaseValue`, which GRDB
    /// (another module, not inlinable) instantiates at run time on every
    /// call — 4.9 % of the pass sender's samples in a profile
    /// (docs/performance.md, "The pass ledger").
    static func statementArguments(_ arguments: [SQLValue]) -> StatementArguments {
        StatementArguments(arguments.map { Self.databaseValue($0) as (any DatabaseValueConvertible)? })
    }

    static func databaseValue(_ value: SQLValue) -> DatabaseValue {
        switch value {
        case .null: .null
        case .int(let v): v.databaseValue
        case .double(let v): v.databaseValue
        case .text(let v): v.databaseValue
        case .blob(let v): v.databaseValue
        case .bool(let v): v.databaseValue
        }
    }

    static func value(_ value: DatabaseValue) -> SQLValue {
        switch value.storage {
        case .null: .null
        case .int64(let v): .int(v)
        case .double(let v): .double(v)
        case .string(let v): .text(v)
        case .blob(let v): .blob(v)
        }
    }
}
