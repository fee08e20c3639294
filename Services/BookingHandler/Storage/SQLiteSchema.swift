import BookingContracts
import Foundation
import GRDB

extension SQLiteBookingStore {
    /// The schema's migrations, in order; never edited once released (a
    /// database that ran one keeps it).
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
        // Closures (contract v1.2): a room closed from one instant to
        // another, kept until reopened. `fromAt`/`toAt` are UNIX seconds
        // for the overlap checks of new bookings; `json` is the closure as
        // replies and events carry it.
        migrator.registerMigration("v8-closures") { db in
            try db.execute(sql: """
                CREATE TABLE closure (
                    id TEXT PRIMARY KEY,
                    room TEXT NOT NULL,
                    fromAt INTEGER NOT NULL,
                    toAt INTEGER NOT NULL,
                    json BLOB NOT NULL,
                    createdAt DOUBLE NOT NULL
                );
                CREATE INDEX closure_room_time ON closure (room, fromAt);
                """)
        }
        // Holds and waitlists (contract v1.2): `queuedAt` is the
        // `booking_version.seq` of the version that first made a booking
        // waitlisted — its place in the room's waitlist, assigned under
        // the write lock, so in commit order; `waitingSince` the wall-clock
        // time of that (for the metric of how long promoted bookings waited). The partial index holds only
        // the waiters, so a promotion pass over a room without any is one
        // index probe.
        migrator.registerMigration("v9-waitlist") { db in
            try db.execute(sql: """
                ALTER TABLE booking ADD COLUMN queuedAt INTEGER;
                ALTER TABLE booking ADD COLUMN waitingSince DOUBLE;
                CREATE INDEX booking_waiting ON booking (room, queuedAt, id) WHERE status = 'waitlisted';
                """)
        }
        // `booking.list` by requester (a non-admin's own calendar, the
        // contract's owner filter): an index range in start order rather
        // than every booking of the period filtered by requester — at a
        // million bookings the difference between ~1 ms and over a second.
        migrator.registerMigration("v10-requester-index") { db in
            try db.execute(sql: "CREATE INDEX booking_version_requester_time ON booking_version (requestedBy, startsAt, id)")
        }
        // The W3C trace context of the transaction that queued an event
        // (``OutboxEvent/traceParent``): a publish from the table, after a
        // restart or a failed publish, stays in its command's trace.
        migrator.registerMigration("v11-outbox-trace") { db in
            try db.execute(sql: """
                ALTER TABLE outbox ADD COLUMN traceParent TEXT;
                ALTER TABLE outbox ADD COLUMN traceState TEXT;
                """)
        }
        // The prune of versions no cursor can need reads only the superseded
        // ones (a few days' changes), not the whole history: it runs on the
        // writer, and a scan of a million versions there holds every command
        // behind it.
        migrator.registerMigration("v12-superseded-index") { db in
            try db.execute(sql: "CREATE INDEX booking_version_superseded ON booking_version (supersededAt) WHERE until IS NOT NULL")
        }
        return migrator
    }
}
