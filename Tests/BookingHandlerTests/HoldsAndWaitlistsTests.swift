import BookingContracts
import Foundation
import GRDB
import Testing
import TestSupport

@testable import BookingHandler

/// Contract v1.2, "Holds and waitlists": the rules, then every transition
/// on both stores through the command processor (the real SQLite file and
/// PostgreSQL database; the clock injected).
@Suite("Holds and waitlists")
struct HoldsAndWaitlistsTests {
    // MARK: Rules

    @Test func holdAndIfTakenAreCheckedWithTheirFields() {
        func options(_ hold: HoldRequest?, ifTaken: String? = nil, series: Bool = false) -> Result<HoldOptions, ReplyError> {
            var create = Fixture.create()
            create.hold = hold
            create.ifTaken = ifTaken
            if series { create.recurrence = Recurrence(.weekly, count: 2) }
            return BookingRules.holdOptions(create)
        }
        #expect(expectSuccess(options(HoldRequest())) == HoldOptions(holdMinutes: 10, waitlist: false), "10 by default")
        #expect(expectSuccess(options(HoldRequest(minutes: 60)))?.holdMinutes == 60)
        #expect(expectSuccess(options(nil, ifTaken: "waitlist")) == HoldOptions(holdMinutes: nil, waitlist: true))
        #expect(expectSuccess(options(nil, ifTaken: "waitlist", series: true))?.waitlist == true, "per occurrence")
        expectFailure(options(HoldRequest(minutes: 0)), .invalidField, field: "hold.minutes")
        expectFailure(options(HoldRequest(minutes: 61)), .invalidField, field: "hold.minutes")
        expectFailure(options(HoldRequest(), series: true), .invalidField, field: "hold")
        expectFailure(options(HoldRequest(), ifTaken: "waitlist"), .invalidField, field: "hold")
        expectFailure(options(nil, ifTaken: "queue"), .invalidField, field: "ifTaken")
    }

    @Test func aHoldLapsesAtTheEarlierOfItsMinutesAndTheStart() {
        let now = utc("2026-11-22T10:00:00Z")
        #expect(BookingRules.holdExpiry(now: now, minutes: 10, startsAt: utc("2026-11-23T08:00:00Z")) == utc("2026-11-22T10:10:00Z"))
        #expect(BookingRules.holdExpiry(now: now, minutes: 30, startsAt: utc("2026-11-22T10:15:00Z")) == utc("2026-11-22T10:15:00Z"),
                "never after the start")
        #expect(BookingRules.nextTransition(status: .held, startsAt: utc("2026-11-23T08:00:00Z"), endsAt: utc("2026-11-23T09:00:00Z"),
                                            room: nil, holdExpiresAt: utc("2026-11-22T10:10:00Z"))?.transition == .lapse)
        #expect(BookingRules.nextTransition(status: .waitlisted, startsAt: utc("2026-11-23T08:00:00Z"), endsAt: utc("2026-11-23T09:00:00Z"),
                                            room: nil)! == (.giveUp, utc("2026-11-23T08:00:00Z")))
        #expect(TimedTransition.lapse.reason == "expired: hold not confirmed")
        #expect(TimedTransition.giveUp.reason == "expired: the slot did not come free")
    }

    @Test func statusMachineOfHeldAndWaitlisted() {
        #expect(expectSuccess(BookingRules.transition(.confirm, from: .held, requiresApproval: false)) == .confirmed)
        #expect(expectSuccess(BookingRules.transition(.confirm, from: .held, requiresApproval: true)) == .pending)
        for status in [BookingStatus.held, .waitlisted] {
            #expect(expectSuccess(BookingRules.transition(.cancel, from: status, requiresApproval: false)) == .cancelled)
            #expect(expectSuccess(BookingRules.transition(.update, from: status, requiresApproval: false)) == status)
            expectFailure(BookingRules.transition(.reschedule, from: status, requiresApproval: false), .statusChangeNotAllowed, field: nil)
            expectFailure(BookingRules.transition(.checkin, from: status, requiresApproval: false), .statusChangeNotAllowed, field: nil)
        }
        expectFailure(BookingRules.transition(.confirm, from: .waitlisted, requiresApproval: false), .statusChangeNotAllowed, field: nil)
    }

    /// Positions count only earlier waiters whose slot, widened by the
    /// buffer, overlaps; the walk never lets a later waiter pass an
    /// earlier one whose slot it overlaps (contract v1.2), but offers a
    /// slot no earlier waiter shares.
    @Test func promotionOrderWithOverlappingWaitersOfDifferentLengths() {
        func waiter(_ id: String, _ start: String, _ end: String) -> Booking {
            Booking(id: id, room: "Berlin", date: "2026-11-23", start: "", end: "", timeZone: "Europe/Berlin",
                    startsAt: "2026-11-23T\(start):00Z", endsAt: "2026-11-23T\(end):00Z", title: "T", status: .waitlisted,
                    attendees: [Fixture.adaNormalised], version: 1)
        }
        // In waitlist order: a long one, one inside it, one after both, one right after the long one.
        let waiters = [waiter("long", "08:00", "11:00"), waiter("inside", "09:00", "10:00"),
                       waiter("later", "11:00", "12:00"), waiter("abutting", "11:00", "11:30")]
        #expect(waiters.map { BookingRules.waitlistPosition(of: $0.id, in: waiters, bufferSeconds: 0) } == [1, 2, 1, 2])
        #expect(waiters.map { BookingRules.waitlistPosition(of: $0.id, in: waiters, bufferSeconds: 900) } == [1, 2, 2, 3],
                "with a 15-minute buffer, back-to-back slots wait behind each other")

        // Promote against a day where 10:00–11:00 stays blocked: `long`
        // cannot be promoted; `inside` (09:00–10:00) is free but overlaps
        // `long`, so it is not offered — taking it would pass `long` over;
        // `later` shares no waiting slot and is promoted; `abutting` then
        // conflicts with `later`, promoted just before it.
        var blocked: [(Double, Double)] = [(10, 11)]
        var promoted: [String] = [], offered: [String] = []
        func hours(_ text: String) -> Double {
            let time = text.split(separator: "T")[1]
            return Double(time.prefix(2))! + Double(time.dropFirst(3).prefix(2))! / 60
        }
        BookingRules.walkWaitlist(waiters, bufferSeconds: 0) { booking in
            offered.append(booking.id)
            let (start, end) = (hours(booking.startsAt), hours(booking.endsAt))
            guard !blocked.contains(where: { $0.0 < end && start < $0.1 }) else { return .waiting }
            blocked.append((start, end))
            promoted.append(booking.id)
            return .promoted
        }
        #expect(promoted == ["later"])
        #expect(offered == ["long", "later", "abutting"])
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

        func create(_ start: String, _ end: String, room: String = "Berlin", date: String = "2026-11-23", extra: String = "",
                    user: String? = "ann") async throws -> CommandReply {
            try await send(.createBooking, #"{"room":"\#(room)","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]\#(extra)}"#,
                           user: user)
        }

        func confirm(_ id: String, user: String? = "ann") async throws -> CommandReply {
            try await send(.confirmBooking, #"{"bookingId":"\#(id)"}"#, user: user)
        }

        func cancel(_ id: String, user: String? = "ann") async throws -> CommandReply {
            try await send(.cancelBooking, #"{"bookingId":"\#(id)"}"#, user: user)
        }

        /// Bob's waiter for Berlin 09:00–10:00 on 2026-11-23, with two attendees.
        func twoPersonWaiter() async throws -> Booking {
            let two = #"[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"},{"name":"Bo","email":"bo@example.com","phone":"0170 7654321"}]"#
            return try #require(try await send(.createBooking,
                #"{"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:00","title":"T","attendees":\#(two),"ifTaken":"waitlist"}"#,
                user: "bob").bookingValue)
        }

        /// The events queued since the last call.
        func events() -> [OutboxEvent] { store.takeCommitted(limit: 1000) }

        func status(_ id: String) async throws -> BookingStatus? { try await store.booking(id: id)?.status }

        /// Runs the timers until nothing is due.
        func runTimers() async throws -> [TimerStep] {
            var steps: [TimerStep] = []
            while let step = try await processor.applyDueTimer() { steps.append(step) }
            return steps
        }
    }

    static let rooms = #"""
        [{"name": "Berlin", "capacity": 8},
         {"name": "Board", "capacity": 8, "requiresApproval": true, "approvers": ["boss"]},
         {"name": "Buffered", "capacity": 8, "bufferMinutes": 15},
         {"name": "Quota", "capacity": 8, "maxActiveBookings": 2}]
        """#

    func setup(_ fixture: StoreFixture, now: Date = utc("2026-11-22T10:00:00Z"),
               metrics: WaitlistMetrics = .shared) async throws -> Setup {
        let store = try await fixture.open()
        let clock = LockedBox(now)
        let processor = CommandProcessor(store: store, policy: CallerPolicy(administrators: ["root"], roomManagers: ["desk"]),
                                         now: { clock.withLock { $0 } }, waitlistMetrics: metrics)
        _ = try await processor.upsertRooms(fileContents: Data(Self.rooms.utf8))
        let setup = Setup(store: store, processor: processor, clock: clock)
        _ = setup.events()
        return setup
    }

    /// A hold blocks the slot, is confirmed by its requester (not by
    /// anyone else, 2003), and its events are `booking.created` (held) and
    /// then `booking.confirmed`; an admin may confirm one too.
    @Test(arguments: StoreKind.allCases)
    func aHoldBlocksAndIsConfirmedByItsRequester(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let held = try #require(try await s.create("09:00", "10:00", extra: #","hold":{"minutes":15}"#).bookingValue)
        #expect(held.status == .held && held.holdExpiresAt == "2026-11-22T10:15:00Z")
        #expect(s.events().map(\.routingKey) == ["booking.created"], "no booking.confirmed, so no pass")
        let taken = try #require(try await s.create("09:30", "10:30", user: "bob").errorValue)
        #expect(taken.code == .overlap && taken.conflicts == [held.id], "it blocks like a confirmed booking")
        #expect(try await s.confirm(held.id, user: "bob").errorValue?.code == .notPermitted)
        let confirmed = try #require(try await s.confirm(held.id).bookingValue)
        #expect(confirmed.status == .confirmed && confirmed.version == 2 && confirmed.holdExpiresAt == held.holdExpiresAt)
        let events = s.events()
        #expect(events.map(\.routingKey) == ["booking.confirmed"])
        #expect(events.first?.value?.previous?.status == .held && events.first?.value?.promoted == nil)
        #expect(try await s.confirm(held.id).errorValue?.code == .statusChangeNotAllowed, "once")

        let other = try #require(try await s.create("11:00", "12:00", extra: #","hold":{}"#, user: "bob").bookingValue)
        #expect(other.holdExpiresAt == "2026-11-22T10:10:00Z", "ten minutes by default")
        #expect(try await s.confirm(other.id, user: "root").bookingValue?.status == .confirmed, "an admin may")
    }

    /// At or after `holdExpiresAt` the confirm is 2002; the timer cancels
    /// the hold with its reason, once, and the slot is free again.
    @Test(arguments: StoreKind.allCases)
    func anUnconfirmedHoldLapses(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let held = try #require(try await s.create("09:00", "10:00", extra: #","hold":{"minutes":5}"#).bookingValue)
        _ = s.events()
        _ = try await s.runTimers()
        #expect(try await s.status(held.id) == .held, "not before its time")
        s.clock.withLock { $0 = utc("2026-11-22T10:05:00Z") }
        #expect(try await s.confirm(held.id).errorValue?.code == .statusChangeNotAllowed, "at holdExpiresAt: 2002")
        let steps = try await s.runTimers()
        #expect(steps.contains(.applied(bookingID: held.id, transition: .lapse, version: 2)))
        let lapsed = try #require(try await s.store.booking(id: held.id))
        #expect(lapsed.status == .cancelled && lapsed.cancelReason == "expired: hold not confirmed")
        #expect(s.events().map(\.routingKey) == ["booking.cancelled"])
        #expect(try await s.runTimers().allSatisfy { if case .applied = $0 { false } else { true } }, "at most once")
        #expect(try await s.create("09:00", "10:00", user: "bob").bookingValue?.status == .confirmed)
    }

    /// A hold on a slot starting within its minutes lapses at the start; a
    /// confirm at or after it is 2002 (the hold lapsed), not 2004, before
    /// the timer has run and after the end alike.
    @Test(arguments: StoreKind.allCases)
    func aHoldLapsingAtItsStartIsRefusedAsLapsed(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        // 09:52 in Berlin; the slot starts at 10:00, so the hold's ten
        // minutes are cut to the start.
        let s = try await setup(fixture, now: utc("2026-11-23T08:52:00Z"))
        let held = try #require(try await s.create("10:00", "11:00", extra: #","hold":{}"#).bookingValue)
        #expect(held.holdExpiresAt == "2026-11-23T09:00:00Z" && held.startsAt == "2026-11-23T09:00:00Z")
        for now in ["2026-11-23T09:00:00Z", "2026-11-23T09:30:00Z", "2026-11-23T10:00:00Z"] {
            s.clock.withLock { $0 = utc(now) }
            let refused = try #require(try await s.confirm(held.id).errorValue)
            #expect(refused.code == .statusChangeNotAllowed, "at \(now): \(refused)")
            #expect(refused.text.contains("lapsed"), "at \(now): \(refused.text)")
        }
        #expect(try await s.status(held.id) == .held, "the timer has not run")
    }

    /// A booking row that cannot be decoded is given up by the timers (its
    /// timer cleared, reported once) instead of failing every round.
    @Test func anUnreadableBookingsTimerIsClearedOnce() async throws {
        let fixture = try StoreFixture(.sqlite)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let booking = try #require(try await s.create("09:00", "10:00").bookingValue)
        let other = try #require(try await s.create("11:00", "12:00").bookingValue)
        let file = try DatabaseQueue(path: fixture.directory.appendingPathComponent("db.sqlite").path)
        try await file.write { db in
            try db.execute(sql: "UPDATE booking SET json = '{\"broken\":' WHERE id = ?", arguments: [booking.id])
        }
        s.clock.withLock { $0 = utc("2026-11-23T12:30:00Z") }
        let steps = try await s.runTimers()
        let unreadable = steps.compactMap { if case .unreadable(let id, _) = $0 { id } else { nil } }
        #expect(unreadable == [booking.id])
        #expect(steps.contains { if case .applied(other.id, _, _) = $0 { true } else { false } }, "the others go on")
        #expect(try await s.runTimers().isEmpty, "given up once, not every round")
    }

    /// A transition that keeps failing for a reason other than its own row
    /// (here its room's row cannot be decoded) does not stop the timers of
    /// every other room: the first failures end the round as a passing
    /// fault would (retried in due order), the third moves it a few
    /// seconds on, and the others are applied. Before, it stayed the
    /// earliest due row and failed every round first.
    @Test func aFailingTransitionDoesNotStopTheOtherTimers() async throws {
        let fixture = try StoreFixture(.sqlite)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let stuck = try #require(try await s.create("09:00", "10:00", room: "Quota").bookingValue)
        let other = try #require(try await s.create("09:30", "10:30").bookingValue)
        let file = try DatabaseQueue(path: fixture.directory.appendingPathComponent("db.sqlite").path)
        try await file.write { db in try db.execute(sql: "UPDATE room SET json = CAST('{\"broken\":' AS BLOB) WHERE name = 'Quota'") }
        s.clock.withLock { $0 = utc("2026-11-23T09:00:00Z") }
        let failures = TimerFailures()
        for _ in 1..<CommandProcessor.timerFailuresBeforePostponing {
            await #expect(throws: (any Error).self) { _ = try await s.processor.applyDueTimer(failures: failures) }
        }
        var steps: [TimerStep] = []
        while let step = try await s.processor.applyDueTimer(failures: failures) { steps.append(step) }
        #expect(steps.contains { if case .postponed(stuck.id, _) = $0 { true } else { false } }, "\(steps)")
        #expect(steps.contains { if case .applied(other.id, .start, _) = $0 { true } else { false } }, "the others go on: \(steps)")
        #expect(try await s.status(other.id) == .inProgress)
        #expect(try await s.status(stuck.id) == .confirmed, "kept, to be tried again")
    }

    /// A timer whose booking cannot be read for a reason other than its
    /// contents (here PostgreSQL refuses the read: a stand-in for an I/O or
    /// lock error) fails the round and keeps the timer, so the booking
    /// still starts once the read works again. (On PostgreSQL the failed
    /// statement aborts the transaction, so even a step that tried to
    /// clear the timer could not; the SQLite path, where it could, has no
    /// injectable error short of a corrupt page, which fails the clearing
    /// too.)
    @Test func aTimerWhoseBookingCannotBeReadForNowIsKeptAndAppliedLater() async throws {
        let fixture = try StoreFixture(.postgres)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let booking = try #require(try await s.create("09:00", "10:00").bookingValue)
        #expect(booking.status == .confirmed)
        let schema = try #require(fixture.databaseURL?.split(separator: "=").last.map(String.init))
        // The handler's role (the owner) may read the timer's columns but
        // not the booking's JSON.
        try TestPostgres.control("psql", ["-v", "ON_ERROR_STOP=1", "-c", """
            REVOKE SELECT ON \(schema).booking FROM booking; GRANT SELECT (id, nextDueAt) ON \(schema).booking TO booking
            """])
        let startsAt = try #require(ContractFormat.parseTimestamp(booking.startsAt))
        s.clock.withLock { $0 = startsAt.addingTimeInterval(30) }
        await #expect(throws: (any Error).self, "the round fails") { _ = try await s.processor.applyDueTimer() }
        let due = try TestPostgres.control("psql", ["-tA", "-c",
                                                    "SELECT nextDueAt FROM \(schema).booking WHERE id = '\(booking.id)'"])
        #expect(due.trimmingCharacters(in: .whitespacesAndNewlines) == "\(Int(startsAt.timeIntervalSince1970))",
                "the timer is kept")
        try TestPostgres.control("psql", ["-v", "ON_ERROR_STOP=1", "-c", "GRANT SELECT ON \(schema).booking TO booking"])
        let steps = try await s.runTimers()
        #expect(steps.contains { if case .applied(booking.id, .start, _) = $0 { true } else { false } }, "\(steps)")
        #expect(try await s.status(booking.id) == .inProgress)
    }

    /// A room whose zone changes moves its waiters' local times onto other
    /// instants: a waiter is not promoted into a slot other than the one it
    /// holds (on PostgreSQL that overlap failed the whole registration).
    @Test(arguments: StoreKind.allCases)
    func aWaiterIsNotPromotedAcrossAChangeOfItsRoomsZone(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let first = try #require(try await s.create("10:00", "11:00").bookingValue)
        #expect(first.status == .confirmed)
        let waiter = try #require(try await s.create("10:00", "11:00", extra: #","ifTaken":"waitlist""#, user: "bob").bookingValue)
        #expect(waiter.status == .waitlisted)
        // In London, 10:00–11:00 local is 10:00–11:00Z, right after the
        // first booking's 09:00–10:00Z: free, by the local times.
        let moved = try await s.send(.registerRoom, #"{"name":"Berlin","capacity":8,"timeZone":"Europe/London"}"#, user: "root")
        #expect(moved.isOK, "\(moved)")
        #expect(try await s.status(waiter.id) == .waitlisted)
        #expect(try await s.status(first.id) == .confirmed)
    }

    /// In a room that requires approval a confirmed hold becomes pending
    /// with `booking.submitted`; then the approvers decide.
    @Test(arguments: StoreKind.allCases)
    func aConfirmedHoldInAnApprovalRoomIsSubmitted(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let held = try #require(try await s.create("09:00", "10:00", room: "Board", extra: #","hold":{}"#).bookingValue)
        _ = s.events()
        #expect(try await s.confirm(held.id, user: "boss").errorValue?.code == .notPermitted, "the hold is the requester's")
        #expect(try await s.confirm(held.id).bookingValue?.status == .pending)
        #expect(s.events().map(\.routingKey) == ["booking.submitted"])
        #expect(try await s.confirm(held.id, user: "boss").bookingValue?.status == .confirmed)
    }

    /// Only a conflict puts a booking on the waitlist: it blocks nothing,
    /// gets its position, and every other refusal stays a refusal.
    @Test(arguments: StoreKind.allCases)
    func onlyAConflictWaitlistsAndPositionsCountOverlappingEarlierWaiters(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let wait = #","ifTaken":"waitlist""#
        let free = try #require(try await s.create("09:00", "11:00", extra: wait).bookingValue)
        #expect(free.status == .confirmed && free.waitlist == nil, "a free slot books as usual")
        let first = try #require(try await s.create("09:00", "10:00", extra: wait, user: "bob").bookingValue)
        #expect(first.status == .waitlisted && first.waitlist == WaitlistPlace(position: 1))
        let second = try #require(try await s.create("09:30", "11:00", extra: wait, user: "cy").bookingValue)
        #expect(second.status == .waitlisted && second.waitlist?.position == 2)
        let apart = try #require(try await s.create("10:00", "11:00", extra: wait, user: "dee").bookingValue)
        #expect(apart.waitlist?.position == 2, "overlaps the second, not the first")
        _ = s.events()
        #expect(try await s.create("06:00", "07:00", extra: wait).errorValue?.code == .outsideOpeningHours)
        #expect(try await s.create("09:10", "10:00", extra: wait).errorValue?.code == .offGrid)
        #expect(s.events().isEmpty)
        // Waiters block nothing.
        #expect(try await s.create("12:00", "13:00", extra: wait).bookingValue?.status == .confirmed)
        // Reads show the current position; the busy view does not.
        let reader = BookingReader(store: s.store, policy: s.processor.policy)
        guard case .booking(let view) = try await reader.get(GetBooking(bookingId: second.id), caller: .user("cy")) else {
            Issue.record("not found"); return
        }
        #expect(view.status == .waitlisted && view.waitlist?.position == 2)
        guard case .booking(let busy) = try await reader.get(GetBooking(bookingId: second.id), caller: .user("eve")) else { return }
        #expect(busy.waitlist == nil)
        let listed = try await reader.list(ListBookings(from: .date("2026-11-23"), to: .date("2026-11-24"), room: "Berlin",
                                                         status: ["waitlisted"]), caller: .user("root"))
        guard case .bookings(let rows, _) = listed else { Issue.record("\(listed)"); return }
        #expect(rows.map(\.id) == [first.id, second.id, apart.id])
        #expect(rows.map { $0.waitlist?.position } == [1, 2, 2])
        // A waiter may be updated and cancelled, not rescheduled.
        #expect(try await s.send(.updateBooking, #"{"bookingId":"\#(first.id)","title":"New"}"#, user: "bob").bookingValue?.status == .waitlisted)
        let moved = try await s.send(.rescheduleBooking, #"{"bookingId":"\#(first.id)","date":"2026-11-23","start":"15:00","end":"16:00"}"#,
                                     user: "bob")
        #expect(moved.errorValue?.code == .statusChangeNotAllowed)
        #expect(try await s.cancel(first.id, user: "bob").bookingValue?.status == .cancelled)
        guard case .booking(let after) = try await reader.get(GetBooking(bookingId: second.id), caller: .user("cy")) else { return }
        #expect(after.waitlist?.position == 1, "moved up")
    }

    /// Cancelling the holder promotes the first waiter in the same
    /// transaction: `booking.confirmed` with `promoted` and `previous`;
    /// the next waiter on the same slot keeps waiting.
    @Test(arguments: StoreKind.allCases)
    func aCancelPromotesTheFirstWaiter(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let wait = #","ifTaken":"waitlist""#
        let holder = try #require(try await s.create("09:00", "10:00").bookingValue)
        let first = try #require(try await s.create("09:00", "10:00", extra: wait, user: "bob").bookingValue)
        let second = try #require(try await s.create("09:00", "10:00", extra: wait, user: "cy").bookingValue)
        _ = s.events()
        #expect(try await s.cancel(holder.id).bookingValue?.status == .cancelled)
        let events = s.events()
        #expect(events.map(\.routingKey) == ["booking.cancelled", "booking.confirmed"])
        let promotion = try #require(events.last?.value)
        #expect(promotion.booking.id == first.id && promotion.promoted == true && promotion.previous?.status == .waitlisted)
        let body = String(decoding: events.last!.body, as: UTF8.self)
        #expect(body.contains(#""promoted":true"#))
        #expect(try await s.status(first.id) == .confirmed)
        #expect(try await s.status(second.id) == .waitlisted)
        // The promoted one cancelled in turn: the next waiter gets it.
        #expect(try await s.cancel(first.id, user: "bob").bookingValue != nil)
        #expect(try await s.status(second.id) == .confirmed)
    }

    /// A hold's lapse frees the slot for the waiter in the timer's transaction.
    @Test(arguments: StoreKind.allCases)
    func aLapsedHoldPromotesTheWaiter(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let held = try #require(try await s.create("09:00", "10:00", extra: #","hold":{"minutes":1}"#).bookingValue)
        let waiter = try #require(try await s.create("09:00", "10:00", extra: #","ifTaken":"waitlist""#, user: "bob").bookingValue)
        #expect(waiter.status == .waitlisted)
        _ = s.events()
        s.clock.withLock { $0 = $0.addingTimeInterval(60) }
        _ = try await s.runTimers()
        #expect(try await s.status(held.id) == .cancelled)
        #expect(try await s.status(waiter.id) == .confirmed)
        #expect(s.events().map(\.routingKey) == ["booking.cancelled", "booking.confirmed"])
    }

    /// In an approval room a promoted waiter becomes pending with
    /// `booking.submitted`; a waiter not promoted by its start is cancelled.
    @Test(arguments: StoreKind.allCases)
    func promotionInAnApprovalRoomAndExpiryAtTheStart(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let wait = #","ifTaken":"waitlist""#
        let holder = try #require(try await s.create("09:00", "10:00", room: "Board").bookingValue)
        let waiter = try #require(try await s.create("09:00", "10:00", room: "Board", extra: wait, user: "bob").bookingValue)
        let late = try #require(try await s.create("13:00", "14:00", room: "Board").bookingValue)
        let stuck = try #require(try await s.create("13:00", "14:00", room: "Board", extra: wait, user: "bob").bookingValue)
        _ = s.events()
        #expect(try await s.send(.rejectBooking, #"{"bookingId":"\#(holder.id)"}"#, user: "boss").bookingValue?.status == .rejected)
        let events = s.events()
        #expect(events.map(\.routingKey) == ["booking.rejected", "booking.submitted"])
        #expect(events.last?.value?.promoted == true && events.last?.value?.booking.id == waiter.id)
        #expect(try await s.status(waiter.id) == .pending)

        // 13:00 Berlin = 12:00Z the next day: the pending `late` and the
        // waiter behind it both reach their start.
        s.clock.withLock { $0 = utc("2026-11-23T12:00:00Z") }
        _ = try await s.runTimers()
        #expect(try await s.status(late.id) == .rejected)
        let expired = try #require(try await s.store.booking(id: stuck.id))
        #expect(expired.status == .cancelled && expired.cancelReason == "expired: the slot did not come free",
                "a waiter is never promoted once started")
    }

    /// Every rule is checked again at promotion: the requester's quota
    /// (waiters count towards it), buffers, and a closure cancels waiters.
    @Test(arguments: StoreKind.allCases)
    func promotionChecksQuotaAndBuffersAndClosuresCancelWaiters(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let wait = #","ifTaken":"waitlist""#
        // Quota 2: a waiter counts.
        let holder = try #require(try await s.create("09:00", "10:00", room: "Quota", user: "bob").bookingValue)
        #expect(try await s.create("09:00", "10:00", room: "Quota", extra: wait).bookingValue?.status == .waitlisted)
        #expect(try await s.create("11:00", "12:00", room: "Quota").bookingValue != nil)
        #expect(try await s.create("13:00", "14:00", room: "Quota", extra: wait).errorValue?.code == .quotaExceeded)
        _ = holder

        // Buffer 15: 10:00–11:00 waits behind 09:00–10:00; a cancel of the
        // blocker promotes the first waiter, and the one 15 minutes after it waits on.
        let blocker = try #require(try await s.create("09:00", "10:00", room: "Buffered").bookingValue)
        let near = try #require(try await s.create("10:00", "11:00", room: "Buffered", extra: wait, user: "bob").bookingValue)
        #expect(near.status == .waitlisted, "inside the buffer")
        let same = try #require(try await s.create("09:00", "10:00", room: "Buffered", extra: wait, user: "cy").bookingValue)
        #expect(same.waitlist?.position == 2, "widened by the buffer, the earlier waiter overlaps")
        #expect(try await s.cancel(blocker.id).bookingValue != nil)
        #expect(try await s.status(near.id) == .confirmed)
        #expect(try await s.status(same.id) == .waitlisted, "the buffer holds against the promotion before it")

        // A closure cancels waiters it covers.
        guard case .closure(let closed) = try await s.send(.closeRoom, #"{"room":"Buffered","from":"2026-11-23","to":"2026-11-24","reason":"paint"}"#,
                                                          user: "root") else { Issue.record("not closed"); return }
        #expect(closed.cancelled?.map(\.id).contains(same.id) == true)
        let cancelled = try #require(try await s.store.booking(id: same.id))
        #expect(cancelled.status == .cancelled && cancelled.cancelReason == "room closed: paint")
    }

    /// "No waiter is passed over by a later one whose slot overlaps it":
    /// a short waiter does not take the part of an earlier, longer
    /// waiter's slot that comes free first; the earlier one gets its whole
    /// slot when the rest comes free.
    @Test(arguments: StoreKind.allCases)
    func aLaterWaiterDoesNotPassAnEarlierOneWhoseSlotItOverlaps(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let wait = #","ifTaken":"waitlist""#
        let x = try #require(try await s.create("10:00", "11:00").bookingValue)
        let y = try #require(try await s.create("11:00", "12:00").bookingValue)
        let long = try #require(try await s.create("10:00", "12:00", extra: wait, user: "bob").bookingValue)
        let short = try #require(try await s.create("11:00", "12:00", extra: wait, user: "cy").bookingValue)
        #expect(long.status == .waitlisted && short.status == .waitlisted)
        #expect(short.waitlist?.position == 2)
        #expect(try await s.cancel(y.id).bookingValue?.status == .cancelled)
        #expect(try await s.status(short.id) == .waitlisted, "11:00–12:00 is free, but taking it would pass the earlier waiter")
        #expect(try await s.cancel(x.id).bookingValue?.status == .cancelled)
        #expect(try await s.status(long.id) == .confirmed)
        #expect(try await s.status(short.id) == .waitlisted)
    }

    /// A requester may let go of a hold or leave a waitlist inside the
    /// room's change cutoff (a confirmed booking there is still 2004).
    @Test(arguments: StoreKind.allCases)
    func heldAndWaitlistedBookingsAreCancelledInsideTheCutoff(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        #expect(try await s.send(.registerRoom, #"{"name":"Cutoff","capacity":8,"changeCutoffMinutes":60}"#, user: "root").isOK)
        let holder = try #require(try await s.create("12:00", "13:00", room: "Cutoff").bookingValue)
        let waiter = try #require(try await s.create("12:00", "13:00", room: "Cutoff", extra: #","ifTaken":"waitlist""#,
                                                     user: "bob").bookingValue)
        #expect(waiter.status == .waitlisted)
        // 11:30 Berlin: 30 minutes before the start.
        s.clock.withLock { $0 = utc("2026-11-23T10:30:00Z") }
        #expect(try await s.cancel(holder.id).errorValue?.code == .tooLateToChange)
        #expect(try await s.cancel(waiter.id, user: "bob").bookingValue?.status == .cancelled)
        let hold = try #require(try await s.create("13:00", "14:00", room: "Cutoff", extra: #","hold":{"minutes":60}"#,
                                                   user: "cy").bookingValue)
        #expect(hold.status == .held)
        // 12:20 Berlin: 40 minutes before its start, the hold not yet lapsed.
        s.clock.withLock { $0 = utc("2026-11-23T11:20:00Z") }
        #expect(try await s.cancel(hold.id, user: "cy").bookingValue?.status == .cancelled)
    }

    /// An end frees a place of the requester's quota: a waiter kept only by
    /// the quota is promoted when its requester's booking ends.
    @Test(arguments: StoreKind.allCases)
    func anEndPromotesAWaiterKeptByTheQuota(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let taken = try #require(try await s.create("11:00", "12:00", room: "Quota").bookingValue)
        let first = try #require(try await s.create("09:00", "10:00", room: "Quota", user: "bob").bookingValue)
        let waiter = try #require(try await s.create("11:00", "12:00", room: "Quota", extra: #","ifTaken":"waitlist""#,
                                                     user: "bob").bookingValue)
        #expect(waiter.status == .waitlisted)
        // The quota is lowered to one: bob has two (the waiter counts).
        #expect(try await s.send(.registerRoom, #"{"name":"Quota","capacity":8,"maxActiveBookings":1}"#, user: "root").isOK)
        #expect(try await s.cancel(taken.id).bookingValue != nil)
        #expect(try await s.status(waiter.id) == .waitlisted, "free, but over bob's quota")
        // 10:00 Berlin: bob's first booking starts and ends.
        s.clock.withLock { $0 = utc("2026-11-23T09:00:00Z") }
        _ = try await s.runTimers()
        #expect(try await s.status(first.id) == .completed)
        #expect(try await s.status(waiter.id) == .confirmed)
    }

    /// A room re-registered smaller does not take a waiter with more
    /// attendees than it now holds; that waiter cannot take the slot, so it
    /// does not hold it against the waiter behind it.
    @Test(arguments: StoreKind.allCases)
    func promotionChecksTheRoomsCapacity(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let holder = try #require(try await s.create("09:00", "10:00").bookingValue)
        let waiter = try await s.twoPersonWaiter()
        #expect(waiter.status == .waitlisted)
        let behind = try #require(try await s.create("09:00", "10:00", extra: #","ifTaken":"waitlist""#, user: "cy").bookingValue)
        #expect(try await s.send(.registerRoom, #"{"name":"Berlin","capacity":1}"#, user: "root").isOK)
        #expect(try await s.cancel(holder.id).bookingValue != nil)
        #expect(try await s.status(waiter.id) == .waitlisted)
        #expect(try await s.status(behind.id) == .confirmed, "the slot is not left empty for a waiter that cannot take it")
    }

    /// A waiter the room has become too small for waits on a free slot; its
    /// requester's `booking.update` down to the capacity is a change to the
    /// room's bookings, so the walk runs in its transaction and promotes it
    /// (contract v1.2, "Promotion": "any change to a room's bookings").
    @Test(arguments: StoreKind.allCases)
    func anUpdateThatMakesAWaiterFitPromotesIt(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let holder = try #require(try await s.create("09:00", "10:00").bookingValue)
        let waiter = try await s.twoPersonWaiter()
        #expect(try await s.send(.registerRoom, #"{"name":"Berlin","capacity":1}"#, user: "root").isOK)
        #expect(try await s.cancel(holder.id).bookingValue != nil)
        #expect(try await s.status(waiter.id) == .waitlisted, "two attendees do not fit a room for one")
        _ = s.events()

        let one = #"[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]"#
        let updated = try await s.send(.updateBooking, #"{"bookingId":"\#(waiter.id)","attendees":\#(one)}"#, user: "bob")
        #expect(updated.bookingValue?.status == .confirmed && updated.bookingValue?.version == waiter.version + 2,
                "the reply is the booking as the command leaves it: updated, then promoted")
        #expect(try await s.status(waiter.id) == .confirmed)
        let events = s.events().filter { $0.routingKey.hasPrefix("booking.") }
        #expect(events.map(\.routingKey) == ["booking.updated", "booking.confirmed"])
        let promoted = try ContractJSON.decode(BookingEvent.self, from: Data(try #require(events.last).body))
        #expect(promoted.promoted == true && promoted.previous?.status == .waitlisted && promoted.booking.attendees.count == 1)
    }

    /// Series: `ifTaken` per occurrence — the taken week waits, the others
    /// are booked; cancelling the series covers its waiting occurrence.
    @Test(arguments: StoreKind.allCases)
    func aSeriesWaitsPerOccurrence(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let s = try await setup(fixture)
        let taken = try #require(try await s.create("09:00", "10:00", date: "2026-11-30", user: "bob").bookingValue)
        let reply = try await s.create("09:00", "10:00", extra: #","recurrence":{"frequency":"weekly","count":3},"ifTaken":"waitlist""#)
        guard case .series(let series) = reply else { Issue.record("\(reply)"); return }
        #expect(series.bookings.map(\.status) == [.confirmed, .waitlisted, .confirmed])
        #expect(series.bookings.map { $0.waitlist?.position } == [nil, 1, nil], "the waiting occurrence shows its place")
        #expect(series.skipped.isEmpty)
        #expect(try await s.cancel(taken.id, user: "bob").bookingValue != nil)
        #expect(try await s.status(series.bookings[1].id) == .confirmed, "promoted")
        let holdSeries = try await s.create("09:00", "10:00", extra: #","recurrence":{"frequency":"weekly","count":3},"hold":{}"#)
        #expect(holdSeries.errorValue?.code == .invalidField && holdSeries.errorValue?.field == "hold")
    }

    /// Fifty waiters for one slot through two stores on one database (two
    /// processes), then the holders cancelled while creates race: never
    /// two blocking bookings in conflict, and the promotions come in the
    /// waiters' order.
    @Test(arguments: StoreKind.allCases)
    func fiftyWaitersAndRacingCancelsKeepOrderAndNeverConflict(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let a = try await setup(fixture)
        let bStore = try await fixture.open()
        let b = Setup(store: bStore, processor: CommandProcessor(store: bStore, policy: a.processor.policy, now: { a.clock.withLock { $0 } }),
                      clock: a.clock)
        let wait = #","ifTaken":"waitlist""#
        let holder = try #require(try await a.create("09:00", "10:00", room: "Buffered").bookingValue)
        let waiters = try await withThrowingTaskGroup(of: Booking?.self) { group in
            for i in 0..<50 {
                // Alternating 09:00–10:00 and 10:00–11:00: the second is
                // only blocked through the buffer, which no constraint sees.
                let (start, end) = i % 2 == 0 ? ("09:00", "10:00") : ("10:00", "11:00")
                let side = i % 2 == 0 ? a : b
                group.addTask { try await side.create(start, end, room: "Buffered", extra: wait, user: "u\(i)").bookingValue }
            }
            return try await group.reduce(into: [Booking]()) { if let b = $1 { $0.append(b) } }
        }
        #expect(waiters.count == 50 && waiters.allSatisfy { $0.status == .waitlisted })
        // Positions are a permutation: each waiter saw a different queue.
        #expect(Set(waiters.map { $0.waitlist!.position }).count == 50)
        let order = waiters.sorted { $0.waitlist!.position < $1.waitlist!.position }.map(\.id)

        // Cancel whoever holds it, from both sides, while more creates race.
        var promoted: [String] = []
        var current = holder.id
        for round in 0..<20 {
            let side = round % 2 == 0 ? a : b
            let target = current
            async let cancel = side.cancel(target, user: round == 0 ? "ann" : "root")
            async let extra = (round % 2 == 0 ? b : a).create("09:00", "10:00", room: "Buffered", extra: wait, user: "late\(round)")
            _ = try await (cancel, extra)
            let blocking = try await blockingBookings(a.store)
            #expect(blocking.count <= 1, "round \(round): \(blocking.count) blocking bookings")
            guard let next = blocking.first else { break }
            promoted.append(next.id)
            current = next.id
        }
        #expect(promoted.count == 20)
        #expect(promoted == Array(order.prefix(promoted.count)), "never a waiter passed over by a later one")
    }

    /// The blocking bookings of the Buffered room on 2026-11-23 (every waiter there overlaps every other through the buffer).
    func blockingBookings(_ store: any BookingStore) async throws -> [Booking] {
        let reader = BookingReader(store: store, policy: CallerPolicy(administrators: ["root"]))
        guard case .bookings(let rows, _) = try await reader.list(ListBookings(from: .date("2026-11-23"), to: .date("2026-11-24"),
                                                                              room: "Buffered", status: ["confirmed", "held", "pending"], limit: 500),
                                                                 caller: .user("root")) else { return [] }
        var bookings: [Booking] = []
        for row in rows { if let booking = try await store.booking(id: row.id) { bookings.append(booking) } }
        return bookings
    }
}
