import AMQPClient
import BookingContracts
import Foundation
import GRDB
import ServiceSupport

/// The delivery ledger: SQLite (WAL) through GRDB in `$DATA_DIR/pass-sender.sqlite`.
///
/// It records, per booking, the newest version seen, whether it was
/// cancelled and since which version its times hold (column `timesVersion`);
/// per (booking, version, kind, normalised e-mail) the status and attempts
/// of one pass or notice — so nobody hears the same thing twice however
/// the attendees are re-ordered; the booking snapshot (and its `previous`)
/// of every version (operator retries need it); and an outbox of
/// follow-up messages (retries, `passes.failed`, `pass.*` events) written
/// in the same transaction as the statuses they follow from.
public final class PassLedger: Sendable {
    let pool: DatabasePool

    /// Opens (creating and migrating as needed) the ledger at `path`.
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

    /// How the ledger compares e-mail addresses: the whole address,
    /// trimmed, without regard to case (as the handler's booking queries).
    public static func normalised(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
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
        return migrator
    }

    // MARK: Results

    /// Records the result of one gateway call in one transaction: delivered
    /// rows, failed ones (scheduled again or given up), and the messages
    /// that follow from it. Rows are named by normalised e-mail.
    public func record(bookingId: String, version: Int, kind: NoticeKind = .pass, delivered: [String], deliveredAt: String,
                       failures: [FailureUpdate], outbox: [OutboxMessage]) async throws {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            for email in delivered {
                try db.execute(sql: """
                    UPDATE notice SET status = 'delivered', deliveredAt = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                    """, arguments: [deliveredAt, now, bookingId, version, kind.rawValue, email])
            }
            for f in failures {
                try db.execute(sql: """
                    UPDATE notice SET status = ?, attempts = ?, firstFailureAt = ?, lastFailureAt = ?, lastErrorCode = ?,
                           lastErrorText = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                    """, arguments: [f.status.rawValue, f.attempts, f.firstFailureAt, f.lastFailureAt, f.lastErrorCode,
                                     f.lastErrorText, now, bookingId, version, kind.rawValue, f.email])
            }
            let encoder = JSONEncoder()
            for m in outbox {
                try db.execute(sql: """
                    INSERT INTO outbox (bookingId, exchange, routingKey, messageId, type, body, headers, createdAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """, arguments: [bookingId, m.exchange, m.routingKey, m.messageID, m.type, Data(m.body),
                                     try encoder.encode(m.headers), now])
            }
        }
    }
    /// Outbox messages not yet confirmed by the broker, oldest first: of one
    /// booking, or of all (at start-up).
    public func unpublished(bookingId: String? = nil, limit: Int = 1000) async throws -> [OutboxRow] {
        try await pool.read { db in
            let rows: [Row]
            if let bookingId {
                rows = try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE bookingId = ? AND publishedAt IS NULL ORDER BY id LIMIT ?",
                                        arguments: [bookingId, limit])
            } else {
                rows = try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE publishedAt IS NULL ORDER BY id LIMIT ?",
                                        arguments: [limit])
            }
            let decoder = JSONDecoder()
            return try rows.map { row in
                var message = OutboxMessage(exchange: row["exchange"], routingKey: row["routingKey"], messageID: row["messageId"],
                                            type: row["type"], body: [UInt8](row["body"] as Data))
                message.headers = try decoder.decode([String: OutboxMessage.HeaderValue].self, from: row["headers"] as Data)
                return OutboxRow(id: row["id"], message: message)
            }
        }
    }

    /// Marks outbox rows as published (confirmed by the broker).
    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            for id in ids {
                try db.execute(sql: "UPDATE outbox SET publishedAt = ? WHERE id = ?", arguments: [now, id])
            }
        }
    }

    /// Deletes outbox rows published more than `age` seconds ago; returns how many.
    @discardableResult
    public func prunePublished(olderThan age: TimeInterval) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM outbox WHERE publishedAt IS NOT NULL AND publishedAt < ?",
                           arguments: [Date().timeIntervalSince1970 - age])
            return db.changesCount
        }
    }

    // MARK: Queries

    /// Every row of one kind (default passes) of a booking, by version and index.
    public func passes(bookingId: String, kind: NoticeKind = .pass) async throws -> [PassRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM notice WHERE bookingId = ? AND kind = ? ORDER BY version, attendeeIndex",
                             arguments: [bookingId, kind.rawValue]).map(Self.record)
        }
    }

    /// Every row of a booking, every kind, by version, kind and index.
    public func notices(bookingId: String) async throws -> [PassRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM notice WHERE bookingId = ? ORDER BY version, kind, attendeeIndex",
                             arguments: [bookingId]).map(Self.record)
        }
    }

    /// Rows per status (all bookings, all kinds).
    public func statusCounts() async throws -> [PassStatus: Int] {
        try await pool.read { db in
            var counts: [PassStatus: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT status, count(*) AS n FROM notice GROUP BY status") {
                if let s = PassStatus(rawValue: row["status"]) { counts[s] = row["n"] }
            }
            return counts
        }
    }

    // MARK: Helpers

    /// The key of one ledger row.
    struct RowKey {
        var bookingId: String
        var version: Int
        var kind: NoticeKind
        var email: String
        var arguments: StatementArguments { [bookingId, version, kind.rawValue, email] }
    }

    static func storeSnapshot(_ db: Database, _ booking: Booking, _ previous: BookingSnapshot?) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO snapshot (bookingId, version, json, previous) VALUES (?, ?, ?, ?)",
                       arguments: [booking.id, booking.version, try ContractJSON.encode(booking),
                                   try previous.map { try ContractJSON.encode($0) }])
        if let previous {
            // A snapshot stored by a retry message that had no `previous`.
            try db.execute(sql: "UPDATE snapshot SET previous = ? WHERE bookingId = ? AND version = ? AND previous IS NULL",
                           arguments: [try ContractJSON.encode(previous), booking.id, booking.version])
        }
    }

    /// Remembers an occurrence of a series: its first snapshot stays, the
    /// newest replaces an older one.
    static func storeOccurrence(_ db: Database, _ booking: Booking) throws {
        guard let series = booking.series else { return }
        let json = try ContractJSON.encode(booking)
        try db.execute(sql: """
            INSERT INTO series_occurrence (seriesId, bookingId, original, latest, latestVersion) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(seriesId, bookingId) DO UPDATE SET latest = excluded.latest, latestVersion = excluded.latestVersion
            WHERE excluded.latestVersion > series_occurrence.latestVersion
            """, arguments: [series.id, booking.id, json, json, booking.version])
    }

    /// The occurrences of a series the ledger has seen, by original start.
    public func seriesOccurrences(seriesId: String) async throws -> [SeriesOccurrence] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT original, latest FROM series_occurrence WHERE seriesId = ?",
                             arguments: [seriesId]).compactMap { row in
                guard let original = try? ContractJSON.decode(Booking.self, from: row["original"] as Data),
                      let latest = try? ContractJSON.decode(Booking.self, from: row["latest"] as Data) else { return nil }
                return SeriesOccurrence(original: original, latest: latest)
            }.sorted { $0.original.startsAt < $1.original.startsAt }
        }
    }

    /// Older versions' unsent work is void once a newer version is known:
    /// that version decides what each person is told (and re-claims passes
    /// still owed, see ``admit(event:booking:previous:)``).
    static func supersede(_ db: Database, bookingId: String, below version: Int) throws {
        try db.execute(sql: """
            UPDATE notice SET status = 'dropped', updatedAt = ?
            WHERE bookingId = ? AND version < ? AND status IN ('attempting', 'scheduled')
            """, arguments: [Date().timeIntervalSince1970, bookingId, version])
    }

    static func row(_ db: Database, _ key: RowKey) throws -> PassRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM notice WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                         arguments: key.arguments).map(record)
    }

    static func setStatus(_ db: Database, _ key: RowKey, _ status: PassStatus, now: Double) throws {
        try db.execute(sql: "UPDATE notice SET status = ?, updatedAt = ? WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                       arguments: [status.rawValue, now] + key.arguments)
    }

    private static func record(_ row: Row) -> PassRecord {
        PassRecord(bookingId: row["bookingId"], version: row["version"],
                   kind: NoticeKind(rawValue: row["kind"]) ?? .pass, email: row["email"], attendeeIndex: row["attendeeIndex"],
                   status: PassStatus(rawValue: row["status"]) ?? .attempting, attempts: row["attempts"],
                   firstFailureAt: row["firstFailureAt"], lastFailureAt: row["lastFailureAt"],
                   lastErrorCode: row["lastErrorCode"], lastErrorText: row["lastErrorText"])
    }

    /// The row's history as work for recipient `index` of this message's list.
    static func work(_ p: PassRecord, index: Int) -> PassWork {
        PassWork(attendeeIndex: index, attempts: p.attempts, firstFailureAt: p.firstFailureAt,
                 lastFailureAt: p.lastFailureAt, lastErrorCode: p.lastErrorCode, lastErrorText: p.lastErrorText)
    }
}
