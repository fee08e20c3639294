import AMQPClient
import AvailabilityProjector
import BookingContracts
import Foundation
import ServiceSupport
import TestSupport
import Testing

/// Contract v1.2 weekly hours and buffers through the real broker: the
/// handler's rules, the `room.registered` event, and the projector's answers.
@Suite("Calendars end to end", .serialized)
struct CalendarEndToEndTests {
    /// The next date, at least `after` days from now, that falls on ISO
    /// weekday `weekday` (0 = Monday).
    static func next(_ weekday: Int, after: Int = 2) -> String {
        for days in after..<(after + 7) {
            let date = localDate(daysFromNow: days)
            if WeeklyHours.weekdayIndex(of: date) == weekday { return date }
        }
        return localDate(daysFromNow: after)
    }

    @Test func weeklyHoursAndBuffersReachEveryAnswer() async throws {
        let h = try await ProjectorHarness.start()
        let atrium = RegisterRoom(name: "Atrium", capacity: 12, opens: "09:00", closes: "17:00",
                                hours: ["mon": ["08:00", "18:00"], "sat": nil, "sun": nil], bufferMinutes: 15)
        let registered = try #require(try await h.send(.registerRoom, atrium).roomValue)
        #expect(registered.hours?["sat"] == .some(nil) && registered.bufferMinutes == 15, "the room as given")
        let monday = Self.next(0), tuesday = Self.next(1), saturday = Self.next(5)
        // The handler: that weekday's hours, closed weekdays, the buffer.
        #expect(try await h.send(.createBooking, Self.create(monday, "08:00", "09:00")).bookingValue != nil)
        #expect(try await h.send(.createBooking, Self.create(tuesday, "08:00", "09:00")).errorValue?.code == .outsideOpeningHours,
                "Tuesday has opens/closes 09:00-17:00")
        let closed = try #require(try await h.send(.createBooking, Self.create(saturday, "10:00", "11:00")).errorValue)
        #expect(closed.code == .outsideOpeningHours && closed.field == "date" && closed.text.contains("closed on Saturdays"))
        let tooClose = try #require(try await h.send(.createBooking, Self.create(monday, "09:00", "10:00")).errorValue)
        #expect(tooClose.code == .overlap, "09:00 is inside the 15-minute buffer after 08:00-09:00")
        #expect(try await h.send(.createBooking, Self.create(monday, "09:15", "10:00")).bookingValue != nil)
        // The projector: buffers left out, clipped at the hours; a closed day says so.
        let reply = try await h.waitForRooms("date=\(monday)&name=atrium", "Atrium booked") {
            room($0, "Atrium")?.avail == ["10:15 - 18:00"]
        }
        #expect(reply[0].closed == nil)
        let saturdayReply = try await h.rooms("date=\(saturday)&name=atrium")
        #expect(saturdayReply.first?.avail == [] && saturdayReply.first?.closed == "closed on Saturdays")
        let rpc = try await h.rpc(#"{"date":"\#(tuesday)","name":"atrium"}"#)
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: rpc.body).first?.avail == ["09:00 - 17:00"])
        await h.stop()
    }

    static func create(_ date: String, _ start: String, _ end: String) -> CreateBooking {
        CreateBooking(room: "Atrium", date: .calendarDate(date), start: start, end: end, title: "T",
                      attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")])
    }
}
