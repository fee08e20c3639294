import BookingContracts
import Testing
@testable import AvailabilityProjector

/// Contract v1.2: free ranges follow the weekday's hours and leave the
/// room's buffer out on both sides of every booking, clipped at the hours.
@Suite("Free ranges with weekly hours and buffers")
struct CalendarFreeRangesTests {
    static let room = Room(name: "Week", capacity: 6, opens: "10:00", closes: "16:00",
                           hours: ["mon": ["08:00", "18:00"], "sat": nil, "sun": nil], bufferMinutes: 15)

    static func booked(_ from: String, _ to: String) -> DayOccupancy {
        DayOccupancy(confirmed: SlotMask(fromMinute: ContractFormat.minutes(ofTime: from)!,
                                         toMinute: ContractFormat.minutes(ofTime: to)!))
    }

    @Test func theBufferIsLeftOutOnBothSidesOfABooking() {
        let info = RoomInfo(room: Self.room)
        // Monday 2026-11-23, 08:00–18:00, a booking 10:00–11:00.
        let free = info.free(on: "2026-11-23", occupancy: Self.booked("10:00", "11:00"), missing: .empty)
        #expect(free.availStrings == ["08:00 - 09:45", "11:15 - 18:00"])
    }

    @Test func theBufferIsClippedAtTheDaysHours() {
        let info = RoomInfo(room: Self.room)
        let free = info.free(on: "2026-11-23", occupancy: Self.booked("08:00", "09:00"), missing: .empty)
        #expect(free.availStrings == ["09:15 - 18:00"])
        let late = info.free(on: "2026-11-23", occupancy: Self.booked("17:30", "18:00"), missing: .empty)
        #expect(late.availStrings == ["08:00 - 17:15"])
    }

    @Test func eachWeekdayHasItsHoursAndClosedDaysHaveNoneWithAReason() {
        let info = RoomInfo(room: Self.room)
        #expect(info.free(on: "2026-11-23", occupancy: DayOccupancy(), missing: .empty).availStrings == ["08:00 - 18:00"])
        // Tuesday: not in `hours`, so opens/closes.
        #expect(info.free(on: "2026-11-24", occupancy: DayOccupancy(), missing: .empty).availStrings == ["10:00 - 16:00"])
        #expect(info.closedReason(on: "2026-11-24") == nil)
        for (date, reason) in [("2026-11-28", "closed on Saturdays"), ("2026-11-29", "closed on Sundays")] {
            #expect(info.free(on: date, occupancy: DayOccupancy(), missing: .empty).isEmpty)
            #expect(info.closedReason(on: date) == reason)
        }
    }

    @Test func aClosedDayReadsDifferentlyFromAFullOneInTheReply() throws {
        let info = RoomInfo(room: Self.room)
        let closed = QueryEngine.Answer(info: info, date: "2026-11-28", occupancy: DayOccupancy(), free: .empty,
                                        closed: .all, closedReason: info.closedReason(on: "2026-11-28"))
        let full = QueryEngine.Answer(info: info, date: "2026-11-23", occupancy: Self.booked("08:00", "18:00"), free: .empty,
                                      closed: .empty, closedReason: nil)
        let reply = try ContractJSON.decode(AvailabilityReply.self, from: QueryEngine.encode([closed, full]))
        #expect(reply[0].avail.isEmpty && reply[0].closed == "closed on Saturdays")
        #expect(reply[1].avail.isEmpty && reply[1].closed == nil)
        // The writer and the encoder agree on both shapes.
        #expect(QueryEngine.encode([closed, full]) == [UInt8](try ContractJSON.encode(reply)))
    }

    @Test func dilationCoversEveryRun() {
        let mask = SlotMask(fromMinute: 60, toMinute: 120).union(SlotMask(fromMinute: 600, toMinute: 615))
        #expect(mask.dilated(by: 2).availStrings == ["00:30 - 02:30", "09:30 - 10:45"])
        #expect(SlotMask(fromMinute: 0, toMinute: 15).dilated(by: 4).availStrings == ["00:00 - 01:15"])
        #expect(mask.dilated(by: 0) == mask)
    }
}
