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

/// One pass in the ledger.
public struct PassRecord: Sendable, Equatable {
    public var bookingId: String
    public var version: Int
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

/// The result of admitting a message to the ledger.
public enum Admission: Sendable, Equatable {
    /// Nothing to send: the whole message is moot.
    case dropped(DropReason)
    /// Send `work` (possibly empty: everything was delivered or is owned by
    /// another message already) for `booking`.
    case proceed(booking: Booking, work: [PassWork])
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
/// It records, per booking, the newest version seen and whether it was
/// cancelled; per (booking, version, attendee) the pass's status and
/// attempts; the booking snapshot of every version (operator retries need
/// it); and an outbox of follow-up messages (retries, `passes.failed`,
/// `pass.*` events) written in the same transaction as the statuses they
/// follow from.
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
        return migrator
    }

    // MARK: Admission

    /// Admits a `booking.confirmed` / `booking.rescheduled` event: drops it
    /// when the booking is cancelled or a newer version is known, or (after
    /// recording its version) when it is not confirmed; otherwise
    /// records the version and its snapshot and claims every pass of it
    /// that is new or was being attempted when a previous process died.
    public func admit(event booking: Booking) async throws -> Admission {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            if let row = try Row.fetchOne(db, sql: "SELECT latestVersion, cancelled FROM booking WHERE id = ?", arguments: [booking.id]) {
                if row["cancelled"] as Bool { return .dropped(.cancelled) }
                let latest: Int = row["latestVersion"]
                if latest > booking.version { return .dropped(.stale) }
                if latest < booking.version {
                    try Self.supersede(db, bookingId: booking.id, below: booking.version)
                }
                try db.execute(sql: "UPDATE booking SET latestVersion = ?, updatedAt = ? WHERE id = ?",
                               arguments: [booking.version, now, booking.id])
            } else {
                try db.execute(sql: "INSERT INTO booking (id, latestVersion, cancelled, updatedAt) VALUES (?, ?, 0, ?)",
                               arguments: [booking.id, booking.version, now])
            }
            try Self.storeSnapshot(db, booking)
            // The version is recorded (older passes and their retries are
            // superseded: that time is void), but nothing is sent for a
            // booking that waits for approval again; its booking.confirmed
            // (a higher version) brings the passes.
            guard booking.status == .confirmed else { return .dropped(.notConfirmed) }
            var work: [PassWork] = []
            for index in booking.attendees.indices {
                if let existing = try Self.pass(db, booking.id, booking.version, index) {
                    // attempting = a previous process died in the gateway call.
                    if existing.status == .attempting { work.append(Self.work(existing)) }
                } else {
                    try db.execute(sql: """
                        INSERT INTO pass (bookingId, version, attendeeIndex, status, attempts, updatedAt)
                        VALUES (?, ?, ?, 'attempting', 0, ?)
                        """, arguments: [booking.id, booking.version, index, now])
                    work.append(PassWork(attendeeIndex: index, attempts: 0))
                }
            }
            return .proceed(booking: booking, work: work)
        }
    }

    /// Thrown when a retry message cannot be used (poison).
    public struct UnusableMessage: Error, CustomStringConvertible {
        public let description: String
    }

    /// Admits a retry message. A back-off retry claims a pass only when the
    /// ledger agrees on its attempt count (so a second delivery of the same
    /// message sends nothing); an operator retry claims a pass only when it
    /// is `failed` (resetting its attempts) or was being attempted for that
    /// same request when a previous process died. Delivered passes are
    /// never claimed.
    public func admit(retry message: PassRetryMessage) async throws -> Admission {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            let bookingRow = try Row.fetchOne(db, sql: "SELECT latestVersion, cancelled FROM booking WHERE id = ?",
                                              arguments: [message.bookingId])
            if let bookingRow {
                if bookingRow["cancelled"] as Bool { return .dropped(.cancelled) }
                if (bookingRow["latestVersion"] as Int) > message.version { return .dropped(.stale) }
            }
            var booking = message.booking
            if booking == nil, let data = try Data.fetchOne(
                db, sql: "SELECT json FROM snapshot WHERE bookingId = ? AND version = ?",
                arguments: [message.bookingId, message.version]) {
                booking = try? ContractJSON.decode(Booking.self, from: data)
            }
            guard let booking, booking.id == message.bookingId, booking.version == message.version else {
                throw UnusableMessage(description: "no snapshot of booking \(message.bookingId) v\(message.version) (neither in the message nor in the ledger)")
            }
            if bookingRow == nil {
                try db.execute(sql: "INSERT INTO booking (id, latestVersion, cancelled, updatedAt) VALUES (?, ?, 0, ?)",
                               arguments: [booking.id, booking.version, now])
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
            try Self.storeSnapshot(db, booking)
            var work: [PassWork] = []
            for p in message.passes.sorted(by: { $0.attendeeIndex < $1.attendeeIndex }) {
                guard booking.attendees.indices.contains(p.attendeeIndex) else {
                    throw UnusableMessage(description: "attendee index \(p.attendeeIndex) is not in booking \(booking.id) v\(booking.version)")
                }
                let existing = try Self.pass(db, booking.id, booking.version, p.attendeeIndex)
                switch message.kind {
                case .backoff:
                    if let existing {
                        guard existing.status == .scheduled || existing.status == .attempting,
                              existing.attempts == p.attempts else { continue }
                        try Self.setStatus(db, existing, .attempting, now: now)
                        work.append(Self.work(existing))
                    } else {
                        try db.execute(sql: """
                            INSERT INTO pass (bookingId, version, attendeeIndex, status, attempts, firstFailureAt,
                                              lastFailureAt, lastErrorCode, lastErrorText, updatedAt)
                            VALUES (?, ?, ?, 'attempting', ?, ?, ?, ?, ?, ?)
                            """, arguments: [booking.id, booking.version, p.attendeeIndex, p.attempts, p.firstFailureAt,
                                             p.lastFailureAt, p.lastErrorCode, p.lastErrorText, now])
                        work.append(p)
                    }
                case .operator:
                    let token = message.retryToken ?? ""
                    if let existing {
                        let storedToken = try String.fetchOne(
                            db, sql: "SELECT retryToken FROM pass WHERE bookingId = ? AND version = ? AND attendeeIndex = ?",
                            arguments: [booking.id, booking.version, p.attendeeIndex])
                        if existing.status == .failed && (token.isEmpty || storedToken != token) {
                            try db.execute(sql: """
                                UPDATE pass SET status = 'attempting', attempts = 0, firstFailureAt = NULL, lastFailureAt = NULL,
                                       lastErrorCode = NULL, lastErrorText = NULL, retryToken = ?, updatedAt = ?
                                WHERE bookingId = ? AND version = ? AND attendeeIndex = ?
                                """, arguments: [token, now, booking.id, booking.version, p.attendeeIndex])
                            work.append(PassWork(attendeeIndex: p.attendeeIndex, attempts: 0))
                        } else if existing.status == .attempting && !token.isEmpty && storedToken == token {
                            work.append(Self.work(existing))
                        }
                    } else {
                        try db.execute(sql: """
                            INSERT INTO pass (bookingId, version, attendeeIndex, status, attempts, retryToken, updatedAt)
                            VALUES (?, ?, ?, 'attempting', 0, ?, ?)
                            """, arguments: [booking.id, booking.version, p.attendeeIndex, token, now])
                        work.append(PassWork(attendeeIndex: p.attendeeIndex, attempts: 0))
                    }
                }
            }
            return .proceed(booking: booking, work: work)
        }
    }

    /// Records `booking.cancelled`: the booking is cancelled for good, every
    /// pass not yet delivered or given up is dropped. Returns how many.
    public func cancel(booking: Booking) async throws -> Int {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            try db.execute(sql: """
                INSERT INTO booking (id, latestVersion, cancelled, updatedAt) VALUES (?, ?, 1, ?)
                ON CONFLICT(id) DO UPDATE SET cancelled = 1, latestVersion = max(latestVersion, excluded.latestVersion),
                                              updatedAt = excluded.updatedAt
                """, arguments: [booking.id, booking.version, now])
            try db.execute(sql: """
                UPDATE pass SET status = 'dropped', updatedAt = ? WHERE bookingId = ? AND status IN ('attempting', 'scheduled')
                """, arguments: [now, booking.id])
            return db.changesCount
        }
    }

    // MARK: Results

    /// Records the result of one gateway call in one transaction: delivered
    /// passes, failed ones (scheduled again or given up), and the messages
    /// that follow from it.
    public func record(bookingId: String, version: Int, delivered: [Int], deliveredAt: String,
                       failures: [FailureUpdate], outbox: [OutboxMessage]) async throws {
        try await pool.write { db in
            let now = Date().timeIntervalSince1970
            for index in delivered {
                try db.execute(sql: """
                    UPDATE pass SET status = 'delivered', deliveredAt = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND attendeeIndex = ?
                    """, arguments: [deliveredAt, now, bookingId, version, index])
            }
            for f in failures {
                try db.execute(sql: """
                    UPDATE pass SET status = ?, attempts = ?, firstFailureAt = ?, lastFailureAt = ?, lastErrorCode = ?,
                           lastErrorText = ?, updatedAt = ?
                    WHERE bookingId = ? AND version = ? AND attendeeIndex = ?
                    """, arguments: [f.status.rawValue, f.attempts, f.firstFailureAt, f.lastFailureAt, f.lastErrorCode,
                                     f.lastErrorText, now, bookingId, version, f.attendeeIndex])
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

    /// Every pass of a booking, by version and attendee.
    public func passes(bookingId: String) async throws -> [PassRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM pass WHERE bookingId = ? ORDER BY version, attendeeIndex",
                             arguments: [bookingId]).map(Self.record)
        }
    }

    /// Passes per status (all bookings).
    public func statusCounts() async throws -> [PassStatus: Int] {
        try await pool.read { db in
            var counts: [PassStatus: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT status, count(*) AS n FROM pass GROUP BY status") {
                if let s = PassStatus(rawValue: row["status"]) { counts[s] = row["n"] }
            }
            return counts
        }
    }

    // MARK: Helpers

    private static func storeSnapshot(_ db: Database, _ booking: Booking) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO snapshot (bookingId, version, json) VALUES (?, ?, ?)",
                       arguments: [booking.id, booking.version, try ContractJSON.encode(booking)])
    }

    private static func supersede(_ db: Database, bookingId: String, below version: Int) throws {
        try db.execute(sql: """
            UPDATE pass SET status = 'dropped', updatedAt = ?
            WHERE bookingId = ? AND version < ? AND status IN ('attempting', 'scheduled')
            """, arguments: [Date().timeIntervalSince1970, bookingId, version])
    }

    private static func pass(_ db: Database, _ bookingId: String, _ version: Int, _ index: Int) throws -> PassRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM pass WHERE bookingId = ? AND version = ? AND attendeeIndex = ?",
                         arguments: [bookingId, version, index]).map(record)
    }

    private static func setStatus(_ db: Database, _ p: PassRecord, _ status: PassStatus, now: Double) throws {
        try db.execute(sql: "UPDATE pass SET status = ?, updatedAt = ? WHERE bookingId = ? AND version = ? AND attendeeIndex = ?",
                       arguments: [status.rawValue, now, p.bookingId, p.version, p.attendeeIndex])
    }

    private static func record(_ row: Row) -> PassRecord {
        PassRecord(bookingId: row["bookingId"], version: row["version"], attendeeIndex: row["attendeeIndex"],
                   status: PassStatus(rawValue: row["status"]) ?? .attempting, attempts: row["attempts"],
                   firstFailureAt: row["firstFailureAt"], lastFailureAt: row["lastFailureAt"],
                   lastErrorCode: row["lastErrorCode"], lastErrorText: row["lastErrorText"])
    }

    private static func work(_ p: PassRecord) -> PassWork {
        PassWork(attendeeIndex: p.attendeeIndex, attempts: p.attempts, firstFailureAt: p.firstFailureAt,
                 lastFailureAt: p.lastFailureAt, lastErrorCode: p.lastErrorCode, lastErrorText: p.lastErrorText)
    }
}
