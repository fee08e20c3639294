import Foundation
import GRDB
import ServiceSupport

/// The ledger in SQLite (WAL) through GRDB: `$DATA_DIR/pass-sender.sqlite`.
/// Several instances may share the file on one host (one writer at a time).
public final class SQLiteLedgerDatabase: LedgerDatabase {
    let pool: DatabasePool

    /// Opens (creating and migrating as needed) the file at `path`.
    public init(path: String) throws {
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
    }

    public func write<T: Sendable>(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await pool.write { db in try body(GRDBLedgerSQL(db: db)) }
    }

    public func read<T: Sendable>(_ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await pool.read { db in try body(GRDBLedgerSQL(db: db)) }
    }

    public func close() async {}

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
        return migrator
    }
}

/// GRDB's `Database` as ``LedgerSQL``.
struct GRDBLedgerSQL: LedgerSQL {
    let db: Database

    func execute(_ sql: String, _ arguments: [SQLValue]) throws {
        try db.execute(sql: sql, arguments: StatementArguments(arguments.map(Self.databaseValue)))
    }

    func rows(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow] {
        try Row.fetchAll(db, sql: sql, arguments: StatementArguments(arguments.map(Self.databaseValue))).map { row in
            SQLRow(row.map { ($0.0, Self.value($0.1)) })
        }
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
