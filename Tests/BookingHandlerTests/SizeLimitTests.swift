import BookingContracts
import Foundation
import TestSupport
import Testing

@testable import BookingHandler

/// `count` bytes of ASCII text.
private func bytes(_ count: Int, _ letter: Character = "x") -> String {
    String(repeating: letter, count: count)
}

private func attendee(name: String) -> AttendeeInput {
    AttendeeInput(name: name, email: "ada@example.com", phone: "0170 1234567")
}

/// Every field limit of contract v1.1 (docs/contract/README.md), in UTF-8 bytes: exactly at the limit is
/// accepted, one byte over is 1100 naming the field.
@Suite("Size limits of fields (UTF-8 bytes)")
struct FieldSizeLimitTests {
    @Test func limitsAreTheContractOnes() {
        #expect(BookingRules.maxTitleBytes == 400)
        #expect(BookingRules.maxDescriptionBytes == 4_000)
        #expect(BookingRules.maxAttendeeNameBytes == 200)
        #expect(BookingRules.maxRoomTextBytes == 200)
        #expect(BookingRules.maxReasonBytes == 1_000)
        #expect(BookingRules.maxImageURLBytes == 2_048)
    }

    @Test func title() {
        _ = expectSuccess(BookingRules.text(title: bytes(400), description: nil))
        expectFailure(BookingRules.text(title: bytes(401), description: nil), .invalidField, field: "title")
        // Multi-byte: 200 two-byte letters are exactly 400 bytes; one more byte is over.
        _ = expectSuccess(BookingRules.text(title: bytes(200, "é"), description: nil))
        expectFailure(BookingRules.text(title: bytes(200, "é") + "x", description: nil), .invalidField,
                      field: "title")
    }

    /// One letter and 1,000 combining acute accents (U+0301, 2 bytes each):
    /// a single character, 2,001 bytes. Counting characters let it through.
    @Test func combiningMarksCountAsBytes() throws {
        let title = "a" + String(repeating: "\u{0301}", count: 1_000)
        #expect(title.count == 1)
        #expect(title.utf8.count == 2_001)
        let error = try #require(expectFailure(BookingRules.text(title: title, description: nil), .invalidField,
                                               field: "title"))
        #expect(error.text.contains("400 bytes"))
        expectFailure(BookingRules.validateCreate(Fixture.create(title: title), room: Fixture.berlin, now: Fixture.now),
                      .invalidField, field: "title")
        // 199 marks after the letter: 399 bytes, fine.
        _ = expectSuccess(BookingRules.text(title: "a" + String(repeating: "\u{0301}", count: 199), description: nil))
    }

    @Test func description() {
        _ = expectSuccess(BookingRules.text(title: "T", description: bytes(4_000)))
        expectFailure(BookingRules.text(title: "T", description: bytes(4_001)), .invalidField, field: "description")
    }

    @Test func attendeeName() throws {
        let ok = [attendee(name: "Ada"), attendee(name: "Bob"), attendee(name: bytes(200))]
        let people = try #require(expectSuccess(BookingRules.attendees(ok, capacity: 8)))
        #expect(people[2].name.utf8.count == 200)
        let over = [attendee(name: "Ada"), attendee(name: "Bob"), attendee(name: bytes(201))]
        expectFailure(BookingRules.attendees(over, capacity: 8), .invalidField, field: "attendees[2].name")
        // Trimmed first, like the emptiness check.
        _ = expectSuccess(BookingRules.attendees([attendee(name: "  " + bytes(200) + " ")], capacity: 8))
        // Through booking.create.
        expectFailure(BookingRules.validateCreate(Fixture.create(attendees: [Fixture.ada, attendee(name: bytes(201))]),
                                                  room: Fixture.berlin, now: Fixture.now),
                      .invalidField, field: "attendees[1].name")
    }

    @Test func roomName() {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: bytes(200), capacity: 1)))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: bytes(201), capacity: 1)), .invalidField,
                      field: "name")
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: bytes(100, "ß") + "x", capacity: 1)),
                      .invalidField, field: "name")
    }

    @Test func location() {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", location: bytes(200), capacity: 1)))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", location: bytes(201), capacity: 1)),
                      .invalidField, field: "location")
    }

    @Test func size() {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", size: bytes(200), capacity: 1)))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", size: bytes(201), capacity: 1)),
                      .invalidField, field: "size")
    }

    @Test func equipmentItems() {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", equipment: ["tv", bytes(200)], capacity: 1)))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", equipment: ["tv", bytes(201)], capacity: 1)),
                      .invalidField, field: "equipment[1]")
    }

    @Test func imageURLLength() {
        let prefix = "https://example.com/"
        let atLimit = prefix + bytes(2_048 - prefix.utf8.count)
        #expect(atLimit.utf8.count == 2_048)
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: [atLimit])))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: [atLimit + "x"])),
                      .invalidField, field: "images[0]")
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1,
                                                             images: ["https://example.com/1.jpg", atLimit + "x"])),
                      .invalidField, field: "images[1]")
    }

    @Test(arguments: ["javascript:alert(1)", "data:image/png;base64,AAAA", "file:///etc/passwd", "ftp://example.com/1",
                      "/rooms/1.jpg", "example.com/1.jpg", "https://", "https:///path", "https://exa mple.com/1", ""])
    func imageURLMustBeHTTP(_ url: String) {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1,
                                                             images: ["https://example.com/ok.jpg", url])),
                      .invalidField, field: "images[1]")
    }

    @Test(arguments: ["https://example.com/1.jpg", "http://example.com", "HTTPS://Example.COM/a%20b.jpg",
                      "https://[::1]:8443/x", "https://rooms.example.com/berlin/1.jpg?v=2#top"])
    func imageURLAccepted(_ url: String) {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: [url])))
    }

    @Test func cancelReason() {
        #expect(BookingRules.reason(nil) == nil)
        #expect(BookingRules.reason(bytes(1_000)) == nil)
        let error = BookingRules.reason(bytes(1_001))
        #expect(error?.code == .invalidField)
        #expect(error?.field == "reason")
        #expect(BookingRules.reason(bytes(500, "ü")) == nil)
        #expect(BookingRules.reason(bytes(500, "ü") + "x")?.field == "reason")
    }
}

/// The limits as the command pipeline applies them.
@Suite("Size limits in the command pipeline")
struct PipelineSizeLimitTests {
    static func processor() async throws -> (CommandProcessor, URL) {
        let dir = try TemporaryDirectory("limits")
        let store = try SQLiteBookingStore(path: dir.appending("h.sqlite").path)
        let processor = CommandProcessor(store: store, now: { Fixture.now })
        _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8}]"#.utf8))
        return (processor, dir.url)
    }

    static func command(_ type: CommandType, _ body: [UInt8]) -> IncomingCommand {
        IncomingCommand(body: body, typeProperty: type.rawValue, routingKey: type.rawValue,
                        messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: nil)
    }

    /// A body over 256 KiB is poison: 1000, text naming the limit.
    @Test func oversizedBodyIsPoison() async throws {
        let (processor, dir) = try await Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        // One letter and a million combining marks: 2 MB, never decoded.
        let title = "a" + String(repeating: "\u{0301}", count: 1_000_000)
        let body = try Command.createBooking(Fixture.create(title: title)).encodedBody()
        #expect(body.count > ContractLimits.maxBodyBytes)
        let result = try await processor.process(Self.command(.createBooking, body))
        guard case .poison(.error(let error), let reason) = result else {
            Issue.record("expected poison, got \(result)")
            return
        }
        #expect(error.code == .invalidJSON)
        #expect(error.text.hasPrefix("body is larger than 256 KiB"))
        #expect(error.field == nil)
        #expect(reason.hasPrefix("1000 body is larger than 256 KiB"))
    }

    @Test func cancelReasonOverTheLimit() async throws {
        let (processor, dir) = try await Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        let created = try await processor.process(Self.command(.createBooking,
                                                               try Command.createBooking(Fixture.create()).encodedBody()))
        guard case .handled(.booking(let booking), _, _, _) = created else {
            Issue.record("expected a booking, got \(created)")
            return
        }
        let tooLong = CancelBooking(bookingId: booking.id, reason: bytes(1_001))
        let refused = try await processor.process(Self.command(.cancelBooking,
                                                               try Command.cancelBooking(tooLong).encodedBody()))
        guard case .handled(.error(let error), .cancelBooking, false, _) = refused else {
            Issue.record("expected a 1100 reply, got \(refused)")
            return
        }
        #expect(error.code == .invalidField)
        #expect(error.field == "reason")

        let atLimit = CancelBooking(bookingId: booking.id, reason: bytes(1_000))
        let cancelled = try await processor.process(Self.command(.cancelBooking,
                                                                 try Command.cancelBooking(atLimit).encodedBody()))
        guard case .handled(.booking(let after), _, _, _) = cancelled else {
            Issue.record("expected the cancelled booking, got \(cancelled)")
            return
        }
        #expect(after.status == .cancelled)
        #expect(after.cancelReason == bytes(1_000))
    }
}

/// The `idempotency-key` header is held to what `message_id` (an AMQP short
/// string) can carry: a longer one gets 1100 and changes nothing.
@Suite("Idempotency key size")
struct IdempotencyKeySizeTests {
    @Test func aKeyOver255BytesIsRefusedOneAtTheLimitIsTaken() async throws {
        let (processor, dir) = try await PipelineSizeLimitTests.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        func run(key: String, start: String) async throws -> CommandReply {
            let body = try Command.createBooking(Fixture.create(start: start, end: "18:00")).encodedBody()
            let command = IncomingCommand(body: body, typeProperty: "booking.create", routingKey: "booking.create",
                                          messageID: nil, idempotencyKeyHeader: key, userID: nil)
            guard case .handled(let reply, _, _, _) = try await processor.process(command) else { throw CancellationError() }
            return reply
        }
        let tooLong = try await run(key: String(repeating: "k", count: 256), start: "17:00")
        #expect(tooLong.errorValue?.code == .invalidField && tooLong.errorValue?.field == "idempotency-key", "\(tooLong)")
        #expect(try await processor.store.counts().inbox == 0, "a refused key is not stored")
        // Multi-byte: 128 × "é" is 256 bytes.
        #expect(try await run(key: String(repeating: "é", count: 128), start: "17:00").errorValue?.field == "idempotency-key")
        let atLimit = try await run(key: String(repeating: "k", count: 255), start: "17:00")
        #expect(atLimit.bookingValue != nil, "\(atLimit)")
    }
}
