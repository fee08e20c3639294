import BookingContracts
import Foundation
import GRDB
import TestSupport
import Testing
@testable import BookingHandler

/// An outbox id names one event for good: a relay that marks an id
/// published late (its lease ran out, another relay published the event,
/// the row was pruned) must not mark a newer event. The SQLite outbox has
/// no `AUTOINCREMENT` (a page of `sqlite_sequence` per transaction), so
/// this rests on pruning keeping the newest row and on the migration
/// keeping the old sequence's high-water mark.
@Suite("Outbox ids")
struct OutboxIdTests {
    private static func enqueue(_ store: any BookingStore, _ messageIDs: [String]) async throws -> [Int64] {
        try await store.transaction { tx in
            for id in messageIDs { try tx.enqueue(routingKey: "booking.created", messageID: id, body: Data("{}".utf8), orderKey: nil) }
        }
        return store.takeCommitted(limit: 100).map(\.id)
    }

    @Test(arguments: StoreKind.allCases)
    func anIdIsNeverUsedAgainAfterEveryEventWasPublishedAndPruned(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        let first = try await Self.enqueue(store, ["m1", "m2", "m3"])
        #expect(first.count == 3)
        try await store.markPublished(first)
        try await store.prune(olderThan: -1)  // every published event counts as old
        let next = try await Self.enqueue(store, ["m4"])
        #expect(next.count == 1)
        #expect(next[0] > first.max()!, "ids \(first) were handed out before; the next was \(next)")
    }

    /// Pruning reads the outbox in id order up to the first event created
    /// after the cutoff: what is older and published goes, what is newer,
    /// unpublished, or the newest row stays.
    @Test func pruningDropsPublishedEventsOlderThanTheCutoffOnly() async throws {
        let dir = try TemporaryDirectory("outbox-prune")
        defer { dir.remove() }
        let path = dir.appending("db.sqlite").path
        let store = try SQLiteBookingStore(path: path)
        // A fixed time, handed to `prune`: the rows are dated against it,
        // not against the wall clock.
        let clock = Date(timeIntervalSince1970: 1_900_000_000)
        let now = clock.timeIntervalSince1970, day = 86_400.0
        // (messageId, created, published): in id order, as a week passes.
        let rows: [(String, Double, Double?)] = [
            ("old-published", now - 9 * day, now - 9 * day),
            ("old-unpublished", now - 9 * day, nil),
            ("fast-clock", now + 365 * day, now - 8 * day),  // written by a clock a year ahead
            ("after-fast-clock", now - 9 * day, now - 9 * day),
            ("old-published-late", now - 8 * day, now - 1 * day),
            ("recent-published", now - 2 * day, now - 2 * day),
            ("skewed-old", now - 10 * day, now - 10 * day),  // after a clock step back
            ("newest-published", now - 1 * day, now - 1 * day),
        ]
        let file = try DatabaseQueue(path: path)
        try await file.write { db in
            for (id, created, published) in rows {
                try db.execute(sql: "INSERT INTO outbox (routingKey, messageId, body, createdAt, publishedAt) VALUES ('e', ?, x'7b7d', ?, ?)",
                               arguments: [id, created, published])
            }
        }
        try await store.prune(olderThan: 7 * day, now: clock)
        let left = try await file.read { db in try String.fetchAll(db, sql: "SELECT messageId FROM outbox ORDER BY id") }
        // The row from a clock a year ahead does not hold back the rows
        // after it: published over a week ago, it goes, and so does the next.
        #expect(left == ["old-unpublished", "old-published-late", "recent-published", "skewed-old", "newest-published"])
        // A week later everything published has gone but the newest row.
        try await store.prune(olderThan: 0, now: clock.addingTimeInterval(7 * day))
        let later = try await file.read { db in try String.fetchAll(db, sql: "SELECT messageId FROM outbox ORDER BY id") }
        #expect(later == ["old-unpublished", "newest-published"])
    }

    /// A file from before the migration: ids from `AUTOINCREMENT`, the
    /// newest rows already pruned (the old sequence above every row left).
    @Test func theMigrationKeepsEventsAndTheHighestIdEverHandedOut() async throws {
        let dir = try TemporaryDirectory("outbox-migration")
        defer { dir.remove() }
        let path = dir.appending("db.sqlite").path
        let old = try DatabaseQueue(path: path)
        try SQLiteBookingStore.migrator.migrate(old, upTo: "v6-outbox-order")
        try await old.write { db in
            for i in 1...5 {
                try db.execute(sql: """
                    INSERT INTO outbox (routingKey, messageId, body, createdAt, publishedAt, orderKey, claimedBy)
                    VALUES ('booking.created', ?, ?, 1, ?, ?, ?)
                    """, arguments: ["m\(i)", Data("{\"n\":\(i)}".utf8), i == 3 ? nil : 1.0, "b\(i)", i == 3 ? nil : "owner-\(i)"])
            }
            try db.execute(sql: "DELETE FROM outbox WHERE id IN (4, 5)")  // pruned by the old version
        }
        try old.close()

        let store = try SQLiteBookingStore(path: path)
        // The unpublished event is still there, same id, same body.
        let pending = try await store.claimOutbox(limit: 10, lease: 60)
        #expect(pending.map(\.id) == [3])
        #expect(pending.map(\.messageID) == ["m3"])
        #expect(pending.first.map { String(decoding: $0.body, as: UTF8.self) } == #"{"n":3}"#)
        // Ids 4 and 5 were handed out before the upgrade: never again.
        let next = try await Self.enqueue(store, ["m6"])
        #expect(next == [6])
        let schema = try DatabaseQueue(path: path)
        let (autoincrement, pendingIndex, pendingKeyIndex, copied) = try await schema.read { db in
            (try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'outbox'") ?? "",
             try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'outbox_pending'") ?? "",
             try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'outbox_pending_key'") ?? "",
             try Row.fetchAll(db, sql: """
                 SELECT id, routingKey, messageId, body, createdAt, claimedUntil, publishedAt, orderKey, claimedBy
                 FROM outbox WHERE id IN (1, 2) ORDER BY id
                 """).map(CopiedRow.init))
        }
        #expect(!autoincrement.uppercased().contains("AUTOINCREMENT"))
        #expect(pendingIndex.contains("WHERE publishedAt IS NULL"), "the pending index holds unpublished events only: \(pendingIndex)")
        #expect(pendingKeyIndex.contains("(orderKey, id) WHERE publishedAt IS NULL"), "\(pendingKeyIndex)")
        // Every column of the rows not touched since lands in its place.
        #expect(copied == [1, 2].map { i in
            CopiedRow(id: Int64(i), routingKey: "booking.created", messageId: "m\(i)", body: Data("{\"n\":\(i)}".utf8),
                      createdAt: 1, claimedUntil: nil, publishedAt: 1, orderKey: "b\(i)", claimedBy: "owner-\(i)")
        })
    }

    /// An outbox row's columns as typed values, so the migration test
    /// compares data (a blob stays a blob, a NULL a nil), not the way a
    /// library prints them.
    private struct CopiedRow: Equatable {
        var id: Int64, routingKey: String, messageId: String, body: Data, createdAt: Double
        var claimedUntil: Double?, publishedAt: Double?, orderKey: String?, claimedBy: String?

        init(id: Int64, routingKey: String, messageId: String, body: Data, createdAt: Double,
             claimedUntil: Double?, publishedAt: Double?, orderKey: String?, claimedBy: String?) {
            (self.id, self.routingKey, self.messageId, self.body, self.createdAt) = (id, routingKey, messageId, body, createdAt)
            (self.claimedUntil, self.publishedAt, self.orderKey, self.claimedBy) = (claimedUntil, publishedAt, orderKey, claimedBy)
        }

        init(_ row: Row) {
            self.init(id: row["id"], routingKey: row["routingKey"], messageId: row["messageId"], body: row["body"],
                      createdAt: row["createdAt"], claimedUntil: row["claimedUntil"], publishedAt: row["publishedAt"],
                      orderKey: row["orderKey"], claimedBy: row["claimedBy"])
        }
    }
}
