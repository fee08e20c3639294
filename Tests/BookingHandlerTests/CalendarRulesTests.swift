import BookingContracts
import Foundation
import Testing

@testable import BookingHandler

/// Contract v1.2, "Availability calendars": weekly hours and buffers as the
/// handler's pure rules apply them.
@Suite("Calendars: weekly hours and buffers")
struct CalendarRulesTests {
    /// Open 08:00–18:00 on weekdays but Friday 08:00–14:00 and Wednesday
    /// 10:00–16:00 (from `opens`/`closes`), closed on Saturday and Sunday.
    static let room = Room(name: "Week", capacity: 6, opens: "10:00", closes: "16:00",
                           hours: ["mon": ["08:00", "18:00"], "tue": ["08:00", "18:00"], "thu": ["08:00", "18:00"],
                                   "fri": ["08:00", "14:00"], "sat": nil, "sun": nil],
                           bufferMinutes: 15)
    static let now = ISO8601DateFormatter().date(from: "2026-01-01T00:00:00Z")!

    static func slot(_ date: String, _ start: String, _ end: String, room: Room = room) -> Result<BookingSlot, ReplyError> {
        BookingRules.slot(room: room, date: .calendarDate(date), start: start, end: end, now: now)
    }

    @Test func weekdaysOfKnownDates() {
        // 2026-03-29 is a Sunday (Europe's spring change), 2026-10-25 too (autumn).
        #expect(WeeklyHours.weekdayIndex(of: "2026-03-29") == 6)
        #expect(WeeklyHours.weekdayIndex(of: "2026-10-25") == 6)
        #expect(WeeklyHours.weekdayIndex(of: "2026-03-30") == 0)
        #expect(WeeklyHours.weekdayIndex(of: "1970-01-01") == 3)
        #expect(WeeklyHours.weekdayIndex(of: "2000-02-29") == 1)
        #expect(WeeklyHours.weekdayIndex(of: "1969-12-31") == 2)
        #expect(WeeklyHours.weekdayIndex(of: "2026-02-30") == nil)
    }

    /// Every weekday of the weeks around both DST changes: that day's
    /// hours, in the room's zone, with exact instants.
    @Test(arguments: [
        // The week of the spring change (Mon 23 March … Sun 29 March 2026).
        ("2026-03-23", "08:00", "18:00"), ("2026-03-24", "08:00", "18:00"), ("2026-03-25", "10:00", "16:00"),
        ("2026-03-26", "08:00", "18:00"), ("2026-03-27", "08:00", "14:00"),
        // And of the autumn change (Mon 19 … Sun 25 October), and the Monday after each.
        ("2026-10-19", "08:00", "18:00"), ("2026-10-21", "10:00", "16:00"), ("2026-10-23", "08:00", "14:00"),
        ("2026-03-30", "08:00", "18:00"), ("2026-10-26", "08:00", "18:00"),
    ])
    func eachWeekdayHasItsHours(_ day: (String, String, String)) throws {
        let (date, opens, closes) = day
        let open = try #require(try? Self.slot(date, opens, closes).get(), "\(date) \(opens)-\(closes) is bookable")
        let offset = date < "2026-03-29" || date > "2026-10-25" ? 3600.0 : 7200.0
        let expected = ContractFormat.instant(date: date, time: "00:00", timeZone: "UTC")!
            .addingTimeInterval(Double(ContractFormat.minutes(ofTime: opens)! * 60) - offset)
        #expect(open.startsAt == expected, "\(date): Europe/Berlin is UTC+\(Int(offset / 3600)) that day")
        expectFailure(Self.slot(date, ContractFormat.time(fromMinutes: ContractFormat.minutes(ofTime: opens)! - 15), closes),
                      .outsideOpeningHours, field: "start")
        expectFailure(Self.slot(date, opens, ContractFormat.time(fromMinutes: ContractFormat.minutes(ofTime: closes)! + 15)),
                      .outsideOpeningHours, field: "end")
    }

    @Test(arguments: ["2026-03-28", "2026-03-29", "2026-10-24", "2026-10-25"])
    func closedWeekdaysRefuseEveryBookingNamingTheDay(_ date: String) throws {
        let error = try #require(Self.slot(date, "10:00", "11:00").failure)
        #expect(error.code == .outsideOpeningHours && error.field == "date")
        #expect(error.text.contains("closed on Saturdays") || error.text.contains("closed on Sundays"), "\(error.text)")
    }

    @Test func aRoomWithoutHoursIsOpenEveryDayAsBefore() {
        let plain = Room(name: "Plain", capacity: 4)
        for date in ["2026-03-28", "2026-03-29", "2026-10-25", "2026-11-23"] {
            #expect((try? Self.slot(date, "07:00", "19:00", room: plain).get()) != nil, "\(date)")
        }
    }

    @Test func hoursAreValidatedNamingTheField() {
        func field(_ hours: [String: [String]?]?, buffer: Int? = nil) -> String? {
            let command = RegisterRoom(name: "V", capacity: 2, hours: hours, bufferMinutes: buffer)
            if case .failure(let e) = BookingRules.validateRoom(command) { return e.field }
            return nil
        }
        #expect(field(["mon": ["08:00", "18:00"], "sat": nil]) == nil)
        #expect(field(["monday": ["08:00", "18:00"]]) == "hours.monday")
        #expect(field(["tue": ["08:10", "18:00"]]) == "hours.tue")
        #expect(field(["wed": ["18:00", "08:00"]]) == "hours.wed")
        #expect(field(["thu": ["08:00"]]) == "hours.thu")
        #expect(field(["fri": ["8", "18:00"]]) == "hours.fri")
        #expect(field(nil, buffer: 0) == nil)
        #expect(field(nil, buffer: 240) == nil)
        #expect(field(nil, buffer: 255) == "bufferMinutes")
        #expect(field(nil, buffer: 10) == "bufferMinutes")
        #expect(field(nil, buffer: -15) == "bufferMinutes")
    }
}

/// The buffer in the conflict rule, on each store: two blocking bookings
/// at least `bufferMinutes` apart on instants; exactly the buffer apart is
/// fine, a minute of grid less is 2000 naming the neighbour.
@Suite("Calendars: buffers on the stores")
struct BufferStoreTests {
    static let rooms = #"[{"name": "Buffered", "capacity": 8, "opens": "07:00", "closes": "19:00", "bufferMinutes": 15}]"#
    static let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!

    func create(_ p: CommandProcessor, _ start: String, _ end: String) async throws -> CommandReply {
        let json = #"{"room":"Buffered","date":"2026-11-23","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
        let command = IncomingCommand(body: Array(json.utf8), typeProperty: "booking.create", routingKey: "booking.create",
                                      messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: "alice")
        guard case .handled(let reply, _, _, _) = try await p.process(command) else { throw CancellationError() }
        return reply
    }

    @Test(arguments: StoreKind.allCases)
    func aBufferAtExactlyItsLengthIsFineOneStepLessConflicts(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let now = Self.now
        let p = CommandProcessor(store: try await fixture.open(), now: { now })
        _ = try await p.upsertRooms(fileContents: Data(Self.rooms.utf8))
        let first = try #require(try await create(p, "10:00", "11:00").bookingValue)
        for (start, end) in [("11:00", "12:00"), ("09:00", "10:00"), ("10:45", "11:15"), ("09:30", "10:15")] {
            let refused = try await create(p, start, end)
            #expect(refused.errorValue?.code == .overlap, "\(start)-\(end) within 15 minutes of 10:00-11:00")
            #expect(refused.errorValue?.conflicts == [first.id])
            #expect(refused.errorValue?.text.contains("15-minute buffer") == true)
        }
        #expect(try await create(p, "11:15", "12:00").bookingValue != nil, "exactly the buffer after")
        #expect(try await create(p, "09:00", "09:45").bookingValue != nil, "exactly the buffer before")
    }
}
