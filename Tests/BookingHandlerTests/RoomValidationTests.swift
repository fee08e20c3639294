import BookingContracts
import Testing

@testable import BookingHandler

@Suite("room.register")
struct RoomValidationTests {
    @Test func minimalRoomGetsTheDefaults() throws {
        let room = try #require(expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "Berlin", capacity: 8))))
        #expect(room == Room(name: "Berlin", location: nil, equipment: [], size: nil, capacity: 8, images: [],
                             timeZone: "Europe/Berlin", opens: "07:00", closes: "19:00", requiresApproval: false))
    }

    @Test func contractExampleIsKeptAsGiven() throws {
        let command = RegisterRoom(name: "Berlin", location: "2nd floor", equipment: ["beamer", "tv"], size: "22m2",
                                   capacity: 8, images: ["https://example.com/1.jpg"], timeZone: "Europe/Berlin",
                                   opens: "07:00", closes: "19:00", requiresApproval: false)
        let room = try #require(expectSuccess(BookingRules.validateRoom(command)))
        #expect(room == command.resolved())
    }

    @Test func everyOptionalFieldIsTaken() throws {
        let command = RegisterRoom(name: "Oslo", location: "Annex", equipment: ["whiteboard"], size: "10m2",
                                   capacity: 10_000,
                                   images: ["https://a.example/1.jpg", "HTTP://b.example/2", "http://c.example:8080/x?y=z"],
                                   timeZone: "America/Argentina/Buenos_Aires",
                                   opens: "00:00", closes: "23:45", requiresApproval: true)
        let room = try #require(expectSuccess(BookingRules.validateRoom(command)))
        #expect(room == command.resolved())
    }

    @Test func nameIsTrimmed() throws {
        let room = try #require(expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "  Berlin\n", capacity: 8))))
        #expect(room.name == "Berlin")
    }

    @Test(arguments: ["", " ", "\t\n"])
    func blankName(_ name: String) {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: name, capacity: 8)), .invalidField, field: "name")
    }

    @Test func nameLength() {
        let max = String(repeating: "n", count: 200)
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: max, capacity: 8)))
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: " \(max) ", capacity: 8)))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: max + "n", capacity: 8)), .invalidField,
                      field: "name")
    }

    @Test(arguments: [0, -1, 10_001, Int.min, Int.max])
    func capacityOutOfRange(_ capacity: Int) {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "Berlin", capacity: capacity)), .invalidField,
                      field: "capacity")
    }

    @Test(arguments: [1, 8, 10_000])
    func capacityInRange(_ capacity: Int) {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "Berlin", capacity: capacity)))
    }

    @Test func images() {
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: [])))
        let three = ["https://example.com/1.jpg", "https://example.com/2.jpg", "https://example.com/3.jpg"]
        _ = expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: three)))
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: ["1", "2", "3", "4"])),
                      .invalidField, field: "images")
    }

    @Test(arguments: ["Europe/Berlin", "UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe",
                      "America/Argentina/Buenos_Aires"])
    func knownTimeZone(_ zone: String) throws {
        let room = try #require(expectSuccess(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1,
                                                                                      timeZone: zone))))
        #expect(room.timeZone == zone)
    }

    @Test(arguments: ["", "Mars/Olympus_Mons", "Europe/Atlantis", "Berlin", "Europe Berlin"])
    func unknownTimeZone(_ zone: String) {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, timeZone: zone)), .invalidField,
                      field: "timeZone")
    }

    @Test(arguments: [
        ("7:00", "19:00", "opens"), ("24:00", "19:00", "opens"), ("07:10", "19:00", "opens"), ("", "19:00", "opens"),
        ("07:00", "19:05", "closes"), ("07:00", "24:00", "closes"), ("07:00", "7pm", "closes"),
        ("19:00", "07:00", "closes"), ("09:00", "09:00", "closes"), ("23:45", "00:00", "closes"),
    ])
    func badOpeningHours(_ opens: String, _ closes: String, _ field: String) {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, opens: opens, closes: closes)),
                      .invalidField, field: field)
    }

    @Test(arguments: [("07:00", "07:15"), ("00:00", "23:45"), ("08:30", "17:30"), ("06:00", "22:00")])
    func goodOpeningHours(_ opens: String, _ closes: String) throws {
        let room = try #require(expectSuccess(BookingRules.validateRoom(
            RegisterRoom(name: "B", capacity: 1, opens: opens, closes: closes))))
        #expect(room.opens == opens)
        #expect(room.closes == closes)
    }

    @Test func orderOfChecks() {
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: " ", capacity: 0, images: ["1", "2", "3", "4"],
                                                             timeZone: "X", opens: "x", closes: "y")),
                      .invalidField, field: "name")
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 0, images: ["1", "2", "3", "4"],
                                                             timeZone: "X", opens: "x", closes: "y")),
                      .invalidField, field: "capacity")
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, images: ["1", "2", "3", "4"],
                                                             timeZone: "X", opens: "x", closes: "y")),
                      .invalidField, field: "images")
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, timeZone: "X", opens: "x",
                                                             closes: "y")),
                      .invalidField, field: "timeZone")
        expectFailure(BookingRules.validateRoom(RegisterRoom(name: "B", capacity: 1, opens: "x", closes: "y")),
                      .invalidField, field: "opens")
    }

    @Test func validatedRoomIsBookable() throws {
        let room = try #require(expectSuccess(BookingRules.validateRoom(
            RegisterRoom(name: "Kurz", capacity: 2, timeZone: "Asia/Kolkata", opens: "08:30", closes: "17:30"))))
        let slot = try #require(expectSuccess(BookingRules.slot(room: room, date: .calendarDate("2026-11-23"),
                                                                start: "08:30", end: "09:00", now: Fixture.now)))
        // India is UTC+05:30.
        #expect(slot.startsAt == utc("2026-11-23T03:00:00Z"))
    }
}
