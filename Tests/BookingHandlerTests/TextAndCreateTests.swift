import BookingContracts
import Foundation
import Testing

@testable import BookingHandler

@Suite("Title and description")
struct TextTests {
    @Test func trimmedTitleAndDescription() throws {
        let value = try #require(expectSuccess(BookingRules.text(title: "  Sprint review\n", description: " Q4 demo ")))
        #expect(value.title == "Sprint review")
        #expect(value.description == "Q4 demo")
    }

    @Test func descriptionIsOptional() throws {
        let value = try #require(expectSuccess(BookingRules.text(title: "Sprint review", description: nil)))
        #expect(value.title == "Sprint review")
        #expect(value.description == nil)
    }

    @Test(arguments: ["", " ", "\n\t "])
    func blankDescriptionBecomesNil(_ description: String) throws {
        let value = try #require(expectSuccess(BookingRules.text(title: "T", description: description)))
        #expect(value.description == nil)
    }

    @Test(arguments: ["", " ", "\n\t ", "\u{00A0}"])
    func blankTitle(_ title: String) {
        expectFailure(BookingRules.text(title: title, description: nil), .invalidField, field: "title")
    }

    @Test func titleLength() throws {
        let max = String(repeating: "t", count: 400)
        #expect(try #require(expectSuccess(BookingRules.text(title: max, description: nil))).title == max)
        #expect(try #require(expectSuccess(BookingRules.text(title: "  \(max)  ", description: nil))).title == max)
        expectFailure(BookingRules.text(title: max + "t", description: nil), .invalidField, field: "title")
        // UTF-8 bytes, not characters: 100 four-byte emoji fill the 400 bytes.
        let emoji = String(repeating: "🎉", count: 100)
        #expect(try #require(expectSuccess(BookingRules.text(title: emoji, description: nil))).title == emoji)
        expectFailure(BookingRules.text(title: emoji + "t", description: nil), .invalidField, field: "title")
    }

    @Test func descriptionLength() throws {
        let max = String(repeating: "d", count: 4000)
        #expect(try #require(expectSuccess(BookingRules.text(title: "T", description: max))).description == max)
        expectFailure(BookingRules.text(title: "T", description: max + "d"), .invalidField, field: "description")
        #expect(try #require(expectSuccess(BookingRules.text(title: "T", description: String(repeating: "ü", count: 2000))))
            .description?.utf8.count == 4000)
        expectFailure(BookingRules.text(title: "T", description: String(repeating: "ü", count: 2001)), .invalidField,
                      field: "description")
    }

    @Test func titleIsCheckedBeforeDescription() {
        expectFailure(BookingRules.text(title: "", description: String(repeating: "d", count: 4001)), .invalidField,
                      field: "title")
    }
}

@Suite("booking.create")
struct ValidateCreateTests {
    @Test func contractExample() throws {
        let value = try #require(expectSuccess(BookingRules.validateCreate(Fixture.create(), room: Fixture.berlin,
                                                                          now: Fixture.now)))
        #expect(value == ValidatedCreate(
            room: Fixture.berlin,
            slot: BookingSlot(date: "2026-11-23", start: "09:00", end: "10:30", timeZone: "Europe/Berlin",
                              startsAt: utc("2026-11-23T08:00:00Z"), endsAt: utc("2026-11-23T09:30:00Z")),
            title: "Sprint review", description: "Q4 demo", attendees: [Fixture.adaNormalised], status: .confirmed))
    }

    @Test func roomRequiringApprovalStartsPending() throws {
        var room = Fixture.berlin
        room.requiresApproval = true
        let value = try #require(expectSuccess(BookingRules.validateCreate(Fixture.create(), room: room,
                                                                          now: Fixture.now)))
        #expect(value.status == .pending)
        #expect(value.room == room)
        #expect(BookingRules.initialStatus(requiresApproval: true) == .pending)
        #expect(BookingRules.initialStatus(requiresApproval: false) == .confirmed)
    }

    @Test func unknownRoomNamesIt() throws {
        let command = Fixture.create(room: "Atlantis", start: "9:00", title: "", attendees: [])
        let error = try #require(expectFailure(BookingRules.validateCreate(command, room: nil, now: Fixture.now),
                                               .unknownRoom, field: "room"))
        #expect(error.text.contains("Atlantis"))
    }

    @Test func textIsCheckedBeforeTheSlot() {
        let command = Fixture.create(start: "9:00", title: " ")
        expectFailure(BookingRules.validateCreate(command, room: Fixture.berlin, now: Fixture.now), .invalidField,
                      field: "title")
    }

    @Test func slotIsCheckedBeforeTheAttendees() {
        let command = Fixture.create(start: "09:10", attendees: [])
        expectFailure(BookingRules.validateCreate(command, room: Fixture.berlin, now: Fixture.now), .offGrid,
                      field: "start")
    }

    @Test func attendeesAgainstTheRoomsCapacity() {
        let room = Room(name: "Phone booth", capacity: 1)
        let command = Fixture.create(room: room.name, attendees: [Fixture.ada, Fixture.ada])
        expectFailure(BookingRules.validateCreate(command, room: room, now: Fixture.now), .overCapacity,
                      field: "attendees")
        expectFailure(BookingRules.validateCreate(Fixture.create(attendees: []), room: room, now: Fixture.now),
                      .invalidField, field: "attendees")
    }

    @Test func eachSlotRuleSurfaces() {
        let rows: [(CreateBooking, ErrorCode, String)] = [
            (Fixture.create(date: .calendarDate("2026-02-30")), .invalidField, "date"),
            (Fixture.create(end: "25:00"), .invalidField, "end"),
            (Fixture.create(end: "10:05"), .offGrid, "end"),
            (Fixture.create(start: "10:30", end: "10:30"), .endNotAfterStart, "end"),
            (Fixture.create(start: "06:45"), .outsideOpeningHours, "start"),
            (Fixture.create(date: .calendarDate("2026-11-20")), .startInPast, "start"),
        ]
        for (command, code, field) in rows {
            expectFailure(BookingRules.validateCreate(command, room: Fixture.berlin, now: Fixture.now), code,
                          field: field)
        }
    }

    @Test func eachAttendeeRuleSurfaces() {
        let rows: [(AttendeeInput, ErrorCode, String)] = [
            (AttendeeInput(name: "", email: "ada@example.com", phone: "0170 1234567"), .attendeeNameInvalid,
             "attendees[0].name"),
            (AttendeeInput(name: "Ada", email: "ada@example", phone: "0170 1234567"), .attendeeEmailInvalid,
             "attendees[0].email"),
            (AttendeeInput(name: "Ada", email: "ada@example.com", phone: "12"), .attendeePhoneInvalid,
             "attendees[0].phone"),
        ]
        for (person, code, field) in rows {
            let command = Fixture.create(attendees: [person])
            expectFailure(BookingRules.validateCreate(command, room: Fixture.berlin, now: Fixture.now), code,
                          field: field)
        }
    }

    @Test func normalisedValues() throws {
        let command = Fixture.create(
            date: .unixSeconds(1_795_390_200), title: "  Sprint review ", description: "   ",
            attendees: [AttendeeInput(name: " Ada Lovelace ", email: "ada@EXAMPLE.com", phone: "0049 170 1234567")])
        let value = try #require(expectSuccess(BookingRules.validateCreate(command, room: Fixture.berlin,
                                                                          now: Fixture.now)))
        #expect(value.title == "Sprint review")
        #expect(value.description == nil)
        #expect(value.slot.date == "2026-11-23")
        #expect(value.attendees == [Fixture.adaNormalised])
    }

    @Test func roomInNewYork() throws {
        let command = Fixture.create(room: Fixture.newYork.name)
        let value = try #require(expectSuccess(BookingRules.validateCreate(command, room: Fixture.newYork,
                                                                          now: Fixture.now)))
        #expect(value.slot.startsAt == utc("2026-11-23T14:00:00Z"))
        #expect(value.slot.endsAt == utc("2026-11-23T15:30:00Z"))
        #expect(value.slot.timeZone == "America/New_York")
    }
}
