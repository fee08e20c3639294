import AMQPClient
import BookingContracts
import Foundation
import GRDB
import ServiceSupport

/// Where a pass stands in the ledger.
public enum PassStatus: String, Sendable, Codable, CaseIterable {
    /// Handed to the gateway (or about to be); if the process dies now the
    /// pass is sent again on recovery (see docs/pass-sender.md, "crash window").
    case attempting
    /// The gateway took it. Never sent again for this booking version.
    case delivered
    /// Failed; a retry message for it is on its way through a delay queue.
    case scheduled
    /// Given up; it is in `passes.failed` (an operator may retry it).
    case failed
    /// The booking was cancelled or a newer version superseded it.
    case dropped
}

/// One row of the ledger: a pass or notice for one person, booking version
/// and kind.
public struct PassRecord: Sendable, Equatable {
    public var bookingId: String
    public var version: Int
    /// What the row is for (``NoticeKind/pass`` for passes).
    public var kind: NoticeKind
    /// The recipient's normalised e-mail (``PassLedger/normalised(_:)``):
    /// with booking id, version and kind, the row's key.
    public var email: String
    /// The recipient's position in that version's list (attendees, or for
    /// `rescheduled`/`removed` the attendees before the change): what retry
    /// messages and `passes.failed` carry.
    public var attendeeIndex: Int
    public var status: PassStatus
    public var attempts: Int
    public var firstFailureAt: String?
    public var lastFailureAt: String?
    public var lastErrorCode: Int?
    public var lastErrorText: String?
}

/// A pass claimed for a gateway call, with its history so far: the same
/// facts a retry message carries for each of its passes.
public typealias PassWork = PassRetryMessage.Pass

/// Why a message sends nothing.
public enum DropReason: String, Sendable {
    /// The booking was cancelled.
    case cancelled
    /// A newer version of the booking is known.
    case stale
    /// The booking is not confirmed (a reschedule in an approval room made
    /// it pending again): no pass until it is confirmed (contract v1.1).
    case notConfirmed
}

/// One kind of notice for some recipients of one booking version: what a
/// gateway call (or several, after failures) sends.
public struct NoticeJob: Sendable, Equatable {
    public var kind: NoticeKind
    /// The booking at this version.
    public var booking: Booking
    /// The booking before this version's change (the event's `previous`).
    public var previous: BookingSnapshot?
    /// The claimed recipients, by index into ``recipients``.
    public var work: [PassWork]

    public init(kind: NoticeKind, booking: Booking, previous: BookingSnapshot?, work: [PassWork]) {
        self.kind = kind
        self.booking = booking
        self.previous = previous
        self.work = work
    }

    /// The list ``PassWork/attendeeIndex`` points into: the attendees before
    /// the change for `rescheduled` and `removed` (a removed attendee is
    /// only there), the current attendees otherwise.
    public var recipients: [Attendee] { Self.recipients(kind, booking, previous) }

    static func recipients(_ kind: NoticeKind, _ booking: Booking, _ previous: BookingSnapshot?) -> [Attendee] {
        switch kind {
        case .pass, .cancelled: booking.attendees
        case .rescheduled, .removed: previous?.attendees ?? []
        }
    }
}

/// The result of admitting a message to the ledger.
public enum Admission: Sendable, Equatable {
    /// Nothing to send: the whole message is moot.
    case dropped(DropReason)
    /// Send these jobs in order (notices about the change before the new
    /// passes); a job's work may be empty when everything was sent already
    /// or is owned by another message.
    case proceed([NoticeJob])
}

/// A message to publish once the ledger transaction that decided it has
/// committed (the ledger's outbox).
public struct OutboxMessage: Sendable, Equatable {
    public enum HeaderValue: Codable, Sendable, Equatable {
        case string(String)
        case int(Int64)
    }
    public var exchange: String
    public var routingKey: String
    public var messageID: String
    public var type: String
    public var body: [UInt8]
    public var headers: [String: HeaderValue]

    public init(exchange: String, routingKey: String, messageID: String, type: String, body: [UInt8],
                headers: AMQPTable = [:]) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.messageID = messageID
        self.type = type
        self.body = body
        var h: [String: HeaderValue] = [:]
        for (k, v) in headers {
            if let s = v.stringValue { h[k] = .string(s) } else if let i = v.intValue { h[k] = .int(i) }
        }
        self.headers = h
    }

    /// The AMQP properties: persistent JSON with type, message id, headers.
    public var properties: AMQPProperties {
        var table: AMQPTable = [:]
        for (k, v) in headers {
            switch v {
            case .string(let s): table[k] = .string(s)
            case .int(let i): table[k] = .int64(i)
            }
        }
        var p = AMQPProperties.persistentJSON(type: type, messageID: messageID, headers: table)
        p.appID = "pass-sender"
        return p
    }
}

/// A row of the outbox.
public struct OutboxRow: Sendable {
    public var id: Int64
    public var message: OutboxMessage
}

/// How one pass ends a gateway call that did not deliver it.
public struct FailureUpdate: Sendable, Equatable {
    /// Normalised e-mail of the recipient (the ledger key).
    public var email: String
    public var attendeeIndex: Int
    /// ``PassStatus/scheduled`` or ``PassStatus/failed``.
    public var status: PassStatus
    public var attempts: Int
    public var firstFailureAt: String
    public var lastFailureAt: String
    public var lastErrorCode: Int?
    public var lastErrorText: String
}

/// The delivery ledger: SQLite (WAL) through GRDB in `$DATA_DIR/pass-sender.sqlite`.
///
/// It records, per booking, the newest version seen, whether it was
/// cancelled and since which version its times hold (``timesVersion``);
/// per (booking, version, kind, normalised e-mail) the status and attempts
/// of one pass or notice — so nobody hears the same thing twice however
/// the attendees are re-ordered; the booking snapshot (and its `previous`)
/// of every version (operator retries need it); and an outbox of
/// follow-up messages (retries, `passes.failed`, `pass.*` events) written
/// in the same transaction as the statuses they follow from.
public final class PassLedger: Sendable {
    let pool: DatabasePool

    /// Opens (creating and migrating as needed) the ledger at `path`.
    public init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(15)
        configuration.prepareDatabase { db in
            // WAL + FULL: a commit is on disk before we call the gateway or ack.
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        // Instances that open a fresh ledger together must not migrate it
        // together (FileLock explains why).
        pool = try FileLock.withExclusive(path: path + ".migrating") {
            let pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
            return pool
        }
    }

    /// How the ledger compares e-mail addresses: the whole address,
    /// trimmed, without regard to case (as the handler's booking queries).
    public static func normalised(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "booking") { t in
                t.primaryKey("id", .text)
                t.column("latestVersion", .integer).notNull()
                t.column("cancelled", .boolean).notNull().defaults(to: false)
                t.column("updatedAt", .double).notNull()
            }
            try db.create(table: "snapshot") { t in
                t.column("bookingId", .text).notNull()
                t.column("version", .integer).notNull()
                t.column("json", .blob).notNull()
                t.primaryKey(["bookingId", "version"])
            }
            try db.create(table: "pass") { t in
                t.column("bookingId", .text).notNull()
                t.column("version", .integer).notNull()
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
                t.primaryKey(["bookingId", "version", "attendeeIndex"])
            }
            try db.create(table: "outbox") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("bookingId", .text).notNull()
                t.column("exchange", .text).notNull()
                t.column("routingKey", .text).notNull()
                t.column("messageId", .text).notNull()
                t.column("type", .text).notNull()
                t.column("body", .blob).notNull()
                t.column("headers", .blob).notNull()
                t.column("createdAt", .double).notNull()
                t.column("publishedAt", .double)
            }
            try db.create(index: "outbox_pending", on: "outbox", columns: ["bookingId", "publishedAt"])
        }
        migrator.registerMigration("v2-notices", migrate: LedgerMigrationV2.migrate)
        return migrator
    }

    // MARK: Admission

    /// Admits a booking event (`booking.confirmed`, `.rescheduled`,
    /// `.updated`, `.cancelled`, `.rejected`) and claims what it makes the
    /// pass sender send, in one transaction (docs/pass-sender.md, "Kinds"):
    ///
    /// - dropped when a newer version is known, or when the booking was
    ///   cancelled (a redelivered cancellation of the same version resumes
    ///   its notices);
    /// - records the version (and, for confirmed/rescheduled, that the
    ///   times hold from it), the snapshot with `previous`, and marks
    ///   older versions' unsent work `dropped`: this version decides;
    /// - claims per kind the recipients the contract names, each by
    ///   (booking, version, kind, normalised e-mail); a row that exists is
    ///   left alone unless it is `attempting` (a previous process died
    ///   sending it). Passes only for a confirmed booking.
    public func admit(event type: EventType, booking: Booking, previous: BookingSnapshot?) async throws -> Admission {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            let isEnd = type == .bookingCancelled || type == .bookingRejected
            let row = try Row.fetchOne(db, sql: "SELECT latestVersion, cancelled, timesVersion FROM booking WHERE id = ?",
                                       arguments: [booking.id])
            let latest: Int = row?["latestVersion"] ?? 0
            if let row, row["cancelled"] as Bool, !(isEnd && latest == booking.version) { return .dropped(.cancelled) }
            if latest > booking.version { return .dropped(.stale) }
            var timesVersion: Int = row?["timesVersion"] ?? 0
            if type == .bookingConfirmed || type == .bookingRescheduled || timesVersion == 0 { timesVersion = booking.version }
            try db.execute(sql: """
                INSERT INTO booking (id, latestVersion, cancelled, timesVersion, updatedAt) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT(id) DO UPDATE SET latestVersion = excluded.latestVersion, cancelled = max(cancelled, excluded.cancelled),
                                              timesVersion = excluded.timesVersion, updatedAt = excluded.updatedAt
                """, arguments: [booking.id, booking.version, isEnd, timesVersion, now])
            try Self.storeSnapshot(db, booking, previous)
            try Self.supersede(db, bookingId: booking.id, below: booking.version)

            let confirmed = booking.status == .confirmed
            var jobs: [NoticeJob] = []
            func claim(_ kind: NoticeKind, where wanted: (Attendee) throws -> Bool) throws {
                let list = NoticeJob.recipients(kind, booking, previous)
                let indexes = try list.indices.filter { try wanted(list[$0]) }
                let work = try Self.claim(db, booking: booking, kind: kind, recipients: list, indexes: indexes, now: now)
                jobs.append(NoticeJob(kind: kind, booking: booking, previous: previous, work: work))
            }
            let everHeld = try Self.passHolders(db, bookingId: booking.id, from: 0, below: .max)
            switch type {
            case .bookingCancelled, .bookingRejected:
                try claim(.cancelled) { everHeld.contains(Self.normalised($0.email)) }
            case .bookingRescheduled:
                // Passes for the previous time are void; who held one is told.
                let held = try Self.passHolders(db, bookingId: booking.id, from: 0, below: booking.version)
                try claim(.rescheduled) { held.contains(Self.normalised($0.email)) }
                if confirmed { try claim(.pass) { _ in true } }
            case .bookingConfirmed:
                if confirmed { try claim(.pass) { _ in true } }
            case .bookingUpdated:
                let current = Set(booking.attendees.map { Self.normalised($0.email) })
                try claim(.removed) { !current.contains(Self.normalised($0.email)) && everHeld.contains(Self.normalised($0.email)) }
                if confirmed {
                    // Added attendees, and anyone whose pass for these times
                    // has not gone out (its older version's retry is void now)
                    // or was voided by a `removed` notice since (removed, then
                    // added again).
                    let valid = try Self.passHolders(db, bookingId: booking.id, from: timesVersion, below: .max,
                                                     unlessRemovedSince: true)
                    try claim(.pass) { !valid.contains(Self.normalised($0.email)) }
                }
            default:
                throw UnusableMessage(description: "event type \(type.rawValue) is not handled by the pass sender")
            }
            if !confirmed && !isEnd && jobs.allSatisfy(\.work.isEmpty) { return .dropped(.notConfirmed) }
            return .proceed(jobs.filter { !$0.work.isEmpty })
        }
    }

    /// Thrown when a retry message cannot be used (poison).
    public struct UnusableMessage: Error, CustomStringConvertible {
        public let description: String
    }

    /// Admits a retry message. A back-off retry claims a row only when the
    /// ledger agrees on its attempt count (so a second delivery of the same
    /// message sends nothing); an operator retry claims a row only when it
    /// is `failed` (resetting its attempts) or was being attempted for that
    /// same request when a previous process died. Delivered rows are never
    /// claimed. Dropped when a newer version of the booking is known, or,
    /// except for `cancelled` notices, when it was cancelled.
    public func admit(retry message: PassRetryMessage) async throws -> Admission {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            let kind = message.noticeKind
            let bookingRow = try Row.fetchOne(db, sql: "SELECT latestVersion, cancelled FROM booking WHERE id = ?",
                                              arguments: [message.bookingId])
            if let bookingRow {
                if bookingRow["cancelled"] as Bool && kind != .cancelled { return .dropped(.cancelled) }
                if (bookingRow["latestVersion"] as Int) > message.version { return .dropped(.stale) }
            }
            var booking = message.booking
            var previous = message.previous
            if booking == nil, let row = try Row.fetchOne(
                db, sql: "SELECT json, previous FROM snapshot WHERE bookingId = ? AND version = ?",
                arguments: [message.bookingId, message.version]) {
                booking = try? ContractJSON.decode(Booking.self, from: row["json"] as Data)
                if previous == nil, let data = row["previous"] as Data? {
                    previous = try? ContractJSON.decode(BookingSnapshot.self, from: data)
                }
            }
            guard let booking, booking.id == message.bookingId, booking.version == message.version else {
                throw UnusableMessage(description: "no snapshot of booking \(message.bookingId) v\(message.version) (neither in the message nor in the ledger)")
            }
            if (kind == .rescheduled || kind == .removed) && previous == nil {
                throw UnusableMessage(description: "a \(kind.rawValue) retry of booking \(booking.id) v\(booking.version) without the booking's previous state")
            }
            if bookingRow == nil {
                try db.execute(sql: """
                    INSERT INTO booking (id, latestVersion, cancelled, timesVersion, updatedAt) VALUES (?, ?, ?, ?, ?)
                    """, arguments: [booking.id, booking.version, kind == .cancelled, booking.version, now])
            }
            // Untrusted counts: an attempt count past any PASS_MAX_ATTEMPTS
            // (1...100) would overflow or dodge the limit, a repeated index
            // would send one attendee twice in a call.
            if let bad = message.passes.first(where: { !(0...100).contains($0.attempts) }) {
                throw UnusableMessage(description: "attempts \(bad.attempts) of attendee \(bad.attendeeIndex) is outside 0...100")
            }
            if Set(message.passes.map(\.attendeeIndex)).count != message.passes.count {
                throw UnusableMessage(description: "an attendee index is listed twice")
            }
            try Self.storeSnapshot(db, booking, previous)
            let list = NoticeJob.recipients(kind, booking, previous)
            var work: [PassWork] = []
            for p in message.passes.sorted(by: { $0.attendeeIndex < $1.attendeeIndex }) {
                guard list.indices.contains(p.attendeeIndex) else {
                    throw UnusableMessage(description: "attendee index \(p.attendeeIndex) is not in booking \(booking.id) v\(booking.version) (\(kind.rawValue))")
                }
                let email = Self.normalised(list[p.attendeeIndex].email)
                let key = RowKey(bookingId: booking.id, version: booking.version, kind: kind, email: email)
                let existing = try Self.row(db, key)
                switch message.kind {
                case .backoff:
                    if let existing {
                        guard existing.status == .scheduled || existing.status == .attempting,
                              existing.attempts == p.attempts else { continue }
                        try Self.setStatus(db, key, .attempting, now: now)
                        work.append(Self.work(existing, index: p.attendeeIndex))
                    } else {
                        try db.execute(sql: """
                            INSERT INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, firstFailureAt,
                                                lastFailureAt, lastErrorCode, lastErrorText, updatedAt)
                            VALUES (?, ?, ?, ?, ?, 'attempting', ?, ?, ?, ?, ?, ?)
                            """, arguments: [booking.id, booking.version, kind.rawValue, email, p.attendeeIndex, p.attempts,
                                             p.firstFailureAt, p.lastFailureAt, p.lastErrorCode, p.lastErrorText, now])
                        work.append(p)
                    }
                case .operator:
                    let token = message.retryToken ?? ""
                    if let existing {
                        let storedToken = try String.fetchOne(
                            db, sql: "SELECT retryToken FROM notice WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                            arguments: key.arguments)
                        if existing.status == .failed && (token.isEmpty || storedToken != token) {
                            try db.execute(sql: """
                                UPDATE notice SET status = 'attempting', attempts = 0, firstFailureAt = NULL, lastFailureAt = NULL,
                                       lastErrorCode = NULL, lastErrorText = NULL, retryToken = ?, updatedAt = ?
                                WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                                """, arguments: [token, now] + key.arguments)
                            work.append(PassWork(attendeeIndex: p.attendeeIndex, attempts: 0))
                        } else if existing.status == .attempting && !token.isEmpty && storedToken == token {
                            work.append(Self.work(existing, index: p.attendeeIndex))
                        }
                    } else {
                        try db.execute(sql: """
                            INSERT INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, retryToken, updatedAt)
                            VALUES (?, ?, ?, ?, ?, 'attempting', 0, ?, ?)
                            """, arguments: [booking.id, booking.version, kind.rawValue, email, p.attendeeIndex, token, now])
                        work.append(PassWork(attendeeIndex: p.attendeeIndex, attempts: 0))
                    }
                }
            }
            return .proceed([NoticeJob(kind: kind, booking: booking, previous: previous, work: work)])
        }
    }

    /// Claims `indexes` of `recipients` for `kind` at the booking's version:
    /// a new row as `attempting`, or an `attempting` row of a process that
    /// died; anything else is someone else's (or done).
    private static func claim(_ db: Database, booking: Booking, kind: NoticeKind, recipients: [Attendee], indexes: [Int],
                              now: Double) throws -> [PassWork] {
        var work: [PassWork] = []
        var seen = Set<String>()
        for index in indexes {
            let email = normalised(recipients[index].email)
            // Two entries differing only in case are one person: told once.
            guard seen.insert(email).inserted else { continue }
            let key = RowKey(bookingId: booking.id, version: booking.version, kind: kind, email: email)
            if let existing = try row(db, key) {
                if existing.status == .attempting { work.append(self.work(existing, index: index)) }
            } else {
                try db.execute(sql: """
                    INSERT INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, updatedAt)
                    VALUES (?, ?, ?, ?, ?, 'attempting', 0, ?)
                    """, arguments: [booking.id, booking.version, kind.rawValue, email, index, now])
                work.append(PassWork(attendeeIndex: index, attempts: 0))
            }
        }
        return work
    }

    /// Normalised e-mails with a delivered pass of a version in `from..<below`;
    /// with `unlessRemovedSince`, not counting a pass that a later `removed`
    /// notice (sent or still to be sent) declared void.
    private static func passHolders(_ db: Database, bookingId: String, from: Int, below: Int,
                                    unlessRemovedSince: Bool = false) throws -> Set<String> {
        Set(try String.fetchAll(db, sql: """
            SELECT p.email FROM notice p
            WHERE p.bookingId = ? AND p.kind = 'pass' AND p.status = 'delivered' AND p.version >= ? AND p.version < ?
              AND NOT (? AND EXISTS (SELECT 1 FROM notice r WHERE r.bookingId = p.bookingId AND r.email = p.email
                                     AND r.kind = 'removed' AND r.version > p.version AND r.status != 'dropped'))
            """, arguments: [bookingId, from, below, unlessRemovedSince]))
    }

    // MARK: Results

    /// Records the result of one gateway call in one transaction: delivered
    /// rows, failed ones (scheduled again or given up), and the messages
    /// that follow from it. Rows are named by normalised e-mail.
    public func record(bookingId: String, version: Int, kind: NoticeKind = .pass, delivered: [String], deliveredAt: String,
                       failures: [FailureUpdate], outbox: [OutboxMessage]) async throws {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            for email in delivered {
                try db.execute(sql: """
                    UPDATE notice SET status = 'delivered', deliveredAt = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                    """, arguments: [deliveredAt, now, bookingId, version, kind.rawValue, email])
            }
            for f in failures {
                try db.execute(sql: """
                    UPDATE notice SET status = ?, attempts = ?, firstFailureAt = ?, lastFailureAt = ?, lastErrorCode = ?,
                           lastErrorText = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                    """, arguments: [f.status.rawValue, f.attempts, f.firstFailureAt, f.lastFailureAt, f.lastErrorCode,
                                     f.lastErrorText, now, bookingId, version, kind.rawValue, f.email])
            }
            let encoder = JSONEncoder()
            for m in outbox {
                try db.execute(sql: """
                    INSERT INTO outbox (bookingId, exchange, routingKey, messageId, type, body, headers, createdAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """, arguments: [bookingId, m.exchange, m.routingKey, m.messageID, m.type, Data(m.body),
                                     try encoder.encode(m.headers), now])
            }
        }
    }
    /// Outbox messages not yet confirmed by the broker, oldest first: of one
    /// booking, or of all (at start-up).
    public func unpublished(bookingId: String? = nil, limit: Int = 1000) async throws -> [OutboxRow] {
        try await pool.read { db in
            let rows: [Row]
            if let bookingId {
                rows = try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE bookingId = ? AND publishedAt IS NULL ORDER BY id LIMIT ?",
                                        arguments: [bookingId, limit])
            } else {
                rows = try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE publishedAt IS NULL ORDER BY id LIMIT ?",
                                        arguments: [limit])
            }
            let decoder = JSONDecoder()
            return try rows.map { row in
                var message = OutboxMessage(exchange: row["exchange"], routingKey: row["routingKey"], messageID: row["messageId"],
                                            type: row["type"], body: [UInt8](row["body"] as Data))
                message.headers = try decoder.decode([String: OutboxMessage.HeaderValue].self, from: row["headers"] as Data)
                return OutboxRow(id: row["id"], message: message)
            }
        }
    }

    /// Marks outbox rows as published (confirmed by the broker).
    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            for id in ids {
                try db.execute(sql: "UPDATE outbox SET publishedAt = ? WHERE id = ?", arguments: [now, id])
            }
        }
    }

    /// Deletes outbox rows published more than `age` seconds ago; returns how many.
    @discardableResult
    public func prunePublished(olderThan age: TimeInterval) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM outbox WHERE publishedAt IS NOT NULL AND publishedAt < ?",
                           arguments: [Date().timeIntervalSince1970 - age])
            return db.changesCount
        }
    }

    // MARK: Queries

    /// Every row of one kind (default passes) of a booking, by version and index.
    public func passes(bookingId: String, kind: NoticeKind = .pass) async throws -> [PassRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM notice WHERE bookingId = ? AND kind = ? ORDER BY version, attendeeIndex",
                             arguments: [bookingId, kind.rawValue]).map(Self.record)
        }
    }

    /// Every row of a booking, every kind, by version, kind and index.
    public func notices(bookingId: String) async throws -> [PassRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM notice WHERE bookingId = ? ORDER BY version, kind, attendeeIndex",
                             arguments: [bookingId]).map(Self.record)
        }
    }

    /// Rows per status (all bookings, all kinds).
    public func statusCounts() async throws -> [PassStatus: Int] {
        try await pool.read { db in
            var counts: [PassStatus: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT status, count(*) AS n FROM notice GROUP BY status") {
                if let s = PassStatus(rawValue: row["status"]) { counts[s] = row["n"] }
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
        var arguments: StatementArguments { [bookingId, version, kind.rawValue, email] }
    }

    private static func storeSnapshot(_ db: Database, _ booking: Booking, _ previous: BookingSnapshot?) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO snapshot (bookingId, version, json, previous) VALUES (?, ?, ?, ?)",
                       arguments: [booking.id, booking.version, try ContractJSON.encode(booking),
                                   try previous.map { try ContractJSON.encode($0) }])
        if let previous {
            // A snapshot stored by a retry message that had no `previous`.
            try db.execute(sql: "UPDATE snapshot SET previous = ? WHERE bookingId = ? AND version = ? AND previous IS NULL",
                           arguments: [try ContractJSON.encode(previous), booking.id, booking.version])
        }
    }

    /// Older versions' unsent work is void once a newer version is known:
    /// that version decides what each person is told (and re-claims passes
    /// still owed, see ``admit(event:booking:previous:)``).
    private static func supersede(_ db: Database, bookingId: String, below version: Int) throws {
        try db.execute(sql: """
            UPDATE notice SET status = 'dropped', updatedAt = ?
            WHERE bookingId = ? AND version < ? AND status IN ('attempting', 'scheduled')
            """, arguments: [Date().timeIntervalSince1970, bookingId, version])
    }

    private static func row(_ db: Database, _ key: RowKey) throws -> PassRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM notice WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                         arguments: key.arguments).map(record)
    }

    private static func setStatus(_ db: Database, _ key: RowKey, _ status: PassStatus, now: Double) throws {
        try db.execute(sql: "UPDATE notice SET status = ?, updatedAt = ? WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                       arguments: [status.rawValue, now] + key.arguments)
    }

    private static func record(_ row: Row) -> PassRecord {
        PassRecord(bookingId: row["bookingId"], version: row["version"],
                   kind: NoticeKind(rawValue: row["kind"]) ?? .pass, email: row["email"], attendeeIndex: row["attendeeIndex"],
                   status: PassStatus(rawValue: row["status"]) ?? .attempting, attempts: row["attempts"],
                   firstFailureAt: row["firstFailureAt"], lastFailureAt: row["lastFailureAt"],
                   lastErrorCode: row["lastErrorCode"], lastErrorText: row["lastErrorText"])
    }

    /// The row's history as work for recipient `index` of this message's list.
    private static func work(_ p: PassRecord, index: Int) -> PassWork {
        PassWork(attendeeIndex: index, attempts: p.attempts, firstFailureAt: p.firstFailureAt,
                 lastFailureAt: p.lastFailureAt, lastErrorCode: p.lastErrorCode, lastErrorText: p.lastErrorText)
    }
}
