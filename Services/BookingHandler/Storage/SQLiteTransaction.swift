import BookingContracts
import Foundation
import GRDB
import ServiceSupport
import Synchronization

/// The SQLite side of ``CommitEngine``: a plain serial queue calling GRDB's
/// synchronous API — one thread hop in and one (the continuation) out per
/// group, where a task awaiting GRDB's async API took four.
///
/// Ownership: `queue` is the only caller of `pool`'s writer for command
/// groups, plain transactions and hand-over switches; GRDB serialises it
/// with the store's other writes (outbox marks, sweeps, prunes), and
/// SQLite's write lock with other processes'.
struct SQLiteWriter: CommitBackend {
    let pool: DatabasePool
    let rooms: RoomCache
    let queue = DispatchQueue(label: "booking-store.writer")
    let checkpoints: WALCheckpointer
    static var systemName: String { StoreSpans.sqlite }

    func onWriterQueue(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    func withWriteConnection<T>(_ body: (SQLiteWriteConnection) throws -> T) throws -> T {
        try pool.writeWithoutTransaction { db in try body(SQLiteWriteConnection(db: db, rooms: rooms)) }
    }

    func groupCommitted() {
        checkpoints.soon()
    }

    /// Nothing to do: GRDB's connection survives a failed transaction.
    func writeFailed(_ error: any Error, commands: Int?) {}
}

/// The SQLite write connection as ``CommitEngine`` uses it (see ``CommitConnection``).
struct SQLiteWriteConnection: CommitConnection {
    let db: Database
    let rooms: RoomCache

    /// IMMEDIATE: the write lock first, then reads, checks and writes —
    /// what keeps overlap checks safe across processes sharing the file.
    func inWriteTransaction<T>(_ body: () throws -> T) throws -> T {
        var result: T?
        try db.inTransaction(.immediate) {
            result = try body()
            return .commit
        }
        return result!
    }

    /// Every error, of the body or of GRDB's savepoint statements, fails
    /// the command alone.
    func inSavepoint<T>(_ body: () throws -> T) throws -> Result<T, any Error> {
        do {
            var result: T?
            try db.inSavepoint {
                result = try body()
                return .commit
            }
            return .success(result!)
        } catch {
            return .failure(error)
        }
    }

    func makeTransaction(claim: InsertClaim?) -> SQLiteTransaction {
        SQLiteTransaction(db: db, rooms: rooms, claim: claim)
    }

    func inboxEntry(_ key: InboxKey) throws -> InboxEntry? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT scope, commandType, fingerprint, reply FROM inbox
            WHERE key = ? AND scope IN (?, '\(InboxKey.legacyScope)') ORDER BY scope = '\(InboxKey.legacyScope)' LIMIT 1
            """), arguments: [key.key, key.scope]) else { return nil }
        return InboxEntry(scope: row["scope"], commandType: row["commandType"], fingerprint: row["fingerprint"],
                          reply: row["reply"])
    }

    func insertInbox(_ key: InboxKey, commandType: String, reply: Data) throws {
        try db.cachedStatement(sql: """
            INSERT INTO inbox (scope, key, commandType, fingerprint, reply, createdAt) VALUES (?, ?, ?, ?, ?, ?)
            """).execute(arguments: [key.scope, key.key, commandType, key.fingerprint, reply, Date().timeIntervalSince1970])
    }

    func releaseClaims(_ ids: [Int64]) throws {
        for chunk in stride(from: 0, to: ids.count, by: 500).map({ ids[$0..<min($0 + 500, ids.count)] }) {
            try db.execute(sql: "UPDATE outbox SET claimedUntil = NULL, claimedBy = NULL WHERE id IN (\(databaseQuestionMarks(count: chunk.count)))",
                           arguments: StatementArguments(Array(chunk)))
        }
    }

    func isCommandFailure(_ error: any Error) -> Bool { true }
}

/// WAL checkpoints on a connection and a queue of their own.
///
/// Why: with SQLite's automatic checkpoint the commit that crosses the
/// mark copies the WAL into the database and fsyncs it, inside the write
/// lock, while every waiting command waits (a sixth of the writer's time in
/// `benchmarks store`). A PASSIVE checkpoint on another connection runs
/// beside the writer instead: SQLite lets writers append to the WAL while
/// it copies.
///
/// Ownership: `connection` is only used on `queue`; `state` is behind its mutex.
final class WALCheckpointer: Sendable {
    private let connection: DatabaseQueue
    private let queue = DispatchQueue(label: "booking-store.checkpoint")
    private let state = Mutex((running: false, last: ContinuousClock.now))
    /// At most this often.
    static let interval = Duration.milliseconds(250)

    init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(15)
        connection = try DatabaseQueue(path: path, configuration: configuration)
    }

    /// Called by the writer after each commit: starts a checkpoint unless one
    /// is running or the last began less than ``interval`` ago.
    func soon() {
        let now = ContinuousClock.now
        let start = state.withLock { state -> Bool in
            guard !state.running, now - state.last >= Self.interval else { return false }
            state = (true, now)
            return true
        }
        guard start else { return }
        queue.async { [self] in
            // A failure (busy, I/O) leaves the WAL to the next attempt.
            _ = try? connection.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            state.withLock { $0.running = false }
        }
    }
}

/// ``StoreTransaction`` on the SQLite write transaction.
struct SQLiteTransaction: QueuingTransaction {
    let db: Database
    let rooms: RoomCache
    /// How new events are claimed by this process, nil for unclaimed
    /// (hand-over suspended).
    var claim: InsertClaim? = nil
    /// The events this transaction queued, handed to the relay after commit.
    let events = QueuedEvents()

    /// The room's stored JSON, exactly as written.
    public func roomJSON(named name: String) throws -> Data? {
        try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM room WHERE name = ?"), arguments: [name])
    }

    /// The room, decoded once per distinct stored JSON.
    public func room(named name: String) throws -> Room? {
        guard let data = try roomJSON(named: name) else { return nil }
        if let cached = rooms.get(name), cached.json == data { return cached.room }
        let room = try ContractJSON.decode(Room.self, from: data)
        rooms.put(CachedRoom(room: room, json: data))
        return room
    }

    public func upsertRoom(_ room: Room, at now: Date) throws -> Date {
        let json = try ContractJSON.encode(room)
        // Whole seconds, as `occurredAt` carries them; after the previous
        // registration (rows from before this rule may hold fractions).
        let registered = try Double.fetchOne(db.cachedStatement(sql: """
            INSERT INTO room (name, json, updatedAt) VALUES (?, ?, ?)
            ON CONFLICT(name) DO UPDATE SET json = excluded.json,
              updatedAt = MAX(excluded.updatedAt, CAST(room.updatedAt AS INTEGER) + 1)
            RETURNING updatedAt
            """), arguments: [room.name, json, now.timeIntervalSince1970.rounded(.down)])
        // Bookings waiting for a check-in were given their release time by
        // the old policy; back to their start, so the timer re-evaluates
        // them under the new one (started at once if check-in is no longer
        // required, released on the new schedule otherwise).
        try db.cachedStatement(sql: """
            UPDATE booking SET nextDueAt = startsAt WHERE room = ? AND status = 'confirmed' AND nextDueAt > startsAt
            """).execute(arguments: [room.name])
        // Not cached here: a rolled-back transaction would leave the cache
        // ahead of the row. The next read caches it.
        return Date(timeIntervalSince1970: registered ?? now.timeIntervalSince1970.rounded(.down))
    }

    public func booking(id: String) throws -> Booking? {
        guard let data = try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM booking WHERE id = ?"), arguments: [id]) else { return nil }
        return try ContractJSON.decode(Booking.self, from: data)
    }

    /// Ids of the room's pending, confirmed and inProgress bookings
    /// overlapping [startsAt, endsAt).
    ///
    /// The lower bound on `startsAt` is implied by ``longestBooking`` and
    /// keeps the index range to about two days; without it every earlier
    /// booking of the room was scanned, a cost growing with history.
    public func conflicts(room: String, startsAt: Date, endsAt: Date, excluding: String? = nil) throws -> [String] {
        let start = Int64(startsAt.timeIntervalSince1970), end = Int64(endsAt.timeIntervalSince1970)
        return try String.fetchAll(db.cachedStatement(sql: """
            SELECT id FROM booking
            WHERE room = ? AND startsAt > ? AND startsAt < ? AND endsAt > ? AND status IN ('pending', 'confirmed', 'inProgress', 'held') AND id != ?
            ORDER BY startsAt
            """), arguments: [room, start - StoreRules.longestBooking, end, start, excluding ?? ""])
    }

    /// The room's waitlisted bookings in waitlist order (`queuedAt`, id).
    public func waiters(room: String) throws -> [Waiter] {
        try Row.fetchAll(db.cachedStatement(sql: """
            SELECT json, waitingSince FROM booking WHERE room = ? AND status = 'waitlisted' ORDER BY queuedAt, id
            """), arguments: [room]).map { row in
            let json: Data = row["json"]
            let since: Double? = row["waitingSince"]
            return Waiter(booking: try ContractJSON.decode(Booking.self, from: json),
                          waitingSince: since.map(Date.init(timeIntervalSince1970:)))
        }
    }

    /// The requester's bookings of the room that have not ended, from the
    /// current versions (`booking` keeps no requester column): the index
    /// range is the room's bookings starting after ``StoreRules/longestBooking``
    /// before `now`, as for conflicts.
    public func activeBookings(room: String, requestedBy: String, at now: Date) throws -> Int {
        let at = Int64(now.timeIntervalSince1970)
        return try Int.fetchOne(db.cachedStatement(sql: """
            SELECT count(*) FROM booking_version
            WHERE room = ? AND startsAt > ? AND until IS NULL AND requestedBy = ? AND endsAt > ?
              AND status IN ('pending', 'confirmed', 'inProgress', 'held', 'waitlisted')
            """), arguments: [room, at - StoreRules.longestBooking, requestedBy, at]) ?? 0
    }

    /// Inserts or replaces a booking, stored as its already encoded JSON,
    /// with the due time of its timer
    /// (``BookingRules/earliestDue(status:startsAt:endsAt:)``).
    public func save(_ encoded: EncodedBooking, startsAt: Date, endsAt: Date) throws {
        let booking = encoded.booking
        let due = BookingRules.earliestDue(status: booking.status, startsAt: startsAt, endsAt: endsAt,
                                           holdExpiresAt: booking.holdExpiresAt.flatMap(ContractFormat.parseTimestamp))
        if booking.version == 1 { events.clearKeys.insert(OutboxKey.booking(booking.id)) }
        try db.cachedStatement(sql: """
            INSERT INTO booking (id, room, status, startsAt, endsAt, version, json, nextDueAt, seriesId) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET room = excluded.room, status = excluded.status, startsAt = excluded.startsAt,
              endsAt = excluded.endsAt, version = excluded.version, json = excluded.json, nextDueAt = excluded.nextDueAt,
              seriesId = excluded.seriesId
            """).execute(arguments: [booking.id, booking.room, booking.status.rawValue, Int64(startsAt.timeIntervalSince1970),
                             Int64(endsAt.timeIntervalSince1970), booking.version, encoded.json,
                             due.map { StoreRules.dueSeconds($0) }, booking.series?.id])
        // The version for readers (``ReadStore/listVersions(at:from:to:room:statuses:requestedBy:seriesId:after:limit:)``): appended,
        // and the one it replaces closed at its seq.
        try db.cachedStatement(sql: """
            INSERT INTO booking_version (id, version, room, status, startsAt, endsAt, requestedBy, json, seriesId)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [booking.id, booking.version, booking.room, booking.status.rawValue,
                                     Int64(startsAt.timeIntervalSince1970), Int64(endsAt.timeIntervalSince1970),
                                     booking.requestedBy, encoded.json, booking.series?.id])
        let seq = db.lastInsertedRowID
        if booking.status == .waitlisted {
            // Its place in the room's waitlist: kept from the version that
            // first made it wait (an update does not move it back).
            try db.cachedStatement(sql: """
                UPDATE booking SET queuedAt = COALESCE(queuedAt, ?), waitingSince = COALESCE(waitingSince, ?) WHERE id = ?
                """).execute(arguments: [seq, Date().timeIntervalSince1970, booking.id])
        }
        if booking.version > 1 {
            try db.cachedStatement(sql: """
                UPDATE booking_version SET until = ?, supersededAt = ? WHERE id = ? AND until IS NULL AND seq < ?
                """).execute(arguments: [seq, Date().timeIntervalSince1970, booking.id, seq])
        }
    }

    // MARK: Closures

    public func insertClosure(_ closure: RoomClosure, from: Date, to: Date) throws {
        try db.cachedStatement(sql: """
            INSERT INTO closure (id, room, fromAt, toAt, json, createdAt) VALUES (?, ?, ?, ?, ?, ?)
            """).execute(arguments: [closure.id, closure.room, Int64(from.timeIntervalSince1970), Int64(to.timeIntervalSince1970),
                                     try ContractJSON.encode(closure), Date().timeIntervalSince1970])
    }

    public func closure(id: String, room: String) throws -> RoomClosure? {
        try Data.fetchOne(db.cachedStatement(sql: "SELECT json FROM closure WHERE id = ? AND room = ?"), arguments: [id, room])
            .map { try ContractJSON.decode(RoomClosure.self, from: $0) }
    }

    public func deleteClosure(id: String) throws {
        try db.cachedStatement(sql: "DELETE FROM closure WHERE id = ?").execute(arguments: [id])
    }

    public func closures(room: String, from: Date, to: Date) throws -> [RoomClosure] {
        try Data.fetchAll(db.cachedStatement(sql: """
            SELECT json FROM closure WHERE room = ? AND fromAt < ? AND toAt > ? ORDER BY fromAt, id
            """), arguments: [room, Int64(to.timeIntervalSince1970), Int64(from.timeIntervalSince1970)])
            .map { try ContractJSON.decode(RoomClosure.self, from: $0) }
    }

    // MARK: Series

    /// Records a new series (version 1).
    public func insertSeries(id: String, room: String, requestedBy: String?, recurrence: Recurrence,
                             onConflict: ConflictPolicy, count: Int, now: Date) throws {
        try db.cachedStatement(sql: """
            INSERT INTO series (id, room, requestedBy, recurrence, onConflict, version, count, createdAt)
            VALUES (?, ?, ?, ?, ?, 1, ?, ?)
            """).execute(arguments: [id, room, requestedBy, try ContractJSON.encode(recurrence), onConflict.rawValue, count,
                                     now.timeIntervalSince1970])
    }

    public func series(id: String) throws -> SeriesRow? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, room, requestedBy, version, count FROM series WHERE id = ?
            """), arguments: [id]) else { return nil }
        return SeriesRow(id: row[0], room: row[1], requestedBy: row[2], version: row[3], count: row[4])
    }

    public func setSeriesVersion(id: String, _ version: Int) throws {
        try db.cachedStatement(sql: "UPDATE series SET version = ? WHERE id = ?").execute(arguments: [version, id])
    }

    /// Every occurrence of the series, in start order.
    public func bookings(seriesId: String) throws -> [Booking] {
        try Data.fetchAll(db.cachedStatement(sql: "SELECT json FROM booking WHERE seriesId = ? ORDER BY startsAt, id"),
                          arguments: [seriesId]).map { try ContractJSON.decode(Booking.self, from: $0) }
    }

    // MARK: Timers

    /// The booking whose timer is due earliest at `now` (ties by id), or nil.
    public func earliestDue(at now: Date) throws -> (id: String, due: Int64)? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT id, nextDueAt FROM booking WHERE nextDueAt IS NOT NULL AND nextDueAt <= ? ORDER BY nextDueAt, id LIMIT 1
            """), arguments: [Int64(now.timeIntervalSince1970.rounded(.down))]) else { return nil }
        return (row[0], row[1])
    }

    /// Moves a booking's timer to `due` (nil: none) without changing the booking.
    public func setDue(bookingID: String, _ due: Date?) throws {
        try db.cachedStatement(sql: "UPDATE booking SET nextDueAt = ? WHERE id = ?")
            .execute(arguments: [due.map { StoreRules.dueSeconds($0) }, bookingID])
    }

    public func postponeDue(bookingID: String, from stored: Int64, to due: Date) throws {
        try db.cachedStatement(sql: "UPDATE booking SET nextDueAt = ? WHERE id = ? AND nextDueAt = ?")
            .execute(arguments: [StoreRules.dueSeconds(due), bookingID, stored])
    }

    /// Queues an event for the relay, in this transaction. Normally the row
    /// is claimed by this process from the start (``OutboxHandOver/insertLease``)
    /// and after the commit the event reaches this process's relay in
    /// memory; while hand-over is suspended it is left unclaimed for the
    /// relay's table reads.
    public func enqueue(routingKey: String, messageID: String, body: Data, orderKey: String?, value: BookingEvent?) throws {
        let now = Date().timeIntervalSince1970
        // Behind an older unpublished event of the same key that another
        // process holds (or nobody does), the new one waits unclaimed (see
        // ``OutboxHandOver``). The write transaction is IMMEDIATE: what
        // another process committed before is visible here.
        var claim = self.claim
        if let held = claim, let orderKey, !events.clearKeys.contains(orderKey) {
            if try Bool.fetchOne(db.cachedStatement(sql: """
                SELECT 1 FROM outbox WHERE orderKey = ? AND publishedAt IS NULL AND claimedBy IS NOT ? LIMIT 1
                """), arguments: [orderKey, held.owner]) != nil {
                held.handOver.queuedBehindOthers()
                claim = nil
            } else {
                events.clearKeys.insert(orderKey)
            }
        }
        try db.cachedStatement(sql: """
            INSERT INTO outbox (routingKey, messageId, body, createdAt, claimedUntil, claimedBy, orderKey, traceParent, traceState)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [routingKey, messageID, body, now, claim.map { now + $0.lease }, claim?.owner, orderKey,
                                     events.trace?.traceParent, events.trace?.traceState])
        if claim != nil {
            events.list.append(OutboxEvent(id: db.lastInsertedRowID, routingKey: routingKey, messageID: messageID,
                                           body: [UInt8](body), value: value, traceParent: events.trace?.traceParent,
                                           traceState: events.trace?.traceState))
        }
    }
}
