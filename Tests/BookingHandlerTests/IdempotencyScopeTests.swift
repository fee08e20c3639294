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
        let processor = CommandProcessor(store: try SQLiteBookingStore(path: path), now: { now })
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

    @Test func rowsFromBeforeScopesAnswerTheirRequesterOnly() async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A database as the previous version left it: schema v1 with
        // unscoped inbox rows — a booking of partner-a's, and an error.
        let old = try DatabaseQueue(path: path)
        try SQLiteBookingStore.migrator.migrate(old, upTo: "v1")
        var booking = Fixture.booking(id: "old-booking", requestedBy: "partner-a")
        booking.attendees = [Attendee(name: "Ada", email: "ada@example.com", phone: "+491701234567")]
        let bookingReply = try ContractJSON.encode(CommandReply.booking(booking))
        let errorReply = try ContractJSON.encode(CommandReply.failure(.overlap, "stored before the upgrade"))
        try await old.write { db in
            for (key, reply) in [("old-booking-key", bookingReply), ("old-error-key", errorReply)] {
                try db.execute(sql: "INSERT INTO inbox (key, commandType, reply, createdAt) VALUES (?, ?, ?, ?)",
                               arguments: [key, "booking.create", reply, Date().timeIntervalSince1970])
            }
        }
        try old.close()
        let processor = try await processor()
        // The requester's redelivery is answered from the inbox …
        let (mine, duplicate) = try await reply(processor, create("09:00", "10:00", key: "old-booking-key", user: "partner-a"))
        #expect(duplicate)
        #expect(mine.bookingValue?.id == "old-booking")
        // … another user's command with that key is its own command and
        // never sees partner-a's attendees.
        let (theirs, theirsDuplicate) = try await reply(processor, create("11:00", "12:00", key: "old-booking-key", user: "partner-b"))
        #expect(!theirsDuplicate)
        #expect(theirs.bookingValue?.requestedBy == "partner-b")
        #expect(theirs.bookingValue?.id != "old-booking")
        // An old error reply (no personal data) still answers any sender.
        let (error, errorDuplicate) = try await reply(processor, create("13:00", "14:00", key: "old-error-key", user: "partner-b"))
        #expect(errorDuplicate)
        #expect(error.errorValue?.text == "stored before the upgrade")
    }
}
