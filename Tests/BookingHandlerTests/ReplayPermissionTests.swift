
import BookingContracts
@testable import BookingHandler
import Foundation
import ServiceSupport
import TestSupport
import Testing

/// `booking.replay`: who may ask and where it may publish.
@Suite("Replay permission")
struct ReplayPermissionTests {
    static func processor() throws -> (CommandProcessor, URL) {
        let dir = try TemporaryDirectory("replay")
        let store = try SQLiteBookingStore(path: dir.appending("h.sqlite").path)
        return (CommandProcessor(store: store, policy: CallerPolicy(administrators: ["ops"], replayUsers: ["availability-projector"]),
                                 now: { Fixture.now }), dir.url)
    }

    static func command(_ body: String, userID: String?) -> IncomingCommand {
        IncomingCommand(body: Array(body.utf8), typeProperty: "booking.replay", routingKey: "booking.replay",
                        messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: userID)
    }

    @Test(arguments: ["availability-projector", "ops"])
    func replayersAndAdministratorsMayReplay(_ user: String) async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        let result = try await processor.process(Self.command(#"{"queue":"availability-projector.replay","replayId":"r1"}"#, userID: user))
        #expect(result == .replay(ReplayBookings(queue: "availability-projector.replay", replayId: "r1")))
    }

    @Test(arguments: ["calendar-app", nil, ""] as [String?])
    func otherUsersAndAnonymousCallersMayNot(_ user: String?) async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        let result = try await processor.process(Self.command(#"{"queue":"availability-projector.replay"}"#, userID: user))
        guard case .handled(.error(let error), .replayBookings, false, _) = result else {
            Issue.record("expected a 2003 reply, got \(result)")
            return
        }
        #expect(error.code == .notPermitted)
    }

    @Test(arguments: ["pass-sender.events", "amq.gen-x", "availability-projector", "my.availability-projector.replay",
                      "availability-projector.events", "availability-projector.control"])
    func onlyProjectorQueues(_ queue: String) async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        let result = try await processor.process(Self.command(#"{"queue":"\#(queue)"}"#, userID: "ops"))
        guard case .handled(.error(let error), _, _, _) = result else {
            Issue.record("expected a 2003 reply, got \(result)")
            return
        }
        #expect(error.code == .notPermitted)
        #expect(error.field == "queue")
    }

    @Test func replayIdIsMadeUpWhenAbsentAndBodyIsChecked() async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        let result = try await processor.process(Self.command(#"{"queue":"availability-projector.replay.x"}"#, userID: "ops"))
        guard case .replay(let request) = result else {
            Issue.record("expected a replay, got \(result)")
            return
        }
        #expect(request.replayId?.isEmpty == false)
        let missing = try await processor.process(Self.command("{}", userID: "ops"))
        guard case .poison(.error(let error), _) = missing else {
            Issue.record("expected poison, got \(missing)")
            return
        }
        #expect(error.code == .invalidField)
        #expect(error.field == "queue")
    }

    @Test(arguments: [0, -1, ReplayStream.maxBookingsPerMessage + 1])
    func pageSizeOutOfRangeIsRefused(_ size: Int) async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        let result = try await processor.process(Self.command(
            #"{"queue":"availability-projector.replay","bookingsPerMessage":\#(size)}"#, userID: "ops"))
        guard case .handled(.error(let error), .replayBookings, false, _) = result else {
            Issue.record("expected 1100, got \(result)")
            return
        }
        #expect(error.code == .invalidField)
        #expect(error.field == "bookingsPerMessage")
        let fine = try await processor.process(Self.command(
            #"{"queue":"availability-projector.replay","bookingsPerMessage":\#(ReplayStream.maxBookingsPerMessage)}"#, userID: "ops"))
        guard case .replay(let request) = fine else {
            Issue.record("expected a replay, got \(fine)")
            return
        }
        #expect(request.bookingsPerMessage == ReplayStream.maxBookingsPerMessage)
    }

    /// The stored JSON a page passes on is each booking as its replay event
    /// would carry it, in the same order and pages.
    @Test func storedJSONPagesMatchTheDecodedPages() async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await Self.seedSevenBookings(processor)
        var after: String?
        var pages = 0
        while true {
            let rows = try await processor.store.replayBookingJSON(after: after, limit: 3)
            let decoded = try await processor.store.replayBookings(after: after, limit: 3)
            #expect(rows.map(\.id) == decoded.map(\.id))
            // Byte for byte what the contract's encoder writes for the booking
            // the single-event replay would carry.
            #expect(try rows.map(\.json) == decoded.map { [UInt8](try ContractJSON.encode($0)) })
            let body = ReplayPage.body(encodedBookings: rows.map(\.json))
            #expect(try ContractJSON.decode(ReplayPage.self, from: body) == ReplayPage(bookings: decoded))
            if rows.isEmpty { break }
            pages += 1
            after = rows.last?.id
        }
        #expect(pages == 3)
    }

    /// Berlin and bookings `b-0`…`b-6`, `b-3` cancelled, versions 1…7.
    static func seedSevenBookings(_ processor: CommandProcessor) async throws {
        try await processor.store.transaction { tx in
            _ = try tx.upsertRoom(Fixture.berlin, at: Date())
            for i in 0..<7 {
                var b = Fixture.booking(id: "b-\(i)", status: i == 3 ? .cancelled : .confirmed)
                b.version = i + 1
                try tx.save(b, startsAt: Date(), endsAt: Date())
            }
        }
    }

    @Test func storePagesEveryBooking() async throws {
        let (processor, dir) = try Self.processor()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await Self.seedSevenBookings(processor)
        var ids: [String] = []
        var after: String?
        while true {
            let page = try await processor.store.replayBookings(after: after, limit: 3)
            if page.isEmpty { break }
            ids += page.map(\.id)
            after = page.last?.id
        }
        #expect(ids == (0..<7).map { "b-\($0)" })
        #expect(try await processor.store.replayRooms().map(\.room.name) == ["Berlin"])
    }
}
