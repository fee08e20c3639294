import BookingContracts
import Foundation
import Testing

@testable import BookingHandler

/// Contract v1.2, `maxActiveBookings`: one requester's bookings of a room
/// that have not ended, counted under the write lock on both stores.
@Suite("Calendars: the quota of active bookings")
struct QuotaTests {
    static let room = Room(name: "Loft", capacity: 4, maxActiveBookings: 3)

    @Test func theRuleRefusesAtExactlyTheLimit() throws {
        #expect(BookingRules.quotaRefusal(room: Self.room, active: 2) == nil, "the third booking fits")
        let refusal = try #require(BookingRules.quotaRefusal(room: Self.room, active: 3))
        #expect(refusal.code == .quotaExceeded && refusal.limit == 3)
        #expect(refusal.text.contains("3 active bookings") && refusal.text.contains("Loft"))
        #expect(BookingRules.quotaRefusal(room: Self.room, active: 1, adding: 2) == nil, "a series filling it exactly")
        #expect(BookingRules.quotaRefusal(room: Self.room, active: 1, adding: 3)?.limit == 3)
        #expect(BookingRules.quotaRefusal(room: Room(name: "Open", capacity: 4), active: 10_000) == nil, "no quota")
    }

    @Test(arguments: [0, -1, BookingRules.maxActiveBookingsLimit + 1])
    func anInvalidQuotaIsRefusedNamingTheField(_ quota: Int) {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "Loft", capacity: 4, maxActiveBookings: quota)), .invalidField,
                      field: "maxActiveBookings")
    }

    @Test func aValidQuotaIsKeptAndNoneStaysAbsent() throws {
        #expect(expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "Loft", capacity: 4, maxActiveBookings: 1)))?
            .maxActiveBookings == 1)
        let plain = try #require(expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "Loft", capacity: 4))))
        #expect(plain.maxActiveBookings == nil)
        #expect(!String(decoding: try ContractJSON.encode(plain), as: UTF8.self).contains("maxActiveBookings"),
                "a v1.1 room reads as before")
    }

    // MARK: On both stores

    static let now = utc("2026-11-22T10:00:00Z")

    func processor(_ store: any BookingStore) -> CommandProcessor {
        CommandProcessor(store: store, policy: CallerPolicy(administrators: ["root"]), now: { Self.now })
    }

    func create(_ start: String, _ end: String, user: String?, date: String = "2026-11-23", extra: String = "") -> IncomingCommand {
        let body = #"{"room":"Loft","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]\#(extra)}"#
        return IncomingCommand(body: Array(body.utf8), typeProperty: "booking.create", routingKey: "booking.create",
                               messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: user)
    }

    func reply(_ processor: CommandProcessor, _ command: IncomingCommand) async throws -> CommandReply {
        guard case .handled(let reply, _, _, _) = try await processor.process(command) else { throw CancellationError() }
        return reply
    }

    /// Twelve creates of one requester at once, half through a second
    /// store on the same database (another handler process): exactly the
    /// quota succeeds, the rest get 1113 with the limit.
    @Test(arguments: StoreKind.allCases)
    func concurrentCreatesOfOneRequesterNeverExceedTheQuota(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let first = processor(try await fixture.open()), second = processor(try await fixture.open())
        _ = try await first.upsertRooms(fileContents: Data(#"[{"name": "Loft", "capacity": 4, "maxActiveBookings": 3}]"#.utf8))
        let replies = try await withThrowingTaskGroup(of: CommandReply.self) { group in
            for i in 0..<12 {
                let start = 7 + i  // 07:00 … 18:00, one hour each: no overlaps
                let command = create(String(format: "%02d:00", start), String(format: "%02d:00", start + 1), user: "ann")
                group.addTask { try await self.reply(i % 2 == 0 ? first : second, command) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(replies.count { $0.bookingValue != nil } == 3)
        for error in replies.compactMap(\.errorValue) {
            #expect(error.code == .quotaExceeded && error.limit == 3, "\(error)")
        }
    }

    /// The quota counts per requester and room; admins, other requesters,
    /// and bookings without `user_id` are not held to it; a cancel frees a
    /// place; a booking that has ended no longer counts.
    @Test(arguments: StoreKind.allCases)
    func theQuotaIsPerRequesterAndRoomAndFreesOnCancel(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let p = processor(try await fixture.open())
        _ = try await p.upsertRooms(fileContents: Data(#"""
            [{"name": "Loft", "capacity": 4, "maxActiveBookings": 1}, {"name": "Other", "capacity": 4, "maxActiveBookings": 1}]
            """#.utf8))
        let held = try #require(try await reply(p, create("09:00", "10:00", user: "ann")).bookingValue)
        #expect(try await reply(p, create("11:00", "12:00", user: "ann")).errorValue?.limit == 1)
        #expect(try await reply(p, create("11:00", "12:00", user: "bob")).bookingValue != nil, "another requester")
        #expect(try await reply(p, create("12:00", "13:00", user: "root")).bookingValue != nil, "an admin")
        #expect(try await reply(p, create("13:00", "14:00", user: "root")).bookingValue != nil, "an admin, again")
        #expect(try await reply(p, create("14:00", "15:00", user: nil)).bookingValue != nil, "no requester")
        var other = create("09:00", "10:00", user: "ann")
        other.body = Array(String(decoding: other.body, as: UTF8.self).replacingOccurrences(of: "\"Loft\"", with: "\"Other\"").utf8)
        #expect(try await reply(p, other).bookingValue != nil, "the quota is per room")
        let cancel = IncomingCommand(body: Array(#"{"bookingId":"\#(held.id)"}"#.utf8), typeProperty: "booking.cancel",
                                     routingKey: "booking.cancel", messageID: "c1", idempotencyKeyHeader: nil, userID: "ann")
        #expect(try await reply(p, cancel).bookingValue?.status == .cancelled)
        #expect(try await reply(p, create("11:00", "12:00", user: "ann", date: "2026-11-24")).bookingValue != nil,
                "the cancel freed the place")
        // A day later the booking of 2026-11-24 has ended: it no longer counts.
        let later = CommandProcessor(store: try await fixture.open(), policy: CallerPolicy(administrators: ["root"]),
                                     now: { utc("2026-11-25T10:00:00Z") })
        #expect(try await reply(later, create("11:00", "12:00", user: "ann", date: "2026-11-26")).bookingValue != nil)
    }

    /// A series beyond the quota: refused whole by default, its excess
    /// occurrences skipped (1113) with `"onConflict": "skip"`.
    @Test(arguments: StoreKind.allCases)
    func aSeriesBeyondTheQuotaIsRefusedWholeOrTrimmed(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let p = processor(try await fixture.open())
        _ = try await p.upsertRooms(fileContents: Data(#"[{"name": "Loft", "capacity": 4, "maxActiveBookings": 3}]"#.utf8))
        #expect(try await reply(p, create("09:00", "10:00", user: "ann")).bookingValue != nil)
        let whole = try #require(try await reply(p, create("11:00", "12:00", user: "ann",
                                                           extra: #","recurrence":{"frequency":"daily","count":3}"#)).errorValue)
        #expect(whole.code == .quotaExceeded && whole.limit == 3)
        guard case .series(let series) = try await reply(p, create("11:00", "12:00", user: "ann",
                                                                    extra: #","recurrence":{"frequency":"daily","count":3},"onConflict":"skip""#)) else {
            Issue.record("the trimmed series was not booked"); return
        }
        #expect(series.bookings.map(\.date) == ["2026-11-23", "2026-11-24"])
        #expect(series.skipped.map(\.date) == ["2026-11-25"] && series.skipped.first?.code == .quotaExceeded)
        #expect(try await reply(p, create("13:00", "14:00", user: "ann", extra: #","recurrence":{"frequency":"daily","count":2},"onConflict":"skip""#))
            .errorValue?.code == .quotaExceeded, "nothing left to book: refused, not an empty series")
    }
}
