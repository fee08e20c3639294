import Foundation
import Logging
import PostgresNIO

/// Applies a service's schema migrations in one transaction: creates the
/// schema when missing, records applied migrations in a table of its own,
/// and runs the missing ones in order. Processes starting together wait for
/// each other on an advisory lock (`lockName`). Blocks: call it on a
/// ``PostgresWriter``'s queue.
public struct PostgresMigrator: Sendable {
    /// A migration: its name (recorded) and its statements, separated by
    /// `;` (the extended protocol postgres-nio speaks takes one statement a
    /// query; the SQL has no `;` inside literals).
    public typealias Migration = (name: String, sql: String)

    public let lockName: String
    /// Where applied migrations are recorded.
    public let table: String
    public let migrations: [Migration]

    public init(lockName: String, table: String, migrations: [Migration]) {
        self.lockName = lockName
        self.table = table
        self.migrations = migrations
    }

    /// `prepare` runs first under the lock (extensions, checks that the
    /// schema is ours); `schema` is a checked identifier (PostgresSettings).
    public func migrate(_ connection: PostgresConnection, schema: String?, logger: Logger,
                        prepare: (PostgresConnection) throws -> Void = { _ in }) throws {
        try connection.run("BEGIN", logger)
        do {
            try connection.run("SELECT pg_advisory_xact_lock(hashtext(\(lockName)))", logger)
            if let schema {
                try connection.run(PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger)
            }
            try prepare(connection)
            try connection.run(PostgresQuery(unsafeSQL: """
                CREATE TABLE IF NOT EXISTS \(table) (name TEXT PRIMARY KEY, appliedAt DOUBLE PRECISION NOT NULL)
                """), logger)
            let applied = Set(try connection.run(PostgresQuery(unsafeSQL: "SELECT name FROM \(table)"), logger)
                .map { try $0.decode(String.self) })
            for migration in migrations where !applied.contains(migration.name) {
                for statement in migration.sql.split(separator: ";") where !statement.allSatisfy(\.isWhitespace) {
                    try connection.run(PostgresQuery(unsafeSQL: String(statement)), logger)
                }
                var insert = PostgresQuery(unsafeSQL: "INSERT INTO \(table) (name, appliedAt) VALUES ($1, $2)")
                insert.binds.append(migration.name)
                insert.binds.append(Date().timeIntervalSince1970)
                try connection.run(insert, logger)
                logger.notice("PostgreSQL schema migrated", metadata: ["migration": "\(migration.name)",
                                                                       "schema": "\(schema ?? "public")", "table": "\(table)"])
            }
            try connection.commit(logger)
        } catch {
            if !connection.isClosed { _ = try? connection.run("ROLLBACK", logger) }
            throw error
        }
    }
}
