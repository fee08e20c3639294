import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport
import AvailabilityProjector

/// A series through the booking handler to the projector: every occurrence
/// takes its slot on its own date, and a cancel by series frees exactly the
/// occurrences it cancelled.
@Suite("Series in the projector", .serialized)
struct SeriesProjectionTests {
    @Test func everyOccurrenceIsShownAndACancelFromADateFreesTheRest() async throws {
        let h = try await ProjectorHarness.start()
        let first = localDate(daysFromNow: 2)
        try await h.waitForRooms("date=\(first)", "rooms registered") { $0.count == 6 }
        let reply = try await h.send(.createBooking, CreateBooking(
            room: "Hamburg", date: .calendarDate(first), start: "10:00", end: "11:00", title: "Weekly",
            attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")],
            recurrence: Recurrence(.weekly, count: 4)))
        guard case .series(let series) = reply else { Issue.record("\(reply)"); return await h.stop() }
        let dates = series.bookings.map(\.date)
        #expect(dates == (0..<4).map { localDate(daysFromNow: 2 + 7 * $0) })
        for date in dates {
            _ = try await h.waitForRooms("date=\(date)&name=hamburg", "Hamburg busy on \(date)") {
                room($0, "Hamburg")?.avail == ["07:00 - 10:00", "11:00 - 19:00"]
            }
        }
        // The page's time bars (GET /api/day) show each occurrence as booked.
        for date in dates {
            let (status, body) = try await httpGet(h.base + "/api/day?date=\(date)&name=hamburg")
            #expect(status == 200)
            let day = try ContractJSON.decode(DayView.self, from: Data(body.utf8))
            #expect(day.rooms.first?.segments.map { "\($0.from)-\($0.to) \($0.state)" }
                    == ["07:00-10:00 free", "10:00-11:00 booked", "11:00-19:00 free"], "\(date)")
        }

        let cancelled = try await h.send(.cancelBooking, CancelSeries(seriesId: series.id, from: dates[2]))
        guard case .seriesCancelled(let c) = cancelled else { Issue.record("\(cancelled)"); return await h.stop() }
        #expect(c.cancelled.count == 2)
        for date in dates[2...] {
            _ = try await h.waitForRooms("date=\(date)&name=hamburg", "Hamburg free again on \(date)") {
                room($0, "Hamburg")?.avail == ["07:00 - 19:00"]
            }
        }
        for date in dates[..<2] {
            let still = try await h.rooms("date=\(date)&name=hamburg")
            #expect(room(still, "Hamburg")?.avail == ["07:00 - 10:00", "11:00 - 19:00"], "\(date) keeps its occurrence")
        }
        await h.stop()
    }
}
