import Foundation
import GRDB
import Testing
import TestSupport
@testable import PassSender

/// The SQLite ledger's outbox ids are row ids (no `AUTOINCREMENT`): the
/// migration keeps every row, its id and so the order, and the highest id
/// handed out before it is never handed out again.
@Suite("Ledger outbox ids")
struct LedgerOutboxIdTests {
    static func insert(_ db: Database, _ messageId: String, booking: String, published: Double?) throws {
        try db.execute(sql: """
            INSERT INTO outbox (bookingId, exchange, routingKey, messageId, type, body, headers, createdAt, publishedAt)
            VALUES (?, 'booking.events', 'pass.sent', ?, 'pass.sent', ?, x'7b7d', 1, ?)
            """, arguments: [booking, messageId, Data("{\"m\":\"\(messageId)\"}".utf8), published])
    }

    @Test func theMigrationKeepsRowsOrderAndTheHighestIdEverHandedOut() async throws {
        let dir = try TemporaryDirectory("ledger-outbox-migration")
        defer { dir.remove() }
        let path = dir.appending("pass-sender.sqlite").path
        let old = try DatabaseQueue(path: path)
        try SQLiteLedgerDatabase.migrator.migrate(old, upTo: "v4-claims")
        try await old.write { db in
            // Two bookings interleaved, some published; the newest two
            // pruned by the old version (the sequence stays at 6).
            for (i, booking) in ["a", "b", "a", "b", "a", "b"].enumerated() {
                try Self.insert(db, "m\(i + 1)", booking: booking, published: [1, 4].contains(i + 1) ? 2.0 : nil)
            }
            try db.execute(sql: "DELETE FROM outbox WHERE id IN (5, 6)")
        }
        let before = try await old.read { db in try Row.fetchAll(db, sql: "SELECT * FROM outbox ORDER BY id") }
        try old.close()

        let ledger = PassLedger(database: try SQLiteLedgerDatabase(path: path))
        // The unpublished rows, in their order, per booking and overall.
        #expect(try await ledger.unpublished().map(\.id) == [2, 3])
        #expect(try await ledger.unpublished(bookingId: "a").map(\.id) == [3])
        #expect(try await ledger.unpublished(bookingId: "b").map(\.id) == [2])
        let file = try DatabaseQueue(path: path)
        let (schema, after, placeholder) = try await file.read { db in
            (try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'outbox'") ?? "",
             try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE id <= 4 ORDER BY id"),
             try Row.fetchOne(db, sql: "SELECT id, body, publishedAt FROM outbox WHERE id = 6"))
        }
        #expect(!schema.uppercased().contains("AUTOINCREMENT"), "\(schema)")
        // Every column of every row in its place.
        #expect(after == before)
        // Id 6 was handed out before the upgrade: kept as a published,
        // empty placeholder, so the next row gets 7.
        let placeholderPublished: Double? = placeholder.flatMap { $0["publishedAt"] }
        let placeholderBody: Data? = placeholder.flatMap { $0["body"] }
        #expect(placeholderPublished == 0 && placeholderBody?.isEmpty == true)
        try await file.write { db in try Self.insert(db, "m7", booking: "a", published: nil) }
        #expect(try await file.read { db in try Int.fetchOne(db, sql: "SELECT MAX(id) FROM outbox") } == 7)
        try file.close()

        // Pruning everything published keeps the newest row, so MAX(id) + 1
        // never goes back to an id given out before.
        let pruned = try await ledger.prunePublished(olderThan: -1e9)
        #expect(pruned == 3, "1, 4 and the placeholder")
        let again = try DatabaseQueue(path: path)
        try await again.write { db in
            try db.execute(sql: "UPDATE outbox SET publishedAt = 2")
        }
        #expect(try await ledger.prunePublished(olderThan: -1e9) == 2, "2 and 3; 7 stays")
        try await again.write { db in try Self.insert(db, "m8", booking: "b", published: nil) }
        #expect(try await again.read { db in try Int.fetchAll(db, sql: "SELECT id FROM outbox ORDER BY id") } == [7, 8])
        try again.close()
    }
}
