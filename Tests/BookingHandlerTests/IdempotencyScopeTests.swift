import BookingContracts
import Foundation
import GRDB
import Testing
@testable import BookingHandler

/// Idempotency keys scoped by the broker-verified sender (contract v1.1),
/// on a real SQLite file.
@Suite("Idempotency scoped by sender")
struct IdempotencyScopeTests {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString)")
    var path: String { directory.appendingPathComponent("db.sqlite").path }

    func processor() async throws -> CommandProcessor {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!
        let processor = CommandProcessor(store: try BookingStore(path: path), now: { now })
        _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8}]"#.utf8))
        return processor
    }

    func create(_ start: String, _ end: String, key: String, user: String?, title: String = "T") -> IncomingCommand {
        let body = #"{"room":"Berlin","date":"2026-11-23","start":"\#(start)","end":"\#(end)","title":"\#(title)","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
        return IncomingCommand(body: Array(body.utf8), typeProperty: "booking.create", routingKey: "booking.create",
                               messageID: key, idempotencyKeyHeader: nil, userID: user)
    }

    func reply(_ processor: CommandProcessor, _ command: IncomingCommand) async throws -> (CommandReply, Bool) {
        guard case .handled(let reply, _, let duplicate, _) = try await processor.process(command) else {
            throw CancellationError()
        }
        return (reply, duplicate)
    }

    @Test func sameKeyFromAnotherUserIsAnotherCommand() async throws {
        let processor = try await processor()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (first, _) = try await reply(processor, create("09:00", "10:00", key: "k-1", user: "partner-a"))
        let (second, duplicate) = try await reply(processor, create("11:00", "12:00", key: "k-1", user: "partner-b"))
        #expect(!duplicate)
        let a = try #require(first.bookingValue)
        let b = try #require(second.bookingValue)
        #expect(a.id != b.id)
        #expect(b.requestedBy == "partner-b")
        #expect(b.start == "11:00")
        // The anonymous scope is a third one.
        let (third, _) = try await reply(processor, create("13:00", "14:00", key: "k-1", user: nil))
        #expect(third.bookingValue?.requestedBy == nil)
        #expect(try await processor.store.counts().bookings == 3)
    }

    @Test func sameKeySameUserSameBodyIsTheStoredReply() async throws {
        let processor = try await processor()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (first, _) = try await reply(processor, create("09:00", "10:00", key: "k-2", user: "partner-a"))
        let (again, duplicate) = try await reply(processor, create("09:00", "10:00", key: "k-2", user: "partner-a"))
        #expect(duplicate)
        #expect(again == first)
        #expect(try await processor.store.counts().bookings == 1)
    }

    @Test func sameKeySameUserOtherBodyOrTypeIs1009() async throws {
        let processor = try await processor()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (first, _) = try await reply(processor, create("09:00", "10:00", key: "k-3", user: "partner-a"))
        let bookingID = try #require(first.bookingValue?.id)
        let (other, duplicate) = try await reply(processor, create("09:00", "10:00", key: "k-3", user: "partner-a", title: "Other"))
        #expect(!duplicate)
        #expect(other.errorValue?.code == .idempotencyKeyReused)
        let cancel = IncomingCommand(body: Array(#"{"bookingId":"\#(bookingID)"}"#.utf8), typeProperty: "booking.cancel",
                                     routingKey: "booking.cancel", messageID: "k-3", idempotencyKeyHeader: nil,
                                     userID: "partner-a")
        let (cancelReply, _) = try await reply(processor, cancel)
        #expect(cancelReply.errorValue?.code == .idempotencyKeyReused)
        // Nothing changed: one booking, still confirmed.
        #expect(try await processor.store.counts().bookings == 1)
        let stored = try await processor.store.transaction { tx in try tx.booking(id: bookingID) }
        #expect(stored?.status == .confirmed)
        #expect(stored?.title == "T")
    }

    @Test func rowsFromBeforeScopesStillAnswerARedelivery() async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A database as the previous version left it: schema v1 with an
        // unscoped inbox row.
        let old = try DatabaseQueue(path: path)
        try BookingStore.migrator.migrate(old, upTo: "v1")
        let stored = try ContractJSON.encode(CommandReply.failure(.overlap, "stored before the upgrade"))
        try await old.write { db in
            try db.execute(sql: "INSERT INTO inbox (key, commandType, reply, createdAt) VALUES (?, ?, ?, ?)",
                           arguments: ["old-key", "booking.create", stored, Date().timeIntervalSince1970])
        }
        try old.close()
        let processor = try await processor()
        let (answer, duplicate) = try await reply(processor, create("09:00", "10:00", key: "old-key", user: "partner-a"))
        #expect(duplicate)
        #expect(answer.errorValue?.text == "stored before the upgrade")
        #expect(try await processor.store.counts().bookings == 0)
    }
}

extension CommandReply {
    var bookingValue: Booking? {
        if case .booking(let b) = self { return b }
        return nil
    }

    var errorValue: ReplyError? {
        if case .error(let e) = self { return e }
        return nil
    }
}
