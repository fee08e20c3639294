import BookingContracts
import Foundation
import Testing

@testable import BookingHandler

/// Shorthand: a slot of `room` on `date`.
private func slot(_ room: Room, _ date: DateSpec, _ start: String, _ end: String,
                  now: Date = Fixture.now) -> Result<BookingSlot, ReplyError> {
    BookingRules.slot(room: room, date: date, start: start, end: end, now: now)
}

/// Shorthand: a slot of Berlin on Monday 2026-11-23.
private func slot(_ start: String, _ end: String, now: Date = Fixture.now) -> Result<BookingSlot, ReplyError> {
    slot(Fixture.berlin, .calendarDate("2026-11-23"), start, end, now: now)
}

/// A row of a table test: the expected code and field, or nil for success.
struct SlotCase: CustomTestStringConvertible, Sendable {
    var start: String
    var end: String
    var code: ErrorCode?
    var field: String?

    static func ok(_ start: String, _ end: String) -> SlotCase { SlotCase(start: start, end: end) }
    static func fails(_ start: String, _ end: String, _ code: ErrorCode, _ field: String) -> SlotCase {
        SlotCase(start: start, end: end, code: code, field: field)
    }

    var testDescription: String { "\(start)-\(end) → \(code.map { "\($0) \(field ?? "")" } ?? "ok")" }

    func check(_ result: Result<BookingSlot, ReplyError>, sourceLocation: SourceLocation = #_sourceLocation) {
        if let code {
            expectFailure(result, code, field: field, sourceLocation: sourceLocation)
        } else if let value = expectSuccess(result, sourceLocation: sourceLocation) {
            #expect(value.start == start, sourceLocation: sourceLocation)
            #expect(value.end == end, sourceLocation: sourceLocation)
        }
    }
}

@Suite("Slot: the resolved booking")
struct SlotResolutionTests {
    @Test func contractExampleResolvesToExactInstants() throws {
        let value = try #require(expectSuccess(slot("09:00", "10:30")))
        #expect(value == BookingSlot(date: "2026-11-23", start: "09:00", end: "10:30", timeZone: "Europe/Berlin",
                                     startsAt: utc("2026-11-23T08:00:00Z"), endsAt: utc("2026-11-23T09:30:00Z")))
        #expect(value.startsAtTimestamp == "2026-11-23T08:00:00Z")
        #expect(value.endsAtTimestamp == "2026-11-23T09:30:00Z")
        #expect(value.interval.startsAt == value.startsAt)
        #expect(value.interval.endsAt == value.endsAt)
    }

    @Test func wholeOpeningDayIsBookable() throws {
        let value = try #require(expectSuccess(slot("07:00", "19:00")))
        #expect(value.startsAt == utc("2026-11-23T06:00:00Z"))
        #expect(value.endsAt == utc("2026-11-23T18:00:00Z"))
    }

    @Test func carriesTheRoomsZone() throws {
        let value = try #require(expectSuccess(slot(Fixture.newYork, .calendarDate("2026-11-23"), "09:00", "10:00")))
        #expect(value.timeZone == "America/New_York")
        #expect(value.date == "2026-11-23")
    }
}

@Suite("Slot: 15-minute grid (1103)")
struct SlotGridTests {
    @Test(arguments: [
        SlotCase.ok("09:00", "10:00"),
        .ok("09:15", "09:30"),
        .ok("09:45", "10:00"),
        .ok("09:30", "18:45"),
        .fails("09:10", "10:00", .offGrid, "start"),
        .fails("09:01", "10:00", .offGrid, "start"),
        .fails("09:59", "11:00", .offGrid, "start"),
        .fails("09:00", "10:05", .offGrid, "end"),
        .fails("09:00", "10:14", .offGrid, "end"),
        .fails("09:00", "10:46", .offGrid, "end"),
        // Both off the grid: start is reported first.
        .fails("09:14", "09:29", .offGrid, "start"),
        // Grid comes before end > start and before opening hours.
        .fails("09:10", "09:00", .offGrid, "start"),
        .fails("06:50", "08:00", .offGrid, "start"),
        .fails("18:00", "19:05", .offGrid, "end"),
        .fails("23:45", "23:59", .offGrid, "end"),
    ])
    func grid(_ c: SlotCase) { c.check(slot(c.start, c.end)) }
}

@Suite("Slot: end after start (1104)")
struct SlotOrderTests {
    @Test(arguments: [
        SlotCase.fails("10:00", "10:00", .endNotAfterStart, "end"),
        .fails("10:00", "09:45", .endNotAfterStart, "end"),
        .fails("18:45", "07:00", .endNotAfterStart, "end"),
        // Before the opening-hours check:
        .fails("06:00", "05:00", .endNotAfterStart, "end"),
        .fails("20:00", "20:00", .endNotAfterStart, "end"),
        .ok("10:00", "10:15"),
    ])
    func order(_ c: SlotCase) { c.check(slot(c.start, c.end)) }

    @Test func endNotAfterStartBeatsThePast() {
        expectFailure(slot(Fixture.berlin, .calendarDate("2026-01-01"), "10:00", "09:00"), .endNotAfterStart,
                      field: "end")
    }
}

@Suite("Slot: opening hours (1102)")
struct SlotOpeningHoursTests {
    @Test(arguments: [
        SlotCase.fails("06:45", "08:00", .outsideOpeningHours, "start"),
        .fails("06:45", "07:00", .outsideOpeningHours, "start"),
        .fails("00:00", "00:15", .outsideOpeningHours, "start"),
        .fails("06:00", "19:30", .outsideOpeningHours, "start"),
        .fails("18:00", "19:15", .outsideOpeningHours, "end"),
        .fails("07:00", "23:45", .outsideOpeningHours, "end"),
        .fails("19:00", "19:15", .outsideOpeningHours, "start"),
        .fails("21:00", "22:00", .outsideOpeningHours, "start"),
        .ok("18:45", "19:00"),
        .ok("07:00", "07:15"),
        .ok("07:00", "19:00"),
    ])
    func defaultHours(_ c: SlotCase) { c.check(slot(c.start, c.end)) }

    @Test(arguments: [
        SlotCase.fails("08:15", "09:00", .outsideOpeningHours, "start"),
        .fails("17:30", "17:45", .outsideOpeningHours, "start"),
        .fails("17:00", "17:45", .outsideOpeningHours, "end"),
        .ok("08:30", "08:45"),
        .ok("17:15", "17:30"),
        .ok("08:30", "17:30"),
    ])
    func roomsOwnHours(_ c: SlotCase) {
        let room = Room(name: "Kurz", capacity: 4, opens: "08:30", closes: "17:30")
        c.check(slot(room, .calendarDate("2026-11-23"), c.start, c.end))
    }

    @Test func textNamesTheRoomAndItsHours() throws {
        let error = try #require(expectFailure(slot("06:45", "08:00"), .outsideOpeningHours, field: "start"))
        #expect(error.text.contains("Berlin"))
        #expect(error.text.contains("07:00-19:00"))
    }

    @Test func openingHoursBeatThePast() {
        expectFailure(slot(Fixture.berlin, .calendarDate("2026-11-01"), "06:00", "08:00"), .outsideOpeningHours,
                      field: "start")
    }
}

@Suite("Slot: start in the past (1105)")
struct SlotPastTests {
    @Test func startOneMinuteBeforeNowIsPast() throws {
        let error = try #require(expectFailure(slot("09:00", "10:00", now: utc("2026-11-23T08:01:00Z")),
                                               .startInPast, field: "start"))
        #expect(error.text.contains("2026-11-23 09:00"))
    }

    @Test func startExactlyNowIsPast() {
        expectFailure(slot("09:00", "10:00", now: utc("2026-11-23T08:00:00Z")), .startInPast, field: "start")
    }

    @Test func startOneSecondAfterNowIsFuture() {
        _ = expectSuccess(slot("09:00", "10:00", now: utc("2026-11-23T07:59:59Z")))
    }

    @Test func runningBookingStartedInThePast() {
        // Ends in the future, but the start counts.
        expectFailure(slot("09:00", "12:00", now: utc("2026-11-23T09:00:00Z")), .startInPast, field: "start")
    }

    @Test func yesterdayIsPast() {
        expectFailure(slot(Fixture.berlin, .calendarDate("2026-11-21"), "09:00", "10:00"), .startInPast,
                      field: "start")
    }

    @Test func todayLaterIsFine() throws {
        // now = 11:00 in Berlin.
        let value = try #require(expectSuccess(slot(Fixture.berlin, .today, "12:00", "13:00")))
        #expect(value.date == "2026-11-22")
        #expect(value.startsAt == utc("2026-11-22T11:00:00Z"))
        _ = expectSuccess(slot(Fixture.berlin, .today, "11:15", "11:30"))
    }

    @Test func todayEarlierIsPast() {
        expectFailure(slot(Fixture.berlin, .today, "10:45", "11:00"), .startInPast, field: "start")
        expectFailure(slot(Fixture.berlin, .today, "11:00", "11:15"), .startInPast, field: "start")
        expectFailure(slot(Fixture.berlin, .today, "07:00", "19:00"), .startInPast, field: "start")
    }
}

@Suite("Slot: date forms")
struct SlotDateFormTests {
    /// 2026-11-22T23:30:00Z: already the 23rd in Berlin, still the 22nd in New York.
    static let lateEvening: Int64 = 1_795_390_200

    @Test func calendarDate() throws {
        let value = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-11-23"), "09:00", "10:00")))
        #expect(value.date == "2026-11-23")
    }

    @Test func todayIsTheRoomsLocalDate() throws {
        // 23:30Z on the 22nd is 00:30 on the 23rd in Berlin.
        let now = utc("2026-11-22T23:30:00Z")
        let berlin = try #require(expectSuccess(slot(Fixture.berlin, .today, "09:00", "10:00", now: now)))
        #expect(berlin.date == "2026-11-23")
        #expect(berlin.startsAt == utc("2026-11-23T08:00:00Z"))
        // ... and 18:30 on the 22nd in New York, too late for 09:00 that day.
        expectFailure(slot(Fixture.newYork, .today, "09:00", "10:00", now: now), .startInPast, field: "start")
        let evening = try #require(expectSuccess(slot(Fixture.newYork, .today, "18:45", "19:00", now: now)))
        #expect(evening.date == "2026-11-22")
        #expect(evening.startsAt == utc("2026-11-22T23:45:00Z"))
    }

    @Test func unixSecondsNameTheLocalDate() throws {
        let value = try #require(expectSuccess(slot(Fixture.berlin, .unixSeconds(Self.lateEvening), "09:00", "10:30")))
        #expect(value.date == "2026-11-23")
        #expect(value.startsAt == utc("2026-11-23T08:00:00Z"))
        #expect(value.endsAt == utc("2026-11-23T09:30:00Z"))

        let ny = try #require(expectSuccess(slot(Fixture.newYork, .unixSeconds(Self.lateEvening), "09:00", "10:00")))
        #expect(ny.date == "2026-11-22")
        #expect(ny.startsAt == utc("2026-11-22T14:00:00Z"))
    }

    @Test func unixSecondsAroundLocalMidnight() throws {
        // Berlin midnight of the 23rd is 23:00Z on the 22nd.
        let midnight = Int64(utc("2026-11-22T23:00:00Z").timeIntervalSince1970)
        #expect(try #require(expectSuccess(slot(Fixture.berlin, .unixSeconds(midnight), "09:00", "10:00"))).date
            == "2026-11-23")
        #expect(try #require(expectSuccess(slot(Fixture.berlin, .unixSeconds(midnight - 1), "12:00", "13:00"))).date
            == "2026-11-22")
    }

    @Test func unixSecondsTimeOfDayDoesNotMatter() throws {
        // Only the date counts: an afternoon instant names that whole day, its morning included.
        let afternoon = Int64(utc("2026-11-23T15:00:00Z").timeIntervalSince1970)
        let value = try #require(expectSuccess(slot(Fixture.berlin, .unixSeconds(afternoon), "09:00", "10:00")))
        #expect(value.date == "2026-11-23")
        #expect(value.startsAt == utc("2026-11-23T08:00:00Z"))
    }

    @Test(arguments: [Int64(-1), -1_795_390_200, 253_402_300_800, Int64.max, Int64.min])
    func unixSecondsOutOfRange(_ seconds: Int64) {
        expectFailure(slot(Fixture.berlin, .unixSeconds(seconds), "09:00", "10:00"), .invalidField, field: "date")
    }

    @Test func unixSecondsAtTheEdgesOfTheRange() throws {
        // 0 is 1970-01-01 (in the past), the largest is 9999-12-31T23:59:59Z (far future).
        expectFailure(slot(Fixture.berlin, .unixSeconds(0), "09:00", "10:00"), .startInPast, field: "start")
        let utcRoom = Room(name: "Greenwich", capacity: 1, timeZone: "UTC")
        let last = try #require(expectSuccess(slot(utcRoom, .unixSeconds(253_402_300_799), "09:00", "10:00")))
        #expect(last.date == "9999-12-31")
        #expect(last.startsAt == utc("9999-12-31T09:00:00Z"))
        // East of UTC that instant is already in year 10000, which YYYY-MM-DD cannot name.
        expectFailure(slot(Fixture.berlin, .unixSeconds(253_402_300_799), "09:00", "10:00"), .invalidField,
                      field: "date")
    }

    @Test func leapDay() throws {
        let value = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2028-02-29"), "09:00", "10:00")))
        #expect(value.startsAt == utc("2028-02-29T08:00:00Z"))
    }

    @Test func publicLocalDateHelper() throws {
        #expect(try BookingRules.localDate(.unixSeconds(Self.lateEvening), timeZone: "Europe/Berlin",
                                           now: Fixture.now).get() == "2026-11-23")
        #expect(try BookingRules.localDate(.unixSeconds(Self.lateEvening), timeZone: "America/New_York",
                                           now: Fixture.now).get() == "2026-11-22")
        #expect(try BookingRules.localDate(.today, timeZone: "Pacific/Kiritimati", now: Fixture.now).get()
            == "2026-11-23")
        #expect(try BookingRules.localDate(.calendarDate("2026-12-24"), timeZone: "UTC", now: Fixture.now).get()
            == "2026-12-24")
        expectFailure(BookingRules.localDate(.calendarDate("2026-02-30"), timeZone: "UTC", now: Fixture.now),
                      .invalidField, field: "date")
        expectFailure(BookingRules.localDate(.today, timeZone: "Mars/Olympus_Mons", now: Fixture.now),
                      .invalidField, field: "date")
    }
}

@Suite("Slot: malformed input (1100)")
struct SlotMalformedTests {
    @Test(arguments: ["2026-13-01", "2026-02-30", "2026-00-10", "2026-11-00", "2026-11-31", "2027-02-29",
                      "2100-02-29", "2026-1-01", "26-11-23", "2026/11/23", "", "tomorrow", "2026-11-23T09:00"])
    func malformedDate(_ text: String) throws {
        let error = try #require(expectFailure(slot(Fixture.berlin, .calendarDate(text), "09:00", "10:00"),
                                               .invalidField, field: "date"))
        #expect(error.text.contains("date"))
    }

    static let badTimes = ["9:00", "25:00", "24:00", "09:60", "0900", "09:00:00", "", " 09:00", "09:00 ", "ab:cd",
                           "-1:00", "09.00", "９:00", "9:0", "09:0"]

    @Test(arguments: badTimes)
    func malformedStart(_ text: String) {
        expectFailure(slot(text, "10:00"), .invalidField, field: "start")
    }

    @Test(arguments: badTimes)
    func malformedEnd(_ text: String) {
        expectFailure(slot("09:00", text), .invalidField, field: "end")
    }

    @Test func formatComesFirst() {
        // Malformed date beats a malformed start, which beats everything else.
        expectFailure(slot(Fixture.berlin, .calendarDate("2026-02-30"), "9:00", "10:05"), .invalidField, field: "date")
        expectFailure(slot("9:00", "25:00"), .invalidField, field: "start")
        expectFailure(slot("09:10", "25:00"), .invalidField, field: "end")
        expectFailure(slot(Fixture.berlin, .calendarDate("2020-01-01"), "05:10", "9:00"), .invalidField, field: "end")
    }

    @Test func roomWithBrokenSettings() {
        let badZone = Room(name: "X", capacity: 1, timeZone: "Nowhere/Atlantis")
        expectFailure(BookingRules.slot(room: badZone, date: .calendarDate("2026-11-23"), start: "09:00",
                                        end: "10:00", now: Fixture.now), .invalidField, field: "room")
        let badHours = Room(name: "X", capacity: 1, opens: "19:00", closes: "07:00")
        expectFailure(BookingRules.slot(room: badHours, date: .calendarDate("2026-11-23"), start: "09:00",
                                        end: "10:00", now: Fixture.now), .invalidField, field: "room")
        let malformedHours = Room(name: "X", capacity: 1, opens: "7 Uhr")
        expectFailure(BookingRules.slot(room: malformedHours, date: .calendarDate("2026-11-23"), start: "09:00",
                                        end: "10:00", now: Fixture.now), .invalidField, field: "room")
    }
}

@Suite("Slot: daylight-saving days are ordinary days")
struct SlotDaylightSavingTests {
    /// The two change days of 2026 in Europe/Berlin.
    static let berlinChangeDays = ["2026-03-29", "2026-10-25"]

    static func quarterHours(from: Int, to: Int) -> [String] {
        stride(from: from, to: to, by: 15).map { ContractFormat.time(fromMinutes: $0) }
    }

    @Test func springForwardInBerlin() throws {
        let day = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-03-29"), "07:00", "19:00",
                                                  now: Fixture.earlyNow)))
        // CEST (UTC+2) from 03:00 local on.
        #expect(day.startsAt == utc("2026-03-29T05:00:00Z"))
        #expect(day.endsAt == utc("2026-03-29T17:00:00Z"))
        let nine = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-03-29"), "09:00", "10:30",
                                                   now: Fixture.earlyNow)))
        #expect(nine.startsAt == utc("2026-03-29T07:00:00Z"))
        #expect(nine.endsAt == utc("2026-03-29T08:30:00Z"))
        #expect(nine.startsAtTimestamp == "2026-03-29T07:00:00Z")
    }

    @Test func fallBackInBerlin() throws {
        let day = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-10-25"), "07:00", "19:00",
                                                  now: Fixture.earlyNow)))
        // CET (UTC+1) from 03:00 CEST = 02:00 CET on.
        #expect(day.startsAt == utc("2026-10-25T06:00:00Z"))
        #expect(day.endsAt == utc("2026-10-25T18:00:00Z"))
        let nine = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-10-25"), "09:00", "10:30",
                                                   now: Fixture.earlyNow)))
        #expect(nine.startsAt == utc("2026-10-25T08:00:00Z"))
        #expect(nine.endsAt == utc("2026-10-25T09:30:00Z"))
    }

    @Test func daysAroundTheChanges() throws {
        let before = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-03-28"), "09:00", "10:00",
                                                     now: Fixture.earlyNow)))
        #expect(before.startsAt == utc("2026-03-28T08:00:00Z"))
        let after = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-10-26"), "09:00", "10:00",
                                                    now: Fixture.earlyNow)))
        #expect(after.startsAt == utc("2026-10-26T08:00:00Z"))
        let summer = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2026-10-24"), "09:00", "10:00",
                                                     now: Fixture.earlyNow)))
        #expect(summer.startsAt == utc("2026-10-24T07:00:00Z"))
    }

    @Test(arguments: berlinChangeDays)
    func everyQuarterHourIsBookableAndFifteenMinutesLong(_ date: String) throws {
        for start in Self.quarterHours(from: 7 * 60, to: 19 * 60) {
            let end = ContractFormat.time(fromMinutes: ContractFormat.minutes(ofTime: start)! + 15)
            let value = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate(date), start, end,
                                                        now: Fixture.earlyNow)))
            #expect(value.endsAt.timeIntervalSince(value.startsAt) == 15 * 60, "\(date) \(start)")
            #expect(value.date == date)
        }
    }

    @Test(arguments: berlinChangeDays)
    func changeDaysOfThisYearAreInThePastAtTheFixedNow(_ date: String) {
        expectFailure(slot(Fixture.berlin, .calendarDate(date), "07:00", "19:00"), .startInPast, field: "start")
    }

    @Test func changeDaysOf2027() throws {
        let spring = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2027-03-28"), "07:00", "19:00")))
        #expect(spring.startsAt == utc("2027-03-28T05:00:00Z"))
        #expect(spring.endsAt == utc("2027-03-28T17:00:00Z"))
        let autumn = try #require(expectSuccess(slot(Fixture.berlin, .calendarDate("2027-10-31"), "07:00", "19:00")))
        #expect(autumn.startsAt == utc("2027-10-31T06:00:00Z"))
        #expect(autumn.endsAt == utc("2027-10-31T18:00:00Z"))
    }

    @Test func unixSecondsDuringTheSkippedHourNameThatDay() throws {
        // 01:30Z on 2026-03-29 is 03:30 CEST, the change day itself.
        let instant = Int64(utc("2026-03-29T01:30:00Z").timeIntervalSince1970)
        let value = try #require(expectSuccess(slot(Fixture.berlin, .unixSeconds(instant), "09:00", "10:00",
                                                    now: Fixture.earlyNow)))
        #expect(value.date == "2026-03-29")
        #expect(value.startsAt == utc("2026-03-29T07:00:00Z"))
    }

    // A room open at night can reach the changes themselves.

    @Test func skippedLocalTimesDoNotExist() {
        let day = DateSpec.calendarDate("2026-03-29")
        expectFailure(slot(Fixture.nightOwl, day, "02:00", "02:30", now: Fixture.earlyNow), .invalidField,
                      field: "start")
        expectFailure(slot(Fixture.nightOwl, day, "02:45", "03:00", now: Fixture.earlyNow), .invalidField,
                      field: "start")
        expectFailure(slot(Fixture.nightOwl, day, "01:00", "02:15", now: Fixture.earlyNow), .invalidField,
                      field: "end")
        expectFailure(slot(Fixture.nightOwl, day, "01:00", "02:00", now: Fixture.earlyNow), .invalidField,
                      field: "end")
    }

    @Test func nonexistentTimeBeatsThePast() {
        // At the fixed now (November) the day is past, but the gap is reported.
        expectFailure(slot(Fixture.nightOwl, .calendarDate("2026-03-29"), "02:00", "02:30"), .invalidField,
                      field: "start")
    }

    @Test func aroundTheGap() throws {
        let day = DateSpec.calendarDate("2026-03-29")
        let across = try #require(expectSuccess(slot(Fixture.nightOwl, day, "01:45", "03:00", now: Fixture.earlyNow)))
        // 01:45 CET = 00:45Z, 03:00 CEST = 01:00Z: fifteen real minutes.
        #expect(across.startsAt == utc("2026-03-29T00:45:00Z"))
        #expect(across.endsAt == utc("2026-03-29T01:00:00Z"))
        let after = try #require(expectSuccess(slot(Fixture.nightOwl, day, "03:00", "04:00", now: Fixture.earlyNow)))
        #expect(after.startsAt == utc("2026-03-29T01:00:00Z"))
        #expect(after.endsAt == utc("2026-03-29T02:00:00Z"))
    }

    @Test func repeatedLocalTimesMeanTheFirstOccurrence() throws {
        let day = DateSpec.calendarDate("2026-10-25")
        let inside = try #require(expectSuccess(slot(Fixture.nightOwl, day, "02:30", "03:00", now: Fixture.earlyNow)))
        // 02:30 CEST = 00:30Z; 03:00 exists once, as CET = 02:00Z.
        #expect(inside.startsAt == utc("2026-10-25T00:30:00Z"))
        #expect(inside.endsAt == utc("2026-10-25T02:00:00Z"))
        let toTwo = try #require(expectSuccess(slot(Fixture.nightOwl, day, "01:00", "02:00", now: Fixture.earlyNow)))
        #expect(toTwo.startsAt == utc("2026-10-24T23:00:00Z"))
        #expect(toTwo.endsAt == utc("2026-10-25T00:00:00Z"))
        let whole = try #require(expectSuccess(slot(Fixture.nightOwl, day, "00:00", "06:00", now: Fixture.earlyNow)))
        #expect(whole.startsAt == utc("2026-10-24T22:00:00Z"))
        #expect(whole.endsAt == utc("2026-10-25T05:00:00Z"))
        #expect(whole.date == "2026-10-25")
    }
}

@Suite("Slot: a room in America/New_York")
struct SlotNewYorkTests {
    @Test func ordinaryDay() throws {
        let value = try #require(expectSuccess(slot(Fixture.newYork, .calendarDate("2026-11-23"), "09:00", "10:30")))
        #expect(value.startsAt == utc("2026-11-23T14:00:00Z"))
        #expect(value.endsAt == utc("2026-11-23T15:30:00Z"))
        #expect(value.timeZone == "America/New_York")
    }

    @Test func daylightSavingDays() throws {
        // 2026-03-08: EST → EDT; 2026-11-01: EDT → EST.
        let spring = try #require(expectSuccess(slot(Fixture.newYork, .calendarDate("2026-03-08"), "07:00", "19:00",
                                                     now: Fixture.earlyNow)))
        #expect(spring.startsAt == utc("2026-03-08T11:00:00Z"))
        #expect(spring.endsAt == utc("2026-03-08T23:00:00Z"))
        let autumn = try #require(expectSuccess(slot(Fixture.newYork, .calendarDate("2026-11-01"), "07:00", "19:00",
                                                     now: Fixture.earlyNow)))
        #expect(autumn.startsAt == utc("2026-11-01T12:00:00Z"))
        #expect(autumn.endsAt == utc("2026-11-02T00:00:00Z"))
    }

    @Test func openingHoursAreLocal() {
        // 06:45 New York is 11:45Z, well within Berlin-style UTC hours, but outside local ones.
        expectFailure(slot(Fixture.newYork, .calendarDate("2026-11-23"), "06:45", "08:00"), .outsideOpeningHours,
                      field: "start")
        expectFailure(slot(Fixture.newYork, .calendarDate("2026-11-23"), "18:00", "19:15"), .outsideOpeningHours,
                      field: "end")
    }

    @Test func pastIsJudgedByTheInstant() {
        // now = 05:00 in New York on the 22nd: the 22nd at 07:00 is still ahead.
        _ = expectSuccess(slot(Fixture.newYork, .calendarDate("2026-11-22"), "07:00", "08:00"))
        _ = expectSuccess(slot(Fixture.newYork, .today, "07:00", "08:00"))
        expectFailure(slot(Fixture.newYork, .calendarDate("2026-11-22"), "07:00", "08:00",
                           now: utc("2026-11-22T12:00:00Z")), .startInPast, field: "start")
    }
}

@Suite("Local time arithmetic")
struct LocalTimeTests {
    @Test func civilDays() {
        #expect(LocalTime.days(year: 1970, month: 1, day: 1) == 0)
        #expect(LocalTime.days(year: 2000, month: 3, day: 1) == 11_017)
        #expect(LocalTime.days(year: 1969, month: 12, day: 31) == -1)
        #expect(LocalTime.days(year: 2026, month: 11, day: 23) * 86_400
            == Int64(utc("2026-11-23T00:00:00Z").timeIntervalSince1970))
        for days in stride(from: Int64(-800_000), through: 3_000_000, by: 997) {
            let d = LocalTime.civil(days: days)
            #expect(LocalTime.days(year: d.year, month: d.month, day: d.day) == days)
        }
    }

    @Test func instantsInGapAndOverlap() throws {
        let berlin = try #require(TimeZone(identifier: "Europe/Berlin"))
        #expect(LocalTime.instants(year: 2026, month: 3, day: 29, minutes: 150, zone: berlin).isEmpty)
        #expect(LocalTime.instants(year: 2026, month: 10, day: 25, minutes: 150, zone: berlin)
            == [utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z")])
        #expect(LocalTime.instants(year: 2026, month: 11, day: 23, minutes: 540, zone: berlin)
            == [utc("2026-11-23T08:00:00Z")])
    }

    @Test func localDateOfInstants() throws {
        let berlin = try #require(TimeZone(identifier: "Europe/Berlin"))
        let newYork = try #require(TimeZone(identifier: "America/New_York"))
        #expect(LocalTime.localDate(of: utc("2026-11-22T23:30:00Z"), zone: berlin) == "2026-11-23")
        #expect(LocalTime.localDate(of: utc("2026-11-22T23:30:00Z"), zone: newYork) == "2026-11-22")
        #expect(LocalTime.localDate(of: Date(timeIntervalSince1970: -1), zone: TimeZone(identifier: "UTC")!)
            == "1969-12-31")
    }
}
