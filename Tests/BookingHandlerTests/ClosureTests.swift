import BookingContracts
import Foundation
import TestSupport
import Testing

@testable import BookingHandler

/// Contract v1.2, closures: the rules of `room.close`, and on both stores
/// what a closure cancels, refuses and publishes.
@Suite("Calendars: closures")
struct ClosureTests {
    static let berlin = Room(name: "Berlin", capacity: 8)

    // MARK: Rules

    @Test func datesAreTheStartOfTheRoomsLocalDay() throws {
        let valid = try #require(expectSuccess(BookingRules.validateClosure(
            CloseRoom(room: "Berlin", from: "2026-12-24", to: "2026-12-28", reason: " holidays "), room: Self.berlin)))
        #expect(valid.from == utc("2026-12-23T23:00:00Z") && valid.to == utc("2026-12-27T23:00:00Z"), "the 24th to the 27th")
        #expect(valid.reason == "holidays")
        let summer = try #require(expectSuccess(BookingRules.validateClosure(
            CloseRoom(room: "Berlin", from: "2026-07-01T06:15:00Z", to: "2026-07-02", reason: "x"), room: Self.berlin)))
        #expect(summer.from == utc("2026-07-01T06:15:00Z") && summer.to == utc("2026-07-01T22:00:00Z"), "summer time: UTC+2")
    }

    @Test func badClosuresAreRefusedNamingTheField() {
        func check(_ c: CloseRoom, _ code: ErrorCode, _ field: String, room: Room? = ClosureTests.berlin) {
            guard case .failure(let error) = BookingRules.validateClosure(c, room: room) else {
                Issue.record("accepted \(c)"); return
            }
            #expect(error.code == code && error.field == field, "\(c): \(error)")
        }
        check(CloseRoom(room: "Nowhere", from: "2026-12-24", to: "2026-12-28", reason: "x"), .unknownRoom, "room", room: nil)
        check(CloseRoom(room: "Berlin", from: "2026-12-24", to: "2026-12-28", reason: "  "), .invalidField, "reason")
        check(CloseRoom(room: "Berlin", from: "2026-12-24T08:10:00Z", to: "2026-12-28", reason: "x"), .offGrid, "from")
        check(CloseRoom(room: "Berlin", from: "2026-12-24", to: "2026-12-24T23:05:00Z", reason: "x"), .offGrid, "to")
        check(CloseRoom(room: "Berlin", from: "24.12.2026", to: "2026-12-28", reason: "x"), .invalidField, "from")
        check(CloseRoom(room: "Berlin", from: "2026-12-28", to: "2026-12-24", reason: "x"), .endNotAfterStart, "to")
        check(CloseRoom(room: "Berlin", from: "2026-12-24", to: "2026-12-24", reason: "x"), .endNotAfterStart, "to")
        check(CloseRoom(room: "Berlin", from: "2026-01-01", to: "2027-01-03", reason: "x"), .invalidField, "to")
    }

    // MARK: On both stores

    struct Setup {
        let store: any BookingStore
        let processor: CommandProcessor
        let clock: LockedBox<Date>

        func send(_ type: CommandType, _ json: String, user: String? = "ann") async throws -> CommandReply {
            guard case .handled(let reply, _, _, _) = try await processor.process(IncomingCommand(
                body: Array(json.utf8), typeProperty: type.rawValue, routingKey: type.rawValue, messageID: UUID().uuidString,
                idempotencyKeyHeader: nil, userID: user)) else { throw CancellationError() }
            return reply
        }

        func create(_ date: String, _ start: String, _ end: String, extra: String = "", user: String? = "ann") async throws -> CommandReply {
            try await send(.createBooking, #"{"room":"Berlin","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]\#(extra)}"#,
                           user: user)
        }

        func close(_ from: String, _ to: String, reason: String = "maintenance", user: String? = "root") async throws -> CommandReply {
            try await send(.closeRoom, #"{"room":"Berlin","from":"\#(from)","to":"\#(to)","reason":"\#(reason)"}"#, user: user)
        }

        /// The events queued since the last call, by routing key.
        func events() -> [OutboxEvent] { store.takeCommitted(limit: 1000) }
    }

    func setup(_ fixture: StoreFixture, now: Date = utc("2026-11-22T10:00:00Z")) async throws -> Setup {
        let store = try await fixture.open()
        let clock = LockedBox(now)
        let processor = CommandProcessor(store: store, policy: CallerPolicy(administrators: ["root"], roomManagers: ["desk"]),
                                         now: { clock.withLock { $0 } })
        _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8}]"#.utf8))
        let setup = Setup(store: store, processor: processor, clock: clock)
        _ = setup.events()
        return setup
    }

    /// A closure that starts inside a booking cancels the whole booking
    /// (reason `room closed: …`, `previous` on its event), leaves bookings
    /// outside it alone, and refuses new bookings and reschedules into it
    /// with 1112 naming it; a reopen lets them in again.
    @Test(arguments: StoreKind.allCases)
    func aClosureStartingInsideABookingCancelsItAndRefusesNewOnes(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let inside = try #require(try await s.create("2026-11-23", "09:00", "11:00").bookingValue)  // 08:00–10:00Z
        let before = try #require(try await s.create("2026-11-23", "07:00", "08:30").bookingValue)  // ends before
        let other = try #require(try await s.create("2026-11-23", "11:00", "12:00", user: "bob").bookingValue)
        _ = s.events()
        guard case .closure(let reply) = try await s.close("2026-11-23T09:00:00Z", "2026-11-24", reason: "burst pipe") else {
            Issue.record("not closed"); return
        }
        #expect(reply.closure.room == "Berlin" && reply.closure.from == "2026-11-23T09:00:00Z"
                && reply.closure.to == "2026-11-23T23:00:00Z" && reply.closure.reason == "burst pipe")
        #expect(Set(reply.cancelled?.map(\.id) ?? []) == [inside.id, other.id])
        #expect(reply.cancelled?.allSatisfy { $0.status == .cancelled && $0.cancelReason == "room closed: burst pipe" } == true,
                "an admin sees them in full")
        let stored = try #require(try await s.store.booking(id: inside.id))
        #expect(stored.status == .cancelled && stored.cancelReason == "room closed: burst pipe" && stored.version == 2)
        #expect(try await s.store.booking(id: before.id)?.status == .confirmed)
        let events = s.events()
        #expect(events.map(\.routingKey).sorted() == ["booking.cancelled", "booking.cancelled", "room.closed"])
        for event in events where event.routingKey == "booking.cancelled" {
            #expect(event.value?.previous?.status == .confirmed, "previous on each event")
        }
        let closed = try ContractJSON.decode(RoomClosureEvent.self, from: Data(try #require(events.last { $0.routingKey == "room.closed" }).body))
        #expect(closed.closure == reply.closure)

        let refused = try #require(try await s.create("2026-11-23", "15:00", "16:00").errorValue)
        #expect(refused.code == .roomClosed && refused.closure == reply.closure)
        let moved = try await s.send(.rescheduleBooking, #"{"bookingId":"\#(before.id)","date":"2026-11-23","start":"17:00","end":"18:00"}"#)
        #expect(moved.errorValue?.code == .roomClosed && moved.errorValue?.closure?.id == reply.closure.id)
        #expect(try await s.create("2026-11-24", "09:00", "10:00").bookingValue != nil, "the next day is open")
        #expect(try await s.create("2026-11-23", "07:00", "08:30", user: "bob").errorValue?.code == .overlap,
                "up to 10:00 it stays open")

        // Durable, readable, replayed.
        #expect(try await s.store.closures(room: "Berlin", from: utc("2026-11-23T00:00:00Z"), to: utc("2026-11-24T00:00:00Z")) == [reply.closure])
        #expect(try await s.store.replayClosures() == [reply.closure])
        let again = try await fixture.open()
        #expect(try await again.closures(room: "Berlin", from: .distantPast, to: .distantFuture) == [reply.closure], "another process reads it")

        // Reopen: unknown id 2001, then the right one; what it cancelled stays cancelled.
        let unknown = try await s.send(.reopenRoom, #"{"room":"Berlin","closureId":"nope"}"#, user: "root")
        #expect(unknown.errorValue?.code == .bookingNotFound && unknown.errorValue?.field == "closureId")
        _ = s.events()
        guard case .closure(let removed) = try await s.send(.reopenRoom, #"{"room":"Berlin","closureId":"\#(reply.closure.id)"}"#, user: "desk") else {
            Issue.record("not reopened"); return
        }
        #expect(removed.closure == reply.closure && removed.cancelled == nil)
        #expect(s.events().map(\.routingKey) == ["room.reopened"])
        #expect(try await s.create("2026-11-23", "15:00", "16:00").bookingValue != nil)
        #expect(try await s.store.booking(id: inside.id)?.status == .cancelled)
        #expect(try await s.store.replayClosures().isEmpty)
    }

    /// In progress when the closure comes: it ends at the later of the
    /// closure's start and the next quarter-hour, as a cancel ends it.
    @Test(arguments: StoreKind.allCases)
    func aBookingInProgressEndsAtTheLaterOfTheClosuresStartAndTheNextQuarterHour(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture, now: utc("2026-11-22T09:50:00Z"))
        // 11:00–13:00 local = 10:00–12:00Z, both checked in.
        let early = try #require(try await s.create("2026-11-22", "11:00", "13:00").bookingValue)
        s.clock.withLock { $0 = utc("2026-11-22T09:55:00Z") }
        #expect(try await s.send(.checkinBooking, #"{"bookingId":"\#(early.id)"}"#).bookingValue?.status == .inProgress)
        s.clock.withLock { $0 = utc("2026-11-22T10:20:00Z") }
        // Starts before now, inside the booking: the next quarter-hour, 10:30Z.
        guard case .closure(let first) = try await s.close("2026-11-22T10:00:00Z", "2026-11-22T10:15:00Z"),
              let ended = first.cancelled?.first else { Issue.record("not closed"); return }
        #expect(ended.status == .cancelled && ended.endsAt == "2026-11-22T10:30:00Z" && ended.end == "11:30")
        // A second booking, in progress, and a closure starting later than the next quarter-hour.
        let later = try #require(try await s.create("2026-11-22", "12:00", "14:00").bookingValue)  // 11:00–13:00Z
        s.clock.withLock { $0 = utc("2026-11-22T11:05:00Z") }
        #expect(try await s.send(.checkinBooking, #"{"bookingId":"\#(later.id)"}"#).bookingValue?.status == .inProgress)
        guard case .closure(let second) = try await s.close("2026-11-22T12:00:00Z", "2026-11-22T15:00:00Z"),
              let cut = second.cancelled?.first else { Issue.record("not closed"); return }
        #expect(cut.endsAt == "2026-11-22T12:00:00Z" && cut.end == "13:00" && cut.status == .cancelled)
    }

    /// Series into a closure: refused whole by default (1112 with the
    /// date), the closed occurrences skipped with `"onConflict": "skip"`.
    @Test(arguments: StoreKind.allCases)
    func seriesOccurrencesInAClosureAreRefusedOrSkipped(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        #expect(try await s.close("2026-11-24", "2026-11-25").isOK)
        let whole = try #require(try await s.create("2026-11-23", "09:00", "10:00", extra: #","recurrence":{"frequency":"daily","count":3}"#).errorValue)
        #expect(whole.code == .roomClosed && whole.date == "2026-11-24" && whole.closure != nil)
        guard case .series(let series) = try await s.create("2026-11-23", "09:00", "10:00",
                                                           extra: #","recurrence":{"frequency":"daily","count":3},"onConflict":"skip""#) else {
            Issue.record("not booked"); return
        }
        #expect(series.bookings.map(\.date) == ["2026-11-23", "2026-11-25"])
        #expect(series.skipped.map(\.date) == ["2026-11-24"] && series.skipped.first?.code == .roomClosed)

        // With "skip" and every date closed nothing is booked: still 1112
        // with the closure, as for one booking.
        guard case .closure(let week) = try await s.close("2026-11-30", "2026-12-07") else { Issue.record("not closed"); return }
        let none = try #require(try await s.create("2026-12-01", "09:00", "10:00",
                                                   extra: #","recurrence":{"frequency":"daily","count":3},"onConflict":"skip""#).errorValue)
        #expect(none.code == .roomClosed && none.closure == week.closure && none.date == "2026-12-01", "\(none)")
    }

    /// Closing and reopening is room management: with admins or room
    /// managers named, anyone else gets 2003 and nothing changes.
    @Test(arguments: StoreKind.allCases)
    func onlyRoomManagersAndAdminsMayCloseAndReopen(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        #expect(try await s.close("2026-11-24", "2026-11-25", user: "ann").errorValue?.code == .notPermitted)
        #expect(try await s.close("2026-11-24", "2026-11-25", user: nil).errorValue?.code == .notPermitted)
        #expect(try await s.store.replayClosures().isEmpty)
        guard case .closure(let made) = try await s.close("2026-11-24", "2026-11-25", user: "desk") else {
            Issue.record("a room manager may close"); return
        }
        #expect(try await s.send(.reopenRoom, #"{"room":"Berlin","closureId":"\#(made.closure.id)"}"#, user: "ann")
            .errorValue?.code == .notPermitted)
        #expect(try await s.store.replayClosures().count == 1)
    }
}
