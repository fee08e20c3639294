import AvailabilityProjector
import BookingContracts
import Foundation
import Testing

@Suite("Slot arithmetic")
struct SlotArithmeticTests {
    let berlin = TimeZone(identifier: "Europe/Berlin")!
    let room = RoomInfo(room: Room(name: "Berlin", capacity: 8))

    func avail(_ bookings: [(String, String, BookingStatus)], date: String = "2026-11-23", room: RoomInfo? = nil) -> [String] {
        let occupancy = DayOccupancy(bookings: bookings.map {
            (ContractFormat.minutes(ofTime: $0.0)!, ContractFormat.minutes(ofTime: $0.1)!, $0.2)
        })
        let info = room ?? self.room
        let zone = TimeZone(identifier: info.room.timeZone)!
        return info.free(on: date, occupancy: occupancy, missing: LocalClock.missingSlots(date: date, zone: zone)).availStrings
    }

    @Test func contractExample() {
        #expect(avail([("09:00", "10:30", .confirmed)]) == ["07:00 - 09:00", "10:30 - 19:00"])
    }

    @Test func emptyDayIsTheOpeningHours() {
        #expect(avail([]) == ["07:00 - 19:00"])
    }

    @Test func edgesOfTheDay() {
        #expect(avail([("07:00", "07:15", .confirmed)]) == ["07:15 - 19:00"])
        #expect(avail([("18:45", "19:00", .pending)]) == ["07:00 - 18:45"])
        #expect(avail([("07:00", "07:15", .confirmed), ("18:45", "19:00", .confirmed)]) == ["07:15 - 18:45"])
    }

    @Test func backToBackBookingsMerge() {
        #expect(avail([("09:00", "10:00", .confirmed), ("10:00", "11:00", .pending)]) == ["07:00 - 09:00", "11:00 - 19:00"])
        #expect(avail([("09:00", "10:00", .confirmed), ("10:15", "11:00", .confirmed)])
                    == ["07:00 - 09:00", "10:00 - 10:15", "11:00 - 19:00"])
    }

    @Test func fullDayAndCancelled() {
        #expect(avail([("07:00", "19:00", .confirmed)]) == [])
        #expect(avail([("07:00", "19:00", .cancelled)]) == ["07:00 - 19:00"])
        #expect(avail([("07:00", "19:00", .rejected)]) == ["07:00 - 19:00"], "a rejected booking frees its time (v1.1)")
        #expect(avail([("06:00", "20:00", .pending)]) == [])
    }

    /// v1.2: a held booking takes its slot (in a mask of its own, not
    /// with the pending ones); a waitlisted one takes nothing.
    @Test func heldIsTakenAndWaitlistedIsNot() {
        #expect(avail([("09:00", "10:00", .held)]) == ["07:00 - 09:00", "10:00 - 19:00"])
        #expect(avail([("09:00", "10:00", .waitlisted)]) == ["07:00 - 19:00"])
        #expect(DayOccupancy(bookings: [(540, 600, .held)]).held.availStrings == ["09:00 - 10:00"])
        #expect(DayOccupancy(bookings: [(540, 600, .held)]).pending.isEmpty)
        #expect(DayOccupancy.holdingStatuses.contains(.held) && !DayOccupancy.holdingStatuses.contains(.waitlisted))
    }

    @Test func overlappingBookingsFromReplayMerge() {
        // A replay or out-of-order events can show two active bookings on
        // the same slots for a moment: the union is busy, nothing breaks.
        #expect(avail([("09:00", "11:00", .confirmed), ("10:00", "12:00", .pending), ("10:30", "10:45", .confirmed)])
                    == ["07:00 - 09:00", "12:00 - 19:00"])
        let occupancy = DayOccupancy(bookings: [(540, 660, .confirmed), (600, 720, .pending)])
        #expect(occupancy.confirmed.availStrings == ["09:00 - 11:00"])
        #expect(occupancy.pending.availStrings == ["11:00 - 12:00"])  // pending never hides confirmed
    }

    @Test func offGridTimesRoundOutward() {
        #expect(avail([("09:05", "09:20", .confirmed)]) == ["07:00 - 09:00", "09:30 - 19:00"])
        let odd = RoomInfo(room: Room(name: "Odd", capacity: 1, opens: "07:10", closes: "18:50"))
        #expect(avail([], room: odd) == ["07:15 - 18:45"])
    }

    @Test func springForwardDaySkipsTheMissingHour() {
        // 2026-03-29, Europe/Berlin: 02:00 → 03:00.
        #expect(LocalClock.missingSlots(date: "2026-03-29", zone: berlin).availStrings == ["02:00 - 03:00"])
        #expect(LocalClock.missingSlots(date: "2026-03-28", zone: berlin).isEmpty)
        #expect(LocalClock.missingSlots(date: "2026-10-25", zone: berlin).isEmpty)  // fall back: nothing missing
        let night = RoomInfo(room: Room(name: "Night", capacity: 1, opens: "00:00", closes: "06:00"))
        #expect(avail([], date: "2026-03-29", room: night) == ["00:00 - 02:00", "03:00 - 06:00"])
        #expect(avail([("01:30", "03:30", .confirmed)], date: "2026-03-29", room: night) == ["00:00 - 01:30", "03:30 - 06:00"])
        #expect(avail([], date: "2026-10-25", room: night) == ["00:00 - 06:00"])
        let ny = TimeZone(identifier: "America/New_York")!
        #expect(LocalClock.missingSlots(date: "2026-03-08", zone: ny).availStrings == ["02:00 - 03:00"])
    }

    @Test func daylightSavingDaysAreOrdinaryInOpeningHours() {
        for date in ["2026-03-29", "2026-10-25"] {
            #expect(avail([], date: date) == ["07:00 - 19:00"])
            #expect(avail([("09:00", "10:30", .confirmed)], date: date) == ["07:00 - 09:00", "10:30 - 19:00"])
        }
    }

    @Test func localClock() {
        // 2026-03-29T01:30:00Z is 03:30 CEST.
        let local = LocalClock.local(Date(timeIntervalSince1970: 1_774_747_800), zone: berlin)
        #expect(local.date == "2026-03-29")
        #expect(local.minute == 3 * 60 + 30)
        #expect(LocalClock.adding(days: 1, to: "2026-12-31") == "2027-01-01")
        #expect(LocalClock.adding(days: -1, to: "2028-03-01") == "2028-02-29")
    }

    @Test func maskBasics() {
        let m = SlotMask(fromMinute: 0, toMinute: 24 * 60)
        #expect(m == .all)
        #expect(m.slotCount == 96)
        #expect(SlotMask(fromMinute: 23 * 60 + 45, toMinute: 24 * 60).contains(95))
        #expect(SlotMask(fromMinute: 600, toMinute: 600).isEmpty)
        #expect(SlotMask.all.availStrings == ["00:00 - 24:00"])
    }
}
