import BookingContracts
import Foundation
import Logging
import PostgresSupport
import ServiceSettings
import ServiceSupport
import TestSupport
import Testing
@testable import BookingHandler

/// What only the PostgreSQL store has to show: its settings, the database's
/// own refusal of double bookings, and several instances on one database.
@Suite("PostgreSQL store")
struct PostgresStoreTests {
    @Test func databaseURLsAreParsedAndBadOnesNamed() throws {
        let s = try PostgresSettings(url: "postgres://svc:p%40ss@db.example:6543/bookings?sslmode=verify-full&schema=prod_1")
        #expect(s.host == "db.example")
        #expect(s.port == 6543)
        #expect(s.user == "svc")
        #expect(s.password == "p@ss")
        #expect(s.database == "bookings")
        #expect(s.tls == .verifyFull)
        #expect(s.schema == "prod_1")
        #expect(!s.description.contains("p@ss"))
        #expect(try PostgresSettings(url: "postgres://u:a%2541b@h/d%20b").password == "a%41b", "decoded once")
        #expect(try PostgresSettings(url: "postgres://u:a%2541b@h/d%20b").database == "d b")
        #expect(try PostgresSettings(url: "postgresql://u@127.0.0.1/db").tls == .disable, "loopback: no TLS by default")
        #expect(try PostgresSettings(url: "postgres://u@db.internal/db").tls == .require, "elsewhere: TLS by default")
        for bad in ["mysql://u@h/db", "postgres://h/db", "postgres://u@h/", "postgres://u@h/db?sslmode=maybe",
                    "postgres://u@h/db?schema=x;drop", "postgres://u@h/db?schema=1x", "postgres://u@h/db?pool=3"] {
            #expect(throws: SettingsError.self, "\(bad)") { try PostgresSettings(url: bad) }
        }
        do {
            _ = try PostgresSettings(url: "postgres://u:kX9q@h/db?sslmode=nope")
        } catch {
            #expect(!"\(error)".contains("kX9q"), "errors never echo the password")
        }
    }

    /// The exclusion constraint refuses an overlapping active booking even
    /// when it is written around the handler (psql as the same role), and
    /// lets through what is not a conflict: a cancelled row, the next slot.
    /// A failure swallowed inside a transaction must not pass for a commit:
    /// PostgreSQL answers such a COMMIT with the tag ROLLBACK, no error.
    @Test func aCommitOfAFailedTransactionThrows() async throws {
        let writer = try PostgresWriter(settings: PostgresSettings(url: try TestPostgres.url(schemaPrefix: "commit")),
                                        label: "commit-test", logger: Logger(label: "commit-test"))
        let logger = Logger(label: "commit-test")
        await #expect(throws: PostgresCommitRefused.self) {
            try await writer.transaction(lockKey: "commit-test") { connection in
                _ = try? connection.run("SELECT 1/0", logger)
            }
        }
        // The connection is usable again afterwards.
        let one = try await writer.transaction(lockKey: nil) { connection in
            try connection.run("SELECT 1", logger).first?.decode(Int.self)
        }
        #expect(one == 1)
        await writer.close()
    }

    /// A backlog larger than one prune statement's batch goes in one prune.
    @Test func pruningWorksThroughABacklogInBatches() async throws {
        let fixture = try StoreFixture(.postgres)
        let store = try await fixture.open()
        let schema = String(fixture.databaseURL!.split(separator: "=").last!)
        let rows = PostgresBookingStore.pruneBatch * 2 + 17
        _ = try TestPostgres.control("psql", ["-c", """
            INSERT INTO \(schema).inbox (scope, key, reply, createdAt)
            SELECT '', 'k' || n, '{}', 0 FROM generate_series(1, \(rows)) AS n
            """])
        #expect(try await store.counts().inbox == rows)
        try await store.prune(olderThan: 60)
        #expect(try await store.counts().inbox == 0)
        await store.close()
    }

    @Test func theDatabaseItselfRefusesOverlappingActiveBookings() async throws {
        let url = try TestPostgres.url(schemaPrefix: "excl")
        let settings = try PostgresSettings(url: url)
        _ = try await PostgresBookingStore.open(settings: settings, logger: Logger(label: "excl"), waitSeconds: 0)
        let schema = try #require(settings.schema)
        func insert(_ id: String, _ status: String, _ start: Int, _ end: Int) throws -> String {
            try TestPostgres.control("psql", ["-v", "ON_ERROR_STOP=1", "-c", """
                SET search_path TO \(schema); INSERT INTO booking (id, room, status, startsAt, endsAt, version, json)
                VALUES ('\(id)', 'Berlin', '\(status)', \(start), \(end), 1, '{}')
                """])
        }
        _ = try insert("a", "confirmed", 1000, 2000)
        _ = try insert("b", "cancelled", 1500, 1800)
        _ = try insert("c", "pending", 2000, 3000)
        for (id, status) in [("d", "confirmed"), ("e", "pending"), ("f", "inProgress")] {
            do {
                _ = try insert(id, status, 1900, 2100)
                Issue.record("\(status) overlapping a and c was stored")
            } catch {
                #expect("\(error)".contains("booking_no_overlap"), "\(error)")
            }
        }
    }

    /// Two handler instances on one database (two stores, two connections
    /// each, as two processes on two hosts would have), racing for one
    /// slot: exactly one booking, every loser told which one.
    @Test func twoInstancesRacingForOneSlotBookItOnce() async throws {
        let fixture = try StoreFixture(.postgres)
        let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!
        let first = CommandProcessor(store: try await fixture.open(), now: { now })
        let second = CommandProcessor(store: try await fixture.open(), now: { now })
        _ = try await first.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8}]"#.utf8))
        let replies = try await withThrowingTaskGroup(of: CommandReply.self) { group in
            for i in 0..<40 {
                let processor = i % 2 == 0 ? first : second
                group.addTask {
                    let body = #"{"room":"Berlin","date":"2026-11-23","start":"\#(i % 4 < 2 ? "09:00" : "09:15")","end":"10:00","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
                    guard case .handled(let reply, _, _, _) = try await processor.process(IncomingCommand(
                        body: Array(body.utf8), typeProperty: "booking.create", routingKey: "booking.create",
                        messageID: "race-\(i)", idempotencyKeyHeader: nil, userID: nil)) else { throw CancellationError() }
                    return reply
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let winners = replies.compactMap(\.bookingValue)
        #expect(winners.count == 1)
        #expect(replies.filter { if case .error(let e) = $0 { return e.code == .overlap && e.conflicts == winners.map(\.id) } else { return false } }.count == 39)
        #expect(try await first.store.counts().bookings == 1)
        // Each instance's events went to its own relay, none to both.
        let handed = first.store.takeCommitted(limit: 1000) + second.store.takeCommitted(limit: 1000)
        #expect(Set(handed.map(\.id)).count == handed.count)
        #expect(handed.filter { $0.routingKey.hasPrefix("booking.") }.count == 2, "created and confirmed, once")
    }
}
