import BookingContracts
import Foundation
import GRDB

/// The ledger's second schema (contract v1.1 notices): rows keyed by (booking, version,
/// kind, normalised e-mail) instead of the attendee's position, which a
/// `booking.update` can change.
enum LedgerMigrationV2 {
    /// Moves every v1 `pass` row into `notice` as kind `pass`, with the
    /// e-mail of the attendee at that index in the stored snapshot of its
    /// version (the v1 ledger stored one for every version it claimed
    /// passes of). A row whose snapshot cannot be read keeps the key
    /// `#<index>`: it still blocks a second send of that exact row, and
    /// matches no real address, so it is never mistaken for someone's pass.
    /// Existing bookings' times hold from their latest version (v1 only
    /// recorded versions that re-issued every pass).
    static func migrate(_ db: Database) throws {
        try db.alter(table: "booking") { t in
            t.add(column: "timesVersion", .integer).notNull().defaults(to: 0)
        }
        try db.execute(sql: "UPDATE booking SET timesVersion = latestVersion")
        try db.alter(table: "snapshot") { t in t.add(column: "previous", .blob) }
        try db.create(table: "notice") { t in
            t.column("bookingId", .text).notNull()
            t.column("version", .integer).notNull()
            t.column("kind", .text).notNull()
            t.column("email", .text).notNull()
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
            t.primaryKey(["bookingId", "version", "kind", "email"])
        }
        try db.create(index: "notice_by_kind", on: "notice", columns: ["bookingId", "kind", "status", "version"])
        var snapshots: [String: Booking] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT * FROM pass") {
            let bookingId: String = row["bookingId"], version: Int = row["version"], index: Int = row["attendeeIndex"]
            let key = "\(version):\(bookingId)"
            if snapshots[key] == nil, let data = try Data.fetchOne(
                db, sql: "SELECT json FROM snapshot WHERE bookingId = ? AND version = ?", arguments: [bookingId, version]) {
                snapshots[key] = try? ContractJSON.decode(Booking.self, from: data)
            }
            let attendees = snapshots[key]?.attendees ?? []
            let email = attendees.indices.contains(index) ? PassLedger.normalised(attendees[index].email) : "#\(index)"
            try db.execute(sql: """
                INSERT OR IGNORE INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, firstFailureAt,
                                              lastFailureAt, lastErrorCode, lastErrorText, retryToken, deliveredAt, updatedAt)
                VALUES (?, ?, 'pass', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [bookingId, version, email, index, row["status"], row["attempts"], row["firstFailureAt"],
                                 row["lastFailureAt"], row["lastErrorCode"], row["lastErrorText"], row["retryToken"],
                                 row["deliveredAt"], row["updatedAt"]])
        }
        try db.drop(table: "pass")
    }
}

/// The ledger's third schema: the occurrences of each series, so the spool
/// can write one e-mail per attendee for a whole series once all its
/// occurrences are known (contract v1.1, `series.count`).
enum LedgerMigrationV3 {
    static func migrate(_ db: Database) throws {
        try db.create(table: "series_occurrence") { t in
            t.column("seriesId", .text).notNull()
            t.column("bookingId", .text).notNull()
            /// The first snapshot seen (the instance the series generated).
            t.column("original", .blob).notNull()
            t.column("latest", .blob).notNull()
            t.column("latestVersion", .integer).notNull()
            t.primaryKey(["seriesId", "bookingId"])
        }
    }
}

/// The ledger's fourth schema: who claimed an `attempting` row and until
/// when, so instances sharing a ledger tell a live sender's claim (wait)
/// from a dead one's (take over) — see ``PassLedger/claimLease``.
enum LedgerMigrationV4 {
    static func migrate(_ db: Database) throws {
        try db.alter(table: "notice") { t in
            t.add(column: "claimedBy", .text)
            t.add(column: "leaseUntil", .double)
        }
    }
}

/// The ledger's outbox without `AUTOINCREMENT`, as the booking handler's
/// outbox (docs/performance.md, "The SQLite outbox has no `AUTOINCREMENT`"):
/// `AUTOINCREMENT` writes a page of `sqlite_sequence` in every transaction
/// that queues a message. The id becomes the plain row id, `MAX(id) + 1`,
/// which never hands out an id twice as long as the newest row stays —
/// ``PassLedger/prunePublished(olderThan:)`` keeps it — so the highest id
/// ever handed out (the old sequence, which may be above every row left)
/// is kept as a published placeholder row. Every row is copied with its
/// id, so the order (`ORDER BY id`) is the same. The pending indexes hold
/// unpublished rows only, in id order (per booking and overall), which is
/// what the relay reads.
enum LedgerMigrationV5 {
    static func migrate(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE outbox_rowid (
                id INTEGER PRIMARY KEY,
                bookingId TEXT NOT NULL,
                exchange TEXT NOT NULL,
                routingKey TEXT NOT NULL,
                messageId TEXT NOT NULL,
                type TEXT NOT NULL,
                body BLOB NOT NULL,
                headers BLOB NOT NULL,
                createdAt DOUBLE NOT NULL,
                publishedAt DOUBLE
            );
            INSERT INTO outbox_rowid (id, bookingId, exchange, routingKey, messageId, type, body, headers, createdAt, publishedAt)
                SELECT id, bookingId, exchange, routingKey, messageId, type, body, headers, createdAt, publishedAt FROM outbox;
            INSERT INTO outbox_rowid (id, bookingId, exchange, routingKey, messageId, type, body, headers, createdAt, publishedAt)
                SELECT seq, '', '', '', '', '', x'', x'', 0, 0 FROM sqlite_sequence
                WHERE name = 'outbox' AND seq > (SELECT IFNULL(MAX(id), 0) FROM outbox);
            DROP TABLE outbox;
            ALTER TABLE outbox_rowid RENAME TO outbox;
            CREATE INDEX outbox_pending ON outbox (bookingId, id) WHERE publishedAt IS NULL;
            CREATE INDEX outbox_unpublished ON outbox (id) WHERE publishedAt IS NULL;
            """)
    }
}
