import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// Room policies and the 2004 window through the real broker, with the
/// handler's clock injected (contract v1.1).
@Suite("Room policies end to end")
struct RoomPolicyEndToEndTests {
    @Test func policiesRefuseWithTheirCodesAndEndedBookingsCannotBeCancelled() async throws {
        let clock = LockedBox(Date())
        // Timers idle: this checks the 2004 window before the end timer has
        // completed the booking (afterwards it is final: 2002).
        let h = try await HandlerHarness.start(administrators: ["guest"], now: { clock.withLock { $0 } },
                                               timerInterval: .seconds(3600))
        let room = #"{"name": "Policy", "capacity": 4, "horizonDays": 3, "minMinutes": 30, "maxMinutes": 120, "changeCutoffMinutes": 60}"#
        #expect(try await h.send("room.register", json: room, userID: "guest").error == nil)
        func create(_ days: Int, _ start: String, _ end: String) async throws -> CommandReply {
            try await h.send("booking.create", json: createJSON(room: "Policy", date: TestDates.berlinDate(daysFromNow: days),
                                                               start: start, end: end))
        }
        #expect(try await create(5, "09:00", "10:00").error?.code == .beyondHorizon)
        #expect(try await create(1, "09:00", "09:15").error?.code == .durationOutOfRange)
        #expect(try await create(1, "09:00", "12:00").error?.code == .durationOutOfRange)
        let booking = try #require(try await create(1, "09:00", "10:00").booking)
        #expect(try await h.app.store.counts().bookings == 1)
        let startsAt = try #require(ContractFormat.parseTimestamp(booking.startsAt))
        let endsAt = try #require(ContractFormat.parseTimestamp(booking.endsAt))
        // 30 minutes before the start: inside the 60-minute cutoff.
        clock.withLock { $0 = startsAt.addingTimeInterval(-30 * 60) }
        let late = try await h.send("booking.cancel", json: #"{"bookingId": "\#(booking.id)"}"#)
        #expect(late.error?.code == .tooLateToChange)
        // After the end: not even an admin may cancel it.
        clock.withLock { $0 = endsAt.addingTimeInterval(60) }
        let ended = try await h.send("booking.cancel", json: #"{"bookingId": "\#(booking.id)"}"#, userID: "guest")
        #expect(ended.error?.code == .tooLateToChange)
        let stored = try await h.app.store.transaction { tx in try tx.booking(id: booking.id) }
        #expect(stored?.status == .confirmed)
        #expect(stored?.version == 1, "nothing changed")
        await h.stop()
    }
}
