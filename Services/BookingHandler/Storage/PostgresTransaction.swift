import BookingContracts
import Foundation
import Logging
import PostgresNIO
import PostgresSupport
import ServiceSupport

/// The PostgreSQL side of ``CommitEngine``: ``PostgresWriter``'s serial
/// queue, which owns the write connection (see its ownership rule).
struct PostgresCommitBackend: CommitBackend {
    let writer: PostgresWriter
    let logger: Logger
    let rooms: RoomCache
    /// Key text of the advisory lock that serialises writers (per schema).
    let writeLockKey: String
    static var systemName: String { StoreSpans.postgresql }

    func onWriterQueue(_ work: @escaping @Sendable () -> Void) {
        writer.enqueue(work)
    }

    func withWriteConnection<T>(_ body: (PostgresWriteConnection) throws -> T) throws -> T {
        try body(PostgresWriteConnection(connection: try writer.connectionOnQueue(), writer: writer, logger: logger,
                                         rooms: rooms, writeLockKey: writeLockKey))
    }

    func groupCommitted() {}

    func writeFailed(_ error: any Error, commands: Int?) {
        if let commands {
            logger.warning("PostgreSQL command transaction failed",
                           metadata: ["error": .string(PostgresFailure.describe(error)), "commands": "\(commands)"])
        }
        writer.dropIfBroken(error)
    }
}

/// The PostgreSQL write connection as ``CommitEngine`` uses it (see
/// ``CommitConnection``). On the writer's queue only.
struct PostgresWriteConnection: CommitConnection {
    let connection: PostgresConnection
    let writer: PostgresWriter
    let logger: Logger
    let rooms: RoomCache
    let writeLockKey: String

    /// Under the write lock: the counterpart of SQLite's BEGIN IMMEDIATE.
    func inWriteTransaction<T>(_ body: () throws -> T) throws -> T {
        try writer.transactionOnQueue(connection, lockKey: writeLockKey, body)
    }

    func inSavepoint<T>(_ body: () throws -> T) throws -> Result<T, any Error> {
        try connection.run("SAVEPOINT job", logger)
        do {
            let result = try body()
            try connection.run("RELEASE SAVEPOINT job", logger)
            return .success(result)
        } catch {
            // A failed statement or body: undo this command only. If even
            // that fails the connection is gone and the whole group fails.
            try connection.run("ROLLBACK TO SAVEPOINT job", logger)
            return .failure(error)
        }
    }

    func makeTransaction(claim: InsertClaim?) -> PostgresTransaction {
        PostgresTransaction(connection: connection, logger: logger, rooms: rooms, claim: claim)
    }

    func inboxEntry(_ key: InboxKey) throws -> InboxEntry? {
        guard let row = try connection.run("""
            SELECT scope, commandType, fingerprint, reply FROM inbox
            WHERE key = \(key.key) AND scope IN (\(key.scope), \(InboxKey.legacyScope))
            ORDER BY scope = \(InboxKey.legacyScope) LIMIT 1
            """, logger).first else { return nil }
        let (scope, commandType, fingerprint, reply) = try row.decode((String, String?, Int64?, String).self)
        return InboxEntry(scope: scope, commandType: commandType, fingerprint: fingerprint, reply: Data(reply.utf8))
    }

    func insertInbox(_ key: InboxKey, commandType: String, reply: Data) throws {
        try connection.run("""
            INSERT INTO inbox (scope, key, commandType, fingerprint, reply, createdAt)
            VALUES (\(key.scope), \(key.key), \(commandType), \(key.fingerprint), \(String(decoding: reply, as: UTF8.self)),
                    \(Date().timeIntervalSince1970))
            """, logger)
    }

    func releaseClaims(_ ids: [Int64]) throws {
        guard !ids.isEmpty else { return }
        try connection.run("UPDATE outbox SET claimedUntil = NULL, claimedBy = NULL WHERE id = ANY(\(ids))", logger)
    }

    /// The command's own error, unless the connection broke under it.
    func isCommandFailure(_ error: any Error) -> Bool {
        !PostgresFailure.isConnectionFailure(error) && !connection.isClosed
    }
}

/// ``StoreTransaction`` on a PostgreSQL write transaction: the same
/// statements as ``SQLiteTransaction``, with JSON stored as text (the
/// encoder's exact bytes) and times as UNIX seconds.
struct PostgresTransaction: QueuingTransaction {
    let connection: PostgresConnection
    let logger: Logger
    let rooms: RoomCache
    /// How new events are claimed by this process, nil for unclaimed.
    let claim: InsertClaim?
    /// The events this transaction queued, handed to the relay after commit.
    let events = QueuedEvents()

    private func run(_ query: PostgresQuery) throws -> [PostgresRow] {
        try connection.run(query, logger)
    }

    private static func text(_ data: Data) -> String {
        String(decoding: data, as: UTF8.self)
    }

    func roomJSON(named name: String) throws -> Data? {
        try run("SELECT json FROM room WHERE name = \(name)").first.map { Data(try $0.decode(String.self).utf8) }
    }

    func room(named name: String) throws -> Room? {
        guard let data = try roomJSON(named: name) else { return nil }
        if let cached = rooms.get(name), cached.json == data { return cached.room }
        let room = try ContractJSON.decode(Room.self, from: data)
        rooms.put(CachedRoom(room: room, json: data))
        return room
    }

    func upsertRoom(_ room: Room, at now: Date) throws -> Date {
        let json = Self.text(try ContractJSON.encode(room))
        // As on SQLite: whole seconds, after the previous registration.
        // The row lock of the upsert orders concurrent handlers' writes.
        let registered = try run("""
            INSERT INTO room (name, json, updatedAt) VALUES (\(room.name), \(json), \(now.timeIntervalSince1970.rounded(.down)))
            ON CONFLICT (name) DO UPDATE SET json = excluded.json,
              updatedAt = GREATEST(excluded.updatedAt, floor(room.updatedAt) + 1)
            RETURNING updatedAt
            """).first.map { try $0.decode(Double.self) }
        // As on SQLite: bookings waiting for a check-in are re-evaluated
        // under the new policy.
        try run("UPDATE booking SET nextDueAt = startsAt WHERE room = \(room.name) AND status = 'confirmed' AND nextDueAt > startsAt")
        return Date(timeIntervalSince1970: registered ?? now.timeIntervalSince1970.rounded(.down))
    }

    func booking(id: String) throws -> Booking? {
        try run("SELECT json FROM booking WHERE id = \(id)").first
            .map { try ContractJSON.decode(Booking.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    func conflicts(room: String, startsAt: Date, endsAt: Date, excluding: String?) throws -> [String] {
        let start = Int64(startsAt.timeIntervalSince1970), end = Int64(endsAt.timeIntervalSince1970)
        return try run("""
            SELECT id FROM booking
            WHERE room = \(room) AND startsAt > \(start - StoreRules.longestBooking) AND startsAt < \(end) AND endsAt > \(start)
              AND status IN ('pending', 'confirmed', 'inProgress', 'held') AND id <> \(excluding ?? "")
            ORDER BY startsAt
            """).map { try $0.decode(String.self) }
    }

    /// The room's waitlisted bookings in waitlist order (`queuedAt`, id).
    func waiters(room: String) throws -> [Waiter] {
        try run("SELECT json, waitingSince FROM booking WHERE room = \(room) AND status = 'waitlisted' ORDER BY queuedAt, id")
            .map { row in
                let (json, since) = try row.decode((String, Double?).self)
                return Waiter(booking: try ContractJSON.decode(Booking.self, from: Data(json.utf8)),
                              waitingSince: since.map(Date.init(timeIntervalSince1970:)))
            }
    }

    /// As on SQLite: the current versions of the room's bookings by the requester.
    func activeBookings(room: String, requestedBy: String, at now: Date) throws -> Int {
        let at = Int64(now.timeIntervalSince1970)
        return Int(try run("""
            SELECT count(*) FROM booking_version
            WHERE room = \(room) AND startsAt > \(at - StoreRules.longestBooking) AND until IS NULL
              AND requestedBy = \(requestedBy) AND endsAt > \(at)
              AND status IN ('pending', 'confirmed', 'inProgress', 'held', 'waitlisted')
            """).first?.decode(Int64.self) ?? 0)
    }

    func insertClosure(_ closure: RoomClosure, from: Date, to: Date) throws {
        let json = Self.text(try ContractJSON.encode(closure))
        try run("""
            INSERT INTO closure (id, room, fromAt, toAt, json, createdAt)
            VALUES (\(closure.id), \(closure.room), \(Int64(from.timeIntervalSince1970)), \(Int64(to.timeIntervalSince1970)), \(json),
                    \(Date().timeIntervalSince1970))
            """)
    }

    func closure(id: String, room: String) throws -> RoomClosure? {
        try run("SELECT json FROM closure WHERE id = \(id) AND room = \(room)").first
            .map { try ContractJSON.decode(RoomClosure.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    func deleteClosure(id: String) throws {
        try run("DELETE FROM closure WHERE id = \(id)")
    }

    /// One statement for the three reads of a create (kind 0: the room,
    /// 1: closures, 2: conflicts), each branch the same index look-up as
    /// its own method's; ``roomJSON(named:)``, ``closures(room:from:to:)``
    /// and ``conflicts(room:startsAt:endsAt:excluding:)`` stay for the
    /// other commands.
    func createChecks(room: String, slot: DateInterval, window: DateInterval) throws -> CreateChecks {
        let slotStart = Int64(slot.start.timeIntervalSince1970), slotEnd = Int64(slot.end.timeIntervalSince1970)
        let start = Int64(window.start.timeIntervalSince1970), end = Int64(window.end.timeIntervalSince1970)
        var checks = CreateChecks(roomJSON: nil, closures: [], conflicts: [])
        for row in try run("""
            SELECT 0 AS kind, 0::BIGINT AS at, ''::TEXT COLLATE "C" AS id, json FROM room WHERE name = \(room)
            UNION ALL
            SELECT 1, fromAt, id COLLATE "C", json FROM closure
            WHERE room = \(room) AND fromAt < \(slotEnd) AND toAt > \(slotStart)
            UNION ALL
            SELECT 2, startsAt, id COLLATE "C", NULL FROM booking
            WHERE room = \(room) AND startsAt > \(start - StoreRules.longestBooking) AND startsAt < \(end) AND endsAt > \(start)
              AND status IN ('pending', 'confirmed', 'inProgress', 'held')
            ORDER BY kind, at, id
            """) {
            let (kind, _, id, json) = try row.decode((Int32, Int64, String, String?).self)
            switch kind {
            case 0: checks.roomJSON = json.map { Data($0.utf8) }
            case 1: if let json { checks.closures.append(try ContractJSON.decode(RoomClosure.self, from: Data(json.utf8))) }
            default: checks.conflicts.append(id)
            }
        }
        return checks
    }

    func closures(room: String, from: Date, to: Date) throws -> [RoomClosure] {
        try run("""
            SELECT json FROM closure
            WHERE room = \(room) AND fromAt < \(Int64(to.timeIntervalSince1970)) AND toAt > \(Int64(from.timeIntervalSince1970))
            ORDER BY fromAt, id
            """).map { try ContractJSON.decode(RoomClosure.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    func save(_ encoded: EncodedBooking, startsAt: Date, endsAt: Date) throws {
        let booking = encoded.booking
        let due = BookingRules.earliestDue(status: booking.status, startsAt: startsAt, endsAt: endsAt,
                                           holdExpiresAt: booking.holdExpiresAt.flatMap(ContractFormat.parseTimestamp)).map { StoreRules.dueSeconds($0) }
        let start = Int64(startsAt.timeIntervalSince1970), end = Int64(endsAt.timeIntervalSince1970)
        let json = Self.text(encoded.json)
        if booking.version == 1 { events.clearKeys.insert(OutboxKey.booking(booking.id)) }
        // The row and the version for readers in one statement (a round
        // trip fewer under the write lock; PostgreSQL runs a data-modifying
        // WITH exactly once whether or not the rest reads it). The version
        // is appended, its seq assigned under the write lock, so in commit
        // order; the one it replaces is closed below.
        let seq = try run("""
            WITH saved AS (
              INSERT INTO booking (id, room, status, startsAt, endsAt, version, json, nextDueAt, seriesId)
              VALUES (\(booking.id), \(booking.room), \(booking.status.rawValue), \(start), \(end), \(Int64(booking.version)), \(json),
                      \(due), \(booking.series?.id))
              ON CONFLICT (id) DO UPDATE SET room = excluded.room, status = excluded.status, startsAt = excluded.startsAt,
                endsAt = excluded.endsAt, version = excluded.version, json = excluded.json, nextDueAt = excluded.nextDueAt,
                seriesId = excluded.seriesId
              RETURNING 1
            )
            INSERT INTO booking_version (id, version, room, status, startsAt, endsAt, requestedBy, json, seriesId)
            VALUES (\(booking.id), \(Int64(booking.version)), \(booking.room), \(booking.status.rawValue), \(start), \(end),
                    \(booking.requestedBy), \(json), \(booking.series?.id))
            RETURNING seq
            """).first?.decode(Int64.self) ?? 0
        if booking.status == .waitlisted {
            // Its place in the room's waitlist (as on SQLite).
            try run("""
                UPDATE booking SET queuedAt = COALESCE(queuedAt, \(seq)), waitingSince = COALESCE(waitingSince, \(Date().timeIntervalSince1970))
                WHERE id = \(booking.id)
                """)
        }
        if booking.version > 1 {
            try run("""
                UPDATE booking_version SET until = \(seq), supersededAt = \(Date().timeIntervalSince1970)
                WHERE id = \(booking.id) AND until IS NULL AND seq < \(seq)
                """)
        }
    }

    func insertSeries(id: String, room: String, requestedBy: String?, recurrence: Recurrence,
                      onConflict: ConflictPolicy, count: Int, now: Date) throws {
        let recurrenceJSON = Self.text(try ContractJSON.encode(recurrence))
        try run("""
            INSERT INTO series (id, room, requestedBy, recurrence, onConflict, version, count, createdAt)
            VALUES (\(id), \(room), \(requestedBy), \(recurrenceJSON), \(onConflict.rawValue), 1, \(Int64(count)),
                    \(now.timeIntervalSince1970))
            """)
    }

    func series(id: String) throws -> SeriesRow? {
        guard let row = try run("SELECT id, room, requestedBy, version, count FROM series WHERE id = \(id)").first else { return nil }
        let (id, room, requestedBy, version, count) = try row.decode((String, String, String?, Int64, Int64).self)
        return SeriesRow(id: id, room: room, requestedBy: requestedBy, version: Int(version), count: Int(count))
    }

    func setSeriesVersion(id: String, _ version: Int) throws {
        try run("UPDATE series SET version = \(Int64(version)) WHERE id = \(id)")
    }

    func bookings(seriesId: String) throws -> [Booking] {
        try run("SELECT json FROM booking WHERE seriesId = \(seriesId) ORDER BY startsAt, id")
            .map { try ContractJSON.decode(Booking.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    func earliestDue(at now: Date) throws -> (id: String, due: Int64)? {
        let limit = Int64(now.timeIntervalSince1970.rounded(.down))
        guard let row = try run("""
            SELECT id, nextDueAt FROM booking WHERE nextDueAt IS NOT NULL AND nextDueAt <= \(limit) ORDER BY nextDueAt, id LIMIT 1
            """).first else { return nil }
        let (id, due) = try row.decode((String, Int64).self)
        return (id, due)
    }

    func setDue(bookingID: String, _ due: Date?) throws {
        try run("UPDATE booking SET nextDueAt = \(due.map { StoreRules.dueSeconds($0) }) WHERE id = \(bookingID)")
    }

    func postponeDue(bookingID: String, from stored: Int64, to due: Date) throws {
        try run("UPDATE booking SET nextDueAt = \(StoreRules.dueSeconds(due)) WHERE id = \(bookingID) AND nextDueAt = \(stored)")
    }

    func checkOrderKeys(_ keys: [String]) throws {
        guard let held = claim else { return }
        let pending = keys.filter { !events.clearKeys.contains($0) }
        guard !pending.isEmpty else { return }
        let blocked = Set(try run("""
            SELECT DISTINCT orderKey FROM outbox WHERE orderKey = ANY(\(pending)) AND publishedAt IS NULL
                                                   AND claimedBy IS DISTINCT FROM \(held.owner)
            """).map { try $0.decode(String.self) })
        // A blocked key is checked again by its enqueue (and waits there).
        for key in pending where !blocked.contains(key) { events.clearKeys.insert(key) }
    }

    func enqueueAll(_ new: [NewOutboxEvent]) throws {
        try checkOrderKeys(new.compactMap(\.orderKey))
        // A key still not clear is held elsewhere: its events go one by one
        // (and wait unclaimed); the rest in multi-row inserts, in order.
        var together: [NewOutboxEvent] = [], alone: [NewOutboxEvent] = []
        for event in new {
            if event.orderKey.map(events.clearKeys.contains) ?? true { together.append(event) } else { alone.append(event) }
        }
        for event in alone {
            try enqueue(routingKey: event.routingKey, messageID: event.messageID, body: event.body, orderKey: event.orderKey,
                        value: event.value)
        }
        var start = 0
        while start < together.count {
            let chunk = together[start..<min(start + 1_000, together.count)]
            start += chunk.count
            var binds = PostgresBindings(capacity: chunk.count * 8)
            var values: [String] = []
            values.reserveCapacity(chunk.count)
            for (i, event) in chunk.enumerated() {
                let b = i * 8
                values.append("($\(b + 1), $\(b + 2), $\(b + 3), extract(epoch FROM clock_timestamp())::double precision, "
                    + "extract(epoch FROM clock_timestamp())::double precision + $\(b + 4)::double precision, "
                    + "$\(b + 5), $\(b + 6), $\(b + 7), $\(b + 8))")
                binds.append(event.routingKey)
                binds.append(event.messageID)
                binds.append(Self.text(event.body))
                binds.append(claim?.lease)
                binds.append(claim?.owner)
                binds.append(event.orderKey)
                binds.append(events.trace?.traceParent)
                binds.append(events.trace?.traceState)
            }
            let ids = try run(PostgresQuery(unsafeSQL: """
                INSERT INTO outbox (routingKey, messageId, body, createdAt, claimedUntil, claimedBy, orderKey, traceParent, traceState)
                VALUES \(values.joined(separator: ", ")) RETURNING id
                """, binds: binds)).map { try $0.decode(Int64.self) }
            guard claim != nil else { continue }
            guard ids.count == chunk.count else { throw StoreCorruption(description: "outbox insert returned \(ids.count) ids for \(chunk.count) rows") }
            for (id, event) in zip(ids, chunk) {
                self.events.list.append(OutboxEvent(id: id, routingKey: event.routingKey, messageID: event.messageID,
                                                    body: [UInt8](event.body), value: event.value,
                                                    traceParent: events.trace?.traceParent, traceState: events.trace?.traceState))
            }
        }
    }

    func enqueue(routingKey: String, messageID: String, body: Data, orderKey: String?, value: BookingEvent?) throws {
        // Behind an older unpublished event of the same key that another
        // process holds (or nobody does), the new one waits unclaimed: a
        // table read takes it only after that one is published. Writes run
        // under the write lock, so an older event committed by another
        // process is visible to this statement.
        var claim = self.claim
        if let held = claim, let orderKey, !events.clearKeys.contains(orderKey) {
            if try !run("""
                SELECT 1 FROM outbox WHERE orderKey = \(orderKey) AND publishedAt IS NULL
                                       AND claimedBy IS DISTINCT FROM \(held.owner) LIMIT 1
                """).isEmpty {
                held.handOver.queuedBehindOthers()
                claim = nil
            } else {
                events.clearKeys.insert(orderKey)
            }
        }
        // Claims are timed by the database's clock, not this host's: the
        // instances that compare them may run on hosts whose clocks differ.
        let id = try run("""
            INSERT INTO outbox (routingKey, messageId, body, createdAt, claimedUntil, claimedBy, orderKey, traceParent, traceState)
            VALUES (\(routingKey), \(messageID), \(Self.text(body)), extract(epoch FROM clock_timestamp())::double precision,
                    extract(epoch FROM clock_timestamp())::double precision + \(claim?.lease)::double precision,
                    \(claim?.owner), \(orderKey), \(events.trace?.traceParent), \(events.trace?.traceState))
            RETURNING id
            """).first?.decode(Int64.self) ?? 0
        if claim != nil {
            events.list.append(OutboxEvent(id: id, routingKey: routingKey, messageID: messageID, body: [UInt8](body), value: value,
                                           traceParent: events.trace?.traceParent, traceState: events.trace?.traceState))
        }
    }
}
