import Foundation
import Logging
import PostgresNIO
import PostgresSupport

/// The PostgreSQL schema of the booking handler and its migrations: the
/// whole schema the SQLite store reached through its migrations v1–v5,
/// created at once (there is no older PostgreSQL data to carry over), plus
/// what only PostgreSQL can say — the exclusion constraint.
///
/// Column names are written in camel case, as on SQLite; PostgreSQL folds
/// them to lower case, which is fine for unquoted use. Identifiers that are
/// compared or sorted (`id`, `name`) use the "C" collation, so order and
/// `>` comparisons of paging match SQLite's byte order whatever the
/// database's locale.
enum PostgresSchema {
    /// Migrations in order; each runs once per schema, in a transaction.
    static let migrations: [(name: String, sql: String)] = [
        ("v1", """
            CREATE TABLE room (
                name TEXT COLLATE "C" PRIMARY KEY,
                json TEXT NOT NULL,
                updatedAt DOUBLE PRECISION NOT NULL
            );
            CREATE TABLE booking (
                id TEXT COLLATE "C" PRIMARY KEY,
                room TEXT COLLATE "C" NOT NULL,
                status TEXT NOT NULL,
                startsAt BIGINT NOT NULL,
                endsAt BIGINT NOT NULL,
                version BIGINT NOT NULL,
                json TEXT NOT NULL,
                nextDueAt BIGINT,
                seriesId TEXT COLLATE "C",
                CONSTRAINT booking_no_overlap EXCLUDE USING gist (room WITH =, int8range(startsAt, endsAt) WITH &&)
                    WHERE (status IN ('pending', 'confirmed', 'inProgress'))
            );
            CREATE INDEX booking_room_time ON booking (room, startsAt);
            CREATE INDEX booking_due ON booking (nextDueAt, id) WHERE nextDueAt IS NOT NULL;
            CREATE INDEX booking_series ON booking (seriesId, startsAt) WHERE seriesId IS NOT NULL;
            CREATE TABLE inbox (
                scope TEXT COLLATE "C" NOT NULL,
                key TEXT COLLATE "C" NOT NULL,
                commandType TEXT,
                fingerprint BIGINT,
                reply TEXT NOT NULL,
                createdAt DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (scope, key)
            );
            CREATE INDEX inbox_created ON inbox (createdAt);
            CREATE TABLE outbox (
                id BIGSERIAL PRIMARY KEY,
                routingKey TEXT NOT NULL,
                messageId TEXT NOT NULL,
                body TEXT NOT NULL,
                createdAt DOUBLE PRECISION NOT NULL,
                claimedUntil DOUBLE PRECISION,
                publishedAt DOUBLE PRECISION
            );
            CREATE INDEX outbox_pending ON outbox (id) WHERE publishedAt IS NULL;
            CREATE INDEX outbox_published ON outbox (publishedAt) WHERE publishedAt IS NOT NULL;
            CREATE TABLE booking_version (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT COLLATE "C" NOT NULL,
                version BIGINT NOT NULL,
                room TEXT COLLATE "C" NOT NULL,
                status TEXT NOT NULL,
                startsAt BIGINT NOT NULL,
                endsAt BIGINT NOT NULL,
                requestedBy TEXT,
                json TEXT NOT NULL,
                until BIGINT,
                supersededAt DOUBLE PRECISION,
                seriesId TEXT COLLATE "C"
            );
            CREATE INDEX booking_version_time ON booking_version (startsAt, id);
            CREATE INDEX booking_version_room_time ON booking_version (room, startsAt, id);
            CREATE INDEX booking_version_current ON booking_version (id) WHERE until IS NULL;
            CREATE INDEX booking_version_series ON booking_version (seriesId, startsAt, id) WHERE seriesId IS NOT NULL;
            CREATE TABLE series (
                id TEXT COLLATE "C" PRIMARY KEY,
                room TEXT NOT NULL,
                requestedBy TEXT,
                recurrence TEXT NOT NULL,
                onConflict TEXT NOT NULL,
                version BIGINT NOT NULL,
                count BIGINT NOT NULL,
                createdAt DOUBLE PRECISION NOT NULL
            );
            """),
        // Order per booking across instances (see ``OutboxHandOver``): each
        // event's order key and each claim's owner. Rows from before have
        // neither; they are published as before, in id order.
        ("v2-outbox-order", """
            ALTER TABLE outbox ADD COLUMN orderKey TEXT COLLATE "C", ADD COLUMN claimedBy TEXT;
            CREATE INDEX outbox_pending_key ON outbox (orderKey, id) WHERE publishedAt IS NULL;
            """),
        // Closures (contract v1.2), as SQLite's v8-closures.
        ("v3-closures", """
            CREATE TABLE closure (
                id TEXT COLLATE "C" PRIMARY KEY,
                room TEXT COLLATE "C" NOT NULL,
                fromAt BIGINT NOT NULL,
                toAt BIGINT NOT NULL,
                json TEXT NOT NULL,
                createdAt DOUBLE PRECISION NOT NULL
            );
            CREATE INDEX closure_room_time ON closure (room, fromAt);
            """),
        // Holds and waitlists (contract v1.2), as SQLite's v9-waitlist; and
        // held bookings block like confirmed ones, so the exclusion
        // constraint covers them too.
        ("v4-holds-waitlists", """
            ALTER TABLE booking ADD COLUMN queuedAt BIGINT, ADD COLUMN waitingSince DOUBLE PRECISION;
            CREATE INDEX booking_waiting ON booking (room, queuedAt, id) WHERE status = 'waitlisted';
            ALTER TABLE booking DROP CONSTRAINT booking_no_overlap;
            ALTER TABLE booking ADD CONSTRAINT booking_no_overlap
                EXCLUDE USING gist (room WITH =, int8range(startsAt, endsAt) WITH &&)
                WHERE (status IN ('pending', 'confirmed', 'inProgress', 'held'));
            """),
        // `booking.list` by requester: an index range in start order, as SQLite's v10-requester-index.
        ("v5-requester-index", """
            CREATE INDEX booking_version_requester_time ON booking_version (requestedBy, startsAt, id);
            """),
        // The trace of the transaction that queued an event, as SQLite's
        // v11-outbox-trace.
        ("v6-outbox-trace", """
            ALTER TABLE outbox ADD COLUMN traceParent TEXT, ADD COLUMN traceState TEXT;
            """),
        // The prune of superseded versions, as SQLite's v12-superseded-index:
        // without it every prune read the whole history (0.43 s at a million
        // bookings, at each start and every prune after).
        ("v7-superseded-index", """
            CREATE INDEX booking_version_superseded ON booking_version (supersededAt) WHERE until IS NOT NULL;
            """),
    ]

    /// Creates the schema when missing and applies the migrations it lacks.
    /// Processes starting together wait for each other on an advisory lock
    /// (one for all schemas of the database: `btree_gist` is per database).
    static func migrate(_ connection: PostgresConnection, settings: PostgresSettings, logger: Logger) throws {
        try PostgresMigrator(lockName: "booking-handler.migrate", table: "schema_migrations", migrations: migrations)
            .migrate(connection, schema: settings.schema, logger: logger) { connection in
                // The extension lives in `public` (on every search path), so
                // schemas created later find its operator classes.
                try connection.run("CREATE EXTENSION IF NOT EXISTS btree_gist SCHEMA public", logger)
            }
    }
}
