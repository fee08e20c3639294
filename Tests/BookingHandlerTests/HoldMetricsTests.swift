import BookingContracts
import Foundation
import MetricsTestKit
import Testing
import TestSupport

@testable import BookingHandler

/// The hold and waitlist metrics count each committed change once
/// (docs/booking-handler.md, "Metrics"): not a redelivered command (the
/// inbox answers it), not a timer run again, not a transaction that rolled
/// back after the change was made — the case a redelivered command of a
/// failed group or a retried timer step comes from. Each test counts in a
/// `TestMetrics` of its own, on the real SQLite file and PostgreSQL.
@Suite("Hold and waitlist metrics")
struct HoldMetricsTests {
    struct Rollback: Error {}

    /// One command with a fixed `message_id`: sending it twice is a redelivery.
    static func send(_ s: HoldsAndWaitlistsTests.Setup, _ type: CommandType, _ json: String, key: String,
                     user: String = "ann") async throws -> CommandReply {
        guard case .handled(let reply, _, _, _) = try await s.processor.process(IncomingCommand(
            body: Array(json.utf8), typeProperty: type.rawValue, routingKey: type.rawValue, messageID: key,
            idempotencyKeyHeader: nil, userID: user)) else { throw CancellationError() }
        return reply
    }

    static func create(_ start: String, _ end: String, extra: String = "") -> String {
        #"{"room":"Berlin","date":"2026-11-23","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]\#(extra)}"#
    }

    @Test(arguments: StoreKind.allCases)
    func eachHoldAndPromotionCountsOnceWhateverIsRepeated(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let metrics = TestMetrics()
        let s = try await HoldsAndWaitlistsTests().setup(fixture, metrics: WaitlistMetrics(factory: metrics))
        func total(_ label: String) throws -> Int64 { try metrics.expectCounter(label).totalValue }

        // A hold, its command delivered twice.
        let hold = Self.create("09:00", "10:00", extra: #","hold":{"minutes":5}"#)
        let held = try #require(try await Self.send(s, .createBooking, hold, key: "hold-1").bookingValue)
        #expect(try await Self.send(s, .createBooking, hold, key: "hold-1").bookingValue?.id == held.id, "the inbox's answer")
        #expect(try total("booking_holds_created_total") == 1)
        // Confirmed, twice.
        let confirm = #"{"bookingId":"\#(held.id)"}"#
        #expect(try await Self.send(s, .confirmBooking, confirm, key: "confirm-1").bookingValue?.status == .confirmed)
        #expect(try await Self.send(s, .confirmBooking, confirm, key: "confirm-1").bookingValue?.status == .confirmed)
        #expect(try total("booking_holds_confirmed_total") == 1)

        // Another hold lapses; the timers run again and find nothing.
        let other = try #require(try await Self.send(s, .createBooking, Self.create("12:00", "13:00", extra: #","hold":{"minutes":5}"#),
                                                     key: "hold-2").bookingValue)
        s.clock.withLock { $0 = $0.addingTimeInterval(6 * 60) }
        #expect(try await s.runTimers().contains(.applied(bookingID: other.id, transition: .lapse, version: 2)))
        #expect(try await s.runTimers().allSatisfy { if case .applied = $0 { false } else { true } })
        #expect(try total("booking_holds_created_total") == 2 && total("booking_holds_expired_total") == 1)

        // A waiter promoted by a cancel, the cancel delivered twice.
        let waiter = try #require(try await Self.send(s, .createBooking, Self.create("09:00", "10:00", extra: #","ifTaken":"waitlist""#),
                                                      key: "wait-1", user: "bob").bookingValue)
        #expect(waiter.status == .waitlisted)
        #expect(try metrics.expectGauge("booking_waitlist_length", [("room", "Berlin")]).lastValue == 1)
        let cancel = #"{"bookingId":"\#(held.id)"}"#
        #expect(try await Self.send(s, .cancelBooking, cancel, key: "cancel-1").bookingValue?.status == .cancelled)
        #expect(try await Self.send(s, .cancelBooking, cancel, key: "cancel-1").bookingValue?.status == .cancelled)
        #expect(try await s.status(waiter.id) == .confirmed)
        #expect(try total("booking_waitlist_promotions_total") == 1)
        let waited = try metrics.expectTimer("booking_waitlist_wait_seconds").values
        // Recorded once. (Its value is not checked: the store stamps
        // `waitingSince` with the wall clock, not the processor's clock.)
        #expect(waited.count == 1, "recorded once: \(waited)")
        #expect(try metrics.expectGauge("booking_waitlist_length", [("room", "Berlin")]).lastValue == 0)
    }

    /// The same changes in transactions that roll back after them (as a
    /// group whose commit fails, or a timer step that throws, does): the
    /// database keeps nothing, and nothing is counted.
    @Test(arguments: StoreKind.allCases)
    func aRolledBackChangeCountsNothing(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let metrics = TestMetrics()
        let s = try await HoldsAndWaitlistsTests().setup(fixture, metrics: WaitlistMetrics(factory: metrics))
        func total(_ label: String) throws -> Int64 { try metrics.expectCounter(label).totalValue }
        let now = s.clock.withLock { $0 }
        let processor = s.processor

        var create = try ContractJSON.decode(CreateBooking.self, from: Data(Self.create("09:00", "10:00").utf8))
        create.hold = HoldRequest(minutes: 5)
        let holdCommand = Command.createBooking(create)
        await #expect(throws: Rollback.self) {
            try await s.store.transaction { tx in
                let reply = try processor.apply(holdCommand, tx, caller: .user("ann"), now: now)
                guard case .booking(let b) = reply.reply, b.status == .held else { return }
                throw Rollback()
            }
        }
        #expect(try await HoldsAndWaitlistsTests().blockingBookings(s.store).isEmpty, "rolled back")
        #expect(try total("booking_holds_created_total") == 0)

        // A blocker and a waiter; the cancel that promotes it rolls back.
        let blocker = try #require(try await Self.send(s, .createBooking, Self.create("09:00", "10:00"), key: "b").bookingValue)
        let waiter = try #require(try await Self.send(s, .createBooking, Self.create("09:00", "10:00", extra: #","ifTaken":"waitlist""#),
                                                      key: "w", user: "bob").bookingValue)
        let cancel = Command.cancelBooking(CancelBooking(bookingId: blocker.id))
        await #expect(throws: Rollback.self) {
            try await s.store.transaction { tx in
                _ = try processor.apply(cancel, tx, caller: .user("ann"), now: now)
                throw Rollback()
            }
        }
        #expect(try await s.status(waiter.id) == .waitlisted)
        #expect(try total("booking_waitlist_promotions_total") == 0)
        #expect(try metrics.expectTimer("booking_waitlist_wait_seconds").values.isEmpty)
        // Committed, it counts once.
        try await s.store.transaction { tx in _ = try processor.apply(cancel, tx, caller: .user("ann"), now: now) }
        #expect(try await s.status(waiter.id) == .confirmed)
        #expect(try total("booking_waitlist_promotions_total") == 1)
    }
}
