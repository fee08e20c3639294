import BookingContracts
import Foundation
import Logging
import NIOCore
import PostgresNIO
import PostgresSupport
import Synchronization

/// The booking handler's store on PostgreSQL (postgres-nio), for several
/// handler instances on several hosts sharing one database
/// (`DATABASE_URL=postgres://…`). The guarantees are those of
/// ``BookingStore``; how this store keeps them:
///
/// - **One writer at a time, across instances.** Every write transaction
///   first takes a transaction-level advisory lock (one per schema), the
///   counterpart of SQLite's `BEGIN IMMEDIATE`: overlap checks, inbox
///   look-ups, timers and version numbers see every earlier commit, and
///   `booking_version.seq` (a sequence, assigned under the lock) grows in
///   commit order as the `booking.list` snapshot rule needs. Transactions
///   of other instances wait for the lock; readers never do (MVCC).
/// - **Double booking impossible in the database itself**: an exclusion
///   constraint over (room, [startsAt, endsAt)) for pending, confirmed and
///   inProgress rows (`btree_gist`). The lock makes it unreachable for the
///   handler's own writes; it guards against everything else.
/// - **Outbox across instances**: new events are claimed by the instance
///   that wrote them (hand-over in memory, ``OutboxHandOver``); the table
///   fallback claims with `FOR UPDATE SKIP LOCKED` and a lease, so two
///   relays never publish the same event at the same time, and an instance
///   that died has its events published by another once the lease ends.
///
/// Threads: command groups and plain transactions run through
/// ``CommitEngine`` on ``PostgresWriter``'s serial queue, which owns the
/// write connection and blocks on postgres-nio's futures there — never on
/// an event loop, never on the cooperative pool. Reads and the relay's
/// outbox statements use a second connection through postgres-nio's async
/// API (queries on it are queued by postgres-nio). Both reconnect on the
/// next use after PostgreSQL restarts; a command whose transaction was cut
/// off fails, is redelivered, and the inbox makes it exact (a commit that
/// did happen answers from the inbox). The command statements are in
/// `PostgresTransaction.swift`, the schema in `PostgresSchema.swift`.
public final class PostgresBookingStore: BookingStore {
    let settings: PostgresSettings
    let logger: Logger
    let rooms = RoomCache()
    /// Group commit, the inbox and the hand-over, on the writer's queue.
    let commits: CommitEngine<PostgresCommitBackend>
    /// Events committed by this process, handed to its relay in memory.
    var handOver: OutboxHandOver { commits.handOver }
    public var systemName: String? { PostgresCommitBackend.systemName }
    /// The write connection and the queue that owns it.
    private var writer: PostgresWriter { commits.backend.writer }
    private let reader: ReadConnection

    /// Connects, creates the schema when missing and migrates it. Waits up
    /// to `waitSeconds` for a server that is not reachable yet (starting
    /// together in a compose file); refusals by the server itself (bad
    /// password, missing database) fail at once. `insertLease` and
    /// `committedCapacity` are for tests.
    public static func open(settings: PostgresSettings, logger: Logger, waitSeconds: Double = 60, insertLease: TimeInterval = 5,
                            committedCapacity: Int = 10_000) async throws -> PostgresBookingStore {
        let store = try PostgresBookingStore(settings: settings, logger: logger, insertLease: insertLease,
                                             committedCapacity: committedCapacity)
        try await store.writer.whenReachable(waitSeconds: waitSeconds) { connection in
            try PostgresSchema.migrate(connection, settings: settings, logger: logger)
        }
        return store
    }

    private init(settings: PostgresSettings, logger: Logger, insertLease: TimeInterval, committedCapacity: Int) throws {
        self.settings = settings
        self.logger = logger
        let writer = try PostgresWriter(settings: settings, label: "postgres-store.writer", logger: logger)
        // The advisory lock that serialises writers is per schema.
        let backend = PostgresCommitBackend(writer: writer, logger: logger, rooms: rooms,
                                            writeLockKey: "booking-handler.write:" + (settings.schema ?? "public"))
        commits = CommitEngine(backend: backend,
                               handOver: OutboxHandOver(insertLease: insertLease, capacity: committedCapacity))
        reader = ReadConnection(configuration: try settings.connectionConfiguration(), logger: logger)
    }

    /// Closes both connections (the writer's after the group it may be running).
    public func close() async {
        await reader.close()
        await writer.close()
    }

    public typealias Outcome = StoreOutcome

    /// See ``CommitEngine``: group commit (as the SQLite store), a
    /// savepoint per command unless it is alone, the inbox, the hand-over.
    public func execute(
        key: InboxKey?, commandType: String, _ body: @Sendable @escaping (any StoreTransaction) throws -> ReplyBody
    ) async throws -> Outcome {
        try await commits.execute(key: key, commandType: commandType, body)
    }

    public func transaction<T: Sendable>(_ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T {
        try await commits.transaction(body)
    }

    // MARK: Reads

    public func cachedRoom(named name: String) -> CachedRoom? {
        rooms.get(name)
    }

    public func replayRooms() async throws -> [(room: Room, updatedAt: Date)] {
        try await reader.rows("SELECT json, updatedAt FROM room ORDER BY name").map { row in
            let (json, updatedAt) = try row.decode((String, Double).self)
            return (try ContractJSON.decode(Room.self, from: Data(json.utf8)), Date(timeIntervalSince1970: updatedAt))
        }
    }

    public func replayBookings(after id: String?, limit: Int) async throws -> [Booking] {
        try await reader.rows("SELECT json FROM booking WHERE id > \(id ?? "") ORDER BY id LIMIT \(limit)")
            .map { try ContractJSON.decode(Booking.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    public func replayBookingJSON(after id: String?, limit: Int) async throws -> [(id: String, json: [UInt8])] {
        try await reader.rows("SELECT id, json FROM booking WHERE id > \(id ?? "") ORDER BY id LIMIT \(limit)")
            .map { row in
                let (id, json) = try row.decode((String, String).self)
                return (id: id, json: Array(json.utf8))
            }
    }

    public func booking(id: String) async throws -> Booking? {
        try await reader.rows("SELECT json FROM booking WHERE id = \(id)").first
            .map { try ContractJSON.decode(Booking.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    public func snapshotSeq() async throws -> Int64 {
        try await reader.rows("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM booking_version").first?.decode(Int64.self) ?? 0
    }

    public func listVersions(at seq: Int64, from: Date, to: Date, room: String?, statuses: [BookingStatus]?,
                             requestedBy: String?, seriesId: String?, after: (startsAt: Int64, id: String)?, limit: Int)
        async throws -> [ListedVersion]
    {
        let start = Int64(from.timeIntervalSince1970.rounded(.down)), end = Int64(to.timeIntervalSince1970.rounded(.up))
        var binds = PostgresBindings()
        func bind(_ value: some PostgresNonThrowingEncodable & Sendable) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        var sql = """
            SELECT id, room, startsAt, endsAt, requestedBy, json FROM booking_version
            WHERE seq <= \(bind(seq)) AND (until IS NULL OR until > \(bind(seq)))
              AND startsAt < \(bind(end)) AND endsAt > \(bind(start)) AND startsAt > \(bind(start - StoreRules.longestBooking))
            """
        if let room { sql += " AND room = \(bind(room))" }
        if let statuses { sql += " AND status = ANY(\(bind(statuses.map(\.rawValue))))" }
        if let requestedBy { sql += " AND requestedBy = \(bind(requestedBy))" }
        if let seriesId { sql += " AND seriesId = \(bind(seriesId))" }
        if let after {
            sql += " AND (startsAt > \(bind(after.startsAt)) OR (startsAt = \(bind(after.startsAt)) AND id > \(bind(after.id))))"
        }
        sql += " ORDER BY startsAt, id LIMIT \(bind(Int64(limit)))"
        return try await reader.rows(PostgresQuery(unsafeSQL: sql, binds: binds)).map { row in
            let (id, room, startsAt, endsAt, requestedBy, json) = try row.decode((String, String, Int64, Int64, String?, String).self)
            let bytes = Array(json.utf8)
            // No JSON functions here that keep the encoder's bytes (jsonb
            // reorders keys): the redacted form is encoded in Swift.
            let booking = try ContractJSON.decode(Booking.self, from: Data(bytes))
            let redacted = try ContractJSON.encode(BookingView(booking, contacts: false))
            return ListedVersion(id: id, room: room, timeZone: booking.timeZone, startsAt: startsAt, endsAt: endsAt,
                                 requestedBy: requestedBy, json: bytes, redactedJSON: Array(redacted))
        }
    }

    public func room(named name: String) async throws -> Room? {
        try await reader.rows("SELECT json FROM room WHERE name = \(name)").first
            .map { try ContractJSON.decode(Room.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    public func waiters(room: String) async throws -> [Booking] {
        try await reader.rows("SELECT json FROM booking WHERE room = \(room) AND status = 'waitlisted' ORDER BY queuedAt, id")
            .map { try ContractJSON.decode(Booking.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    public func closures(room: String, from: Date, to: Date) async throws -> [RoomClosure] {
        try await reader.rows("""
            SELECT json FROM closure
            WHERE room = \(room) AND fromAt < \(Int64(to.timeIntervalSince1970)) AND toAt > \(Int64(from.timeIntervalSince1970))
            ORDER BY fromAt, id
            """).map { try ContractJSON.decode(RoomClosure.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    public func replayClosures() async throws -> [RoomClosure] {
        try await reader.rows("SELECT json FROM closure ORDER BY room, fromAt, id")
            .map { try ContractJSON.decode(RoomClosure.self, from: Data(try $0.decode(String.self).utf8)) }
    }

    public func counts() async throws -> (rooms: Int, bookings: Int, inbox: Int, outboxPending: Int) {
        let row = try await reader.rows("""
            SELECT (SELECT COUNT(*) FROM room), (SELECT COUNT(*) FROM booking), (SELECT COUNT(*) FROM inbox),
                   (SELECT COUNT(*) FROM outbox WHERE publishedAt IS NULL)
            """).first
        guard let row else { return (0, 0, 0, 0) }
        let (rooms, bookings, inbox, pending) = try row.decode((Int64, Int64, Int64, Int64).self)
        return (Int(rooms), Int(bookings), Int(inbox), Int(pending))
    }

    // MARK: Outbox

    public var handOverSuspended: Bool {
        handOver.suspended
    }

    public var queuedBehindOthers: Bool {
        handOver.recentlyQueuedBehindOthers
    }

    public func suspendHandOver(releasing failed: [Int64]) async throws {
        try await commits.suspendHandOver(releasing: failed)
    }

    public func resumeHandOver() async throws {
        try await commits.resumeHandOver()
    }

    public func takeCommitted(limit: Int) -> [OutboxEvent] {
        handOver.take(limit: limit)
    }

    /// `FOR UPDATE SKIP LOCKED`: relays of several instances claiming at
    /// the same moment take disjoint events instead of waiting for each other.
    /// An event whose order key has an older unpublished event waits for it
    /// (see ``OutboxHandOver``), even when both could be claimed now: the
    /// older one may be skipped as locked by another relay's claim.
    public func claimOutbox(limit: Int, lease: TimeInterval) async throws -> [OutboxEvent] {
        let waiting = Array(handOver.waitingIDs)
        // The database's clock, as for the claims made at insert.
        return try await reader.rows("""
            UPDATE outbox SET claimedUntil = extract(epoch FROM clock_timestamp())::double precision + \(lease),
                              claimedBy = \(handOver.owner)
            WHERE id IN (SELECT id FROM outbox
                         WHERE publishedAt IS NULL
                           AND (claimedUntil IS NULL OR claimedUntil < extract(epoch FROM clock_timestamp())::double precision)
                           AND id <> ALL(\(waiting))
                           AND NOT EXISTS (SELECT 1 FROM outbox older
                                           WHERE older.orderKey = outbox.orderKey AND older.publishedAt IS NULL
                                             AND older.id < outbox.id)
                         ORDER BY id LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED)
            RETURNING id, routingKey, messageId, body, traceParent, traceState
            """).map { row in
            let (id, routingKey, messageID, body, traceParent, traceState)
                = try row.decode((Int64, String, String, String, String?, String?).self)
            return OutboxEvent(id: id, routingKey: routingKey, messageID: messageID, body: Array(body.utf8),
                               traceParent: traceParent, traceState: traceState)
        }.sorted { $0.id < $1.id }
    }

    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        _ = try await reader.rows("""
            UPDATE outbox SET publishedAt = \(Date().timeIntervalSince1970), claimedUntil = NULL, claimedBy = NULL WHERE id = ANY(\(ids))
            """)
    }

    public func releaseClaims(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        _ = try await reader.rows("UPDATE outbox SET claimedUntil = NULL, claimedBy = NULL WHERE id = ANY(\(ids))")
    }

    public func prune(olderThan age: TimeInterval, now: Date) async throws {
        let cutoff = now.timeIntervalSince1970 - age
        let cursorCutoff = now.timeIntervalSince1970 - StoreRules.cursorLifetime
        // In batches: one DELETE of a large backlog (a first prune after
        // months, a long outage) would hold its locks for as long and could
        // outlast the statement timeout, failing every prune after it.
        let size = Self.pruneBatch
        while try await reader.rows("""
            DELETE FROM outbox WHERE ctid IN (SELECT ctid FROM outbox WHERE publishedAt IS NOT NULL AND publishedAt < \(cutoff)
                                              LIMIT \(size)) RETURNING 1
            """).count == size {}
        while try await reader.rows("""
            DELETE FROM inbox WHERE ctid IN (SELECT ctid FROM inbox WHERE createdAt < \(cutoff) LIMIT \(size)) RETURNING 1
            """).count == size {}
        while try await reader.rows("""
            DELETE FROM booking_version WHERE ctid IN (SELECT ctid FROM booking_version
                                                       WHERE \(unescaped: StoreRules.prunableVersionsCondition) \(cursorCutoff) LIMIT \(size))
            RETURNING 1
            """).count == size {}
    }

    /// Rows one prune statement deletes at most.
    static let pruneBatch = 5_000
}

extension PostgresBookingStore: CommitObservable {
    func observeCommits(_ observer: (@Sendable (CommitEvent) -> Void)?) {
        commits.observe(observer)
    }
}
