import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// The booking lifecycle of contract v1.1 through the real broker and real
/// SQLite: timers on a running clock, check-in by several broker users.
@Suite("Booking lifecycle end to end")
struct LifecycleEndToEndTests {
    /// Reads events from the harness's queue until `done` holds for what
    /// was seen (acked as read), or fails after `timeout` seconds.
    static func events(_ h: HandlerHarness, timeout: Double = 120,
                       until done: @escaping @Sendable ([(type: String, event: BookingEvent)]) -> Bool)
        async throws -> [(type: String, event: BookingEvent)]
    {
        let consumer = h.events
        return try await withTimeout(timeout, "lifecycle events") {
            var seen: [(type: String, event: BookingEvent)] = []
            while !done(seen) {
                guard let message = try await consumer.take(1).first else { throw CancellationError() }
                guard let type = EventType(rawValue: message.routingKey), type.isBookingEvent else { continue }
                seen.append((message.routingKey, try ContractJSON.decode(BookingEvent.self, from: message.body)))
            }
            return seen
        }
    }

    /// The real end-to-end case with short durations: the handler's clock
    /// runs 60 times faster than the wall clock from 08:50 tomorrow, so a
    /// 15-minute booking starts 10 s and ends 25 s after the test begins
    /// (the timer loop polls every wall second: every handler minute).
    /// Nothing is forced: the handler's own timer loop starts, releases,
    /// expires and completes the bookings while the broker carries the
    /// events.
    @Test func bookingsStartEndExpireAndAreReleasedByThemselves() async throws {
        let rate = 60.0
        let date = TestDates.tomorrow
        let origin = try #require(ContractFormat.instant(date: date, time: "08:50", timeZone: "Europe/Berlin"))
        let wall = Date()
        let h = try await HandlerHarness.start(administrators: ["guest"], now: {
            origin.addingTimeInterval(Date().timeIntervalSince(wall) * rate)
        })
        for room in [#"{"name": "Runs", "capacity": 4}"#,
                     #"{"name": "Desk", "capacity": 4, "autoReleaseMinutes": 1}"#,
                     #"{"name": "Board", "capacity": 4, "requiresApproval": true}"#] {
            #expect(try await h.send("room.register", json: room, userID: "guest").error == nil)
        }
        var ids: [String: String] = [:]
        for room in ["Runs", "Desk", "Board"] {
            let reply = try await h.send("booking.create", json: createJSON(room: room, date: date, start: "09:00", end: "09:15"))
            ids[room] = try #require(reply.booking, "\(reply)").id
        }
        let runs = ids["Runs"]!, desk = ids["Desk"]!, board = ids["Board"]!
        let seen = try await Self.events(h) { seen in
            seen.contains { $0.type == "booking.completed" && $0.event.booking.id == runs }
                && seen.contains { $0.type == "booking.cancelled" && $0.event.booking.id == desk }
                && seen.contains { $0.type == "booking.rejected" && $0.event.booking.id == board }
        }
        func timed(_ id: String) -> [String] {
            seen.filter { $0.event.booking.id == id && !["booking.created", "booking.confirmed"].contains($0.type) }
                .map { "\($0.type) v\($0.event.booking.version) \($0.event.booking.status.rawValue)" }
        }
        #expect(timed(runs) == ["booking.started v2 inProgress", "booking.completed v3 completed"])
        #expect(timed(desk) == ["booking.cancelled v2 cancelled"])
        #expect(timed(board) == ["booking.rejected v2 rejected"])
        let released = try #require(seen.first { $0.type == "booking.cancelled" && $0.event.booking.id == desk }?.event)
        #expect(released.released == true)
        #expect(released.booking.cancelReason == "released: nobody checked in")
        #expect(released.previous?.status == .confirmed)
        let expired = try #require(seen.first { $0.type == "booking.rejected" }?.event)
        #expect(expired.booking.cancelReason == "expired")
        // Applied at or after their due instants on the handler's clock.
        let started = try #require(seen.first { $0.type == "booking.started" }?.event)
        #expect(try #require(ContractFormat.parseTimestamp(started.occurredAt)) >= ContractFormat.parseTimestamp(started.booking.startsAt)!)
        #expect(try await h.app.store.booking(id: runs)?.status == .completed)
        await h.stop()
    }

    /// `booking.checkin` and cancelling a booking in progress with the
    /// shipped users: the requester and the room's approver may, another
    /// outside system may not (2003), and the window is the contract's (2005).
    @Test func checkinAndEndingEarlyBySeveralUsers() async throws {
        let clock = LockedBox(Date())
        let w = try await CallerModelTests.World.start(now: { clock.withLock { $0 } })
        let room = #"{"name": "Desk", "capacity": 4, "autoReleaseMinutes": 10, "approvers": ["facility-desk"]}"#
        #expect(try await w.send("room.register", room, as: "bookingctl").error == nil)
        let date = TestDates.berlinDate(daysFromNow: 2)
        let mine = try #require(try await w.send("booking.create", createJSON(room: "Desk", date: date, start: "09:00", end: "10:00"),
                                                 as: "partner-a").booking)
        let other = try #require(try await w.send("booking.create", createJSON(room: "Desk", date: date, start: "10:00", end: "11:00"),
                                                  as: "partner-a").booking)
        let start = try #require(ContractFormat.parseTimestamp(mine.startsAt))
        func checkin(_ id: String, as user: String) async throws -> CommandReply {
            try await w.send("booking.checkin", #"{"bookingId": "\#(id)"}"#, as: user)
        }
        clock.withLock { $0 = start.addingTimeInterval(-16 * 60) }
        #expect(try await checkin(mine.id, as: "partner-a").error?.code == .checkinNotPossible, "16 minutes early")
        clock.withLock { $0 = start.addingTimeInterval(-15 * 60) }
        #expect(try await checkin(mine.id, as: "partner-b").error?.code == .notPermitted, "not theirs")
        #expect(try await w.booking(mine.id)?.status == .confirmed)
        let started = try #require(try await checkin(mine.id, as: "partner-a").booking)
        #expect(started.status == .inProgress && started.version == 2)
        #expect(try await checkin(mine.id, as: "partner-a").error?.code == .statusChangeNotAllowed, "checked in already")
        #expect(try await w.send("booking.update", #"{"bookingId": "\#(mine.id)", "title": "x"}"#, as: "partner-a")
            .error?.code == .tooLateToChange, "in progress: details are fixed")

        // The approver lets people into the next booking …
        let next = try #require(ContractFormat.parseTimestamp(other.startsAt))
        clock.withLock { $0 = next.addingTimeInterval(-5 * 60) }
        #expect(try await checkin(other.id, as: "facility-desk").booking?.status == .inProgress)
        // … and ends the first one early: at the next quarter hour, whatever the cutoff.
        clock.withLock { $0 = start.addingTimeInterval(20 * 60) }
        #expect(try await w.send("booking.cancel", #"{"bookingId": "\#(mine.id)"}"#, as: "partner-b").error?.code == .notPermitted)
        let ended = try #require(try await w.send("booking.cancel", #"{"bookingId": "\#(mine.id)", "reason": "done early"}"#,
                                                  as: "facility-desk").booking)
        #expect(ended.status == .cancelled)
        #expect(ended.end == "09:30")
        #expect(ended.version == 3)

        // The second booking's end completes it through the timer.
        let otherEnd = try #require(ContractFormat.parseTimestamp(other.endsAt))
        clock.withLock { $0 = otherEnd }
        let seen = try await Self.events(w.handler) { seen in
            seen.contains { $0.type == "booking.completed" && $0.event.booking.id == other.id }
        }
        let types = seen.filter { $0.event.booking.id == mine.id }.map(\.type)
        #expect(types == ["booking.created", "booking.confirmed", "booking.started", "booking.cancelled"])
        let cancelled = try #require(seen.first { $0.type == "booking.cancelled" }?.event)
        #expect(cancelled.previous?.end == "10:00" && cancelled.booking.end == "09:30")
        #expect(cancelled.released == nil)
        await w.stop()
    }
}
