import Foundation
import Logging
import PostgresNIO
import PostgresSupport
import ServiceSupport

/// The ledger in PostgreSQL (`DATABASE_URL=postgres://…`), shared by
/// pass-sender instances on several hosts. Its tables live in a schema of
/// their own — `pass_sender` unless the URL names one — so the booking
/// handler and the pass sender can be given the same URL.
///
/// Every write transaction runs on one connection (``PostgresWriter``):
/// READ COMMITTED, after transaction-level advisory locks on its bookings,
/// so the ledger's read-then-claim steps for one booking never interleave
/// across instances (each statement after the lock sees the previous
/// holder's commit). Reads use the same connection.
///
/// Writes (and reads) go through ``GroupCommit``: those waiting at one
/// moment share one transaction, which takes all their bookings' locks
/// first, in hash order, and holds them to its commit.
public final class PostgresLedgerDatabase: LedgerDatabase {
    /// The schema when `DATABASE_URL` names none.
    public static let defaultSchema = "pass_sender"
    let writer: PostgresWriter
    let schema: String
    let groupCommit: GroupCommit

    /// Connects (waiting up to `waitSeconds` for a server that is not up
    /// yet), creates the schema when missing and migrates it.
    public static func open(settings: PostgresSettings, logger: Logger, waitSeconds: Double = 60) async throws -> PostgresLedgerDatabase {
        try await open(settings: settings, logger: logger, waitSeconds: waitSeconds, maxBatch: 256, observer: nil)
    }

    /// `maxBatch`: most writes per transaction; `observer`: the group
    /// commit's events (tests).
    static func open(settings: PostgresSettings, logger: Logger, waitSeconds: Double, maxBatch: Int,
                     observer: (@Sendable (GroupCommit.Event) -> Void)?) async throws -> PostgresLedgerDatabase {
        var settings = settings
        if settings.schema == nil { settings.schema = defaultSchema }
        let database = try PostgresLedgerDatabase(settings: settings, logger: logger, maxBatch: maxBatch, observer: observer)
        let schema = database.schema
        try await database.writer.whenReachable(waitSeconds: waitSeconds) { connection in
            try PostgresLedgerSchema.migrate(connection, schema: schema, logger: logger)
        }
        return database
    }

    private init(settings: PostgresSettings, logger: Logger, maxBatch: Int,
                 observer: (@Sendable (GroupCommit.Event) -> Void)?) throws {
        let writer = try PostgresWriter(settings: settings, label: "pass-ledger.writer", logger: logger)
        let schema = settings.schema ?? Self.defaultSchema
        self.writer = writer
        self.schema = schema
        groupCommit = GroupCommit(maxBatch: maxBatch, observer: observer) { keys, body in
            let logger = writer.logger
            return try await writer.transaction(lockKey: nil) { connection in
                let sql = PostgresLedgerSQL(connection: connection, logger: logger)
                if !keys.isEmpty {
                    // As PostgresWriter takes one lock: a holder that does
                    // not let go within 20 s fails this transaction (55P03;
                    // `lock_timeout` is a startup parameter, PostgresSettings).
                    // In hash order: two batches never wait for each other
                    // in a circle.
                    let names = keys.map { "pass-ledger:\(schema):\($0)" }
                    sql.pending.send("""
                        SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest(\(names)::text[]) AS k
                                                             ORDER BY 1) AS l
                        """, on: connection, logger: logger)
                    try sql.flush()  // a lock that fails fails the batch, not its first write
                }
                let result = try body(sql)
                try sql.flush()  // the group commit flushed each write; this is for any other body
                return result
            }
        }
    }

    public func write<T: Sendable>(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await groupCommit.write(lockKey: lockKey, body)
    }

    public func read<T: Sendable>(_ body: @Sendable @escaping (any LedgerSQL) throws -> T) async throws -> T {
        try await write(lockKey: nil, body)
    }

    public func submit(lockKey: String?, _ body: @Sendable @escaping (any LedgerSQL) throws -> Void,
                       settle: @escaping @Sendable ((any Error)?) -> Void) {
        groupCommit.submit(lockKey: lockKey, body, settle: settle)
    }

    /// `clock_timestamp()` outside any transaction (`now()` would be the
    /// transaction's start), the local readings taken on the connection's
    /// queue so that waiting for it does not widen them.
    public func readServerClock(_ local: @escaping @Sendable () -> Date) async throws -> ServerClockReading? {
        let logger = writer.logger
        return try await writer.onConnection { connection in
            let sent = local()
            let seconds = try connection.run("SELECT extract(epoch FROM clock_timestamp())::double precision AS t", logger)
                .first?.decode(Double.self)
            let received = local()
            guard let seconds else { throw LedgerError("the server's clock read returned no row") }
            return ServerClockReading(sent: sent, server: Date(timeIntervalSince1970: seconds), received: received)
        }
    }

    /// Waits for queued writes (``submit(lockKey:_:settle:)``), then closes the connection.
    public var systemName: String { StoreSpans.postgresql }

    public func close() async {
        await groupCommit.idle()
        await writer.close()
    }
}

/// A postgres-nio connection inside a transaction as ``LedgerSQL``:
/// `execute` sends without waiting (``PendingStatements``), `rows` and
/// `flush` wait for what was sent. On the writer queue only.
struct PostgresLedgerSQL: LedgerSQL {
    let connection: PostgresConnection
    let logger: Logger
    let pending = PendingStatements()

    func execute(_ sql: String, _ arguments: [SQLValue]) throws {
        pending.send(try Self.query(sql, arguments), on: connection, logger: logger)
    }

    func flush() throws {
        try pending.settle()
    }

    func rows(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow] {
        let query = try Self.query(sql, arguments)
        try pending.settle()
        return try connection.run(query, logger).map { row in
            SQLRow(try row.map { cell in (cell.columnName, try Self.value(cell)) })
        }
    }

    /// `?` placeholders numbered `$1`, `$2`, … (the ledger's SQL has no `?`
    /// inside string literals).
    static func query(_ sql: String, _ arguments: [SQLValue]) throws -> PostgresQuery {
        var text = ""
        var n = 0
        for ch in sql {
            if ch == "?" {
                n += 1
                text += "$\(n)"
            } else {
                text.append(ch)
            }
        }
        precondition(n == arguments.count, "\(n) placeholders, \(arguments.count) arguments")
        var binds = PostgresBindings(capacity: arguments.count)
        for argument in arguments {
            switch argument {
            case .null: binds.appendNull()
            case .int(let v): binds.append(v)
            case .double(let v): binds.append(v)
            case .text(let v): binds.append(v)
            case .blob(let v): try binds.append(v)
            case .bool(let v): binds.append(v)
            }
        }
        return PostgresQuery(unsafeSQL: text, binds: binds)
    }

    static func value(_ cell: PostgresCell) throws -> SQLValue {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int2, .int4, .int8: return .int(try cell.decode(Int64.self))
        case .float4, .float8: return .double(try cell.decode(Double.self))
        case .bool: return .bool(try cell.decode(Bool.self))
        case .bytea: return .blob(try cell.decode(Data.self))
        default: return .text(try cell.decode(String.self))
        }
    }
}

/// The ledger's tables on PostgreSQL: the SQLite schema after all its
/// migrations, in one step (there is no older PostgreSQL ledger to move).
enum PostgresLedgerSchema {
    static let migrations: [(name: String, sql: String)] = [
        ("v1", """
            CREATE TABLE booking (
                id TEXT PRIMARY KEY, latestVersion BIGINT NOT NULL, cancelled BOOLEAN NOT NULL DEFAULT false,
                timesVersion BIGINT NOT NULL DEFAULT 0, updatedAt DOUBLE PRECISION NOT NULL);
            CREATE TABLE snapshot (
                bookingId TEXT NOT NULL, version BIGINT NOT NULL, json BYTEA NOT NULL, previous BYTEA,
                PRIMARY KEY (bookingId, version));
            CREATE TABLE notice (
                bookingId TEXT NOT NULL, version BIGINT NOT NULL, kind TEXT NOT NULL, email TEXT NOT NULL,
                attendeeIndex BIGINT NOT NULL, status TEXT NOT NULL, attempts BIGINT NOT NULL,
                firstFailureAt TEXT, lastFailureAt TEXT, lastErrorCode BIGINT, lastErrorText TEXT, retryToken TEXT,
                deliveredAt TEXT, updatedAt DOUBLE PRECISION NOT NULL, claimedBy TEXT, leaseUntil DOUBLE PRECISION,
                PRIMARY KEY (bookingId, version, kind, email));
            CREATE INDEX notice_by_kind ON notice (bookingId, kind, status, version);
            CREATE TABLE outbox (
                id BIGSERIAL PRIMARY KEY, bookingId TEXT NOT NULL, exchange TEXT NOT NULL, routingKey TEXT NOT NULL,
                messageId TEXT NOT NULL, type TEXT NOT NULL, body BYTEA NOT NULL, headers BYTEA NOT NULL,
                createdAt DOUBLE PRECISION NOT NULL, publishedAt DOUBLE PRECISION);
            CREATE INDEX outbox_pending ON outbox (bookingId, publishedAt);
            CREATE TABLE series_occurrence (
                seriesId TEXT NOT NULL, bookingId TEXT NOT NULL, original BYTEA NOT NULL, latest BYTEA NOT NULL,
                latestVersion BIGINT NOT NULL, PRIMARY KEY (seriesId, bookingId))
            """),
    ]

    /// Creates `schema` when missing and applies the migrations it lacks;
    /// instances starting together wait for each other on an advisory lock.
    /// A schema that holds tables but no ledger record is another
    /// service's: refused.
    static func migrate(_ connection: PostgresConnection, schema: String, logger: Logger) throws {
        try PostgresMigrator(lockName: "pass-sender.migrate", table: "ledger_migrations", migrations: migrations)
            .migrate(connection, schema: schema, logger: logger) { connection in
                let tables = Set(try connection.run("""
                    SELECT table_name FROM information_schema.tables WHERE table_schema = \(schema)
                    """, logger).map { try $0.decode(String.self) })
                if !tables.contains("ledger_migrations") && !tables.isEmpty {
                    throw LedgerSchemaTaken(schema: schema, tables: tables.sorted())
                }
            }
    }
}

/// The schema `DATABASE_URL` names holds another service's tables.
struct LedgerSchemaTaken: Error, CustomStringConvertible {
    let schema: String
    let tables: [String]
    var description: String {
        "DATABASE_URL: schema '\(schema)' already holds tables that are not the pass sender's (\(tables.prefix(5).joined(separator: ", ")));"
            + " give the pass sender a schema of its own (&schema=\(PostgresLedgerDatabase.defaultSchema), the default)"
    }
}
