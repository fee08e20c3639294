import BookingContracts
import Foundation
import Testing

@Suite("Round trips")
struct RoundTripTests {
    @Test func commands() throws {
        try expectRoundTrip(Fixtures.registerRoom)
        try expectRoundTrip(Fixtures.minimalRegisterRoom)
        try expectRoundTrip(Fixtures.createBooking)
        try expectRoundTrip(CreateBooking(room: "Berlin", date: .today, start: "07:00", end: "08:00", title: "t",
                                          attendees: Fixtures.createBooking.attendees))
        try expectRoundTrip(CreateBooking(room: "Berlin", date: .unixSeconds(1_763_800_000), start: "07:00",
                                          end: "08:00", title: "t", attendees: Fixtures.createBooking.attendees))
        try expectRoundTrip(AttendeeInput(name: "Ada", email: "ada@example.com", phone: "+49 170 1234567"))
        try expectRoundTrip(ConfirmBooking(bookingId: Fixtures.bookingId))
        try expectRoundTrip(CancelBooking(bookingId: Fixtures.bookingId))
        try expectRoundTrip(CancelBooking(bookingId: Fixtures.bookingId, reason: "ill"))
        try expectRoundTrip(RescheduleBooking(bookingId: Fixtures.bookingId, date: .calendarDate("2026-11-24"),
                                              start: "13:00", end: "14:30"))
    }

    @Test func bookingsAndRooms() throws {
        try expectRoundTrip(Fixtures.booking)
        try expectRoundTrip(Fixtures.pendingBooking)
        try expectRoundTrip(Fixtures.cancelledBooking)
        try expectRoundTrip(Fixtures.occurrence)
        try expectRoundTrip(Fixtures.cancelledOccurrence)
        for reply in [CommandReply.series(SeriesBooked(id: "s", recurrence: Recurrence(.daily, count: 2), version: 1,
                                                        bookings: [Fixtures.occurrence], skipped: [])),
                      .seriesCancelled(SeriesCancelled(id: "s", version: 2, cancelled: [])),
                      .seriesCancelled(SeriesCancelled(id: "s", version: 2, cancelled: [BookingView(Fixtures.cancelledOccurrence, contacts: true)],
                                                       skipped: [SkippedOccurrence(date: "2026-11-23", code: .tooLateToChange,
                                                                                   text: "t", bookingId: "b")]))] {
            try expectRoundTrip(reply)
        }
        try expectRoundTrip(Fixtures.registerRoom.resolved())
        try expectRoundTrip(Fixtures.minimalRegisterRoom.resolved())
        try expectRoundTrip(Attendee(name: "Ada", email: "ada@example.com", phone: "+491701234567"))
        for status in BookingStatus.allCases { try expectRoundTrip(status) }
    }

    @Test func replies() throws {
        try expectRoundTrip(CommandReply.booking(Fixtures.booking))
        try expectRoundTrip(CommandReply.room(Fixtures.registerRoom.resolved()))
        try expectRoundTrip(CommandReply.failure(.overlap, "busy", field: "start", conflicts: ["a", "b"]))
        try expectRoundTrip(CommandReply.failure(.invalidJSON, "not JSON"))
        try expectRoundTrip(ReplyError(code: .invalidField, text: "start is missing", field: "start"))
    }

    @Test func events() throws {
        try expectRoundTrip(Fixtures.bookingEvent(Fixtures.booking))
        try expectRoundTrip(Fixtures.bookingEvent(Fixtures.cancelledBooking))
        try expectRoundTrip(RoomRegistered(eventId: "e", occurredAt: Fixtures.occurredAt,
                                           room: Fixtures.minimalRegisterRoom.resolved()))
        try expectRoundTrip(Fixtures.passDelivered)
        try expectRoundTrip(Fixtures.passFailed)
        var noCode = Fixtures.passFailed
        noCode.errorCode = nil
        try expectRoundTrip(noCode)
        try expectRoundTrip(Fixtures.availabilityChanged)
        for channel in PassChannel.allCases { try expectRoundTrip(channel) }
    }

    @Test func availability() throws {
        try expectRoundTrip(Fixtures.availabilityQuery)
        try expectRoundTrip(AvailabilityQuery())
        try expectRoundTrip(AvailabilityQuery(date: .now))
        try expectRoundTrip(AvailabilityQuery(date: .date(.today)))
        try expectRoundTrip(AvailabilityQuery(date: .date(.unixSeconds(1_795_420_800))))
        try expectRoundTrip(Fixtures.availabilityReply)
    }

    @Test func passGateway() throws {
        try expectRoundTrip(Fixtures.sendPassRequest)
        try expectRoundTrip(SendPassResponse.success)
        try expectRoundTrip(SendPassResponse.failure(SendPassError(text: "x", code: 4001, index: 2)))
        try expectRoundTrip(SendPassResponse.failure(SendPassError(text: "x", code: 1200)))
        try expectRoundTrip(Fixtures.failedPass)
    }

    @Test func typeTagsAndEnvelopes() throws {
        for type in CommandType.allCases { try expectRoundTrip(type) }
        for type in EventType.allCases { try expectRoundTrip(type) }
        try expectRoundTrip(ErrorCode.overlap)

        let commands: [Command] = [
            .registerRoom(Fixtures.registerRoom), .createBooking(Fixtures.createBooking),
            .confirmBooking(ConfirmBooking(bookingId: "b")), .cancelBooking(CancelBooking(bookingId: "b", reason: "r")),
            .rejectBooking(RejectBooking(bookingId: "b", reason: "r")),
            .updateBooking(UpdateBooking(bookingId: "b", title: "t", description: "d",
                                         attendees: [AttendeeInput(name: "A", email: "a@example.com", phone: "0170 1")])),
            .rescheduleBooking(RescheduleBooking(bookingId: "b", date: .today, start: "09:00", end: "10:00")),
            .checkinBooking(CheckinBooking(bookingId: "b")),
            .replayBookings(ReplayBookings(queue: "availability-projector.replay", replayId: "r-1")),
            .createBooking(Fixtures.seriesCreate),
            .cancelSeries(CancelSeries(seriesId: "s", from: "2026-12-01", reason: "r")),
            .cancelSeries(CancelSeries(seriesId: "s")),
            .closeRoom(CloseRoom(room: "Berlin", from: "2026-12-24", to: "2026-12-28", reason: "holidays")),
            .reopenRoom(ReopenRoom(room: "Berlin", closureId: "c-1")),
        ]
        #expect(Set(commands.map(\.type)) == Set(CommandType.allCases))
        for command in commands {
            #expect(try Command.decode(type: command.type, body: command.encodedBody()) == command)
        }

        let events: [Event] = [
            .roomRegistered(RoomRegistered(eventId: "r", occurredAt: Fixtures.occurredAt,
                                           room: Fixtures.registerRoom.resolved())),
            .booking(.bookingCreated, Fixtures.bookingEvent(Fixtures.pendingBooking)),
            .booking(.bookingConfirmed, Fixtures.bookingEvent(Fixtures.booking)),
            .booking(.bookingCancelled, Fixtures.bookingEvent(Fixtures.cancelledBooking)),
            .booking(.bookingRescheduled, Fixtures.bookingEvent(Fixtures.rescheduledBooking)),
            .booking(.bookingRejected, Fixtures.bookingEvent(Fixtures.rejectedBooking)),
            .booking(.bookingUpdated, Fixtures.bookingEvent(Fixtures.updatedBooking)),
            .booking(.bookingStarted, Fixtures.bookingEvent(Fixtures.startedBooking)),
            .booking(.bookingCompleted, Fixtures.bookingEvent(Fixtures.completedBooking)),
            .booking(.bookingCancelled, BookingEvent(eventId: "r", occurredAt: Fixtures.occurredAt,
                                                     booking: Fixtures.releasedBooking, released: true)),
            .booking(.bookingSubmitted, BookingEvent(eventId: "s", occurredAt: Fixtures.occurredAt, booking: Fixtures.pendingBooking,
                                                     previous: BookingSnapshot(Fixtures.pendingBooking), promoted: true)),
            .passDelivered(Fixtures.passDelivered), .passFailed(Fixtures.passFailed),
            .availabilityChanged(Fixtures.availabilityChanged),
            .roomClosure(.roomClosed, RoomClosureEvent(eventId: "c", occurredAt: Fixtures.occurredAt, closure: RoomClosure(
                id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays"))),
            .roomClosure(.roomReopened, RoomClosureEvent(eventId: "d", occurredAt: Fixtures.occurredAt, closure: RoomClosure(
                id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays"))),
        ]
        #expect(Set(events.map(\.type)) == Set(EventType.allCases))
        for event in events {
            #expect(try Event.decode(type: event.type, body: event.encodedBody()) == event)
            #expect(!event.eventId.isEmpty)
        }
    }

    @Test func unknownFieldsAreIgnored() throws {
        let body = #"{"bookingId":"b1","reason":"r","priority":"high","extra":{"nested":[1,2]}}"#
        #expect(try ContractJSON.decode(CancelBooking.self, from: Data(body.utf8))
                    == CancelBooking(bookingId: "b1", reason: "r"))
    }

    @Test func optionalFieldsAreOmittedNotNull() throws {
        let json = try encodedJSON(Fixtures.pendingBooking)
        #expect(json["description"] == nil)
        #expect(json["requestedBy"] == nil)
        #expect(json["cancelReason"] == nil)
        let text = String(decoding: try ContractJSON.encode(Fixtures.minimalRegisterRoom), as: UTF8.self)
        #expect(text == #"{"capacity":4,"name":"Hamburg"}"#)
    }

    @Test func encoderSortsKeysAndDoesNotEscapeSlashes() throws {
        let text = String(decoding: try ContractJSON.encode(Fixtures.registerRoom.resolved()), as: UTF8.self)
        #expect(text.contains(#""https://rooms.example.com/berlin/1.jpg""#))
        #expect(text.hasPrefix(#"{"capacity":8,"closes":"19:00","equipment":["#))
    }

    @Test func roomDefaults() {
        let room = Fixtures.minimalRegisterRoom.resolved()
        #expect(room == Room(name: "Hamburg", location: nil, equipment: [], size: nil, capacity: 4, images: [],
                             timeZone: "Europe/Berlin", opens: "07:00", closes: "19:00", requiresApproval: false))
        #expect(Fixtures.registerRoom.resolved().equipment == ["beamer", "tv"])
        let entry = RoomAvailability(room: room, avail: [])
        #expect(entry.location == "" && entry.size == "")
    }
}
