import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport

/// The delivery ledger: SQLite in `$DATA_DIR/pass-sender.sqlite` (one
/// host), or PostgreSQL (`DATABASE_URL`, instances on several hosts).
///
/// It records, per booking, the newest version seen, whether it was
/// cancelled and since which version its times hold (column `timesVersion`);
/// per (booking, version, kind, normalised e-mail) the status and attempts
/// of one pass or notice — so nobody hears the same thing twice however
/// the attendees are re-ordered; the booking snapshot (and its `previous`)
/// of every version (operator retries need it); and an outbox of
/// follow-up messages (retries, `passes.failed`, `pass.*` events) written
/// in the same transaction as the statuses they follow from.
///
/// **Several instances on one ledger.** A claimed row (`attempting`) names
/// its claimer (``owner``, one per process start) and a lease, renewed with
/// every gateway answer recorded. Another instance finding such a row
/// waits while the lease runs (``ClaimHeld``) — the claimer is alive and
/// sending — and takes the row over once it has run out (the claimer died:
/// the documented crash window, docs/pass-sender.md).
public final class PassLedger: Sendable {
    let database: any LedgerDatabase
    /// Who claims rows: a fresh id per process start.
    public let owner: String
    /// How long a claim holds without a recorded gateway answer.
    public let claimLease: TimeInterval
    /// The clock claims and leases are read by (tests move it).
    let now: @Sendable () -> Date

    /// Opens (creating and migrating as needed) the SQLite ledger at `path`.
    public convenience init(path: String, claimLease: TimeInterval = PassLedger.defaultClaimLease) throws {
        self.init(database: try SQLiteLedgerDatabase(path: path), claimLease: claimLease)
    }

    /// A ledger in `database`.
    public init(database: any LedgerDatabase, claimLease: TimeInterval = PassLedger.defaultClaimLease,
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.database = database
        self.claimLease = claimLease
        self.now = now
        owner = UUID().uuidString
    }

    /// Twice the default gateway timeout plus a margin.
    public static let defaultClaimLease: TimeInterval = 50

    /// Thrown inside an admission when a row it would claim is `attempting`
    /// under another instance's unexpired lease: that instance is sending
    /// it now. Nothing of the admission is kept; try again after `until`
    /// (or sooner: the claimer may finish first).
    public struct ClaimHeld: Error, CustomStringConvertible {
        public let bookingId: String
        public let until: Date
        public var description: String { "booking \(bookingId): another instance is sending to these recipients until \(until)" }
    }

    /// Thrown by ``record(bookingId:version:kind:delivered:deliveredAt:failures:outbox:)``
    /// when rows it would mark failed are no longer this instance's claim:
    /// another instance took them over (our lease ran out while our gateway
    /// call hung, e.g. in a network partition) and is sending them, or has.
    /// Nothing of the call's result is kept; record it again without them.
    public struct ClaimLost: Error, CustomStringConvertible {
        public let bookingId: String
        /// Normalised e-mails of the rows taken over.
        public let emails: Set<String>
        public var description: String {
            "booking \(bookingId): \(emails.count) recipient(s) taken over by another instance"
        }
    }

    /// Closes the database's connections.
    public func close() async {
        await database.close()
    }

    /// How the ledger compares e-mail addresses: the whole address,
    /// trimmed, without regard to case (as the handler's booking queries).
    public static func normalised(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    // MARK: Results

    /// Records the result of one gateway call in one transaction: delivered
    /// rows, failed ones (scheduled again or given up), and the messages
    /// that follow from it. Rows are named by normalised e-mail. Renews
    /// this instance's lease on the version's rows it is still sending.
    ///
    /// Fenced by the claim: a failure is recorded only on a row this
    /// instance still claims (else ``ClaimLost``, and nothing is written) —
    /// a stale instance must not put a row another one delivered back to
    /// `scheduled` (a third send) nor give it up. A delivery is recorded
    /// whoever claims the row (the gateway took the pass: that is true),
    /// but a row already `delivered` keeps its first time.
    ///
    /// - Returns: the outbox rows it wrote, in order, for the caller to
    ///   publish without reading them back.
    @discardableResult
    public func record(bookingId: String, version: Int, kind: NoticeKind = .pass, delivered: [String], deliveredAt: String,
                       failures: [FailureUpdate], outbox: [OutboxMessage]) async throws -> [OutboxRow] {
        let owner = self.owner, lease = claimLease, clock = self.now
        return try await storeWrite("record", lockKey: bookingId) { db in
            let now = clock().timeIntervalSince1970
            let lost = try Self.notClaimed(db, bookingId: bookingId, version: version, kind: kind, emails: failures.map(\.email),
                                           owner: owner)
            if !lost.isEmpty { throw ClaimLost(bookingId: bookingId, emails: lost) }
            for email in delivered {
                try db.execute("""
                    UPDATE notice SET status = 'delivered', deliveredAt = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND kind = ? AND email = ? AND status <> 'delivered'
                    """, deliveredAt, now, bookingId, version, kind.rawValue, email)
            }
            for f in failures {
                try db.execute("""
                    UPDATE notice SET status = ?, attempts = ?, firstFailureAt = ?, lastFailureAt = ?, lastErrorCode = ?,
                           lastErrorText = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                    """, f.status.rawValue, f.attempts, f.firstFailureAt, f.lastFailureAt, f.lastErrorCode,
                    f.lastErrorText, now, bookingId, version, kind.rawValue, f.email)
            }
            try Self.renewLease(db, bookingId: bookingId, version: version, owner: owner, until: now + lease)
            var written: [OutboxRow] = []
            for m in outbox {
                // RETURNING: SQLite ≥ 3.35 and PostgreSQL alike.
                let id = try db.row("""
                    INSERT INTO outbox (bookingId, exchange, routingKey, messageId, type, body, headers, createdAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
                    """, bookingId, m.exchange, m.routingKey, m.messageID, m.type, Data(m.body),
                    Data(m.headersJSON), now)?.int("id")
                guard let id else { throw LedgerError("the outbox insert returned no id") }
                written.append(OutboxRow(id: Int64(id), message: m))
            }
            return written
        }
    }

    /// Renews this instance's lease on the version's rows it still claims
    /// (as ``record(bookingId:version:kind:delivered:deliveredAt:failures:outbox:)``
    /// does) and returns which of `emails` (normalised) it no longer
    /// claims: another instance took them over, or finished them. For a
    /// message that waited for a gateway slot so long that its lease might
    /// run out during the call (``PassDispatcher``): it sends only to the
    /// rest.
    public func renewClaims(bookingId: String, version: Int, kind: NoticeKind, emails: [String]) async throws -> Set<String> {
        let owner = self.owner, lease = claimLease, clock = self.now
        return try await storeWrite("renew claims", lockKey: bookingId) { db in
            let now = clock().timeIntervalSince1970
            let lost = try Self.notClaimed(db, bookingId: bookingId, version: version, kind: kind, emails: emails, owner: owner)
            try Self.renewLease(db, bookingId: bookingId, version: version, owner: owner, until: now + lease)
            return lost
        }
    }

    /// Which of `emails` (normalised) `owner` does not claim: rows not
    /// `attempting`, or claimed by another instance.
    private static func notClaimed(_ db: any LedgerSQL, bookingId: String, version: Int, kind: NoticeKind, emails: [String],
                                   owner: String) throws -> Set<String> {
        var lost: Set<String> = []
        for email in emails {
            let row = try db.rows("""
                SELECT status, claimedBy FROM notice WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                """, bookingId, version, kind.rawValue, email).first
            if row?.string("status") != PassStatus.attempting.rawValue || row?.string("claimedBy") != owner {
                lost.insert(email)
            }
        }
        return lost
    }

    /// Extends `owner`'s lease on every row of the version it still claims.
    private static func renewLease(_ db: any LedgerSQL, bookingId: String, version: Int, owner: String, until: Double) throws {
        try db.execute("""
            UPDATE notice SET leaseUntil = ? WHERE bookingId = ? AND version = ? AND status = 'attempting' AND claimedBy = ?
            """, until, bookingId, version, owner)
    }

    /// Outbox messages not yet confirmed by the broker, oldest first: of one
    /// booking, or of all (at start-up).
    public func unpublished(bookingId: String? = nil, limit: Int = 1000) async throws -> [OutboxRow] {
        try await storeRead("read unpublished", bookingId: bookingId) { db in try Self.unpublished(db, bookingId: bookingId, limit: limit) }
    }

    /// Bookings with outbox rows unpublished since before `createdBefore`
    /// (seconds since 1970), the oldest row first: what a publish failure,
    /// a lost mark or a commit that landed after its caller gave up left
    /// behind (``OutboxSweep``).
    public func bookingsWithUnpublishedRows(createdBefore: Double, limit: Int = 100) async throws -> [String] {
        try await storeRead("find unpublished") { db in
            try db.rows("""
                SELECT bookingId, MIN(id) AS firstId FROM outbox
                WHERE publishedAt IS NULL AND createdAt < ?
                GROUP BY bookingId ORDER BY firstId LIMIT ?
                """, createdBefore, limit).compactMap { $0.string("bookingId") }
        }
    }

    /// ``unpublished(bookingId:limit:)`` for one booking, read in the write
    /// queue: after every write queued before it, such as a mark
    /// (``markPublishedSoon(_:onError:)``) not yet committed.
    public func unpublishedQueued(bookingId: String, limit: Int = 1000) async throws -> [OutboxRow] {
        try await storeWrite("read unpublished", lockKey: bookingId) { db in try Self.unpublished(db, bookingId: bookingId, limit: limit) }
    }

    /// ``unpublished(bookingId:limit:)`` inside a transaction (admissions
    /// read a booking's leftovers in their own write).
    static func unpublished(_ db: any LedgerSQL, bookingId: String?, limit: Int) throws -> [OutboxRow] {
        let rows: [SQLRow]
        if let bookingId {
            rows = try db.rows("SELECT * FROM outbox WHERE bookingId = ? AND publishedAt IS NULL ORDER BY id LIMIT ?",
                               bookingId, limit)
        } else {
            rows = try db.rows("SELECT * FROM outbox WHERE publishedAt IS NULL ORDER BY id LIMIT ?", limit)
        }
        guard !rows.isEmpty else { return [] }
        let decoder = JSONDecoder()
        return try rows.map { row in
            var message = OutboxMessage(exchange: row.string("exchange") ?? "", routingKey: row.string("routingKey") ?? "",
                                        messageID: row.string("messageId") ?? "", type: row.string("type") ?? "",
                                        body: [UInt8](row.data("body") ?? Data()))
            message.headers = try decoder.decode([String: OutboxMessage.HeaderValue].self, from: row.data("headers") ?? Data())
            return OutboxRow(id: Int64(row.int("id") ?? 0), message: message)
        }
    }

    /// Marks outbox rows as published (confirmed by the broker).
    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await storeWrite("mark published", lockKey: nil) { db in try Self.setPublished(ids, db) }
    }

    /// Marks outbox rows as published without waiting for the commit: the
    /// write is queued now, ahead of every later ledger write (a booking's
    /// next admission, queued after it, finds them published). The ack of
    /// the message that published them need not wait: if the mark is lost
    /// (a crash before its commit, or `onError`), the rows are published
    /// once more — a repeat consumers drop by `message_id`, and a retry
    /// message repeated is ignored by the attempt count.
    public func markPublishedSoon(_ ids: [Int64], onError: @escaping @Sendable (any Error) -> Void) {
        guard !ids.isEmpty else { return }
        storeSubmit("mark published", lockKey: nil, { db in try Self.setPublished(ids, db) },
                        settle: { error in if let error { onError(error) } })
    }

    /// The mark itself, shared by the awaited and the queued form.
    private static func setPublished(_ ids: [Int64], _ db: any LedgerSQL) throws {
        let now = Date().timeIntervalSince1970
        for id in ids {
            try db.execute("UPDATE outbox SET publishedAt = ? WHERE id = ?", now, id)
        }
    }

    /// Deletes outbox rows published more than `age` seconds ago; returns
    /// how many. The newest row stays, published or not: on SQLite ids are
    /// `MAX(id) + 1` (no `AUTOINCREMENT`, ``LedgerMigrationV5``), and an id
    /// given out again could be marked published by a late confirm of the
    /// row that had it before.
    @discardableResult
    public func prunePublished(olderThan age: TimeInterval) async throws -> Int {
        try await storeWrite("prune outbox", lockKey: nil) { db in
            try db.rows("""
                DELETE FROM outbox WHERE publishedAt IS NOT NULL AND publishedAt < ?
                  AND id < (SELECT MAX(id) FROM outbox) RETURNING id
                """, Date().timeIntervalSince1970 - age).count
        }
    }

    // MARK: Queries

    /// Every row of one kind (default passes) of a booking, by version and index.
    public func passes(bookingId: String, kind: NoticeKind = .pass) async throws -> [PassRecord] {
        try await database.read { db in
            try db.rows("SELECT * FROM notice WHERE bookingId = ? AND kind = ? ORDER BY version, attendeeIndex",
                        bookingId, kind.rawValue).map(Self.record)
        }
    }

    /// Every row of a booking, every kind, by version, kind and index.
    public func notices(bookingId: String) async throws -> [PassRecord] {
        try await database.read { db in
            try db.rows("SELECT * FROM notice WHERE bookingId = ? ORDER BY version, kind, attendeeIndex", bookingId).map(Self.record)
        }
    }

    /// Rows per status (all bookings, all kinds).
    public func statusCounts() async throws -> [PassStatus: Int] {
        try await database.read { db in
            var counts: [PassStatus: Int] = [:]
            for row in try db.rows("SELECT status, count(*) AS n FROM notice GROUP BY status") {
                if let s = PassStatus(rawValue: row.string("status") ?? "") { counts[s] = row.int("n") ?? 0 }
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
        var arguments: [SQLValue] { [.text(bookingId), .int(Int64(version)), .text(kind.rawValue), .text(email)] }
    }

    static func storeSnapshot(_ db: any LedgerSQL, _ booking: Booking, _ previous: BookingSnapshot?) throws {
        try db.execute("INSERT INTO snapshot (bookingId, version, json, previous) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                       booking.id, booking.version, EncodedBooking(booking).json, previous?.json)
        if let previous {
            // A snapshot stored by a retry message that had no `previous`.
            try db.execute("UPDATE snapshot SET previous = ? WHERE bookingId = ? AND version = ? AND previous IS NULL",
                           previous.json, booking.id, booking.version)
        }
    }

    /// The booking as the ledger stored it at `version`, if it did.
    static func snapshot(_ db: any LedgerSQL, bookingId: String, version: Int) throws -> Booking? {
        try db.row("SELECT json FROM snapshot WHERE bookingId = ? AND version = ?", bookingId, version)
            .flatMap { try? ContractJSON.decode(Booking.self, from: $0.data("json") ?? Data()) }
    }

    /// Remembers an occurrence of a series: its first snapshot stays, the
    /// newest replaces an older one.
    static func storeOccurrence(_ db: any LedgerSQL, _ booking: Booking) throws {
        guard let series = booking.series else { return }
        let json = EncodedBooking(booking).json
        try db.execute("""
            INSERT INTO series_occurrence (seriesId, bookingId, original, latest, latestVersion) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(seriesId, bookingId) DO UPDATE SET latest = excluded.latest, latestVersion = excluded.latestVersion
            WHERE excluded.latestVersion > series_occurrence.latestVersion
            """, series.id, booking.id, json, json, booking.version)
    }

    /// The occurrences of a series the ledger has seen, by original start.
    public func seriesOccurrences(seriesId: String) async throws -> [SeriesOccurrence] {
        try await storeRead("read series") { db in
            try db.rows("SELECT original, latest FROM series_occurrence WHERE seriesId = ?", seriesId).compactMap { row in
                guard let original = try? ContractJSON.decode(Booking.self, from: row.data("original") ?? Data()),
                      let latest = try? ContractJSON.decode(Booking.self, from: row.data("latest") ?? Data()) else { return nil }
                return SeriesOccurrence(original: original, latest: latest)
            }.sorted { $0.original.startsAt < $1.original.startsAt }
        }
    }

    /// Older versions' unsent work is void once a newer version is known:
    /// that version decides what each person is told (and re-claims passes
    /// still owed, see ``admit(event:booking:previous:)``). A `removed`
    /// notice is the exception while its person is not back among
    /// `booking`'s attendees: the removal stands whatever came after it,
    /// and no later version names that person again, so its retry still
    /// tells them (``admit(retry:)``). A kept notice is one a retry
    /// message will bring back (`scheduled`) or one being sent
    /// (`attempting`); if its claimer died, its event comes again and,
    /// though stale now, claims it once the lease ran out (the late
    /// update's removals, ``admit(event:booking:previous:)``).
    ///
    /// So is a `rescheduled` notice whose retry is waiting (`scheduled`)
    /// when `booking` keeps its times (`keepMovesFrom`: the version whose
    /// times `booking` has) and its person is still an attendee: a title
    /// edit does not tell them that their old pass is void, the retry does.
    /// One being sent by a claimer that died is dropped as before.
    static func supersede(_ db: any LedgerSQL, booking: Booking, keepMovesFrom: Int?, claimer: Claimer) throws {
        // One statement, as before removals were kept (no read to wait for
        // on PostgreSQL); the attendees' e-mails as its last arguments.
        let back = Array(Set(booking.attendees.map { normalised($0.email) })).sorted()
        let list = "(" + Array(repeating: "?", count: back.count).joined(separator: ", ") + ")"
        let removedBack = back.isEmpty ? "" : " OR email IN " + list
        var arguments: [SQLValue] = [.double(claimer.now), .text(booking.id), .int(Int64(booking.version))] + back.map { .text($0) }
        var movesOwed = ""
        if let keepMovesFrom, !back.isEmpty {
            movesOwed = "\n  AND NOT (kind = 'rescheduled' AND status = 'scheduled' AND version >= ? AND email IN \(list))"
            arguments += [.int(Int64(keepMovesFrom))] + back.map { .text($0) }
        }
        try db.execute("""
            UPDATE notice SET status = 'dropped', updatedAt = ?
            WHERE bookingId = ? AND version < ? AND status IN ('attempting', 'scheduled')
              AND (kind <> 'removed'\(removedBack))\(movesOwed)
            """, arguments)
    }

    static func row(_ db: any LedgerSQL, _ key: RowKey) throws -> PassRecord? {
        try db.rows("SELECT * FROM notice WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?", key.arguments)
            .first.map(record)
    }

    static func setStatus(_ db: any LedgerSQL, _ key: RowKey, _ status: PassStatus, now: Double) throws {
        try db.execute("UPDATE notice SET status = ?, updatedAt = ? WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                       [.text(status.rawValue), .double(now)] + key.arguments)
    }

    private static func record(_ row: SQLRow) -> PassRecord {
        PassRecord(bookingId: row.string("bookingId") ?? "", version: row.int("version") ?? 0,
                   kind: NoticeKind(rawValue: row.string("kind") ?? "") ?? .pass, email: row.string("email") ?? "",
                   attendeeIndex: row.int("attendeeIndex") ?? 0,
                   status: PassStatus(rawValue: row.string("status") ?? "") ?? .attempting, attempts: row.int("attempts") ?? 0,
                   firstFailureAt: row.string("firstFailureAt"), lastFailureAt: row.string("lastFailureAt"),
                   lastErrorCode: row.int("lastErrorCode"), lastErrorText: row.string("lastErrorText"),
                   claimedBy: row.string("claimedBy"), leaseUntil: row.double("leaseUntil"))
    }

    /// The row's history as work for recipient `index` of this message's list.
    static func work(_ p: PassRecord, index: Int) -> PassWork {
        PassWork(attendeeIndex: index, attempts: p.attempts, firstFailureAt: p.firstFailureAt,
                 lastFailureAt: p.lastFailureAt, lastErrorCode: p.lastErrorCode, lastErrorText: p.lastErrorText)
    }
}
