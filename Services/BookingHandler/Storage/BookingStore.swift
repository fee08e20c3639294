import BookingContracts
import Foundation
import GRDB
import Synchronization

/// The booking handler's SQLite database (GRDB, WAL): rooms, bookings, the
/// inbox of processed commands and the outbox of events to publish.
///
/// Every command runs in one IMMEDIATE write transaction that takes the
/// database's write lock first, then reads, checks and writes. That is what
/// makes overlap checks safe when several handler processes share the file:
/// SQLite serialises the transactions, so two of them can never both see a
/// slot free.
public final class BookingStore: Sendable {
    let pool: DatabasePool
    private let batch = Mutex(BatchState())

    /// Opens (creating and migrating as needed) the database at `path`.
    public init(path: String) throws {
        var configuration = Configuration()
        // Another process holding the write lock makes us wait, not fail.
        configuration.busyMode = .timeout(15)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")  // WAL: durable at checkpoint, safe on crash
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(pool)
    }

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
        return migrator
    }

    /// The result of a command transaction.
    public struct Outcome: Sendable {
        /// The reply to send (stored in the inbox with the effect).
        public var reply: CommandReply
        /// True when the key was seen before: `reply` is the stored one and
        /// nothing was changed.
        public var duplicate: Bool
    }

    /// Runs a command: when `key` is already in the inbox, returns its
    /// stored reply and does nothing else; otherwise runs `body` and stores
    /// its effect, its events and its reply in the same transaction.
    ///
    /// Commands submitted while a transaction is running are grouped into
    /// the next one (group commit), each inside its own savepoint: one
    /// commit and one hop to the writer per group instead of per command,
    /// with the same isolation — they still run one after another under the
    /// write lock.
    public func execute(
        key: String?, commandType: String, _ body: @Sendable @escaping (StoreTransaction) throws -> CommandReply
    ) async throws -> Outcome {
        try await withCheckedThrowingContinuation { (promise: CheckedContinuation<Outcome, any Error>) in
            let lead = batch.withLock { state -> Bool in
                state.jobs.append(Job(key: key, commandType: commandType, body: body, promise: promise))
                if state.draining { return false }
                state.draining = true
                return true
            }
            // The first command to find no group running starts one; the
            // task ends when no command is waiting.
            if lead { Task { await self.drain() } }
        }
    }

    struct Job: Sendable {
        let key: String?
        let commandType: String
        let body: @Sendable (StoreTransaction) throws -> CommandReply
        let promise: CheckedContinuation<Outcome, any Error>
    }

    struct BatchState {
        var jobs: [Job] = []
        var draining = false
    }

    /// How many commands one transaction takes at most.
    static let maxGroup = 64

    private func drain() async {
        while true {
            let group = batch.withLock { state -> [Job] in
                let group = Array(state.jobs.prefix(Self.maxGroup))
                state.jobs.removeFirst(group.count)
                if group.isEmpty { state.draining = false }
                return group
            }
            if group.isEmpty { return }
            do {
                let results = try await pool.writeWithoutTransaction { db -> [Result<Outcome, any Error>] in
                    var results: [Result<Outcome, any Error>] = []
                    try db.inTransaction(.immediate) {
                        for job in group {
                            do {
                                var outcome: Outcome!
                                try db.inSavepoint {
                                    outcome = try Self.run(job, db)
                                    return .commit
                                }
                                results.append(.success(outcome))
                            } catch {
                                results.append(.failure(error))
                            }
                        }
                        return .commit
                    }
                    return results
                }
                for (job, result) in zip(group, results) { job.promise.resume(with: result) }
            } catch {
                // The commit itself failed: nothing of the group was stored.
                for job in group { job.promise.resume(throwing: error) }
            }
        }
    }

    private static func run(_ job: Job, _ db: Database) throws -> Outcome {
        if let key = job.key,
           let stored = try Data.fetchOne(db.cachedStatement(sql: "SELECT reply FROM inbox WHERE key = ?"), arguments: [key]) {
            return Outcome(reply: try ContractJSON.decode(CommandReply.self, from: stored), duplicate: true)
        }
        let reply = try job.body(StoreTransaction(db: db))
        if let key = job.key {
            try db.cachedStatement(sql: "INSERT INTO inbox (key, commandType, reply, createdAt) VALUES (?, ?, ?, ?)")
                .execute(arguments: [key, job.commandType, try ContractJSON.encode(reply), Date().timeIntervalSince1970])
        }
        return Outcome(reply: reply, duplicate: false)
    }

    /// Runs `body` in one IMMEDIATE write transaction (no inbox involved).
    public func transaction<T: Sendable>(_ body: @Sendable @escaping (StoreTransaction) throws -> T) async throws -> T {
        try await pool.writeWithoutTransaction { db in
            var result: T?
            try db.inTransaction(.immediate) {
                result = try body(StoreTransaction(db: db))
                return .commit
            }
            return result!
        }
    }

    // MARK: Reads

    /// A room by name.
    public func room(named name: String) async throws -> Room? {
        try await pool.read { db in try StoreTransaction(db: db).room(named: name) }
    }

    /// A booking by id.
    public func booking(id: String) async throws -> Booking? {
        try await pool.read { db in try StoreTransaction(db: db).booking(id: id) }
    }

    /// Every room with the instant it was last registered (for `booking.replay`).
    public func replayRooms() async throws -> [(room: Room, updatedAt: Date)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT json, updatedAt FROM room ORDER BY name").map { row in
                (try ContractJSON.decode(Room.self, from: row["json"] as Data),
                 Date(timeIntervalSince1970: row["updatedAt"]))
            }
        }
    }

    /// Up to `limit` bookings (every status) with ids after `id`, in id
    /// order: one page of a `booking.replay`. Pages are separate reads, so a
    /// booking changed meanwhile may appear in a newer version than its
    /// neighbours; its live event carries the same or a newer version.
    public func replayBookings(after id: String?, limit: Int) async throws -> [Booking] {
        try await pool.read { db in
            try Data.fetchAll(db, sql: "SELECT json FROM booking WHERE id > ? ORDER BY id LIMIT ?",
                              arguments: [id ?? "", limit]).map { try ContractJSON.decode(Booking.self, from: $0) }
        }
    }

    /// Counts, for tests and metrics.
    public func counts() async throws -> (rooms: Int, bookings: Int, inbox: Int, outboxPending: Int) {
        try await pool.read { db in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM room") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM booking") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM inbox") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE publishedAt IS NULL") ?? 0)
        }
    }

    // MARK: Outbox

    /// An event waiting to be published.
    public struct OutboxEvent: Sendable, Equatable {
        public var id: Int64
        public var routingKey: String
        public var messageID: String
        public var body: [UInt8]
    }

    /// Claims up to `limit` unpublished events, oldest first, for `lease`
    /// seconds, so that concurrent relays (several handler processes) do
    /// not publish the same event at the same time. A claim that expires
    /// (its relay died) is taken over.
    public func claimOutbox(limit: Int, lease: TimeInterval) async throws -> [OutboxEvent] {
        try await pool.writeWithoutTransaction { db in
            var events: [OutboxEvent] = []
            try db.inTransaction(.immediate) {
                let now = Date().timeIntervalSince1970
                let rows = try Row.fetchAll(db, sql: """
                    SELECT id, routingKey, messageId, body FROM outbox
                    WHERE publishedAt IS NULL AND (claimedUntil IS NULL OR claimedUntil < ?)
                    ORDER BY id LIMIT ?
                    """, arguments: [now, limit])
                events = rows.map { row in
                    OutboxEvent(id: row["id"], routingKey: row["routingKey"], messageID: row["messageId"],
                                body: [UInt8](row["body"] as Data))
                }
                if !events.isEmpty {
                    let ids = events.map(\.id)
                    try db.execute(sql: "UPDATE outbox SET claimedUntil = ? WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                                   arguments: StatementArguments([now + lease] + ids.map { $0 as (any DatabaseValueConvertible) }))
                }
                return .commit
            }
            return events
        }
    }

    /// Marks events published (after the broker confirmed them).
    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            try db.execute(sql: "UPDATE outbox SET publishedAt = ?, claimedUntil = NULL WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                           arguments: StatementArguments([Date().timeIntervalSince1970] + ids.map { $0 as (any DatabaseValueConvertible) }))
        }
    }

    /// Gives claims back (publish failed) so the next round retries them.
    public func releaseClaims(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            try db.execute(sql: "UPDATE outbox SET claimedUntil = NULL WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                           arguments: StatementArguments(ids))
        }
    }

    /// Deletes published events and inbox entries older than `age` seconds
    /// (the relay calls it hourly), so neither table grows without bound.
    /// A command redelivered after its inbox entry is gone runs again.
    public func prune(olderThan age: TimeInterval) async throws {
        let cutoff = Date().timeIntervalSince1970 - age
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM outbox WHERE publishedAt IS NOT NULL AND publishedAt < ?", arguments: [cutoff])
            try db.execute(sql: "DELETE FROM inbox WHERE createdAt < ?", arguments: [cutoff])
        }
    }
}

/// What a command may do inside its transaction. Only valid inside
/// ``BookingStore/execute(key:commandType:_:)``'s closure.
public struct StoreTransaction {
    let db: Database

    public func room(named name: String) throws -> Room? {
        guard let data = try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM room WHERE name = ?"), arguments: [name]) else { return nil }
        return try ContractJSON.decode(Room.self, from: data)
    }

    public func upsertRoom(_ room: Room) throws {
        try db.cachedStatement(sql: """
            INSERT INTO room (name, json, updatedAt) VALUES (?, ?, ?)
            ON CONFLICT(name) DO UPDATE SET json = excluded.json, updatedAt = excluded.updatedAt
            """).execute(arguments: [room.name, try ContractJSON.encode(room), Date().timeIntervalSince1970])
    }

    public func booking(id: String) throws -> Booking? {
        guard let data = try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM booking WHERE id = ?"), arguments: [id]) else { return nil }
        return try ContractJSON.decode(Booking.self, from: data)
    }

    /// Ids of the room's pending/confirmed bookings overlapping [startsAt, endsAt).
    public func conflicts(room: String, startsAt: Date, endsAt: Date, excluding: String? = nil) throws -> [String] {
        try String.fetchAll(db.cachedStatement(sql: """
            SELECT id FROM booking
            WHERE room = ? AND status IN ('pending', 'confirmed') AND startsAt < ? AND endsAt > ? AND id != ?
            ORDER BY startsAt
            """), arguments: [room, Int64(endsAt.timeIntervalSince1970), Int64(startsAt.timeIntervalSince1970), excluding ?? ""])
    }

    /// Inserts or replaces a booking (the caller bumps `version`).
    public func save(_ booking: Booking, startsAt: Date, endsAt: Date) throws {
        try db.cachedStatement(sql: """
            INSERT INTO booking (id, room, status, startsAt, endsAt, version, json) VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET room = excluded.room, status = excluded.status, startsAt = excluded.startsAt,
              endsAt = excluded.endsAt, version = excluded.version, json = excluded.json
            """).execute(arguments: [booking.id, booking.room, booking.status.rawValue, Int64(startsAt.timeIntervalSince1970),
                             Int64(endsAt.timeIntervalSince1970), booking.version, try ContractJSON.encode(booking)])
    }

    /// Queues an event for the relay, in this transaction.
    public func enqueue(routingKey: String, messageID: String, body: Data) throws {
        try db.cachedStatement(sql: "INSERT INTO outbox (routingKey, messageId, body, createdAt) VALUES (?, ?, ?, ?)")
            .execute(arguments: [routingKey, messageID, body, Date().timeIntervalSince1970])
    }
}
