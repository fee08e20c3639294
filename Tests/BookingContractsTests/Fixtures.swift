import BookingContracts
import Foundation

/// Representative values of every message type, built the way the services
/// build them.
enum Fixtures {
    static let bookingId = "b7e3c1a2-5f4d-4e8b-9c6a-1d2e3f4a5b6c"
    static let otherBookingId = "0c9d8e7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f"

    static let registerRoom = RegisterRoom(
        name: "Berlin", location: "2nd floor", equipment: ["beamer", "tv"], size: "22m2", capacity: 8,
        images: ["https://rooms.example.com/berlin/1.jpg"], timeZone: "Europe/Berlin", opens: "07:00",
        closes: "19:00", requiresApproval: false)
    static let minimalRegisterRoom = RegisterRoom(name: "Hamburg", capacity: 4)

    static let createBooking = CreateBooking(
        room: "Berlin", date: .calendarDate("2026-11-23"), start: "09:00", end: "10:30", title: "Sprint review",
        description: "Q4 demo",
        attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")])

    static func instant(_ date: String, _ time: String, _ zone: String = "Europe/Berlin") -> String {
        ContractFormat.timestamp(ContractFormat.instant(date: date, time: time, timeZone: zone)!)
    }

    static let occurredAt = ContractFormat.timestamp(Date(timeIntervalSince1970: 1_795_312_800))

    static let booking = Booking(
        id: bookingId, room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:30",
        timeZone: "Europe/Berlin", startsAt: instant("2026-11-23", "09:00"), endsAt: instant("2026-11-23", "10:30"),
        title: "Sprint review", description: "Q4 demo", status: .confirmed,
        attendees: [Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567")],
        requestedBy: "calendar-app", version: 2)

    /// A summer booking (UTC+2) in another zone, without the optional fields.
    static let pendingBooking = Booking(
        id: otherBookingId, room: "Lisbon", date: "2026-07-01", start: "07:00", end: "07:15",
        timeZone: "Europe/Lisbon", startsAt: instant("2026-07-01", "07:00", "Europe/Lisbon"),
        endsAt: instant("2026-07-01", "07:15", "Europe/Lisbon"), title: "Stand-up", status: .pending,
        attendees: [
            Attendee(name: "Grace Hopper", email: "grace@example.com", phone: "+14155550100"),
            Attendee(name: "Alan Turing", email: "alan@example.org", phone: "+442079460000"),
        ],
        version: 1)

    static var cancelledBooking: Booking {
        var b = booking
        b.status = .cancelled
        b.version = 3
        b.cancelReason = "Moved to next sprint"
        return b
    }

    static var rejectedBooking: Booking {
        var b = booking
        b.status = .rejected
        b.version = 2
        b.cancelReason = "Room closed for works"
        return b
    }

    static var updatedBooking: Booking {
        var b = booking
        b.title = "Sprint review (online)"
        b.version = 2
        return b
    }

    /// Checked in (or started by itself): v1.1.
    static var startedBooking: Booking {
        var b = booking
        b.status = .inProgress
        b.version = 3
        return b
    }

    static var completedBooking: Booking {
        var b = booking
        b.status = .completed
        b.version = 4
        return b
    }

    /// Released by the handler: nobody checked in (v1.1).
    static var releasedBooking: Booking {
        var b = booking
        b.status = .cancelled
        b.version = 3
        b.cancelReason = "released: nobody checked in"
        return b
    }

    static var rescheduledBooking: Booking {
        var b = booking
        b.date = "2026-11-24"
        b.start = "13:00"
        b.end = "14:30"
        b.startsAt = instant("2026-11-24", "13:00")
        b.endsAt = instant("2026-11-24", "14:30")
        b.version = 3
        return b
    }

    static func bookingEvent(_ booking: Booking, id: String = UUID().uuidString.lowercased()) -> BookingEvent {
        BookingEvent(eventId: id, occurredAt: occurredAt, booking: booking)
    }

    static let passDelivered = PassDelivered(
        eventId: "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f", occurredAt: occurredAt, bookingId: bookingId, version: 2,
        attendeeIndex: 0, name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567", channel: .gateway)

    static let passFailed = PassFailedEvent(
        eventId: "3d4e5f6a-7b8c-4d9e-8f0a-1b2c3d4e5f6a", occurredAt: occurredAt, bookingId: bookingId, version: 2,
        attendeeIndex: 0, name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567", channel: .gateway,
        errorCode: 4002, errorText: "number not reachable", attempts: 5)

    static let availabilityChanged = AvailabilityChanged(
        eventId: "4e5f6a7b-8c9d-4e0f-9a1b-2c3d4e5f6a7b", occurredAt: occurredAt, room: "Berlin", date: "2026-11-23",
        timeZone: "Europe/Berlin",
        avail: [ContractFormat.range("07:00", "09:00"), ContractFormat.range("10:30", "19:00")])

    static let availabilityQuery = AvailabilityQuery(
        date: .date(.calendarDate("2026-11-23")), name: "ber", equipment: ["beamer"], minCapacity: 4,
        freeFrom: "10:00", freeTo: "11:00", availableNextHour: true)

    static let availabilityReply: AvailabilityReply = [
        RoomAvailability(room: registerRoom.resolved(), avail: ["07:00 - 09:00", "10:30 - 19:00"]),
        RoomAvailability(room: minimalRegisterRoom.resolved(), avail: []),
    ]

    static let sendPassRequest = SendPassRequest(
        booking: .init(date: 1_795_388_400, timeStart: 1_795_420_800, timeEnd: 1_795_426_200, title: "Sprint review",
                       description: "Q4 demo", room: "Berlin"),
        passes: [SendPassRequest.Pass(name: "Ada Lovelace", email: "ada@example.com", number: "+491701234567")])

    static let failedPass = FailedPass(
        bookingId: bookingId, version: 2, attendeeIndex: 0, name: "Ada Lovelace", email: "ada@example.com",
        phone: "+491701234567", attempts: 5, firstFailureAt: "2026-11-22T10:00:03Z",
        lastFailureAt: "2026-11-22T10:13:40Z", lastErrorCode: 4002, lastErrorText: "number not reachable",
        room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:30", title: "Sprint review")

    static let seriesId = "5e1f0a3c-2b4d-4c6e-8f9a-0b1c2d3e4f5a"
    static let seriesCreate = CreateBooking(room: "Berlin", date: .calendarDate("2026-11-23"), start: "09:00", end: "09:30",
                                            title: "Stand-up", attendees: createBooking.attendees,
                                            recurrence: Recurrence(.weekly, until: "2026-12-28"), onConflict: "skip")
    static var occurrence: Booking {
        var b = booking
        b.series = SeriesRef(id: seriesId, index: 0, count: 4, version: 1)
        return b
    }
    static var cancelledOccurrence: Booking {
        var b = occurrence
        b.status = .cancelled
        b.version += 1
        b.cancelReason = "moved"
        b.series?.version = 2
        return b
    }

    static let replaySummary = ReplaySummary(replayId: "rebuild-1", queue: "availability-projector.replay",
                                             rooms: 6, bookings: 1520)

    /// Every message type as `<schema-name>[--variant]` → encoded body.
    static func samples() throws -> [(name: String, body: Data)] {
        func e<T: Encodable>(_ name: String, _ value: T) throws -> (name: String, body: Data) {
            (name, try ContractJSON.encode(value))
        }
        var noCode = failedPass
        var notice = failedPass
        notice.kind = .removed
        noCode.lastErrorCode = nil
        var passFailedNoCode = passFailed
        passFailedNoCode.errorCode = nil
        passFailedNoCode.channel = nil
        var delivered = passDelivered
        delivered.channel = nil
        return [
            try e("room.register", registerRoom),
            try e("room.register--minimal", minimalRegisterRoom),
            try e("booking.create", createBooking),
            try e("booking.create--today", CreateBooking(room: "Berlin", date: .today, start: "07:00", end: "19:00",
                                                         title: "All day", attendees: createBooking.attendees)),
            try e("booking.create--unix", CreateBooking(room: "Berlin", date: .unixSeconds(1_795_420_800),
                                                        start: "09:00", end: "09:15", title: "Quick",
                                                        attendees: createBooking.attendees)),
            try e("booking.create--series", seriesCreate),
            try e("booking.create--count", CreateBooking(room: "Berlin", date: .calendarDate("2027-01-31"), start: "14:00",
                                                         end: "15:00", title: "Month-end", attendees: createBooking.attendees,
                                                         recurrence: Recurrence(.monthly, count: 6))),
            try e("booking.cancel--series", CancelSeries(seriesId: seriesId, from: "2026-12-07", reason: "moved")),
            try e("booking.cancel--series-all", CancelSeries(seriesId: seriesId)),
            try e("reply--series", CommandReply.series(SeriesBooked(
                id: seriesId, recurrence: seriesCreate.recurrence!, version: 1, bookings: [occurrence],
                skipped: [SkippedOccurrence(date: "2026-11-30", code: .overlap, text: "Berlin is already booked on 2026-11-30",
                                            conflicts: [otherBookingId]),
                          SkippedOccurrence(date: "2026-12-28", code: .beyondHorizon, text: "beyond the horizon")]))),
            try e("reply--series-cancelled", CommandReply.seriesCancelled(SeriesCancelled(
                id: seriesId, version: 2, cancelled: [BookingView(cancelledOccurrence, contacts: true)],
                skipped: [SkippedOccurrence(date: "2026-11-23", code: .tooLateToChange, text: "too late", bookingId: bookingId)]))),
            // v1.2: an approver ending the occurrence in progress of a series it sees busy.
            try e("reply--series-cancelled-busy", CommandReply.seriesCancelled(SeriesCancelled(
                id: seriesId, version: 2, cancelled: [BookingView(busy: cancelledOccurrence)]))),
            try e("reply--series-conflict", CommandReply.error(ReplyError(
                code: .overlap, text: "Berlin is already booked on 2026-11-30; nothing was booked", field: "start",
                conflicts: [otherBookingId], conflictDates: ["2026-11-30"]))),
            try e("reply--series-rule", CommandReply.error(ReplyError(code: .beyondHorizon, text: "2026-12-28: too far ahead",
                                                                      field: "date", date: "2026-12-28"))),
            try e("booking.confirmed--occurrence", bookingEvent(occurrence)),
            // v1.2: holds and waitlists.
            try e("booking.create--hold", CreateBooking(room: "Berlin", date: .calendarDate("2026-11-23"), start: "09:00", end: "10:00",
                                                        title: "Interview", attendees: createBooking.attendees,
                                                        hold: HoldRequest(minutes: 15))),
            try e("booking.create--waitlist", CreateBooking(room: "Berlin", date: .calendarDate("2026-11-23"), start: "09:00",
                                                            end: "10:00", title: "Retro", attendees: createBooking.attendees,
                                                            ifTaken: IfTaken.waitlist.rawValue)),
            try e("reply--held", CommandReply.booking({ var b = pendingBooking; b.status = .held
                                                        b.holdExpiresAt = "2026-11-22T10:15:00Z"; return b }())),
            try e("reply--waitlisted", CommandReply.booking({ var b = pendingBooking; b.status = .waitlisted
                                                              b.waitlist = WaitlistPlace(position: 3); return b }())),
            try e("booking.confirmed--promoted", { () -> BookingEvent in
                var waiting = booking
                waiting.status = .waitlisted
                return BookingEvent(eventId: "1e2f3a4b", occurredAt: occurredAt, booking: booking,
                                    previous: BookingSnapshot(waiting), promoted: true) }()),
            try e("booking.submitted", { () -> BookingEvent in
                var held = pendingBooking
                held.status = .held
                held.holdExpiresAt = "2026-11-22T10:15:00Z"
                var pending = held
                pending.status = .pending
                pending.version += 1
                return BookingEvent(eventId: "2f3a4b5c", occurredAt: occurredAt, booking: pending, previous: BookingSnapshot(held)) }()),
            try e("public.booking-event--promoted", PublicBookingEvent(BookingEvent(eventId: "1e2f3a4b", occurredAt: occurredAt,
                                                                                    booking: booking, promoted: true))),
            try e("booking.cancelled--occurrence", BookingEvent(eventId: "9d8c7b6a", occurredAt: occurredAt,
                                                                booking: cancelledOccurrence, previous: BookingSnapshot(occurrence))),
            try e("booking.confirm", ConfirmBooking(bookingId: bookingId)),
            try e("booking.cancel", CancelBooking(bookingId: bookingId, reason: "Moved to next sprint")),
            try e("booking.cancel--no-reason", CancelBooking(bookingId: bookingId)),
            try e("booking.reject", RejectBooking(bookingId: bookingId, reason: "Room closed for works")),
            try e("booking.update", UpdateBooking(bookingId: bookingId, title: "Sprint review (online)", description: "",
                                                  attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com",
                                                                            phone: "0170 1234567")])),
            try e("booking.update--title-only", UpdateBooking(bookingId: bookingId, title: "Retro")),
            try e("booking.checkin", CheckinBooking(bookingId: bookingId)),
            try e("booking.get", GetBooking(bookingId: bookingId)),
            try e("booking.get--named", GetBooking(bookingId: bookingId, query: "booking.get")),
            try e("booking.list", ListBookings(from: .date("2026-11-23"), to: .date("2026-11-30"), room: "Berlin",
                                               status: ["confirmed", "inProgress"], limit: 50)),
            try e("booking.list--all", ListBookings(from: .instant(Date(timeIntervalSince1970: 1_795_392_000)),
                                                    to: .instant(Date(timeIntervalSince1970: 1_795_478_400)),
                                                    requestedBy: "calendar-app", attendeeEmail: "ada@example.com",
                                                    seriesId: "s-1", cursor: "abc", query: "booking.list")),
            try e("public.booking-event", PublicBookingEvent(BookingEvent(eventId: "9c0d1e2f", occurredAt: occurredAt,
                                                                          booking: rescheduledBooking,
                                                                          previous: BookingSnapshot(booking)))),
            try e("public.booking-event--released", PublicBookingEvent(BookingEvent(eventId: "0d1e2f3a", occurredAt: occurredAt,
                                                                                   booking: releasedBooking,
                                                                                   previous: BookingSnapshot(booking), released: true))),
            try e("public.booking-event--created", PublicBookingEvent(bookingEvent(pendingBooking))),
            try e("booking.reply--get", BookingQueryReply.booking(BookingView(booking, contacts: true))),
            try e("booking.reply--list", BookingQueryReply.bookings([BookingView(busy: booking),
                                                                     BookingView(pendingBooking, contacts: true)],
                                                                    nextCursor: "abc")),
            try e("booking.reply--last", BookingQueryReply.bookings([], nextCursor: nil)),
            try e("booking.reply--error", BookingQueryReply.error(ReplyError(code: .bookingNotFound, text: "booking 'x' not found",
                                                                             field: "bookingId"))),
            try e("booking.reschedule", RescheduleBooking(bookingId: bookingId, date: .calendarDate("2026-11-24"),
                                                          start: "13:00", end: "14:30")),
            try e("booking.replay", ReplayBookings(queue: "availability-projector.replay", replayId: "rebuild-1")),
            try e("booking.replay--no-id", ReplayBookings(queue: "availability-projector.replay")),
            try e("booking.replay--pages", ReplayBookings(queue: "availability-projector.replay", replayId: "rebuild-1",
                                                          bookingsPerMessage: 500)),
            try e("booking.replay.page", ReplayPage(bookings: [booking, pendingBooking, cancelledBooking])),
            try e("booking.replay.done", replaySummary),
            try e("reply--replay", CommandReply.replay(replaySummary)),
            try e("reply--booking", CommandReply.booking(booking)),
            try e("reply--pending", CommandReply.booking(pendingBooking)),
            try e("reply--room", CommandReply.room(minimalRegisterRoom.resolved())),
            try e("reply--rate-limited", CommandReply.error(ReplyError(
                code: .rateLimited, text: "too many commands or queries from this caller; try again in 40 ms", retryAfterMs: 40))),
            try e("reply--error", CommandReply.failure(.overlap, "Berlin is already booked 09:00-10:00",
                                                       field: "start", conflicts: [otherBookingId])),
            try e("reply--error-minimal", CommandReply.failure(.unknownCommand, "unknown command type booking.delete")),
            try e("room.registered", RoomRegistered(eventId: "1b2c3d4e", occurredAt: occurredAt,
                                                    room: registerRoom.resolved())),
            try e("room.registered--defaults", RoomRegistered(eventId: "1b2c3d4f", occurredAt: occurredAt,
                                                              room: minimalRegisterRoom.resolved())),
            try e("booking.created", bookingEvent(pendingBooking)),
            try e("booking.confirmed", bookingEvent(booking)),
            try e("booking.cancelled", bookingEvent(cancelledBooking)),
            try e("booking.rejected", bookingEvent(rejectedBooking)),
            try e("booking.updated", bookingEvent(updatedBooking)),
            try e("booking.started", BookingEvent(eventId: "6f7a8b9c", occurredAt: occurredAt, booking: startedBooking,
                                                  previous: BookingSnapshot(booking))),
            try e("booking.completed", BookingEvent(eventId: "7a8b9c0d", occurredAt: occurredAt, booking: completedBooking,
                                                    previous: BookingSnapshot(startedBooking))),
            try e("booking.cancelled--released", BookingEvent(eventId: "8b9c0d1e", occurredAt: occurredAt,
                                                              booking: releasedBooking, previous: BookingSnapshot(booking),
                                                              released: true)),
            try e("booking.rescheduled", bookingEvent(rescheduledBooking)),
            try e("booking.rescheduled--previous", BookingEvent(eventId: "5e6f7a8b", occurredAt: occurredAt,
                                                                booking: rescheduledBooking,
                                                                previous: BookingSnapshot(booking))),
            // Contract v1.2: closures and the quota.
            try e("room.register--quota", RegisterRoom(name: "Atrium", capacity: 12, hours: ["sat": nil], bufferMinutes: 15,
                                                       maxActiveBookings: 5)),
            try e("room.close", CloseRoom(room: "Berlin", from: "2026-12-24", to: "2026-12-28", reason: "holidays")),
            try e("room.close--instants", CloseRoom(room: "Berlin", from: "2026-11-23T11:00:00Z", to: "2026-11-23T13:00:00Z",
                                                    reason: "floor polishing")),
            try e("room.reopen", ReopenRoom(room: "Berlin", closureId: "c-1")),
            try e("room.closed", RoomClosureEvent(eventId: "2c3d4e5f", occurredAt: occurredAt, closure: RoomClosure(id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays"))),
            try e("room.reopened", RoomClosureEvent(eventId: "3d4e5f6a", occurredAt: occurredAt, closure: RoomClosure(id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays"))),
            try e("room.closures", ListClosures(room: "Berlin", from: .date("2026-12-01"), to: .date("2027-01-01"))),
            try e("room.closures--open", ListClosures(room: "Berlin", query: "room.closures")),
            try e("booking.reply--closures", BookingQueryReply.closures([RoomClosure(id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays")])),
            try e("reply--closure", CommandReply.closure(ClosureReply(closure: RoomClosure(id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays"),
                                                                      cancelled: [BookingView(busy: cancelledBooking)]))),
            try e("reply--reopen", CommandReply.closure(ClosureReply(closure: RoomClosure(id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays"), cancelled: nil))),
            try e("reply--room-closed", CommandReply.error(ReplyError(code: .roomClosed, text: "Berlin is closed", field: "start",
                                                                      closure: RoomClosure(id: "c-1", room: "Berlin", from: "2026-12-23T23:00:00Z", to: "2026-12-27T23:00:00Z", reason: "holidays")))),
            try e("reply--quota", CommandReply.error(ReplyError(code: .quotaExceeded, text: "quota used", field: "room", limit: 5))),
            try e("booking.replay.done--closures", ReplaySummary(replayId: "r-1", queue: "availability-projector.replay",
                                                                 rooms: 6, bookings: 40, closures: 2)),
            try e("pass.delivered", passDelivered),
            try e("pass.delivered--no-channel", delivered),
            try e("pass.failed", passFailed),
            try e("pass.failed--no-code", passFailedNoCode),
            try e("availability.changed", availabilityChanged),
            try e("availability.changed--full", AvailabilityChanged(eventId: "x", occurredAt: occurredAt,
                                                                    room: "Berlin", date: "2026-11-23",
                                                                    timeZone: "Europe/Berlin", avail: [])),
            try e("availability.query", availabilityQuery),
            try e("availability.query--now", AvailabilityQuery(date: .now, availableNextHour: true)),
            try e("availability.query--unix", AvailabilityQuery(date: .date(.unixSeconds(1_795_420_800)))),
            try e("availability.query--empty", AvailabilityQuery()),
            try e("availability.reply", availabilityReply),
            try e("availability.reply--empty", AvailabilityReply()),
            try e("availability.query--days", AvailabilityQuery(date: .date(.calendarDate("2026-11-27")), days: 3)),
            try e("availability.reply--days", [RoomAvailability(
                room: registerRoom.resolved(), avail: ["07:00 - 09:00"],
                days: [DayAvailability(date: "2026-11-27", avail: ["07:00 - 09:00"]),
                       DayAvailability(date: "2026-11-28", avail: [], closed: "closed on Saturdays")])]),
            try e("availability.suggest", SuggestQuery(from: "2026-11-30", to: "2026-12-04", durationMinutes: 60, minCapacity: 6,
                                                       equipment: ["beamer"], name: "ber", limit: 10, stepMinutes: 30)),
            try e("availability.suggest--instants", SuggestQuery(from: "2026-11-30T08:00:00Z", to: "2026-11-30T17:00:00Z",
                                                                 durationMinutes: 90)),
            try e("availability.suggestions", SuggestReply(suggestions: [Suggestion(
                room: "Berlin", date: "2026-11-30", start: "09:00", end: "10:00", startsAt: "2026-11-30T08:00:00Z",
                endsAt: "2026-11-30T09:00:00Z", timeZone: "Europe/Berlin", capacity: 8)])),
            try e("availability.suggestions--none", SuggestReply(suggestions: [])),
            try e("sendpass.request", sendPassRequest),
            try e("sendpass.response--success", SendPassResponse.success),
            try e("sendpass.response--error", SendPassResponse.failure(SendPassError(text: "number not reachable",
                                                                                     code: 4002, index: 0))),
            try e("sendpass.response--error-nothing-sent",
                  SendPassResponse.failure(SendPassError(text: "invalid api key", code: 1200))),
            try e("passes.failed", failedPass),
            try e("passes.failed--no-code", noCode),
            try e("passes.failed--notice", notice),
            try e("notify.request", NotifyRequest(kind: .rescheduled, booking: sendPassRequest.booking,
                                                  previous: sendPassRequest.booking, recipients: sendPassRequest.passes)),
            try e("notify.request--cancelled", NotifyRequest(kind: .cancelled, booking: sendPassRequest.booking, previous: nil,
                                                             recipients: sendPassRequest.passes)),
            try e("notify.response--success", SendPassResponse.success),
            try e("notify.response--error", SendPassResponse.failure(SendPassError(text: "mailbox full", code: 4001, index: 0))),
        ]
    }
}
