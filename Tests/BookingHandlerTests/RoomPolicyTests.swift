import BookingContracts
import Foundation
import Testing
@testable import BookingHandler

/// Room policies of contract v1.1 (horizon 1107, durations 1108, change
/// cutoff and ended bookings 2004), at their edges.
@Suite("Room policies")
struct RoomPolicyTests {
    static func room(horizon: Int? = nil, min: Int? = nil, max: Int? = nil, cutoff: Int? = nil,
                     zone: String = "Europe/Berlin") -> Room {
        Room(name: "Berlin", capacity: 8, timeZone: zone, opens: "00:00", closes: "23:45", horizonDays: horizon,
             minMinutes: min, maxMinutes: max, changeCutoffMinutes: cutoff)
    }

    func slot(_ room: Room, _ date: String, _ start: String, _ end: String, now: Date) -> Result<BookingSlot, ReplyError> {
        BookingRules.slot(room: room, date: .calendarDate(date), start: start, end: end, now: now)
    }

    @Test func horizonCountsCalendarDaysInTheRoomsZone() throws {
        // 2026-11-22T23:30Z is already 2026-11-23 in Berlin: "today" is the 23rd there.
        let now = utc("2026-11-22T23:30:00Z")
        let room = Self.room(horizon: 2)
        #expect((try? slot(room, "2026-11-25", "09:00", "10:00", now: now).get()) != nil, "exactly 2 days ahead")
        let error = try #require(slot(room, "2026-11-26", "09:00", "10:00", now: now).failure)
        #expect(error.code == .beyondHorizon)
        #expect(error.field == "date")
    }

    @Test func horizonOnADSTDayIsOneDayLikeAnyOther() {
        // Berlin leaves summer time on 2026-10-25 (a 25-hour day).
        let now = utc("2026-10-24T10:00:00Z")
        let room = Self.room(horizon: 1)
        #expect((try? slot(room, "2026-10-25", "09:00", "10:00", now: now).get()) != nil)
        #expect(slot(room, "2026-10-26", "09:00", "10:00", now: now).failure?.code == .beyondHorizon)
    }

    @Test func durationsAreRealElapsedMinutes() {
        let now = utc("2026-10-20T10:00:00Z")
        let room = Self.room(min: 30, max: 120)
        #expect(slot(room, "2026-10-21", "09:00", "09:15", now: now).failure?.code == .durationOutOfRange)
        #expect((try? slot(room, "2026-10-21", "09:00", "09:30", now: now).get()) != nil, "exactly the minimum")
        #expect((try? slot(room, "2026-10-21", "09:00", "11:00", now: now).get()) != nil, "exactly the maximum")
        #expect(slot(room, "2026-10-21", "09:00", "11:15", now: now).failure?.code == .durationOutOfRange)
        // Across the fall-back change 01:00–03:00 local lasts three real hours.
        let dst = slot(room, "2026-10-25", "01:00", "03:00", now: now)
        #expect(dst.failure?.code == .durationOutOfRange, "180 elapsed minutes > 120")
        #expect(dst.failure?.text.contains("180") == true)
    }

    @Test func policyFieldsAreValidated() {
        #expect(BookingRules.validateRoom(RegisterRoom(name: "X", capacity: 1, horizonDays: -1)).failure?.field == "horizonDays")
        #expect(BookingRules.validateRoom(RegisterRoom(name: "X", capacity: 1, minMinutes: 0)).failure?.field == "minMinutes")
        #expect(BookingRules.validateRoom(RegisterRoom(name: "X", capacity: 1, minMinutes: 60, maxMinutes: 30)).failure?.field
            == "maxMinutes")
        #expect(BookingRules.validateRoom(RegisterRoom(name: "X", capacity: 1, changeCutoffMinutes: 600_000)).failure?.field
            == "changeCutoffMinutes")
        let ok = try? BookingRules.validateRoom(RegisterRoom(name: "X", capacity: 1, horizonDays: 0, minMinutes: 15,
                                                             maxMinutes: 1500, changeCutoffMinutes: 0)).get()
        #expect(ok?.maxMinutes == 1500)
    }

    // MARK: 2004

    static func booking(start: String, end: String) -> Booking {
        Booking(id: "b-1", room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:00", timeZone: "Europe/Berlin",
                startsAt: start, endsAt: end, title: "T", status: .confirmed, attendees: [], version: 1)
    }

    @Test func cutoffIsExclusiveOfItsLimitAndAdminsAreExempt() {
        let booking = Self.booking(start: "2026-11-23T08:00:00Z", end: "2026-11-23T09:00:00Z")
        let room = Self.room(cutoff: 60)
        let atLimit = utc("2026-11-23T07:00:00Z")
        let justAfter = atLimit.addingTimeInterval(1)
        for action in [BookingAction.cancel, .reschedule] {
            #expect(BookingRules.tooLate(action, booking: booking, room: room, now: atLimit, isAdmin: false) == nil)
            #expect(BookingRules.tooLate(action, booking: booking, room: room, now: justAfter, isAdmin: false)?.code
                == .tooLateToChange)
            #expect(BookingRules.tooLate(action, booking: booking, room: room, now: justAfter, isAdmin: true) == nil)
        }
        // Confirming is an approval: the cutoff does not apply.
        #expect(BookingRules.tooLate(.confirm, booking: booking, room: room, now: justAfter, isAdmin: false) == nil)
    }

    @Test func startedAndEndedBookings() {
        let booking = Self.booking(start: "2026-11-23T08:00:00Z", end: "2026-11-23T09:00:00Z")
        let room = Self.room()
        let during = utc("2026-11-23T08:30:00Z")
        #expect(BookingRules.tooLate(.reschedule, booking: booking, room: room, now: during, isAdmin: true)?.code
            == .tooLateToChange, "a started booking cannot be moved, not even by an admin")
        #expect(BookingRules.tooLate(.cancel, booking: booking, room: room, now: during, isAdmin: false) == nil,
                "cancelling one in progress is allowed")
        #expect(BookingRules.tooLate(.confirm, booking: booking, room: room, now: during, isAdmin: true)?.code
            == .tooLateToChange, "not approved by its start: it expires, an approval now is too late")
        var checkedIn = booking
        checkedIn.status = .inProgress
        let early = utc("2026-11-23T07:50:00Z")
        #expect(BookingRules.tooLate(.update, booking: checkedIn, room: room, now: early, isAdmin: true)?.code
            == .tooLateToChange, "checked in early: started, even before its start")
        #expect(BookingRules.tooLate(.cancel, booking: checkedIn, room: Self.room(cutoff: 60), now: early, isAdmin: false) == nil,
                "cancelling one in progress ignores the cutoff")
        let after = utc("2026-11-23T09:00:00Z")
        // Check-in has its own window (2005), tested with the lifecycle rules.
        for action in BookingAction.allCases where action != .checkin {
            #expect(BookingRules.tooLate(action, booking: booking, room: room, now: after, isAdmin: true)?.code
                == .tooLateToChange, "\(action) after the end")
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
