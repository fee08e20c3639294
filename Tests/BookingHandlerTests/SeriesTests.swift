import BookingContracts
import Foundation
import Testing
@testable import BookingHandler

/// Which dates a recurrence names (contract v1.1, "Recurring bookings").
@Suite("Recurrence dates")
struct RecurrenceDateTests {
    func dates(_ first: String, _ frequency: Recurrence.Frequency, until: String? = nil, count: Int? = nil) -> [String]? {
        expectSuccess(SeriesRules.dates(first: first, recurrence: Recurrence(frequency, until: until, count: count)))
    }

    @Test func everyFrequencyWithUntilOrCount() {
        #expect(dates("2026-12-30", .daily, count: 4) == ["2026-12-30", "2026-12-31", "2027-01-01", "2027-01-02"])
        #expect(dates("2026-11-23", .weekly, until: "2026-12-14") == ["2026-11-23", "2026-11-30", "2026-12-07", "2026-12-14"])
        #expect(dates("2026-11-23", .weekly, until: "2026-12-13") == ["2026-11-23", "2026-11-30", "2026-12-07"], "until is inclusive")
        #expect(dates("2026-11-23", .biweekly, count: 3) == ["2026-11-23", "2026-12-07", "2026-12-21"])
        // 2026-11-27 is a Friday: the weekend is not an occurrence, and
        // count counts occurrences.
        #expect(dates("2026-11-27", .weekdays, count: 3) == ["2026-11-27", "2026-11-30", "2026-12-01"])
        #expect(dates("2026-11-28", .weekdays, until: "2026-12-01") == ["2026-11-30", "2026-12-01"], "from a Saturday: Monday")
    }

    @Test func monthlyKeepsTheDayAndSkipsMonthsWithoutIt() {
        #expect(dates("2027-01-31", .monthly, count: 4) == ["2027-01-31", "2027-03-31", "2027-05-31", "2027-07-31"])
        #expect(dates("2027-01-30", .monthly, until: "2027-04-30") == ["2027-01-30", "2027-03-30", "2027-04-30"])
        #expect(dates("2027-12-29", .monthly, count: 3) == ["2027-12-29", "2028-01-29", "2028-02-29"], "leap year")
        #expect(dates("2026-01-29", .monthly, count: 2) == ["2026-01-29", "2026-03-29"])
    }

    @Test func atMost366Occurrences() {
        #expect(dates("2026-11-23", .daily, count: 366)?.count == 366)
        #expect(dates("2026-11-23", .daily, until: "2027-11-23")?.count == 366)
        expectFailure(SeriesRules.dates(first: "2026-11-23", recurrence: Recurrence(.daily, until: "2027-11-24")), .invalidField,
                      field: "recurrence.until")
        expectFailure(SeriesRules.dates(first: "2026-11-23", recurrence: Recurrence(.daily, count: 367)), .invalidField,
                      field: "recurrence.count")
        expectFailure(SeriesRules.dates(first: "2026-11-23", recurrence: Recurrence(.daily, count: 0)), .invalidField,
                      field: "recurrence.count")
    }

    @Test func badRecurrencesNameTheirField() {
        func refused(_ r: Recurrence, _ field: String) {
            expectFailure(SeriesRules.dates(first: "2026-11-23", recurrence: r), .invalidField, field: field)
        }
        refused(Recurrence(frequency: "yearly", count: 2), "recurrence.frequency")
        refused(Recurrence(.weekly), "recurrence")
        refused(Recurrence(.weekly, until: "2027-01-01", count: 3), "recurrence")
        refused(Recurrence(.weekly, until: "2027-02-30"), "recurrence.until")
        refused(Recurrence(.weekly, until: "2026-11-22"), "recurrence.until")
        // A Saturday and a Sunday only: no weekday.
        expectFailure(SeriesRules.dates(first: "2026-11-28", recurrence: Recurrence(.weekdays, until: "2026-11-29")),
                      .invalidField, field: "recurrence")
    }
}

/// Series through the command processor on a real SQLite file, with an
/// injected clock.
@Suite("Recurring bookings")
struct SeriesProcessorTests {
    let clock = TestClock(utc("2026-11-20T10:00:00Z"))

    static let rooms = #"""
        [{"name": "Berlin", "capacity": 8},
         {"name": "Near", "capacity": 8, "horizonDays": 20},
         {"name": "Desk", "capacity": 8, "requiresApproval": true, "approvers": ["desk"]},
         {"name": "Strict", "capacity": 8, "changeCutoffMinutes": 1440}]
        """#

    func setUp(_ fixture: StoreFixture) async throws -> (CommandProcessor, any BookingStore) {
        let clock = self.clock
        let store = try await fixture.open()
        let processor = CommandProcessor(store: store, policy: CallerPolicy(administrators: ["ops"]), now: { clock.now })
        _ = try await processor.upsertRooms(fileContents: Data(Self.rooms.utf8))
        _ = store.takeCommitted(limit: 100)  // room.registered
        return (processor, store)
    }

    func run(_ p: CommandProcessor, _ type: CommandType, _ json: String, user: String? = "alice",
             messageID: String = UUID().uuidString) async throws -> (CommandReply, duplicate: Bool) {
        let command = IncomingCommand(body: Array(json.utf8), typeProperty: type.rawValue, routingKey: type.rawValue,
                                      messageID: messageID, idempotencyKeyHeader: nil, userID: user)
        guard case .handled(let reply, _, let duplicate, _) = try await p.process(command) else { throw CancellationError() }
        return (reply, duplicate)
    }

    func series(room: String = "Berlin", date: String = "2026-11-23", start: String = "09:00", end: String = "10:00",
                _ recurrence: String, onConflict: String? = nil) -> String {
        #"""
        {"room":"\#(room)","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"Weekly",
         "attendees":[{"name":"Carol","email":"carol@example.com","phone":"0170 1234567"}],
         "recurrence":\#(recurrence)\#(onConflict.map { #","onConflict":"\#($0)""# } ?? "")}
        """#
    }

    func single(_ date: String, _ start: String = "09:00", _ end: String = "10:00", room: String = "Berlin") -> String {
        #"""
        {"room":"\#(room)","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"One",
         "attendees":[{"name":"Dan","email":"dan@example.com","phone":"0170 7654321"}]}
        """#
    }

    /// Booking events in the outbox, in commit order: `type date index/count`.
    func events(_ store: any BookingStore) throws -> [String] {
        try store.takeCommitted(limit: 100_000).filter { $0.routingKey.hasPrefix("booking.") }.map { event in
            let booking = try ContractJSON.decode(BookingEvent.self, from: Data(event.body)).booking
            return "\(event.routingKey) \(booking.date) " + (booking.series.map { "\($0.index)/\($0.count) v\($0.version)" } ?? "-")
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aWeeklySeriesIsOneCommandWithOneBookingAndEventsPerOccurrence(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let messageID = UUID().uuidString
        let (reply, duplicate) = try await run(p, .createBooking, series(#"{"frequency":"weekly","count":3}"#), messageID: messageID)
        #expect(!duplicate)
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        #expect(s.version == 1 && s.skipped.isEmpty && s.recurrence == Recurrence(.weekly, count: 3))
        #expect(s.bookings.map(\.date) == ["2026-11-23", "2026-11-30", "2026-12-07"])
        #expect(s.bookings.map(\.series) == (0..<3).map { SeriesRef(id: s.id, index: $0, count: 3, version: 1) })
        #expect(Set(s.bookings.map(\.id)).count == 3)
        #expect(try events(store) == [
            "booking.created 2026-11-23 0/3 v1", "booking.confirmed 2026-11-23 0/3 v1",
            "booking.created 2026-11-30 1/3 v1", "booking.confirmed 2026-11-30 1/3 v1",
            "booking.created 2026-12-07 2/3 v1", "booking.confirmed 2026-12-07 2/3 v1",
        ])
        // A redelivery books nothing twice and answers the same.
        let (again, wasDuplicate) = try await run(p, .createBooking, series(#"{"frequency":"weekly","count":3}"#), messageID: messageID)
        #expect(wasDuplicate && again == reply)
        #expect(try await store.counts().bookings == 3)
        #expect(try events(store).isEmpty)
    }

    @Test(arguments: StoreKind.allCases)
    func everyOccurrenceIsCheckedOnItsOwnLocalDateAcrossDaylightSaving(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, _) = try await setUp(fixture)
        defer { fixture.remove() }
        // 2027-03-28: Europe/Berlin moves from UTC+1 to UTC+2.
        let (reply, _) = try await run(p, .createBooking, series(date: "2027-03-21", #"{"frequency":"weekly","count":2}"#))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        #expect(s.bookings.map(\.startsAt) == ["2027-03-21T08:00:00Z", "2027-03-28T07:00:00Z"], "09:00 local on both")
        // Off the room's hours: refused for the series as a whole.
        let (late, _) = try await run(p, .createBooking, series(start: "18:30", end: "19:30", #"{"frequency":"daily","count":2}"#))
        #expect(late.errorValue?.code == .outsideOpeningHours)
        #expect(late.errorValue?.date == "2026-11-23")
    }

    @Test(arguments: StoreKind.allCases)
    func rejectRefusesTheWholeSeriesWithEveryConflictingDate(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let (a, _) = try await run(p, .createBooking, single("2026-11-30"), user: "bob")
        let (b, _) = try await run(p, .createBooking, single("2026-12-14", "09:30", "10:30"), user: "bob")
        _ = try events(store)
        let (reply, _) = try await run(p, .createBooking, series(#"{"frequency":"weekly","until":"2026-12-21"}"#))
        let error = try #require(reply.errorValue)
        #expect(error.code == .overlap)
        #expect(error.conflictDates == ["2026-11-30", "2026-12-14"])
        #expect(error.conflicts == [try #require(a.bookingValue).id, try #require(b.bookingValue).id])
        #expect(try await store.counts().bookings == 2, "nothing booked")
        #expect(try events(store).isEmpty)
    }

    @Test(arguments: StoreKind.allCases)
    func skipBooksTheRestAndListsWhatWasSkippedAndWhy(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let (a, _) = try await run(p, .createBooking, single("2026-11-30", room: "Near"), user: "bob")
        _ = try events(store)
        // Near takes bookings 20 days ahead: 2026-12-14 is 24 days from 2026-11-20.
        let (reply, _) = try await run(p, .createBooking, series(room: "Near", #"{"frequency":"weekly","count":4}"#, onConflict: "skip"))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        #expect(s.bookings.map(\.date) == ["2026-11-23", "2026-12-07"])
        #expect(s.bookings.map { $0.series?.index } == [0, 1] && s.bookings.allSatisfy { $0.series?.count == 2 })
        #expect(s.skipped.map(\.date) == ["2026-11-30", "2026-12-14"])
        #expect(s.skipped.map(\.code) == [.overlap, .beyondHorizon])
        #expect(s.skipped[0].conflicts == [try #require(a.bookingValue).id])
        #expect(try events(store) == [
            "booking.created 2026-11-23 0/2 v1", "booking.confirmed 2026-11-23 0/2 v1",
            "booking.created 2026-12-07 1/2 v1", "booking.confirmed 2026-12-07 1/2 v1",
        ])
        // With reject, the horizon refuses the series with the occurrence's date.
        let (refused, _) = try await run(p, .createBooking, series(room: "Near", start: "11:00", end: "12:00", #"{"frequency":"weekly","count":4}"#))
        #expect(refused.errorValue?.code == .beyondHorizon)
        #expect(refused.errorValue?.date == "2026-12-14")
        // Nothing bookable is not a success, even with skip.
        let (none, _) = try await run(p, .createBooking, series(room: "Near", date: "2026-12-20", #"{"frequency":"daily","count":2}"#, onConflict: "skip"))
        #expect(none.errorValue?.code == .beyondHorizon)
    }

    /// The reply carries every occurrence and must fit the broker's 1 MiB
    /// message limit, with room for a cancel of the same occurrences.
    @Test(arguments: StoreKind.allCases)
    func aSeriesWhoseReplyWouldNotFitIsRefusedWhole(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let description = String(repeating: "x", count: 3_900)
        let body = #"""
            {"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:00","title":"Big","description":"\#(description)",
             "attendees":[{"name":"Carol","email":"carol@example.com","phone":"0170 1234567"}],
             "recurrence":{"frequency":"daily","count":NUMBER}}
            """#
        let (big, _) = try await run(p, .createBooking, body.replacingOccurrences(of: "NUMBER", with: "160"))
        #expect(big.errorValue?.code == .invalidField && big.errorValue?.field == "recurrence", "\(big.errorValue?.text ?? "ok")")
        #expect(try await store.counts().bookings == 0)
        let (fits, _) = try await run(p, .createBooking, body.replacingOccurrences(of: "NUMBER", with: "100"))
        guard case .series(let s) = fits else { Issue.record("\(fits)"); return }
        // Cancelling all of it with the longest reason still fits the broker.
        let reason = String(repeating: "r", count: 1_000)
        let (cancelled, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)","reason":"\#(reason)"}"#)
        #expect(try ContractJSON.encode(cancelled).count < 1_048_576 - 4_096)
    }

    @Test(arguments: StoreKind.allCases)
    func skipAlsoSkipsOccurrencesInThePast(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, _) = try await setUp(fixture)
        defer { fixture.remove() }
        // The clock reads 2026-11-20 10:00Z: the 19th and the 20th at 09:00 Berlin have begun.
        let (reply, _) = try await run(p, .createBooking, series(date: "2026-11-19", #"{"frequency":"daily","count":3}"#, onConflict: "skip"))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        #expect(s.bookings.map(\.date) == ["2026-11-21"])
        #expect(s.skipped.map { "\($0.date) \($0.code.rawValue)" } == ["2026-11-19 1105", "2026-11-20 1105"])
    }

    @Test(arguments: StoreKind.allCases)
    func malformedSeriesBodiesAreRefusedEitherWay(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, _) = try await setUp(fixture)
        defer { fixture.remove() }
        for policy in ["reject", "skip"] {
            let (bad, _) = try await run(p, .createBooking, series(#"{"frequency":"weekly"}"#, onConflict: policy))
            #expect(bad.errorValue?.field == "recurrence")
        }
        let (unknown, _) = try await run(p, .createBooking, series(#"{"frequency":"weekly","count":2}"#, onConflict: "maybe"))
        #expect(unknown.errorValue?.field == "onConflict")
        let (alone, _) = try await run(p, .createBooking, #"""
            {"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:00","title":"T","onConflict":"skip",
             "attendees":[{"name":"Carol","email":"carol@example.com","phone":"0170 1234567"}]}
            """#)
        #expect(alone.errorValue?.field == "onConflict", "onConflict without recurrence")
    }

    @Test(arguments: StoreKind.allCases)
    func cancelBySeriesFromADateAndOneOccurrenceAlone(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let (reply, _) = try await run(p, .createBooking, series(#"{"frequency":"weekly","count":4}"#))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        _ = try events(store)

        // One occurrence alone: moved, then another cancelled by its id.
        let (moved, _) = try await run(p, .rescheduleBooking, #"{"bookingId":"\#(s.bookings[1].id)","date":"2026-12-01","start":"11:00","end":"12:00"}"#)
        #expect(moved.bookingValue?.series == s.bookings[1].series, "still an occurrence of its series")
        let (one, _) = try await run(p, .cancelBooking, #"{"bookingId":"\#(s.bookings[0].id)"}"#)
        #expect(one.bookingValue?.status == .cancelled)
        #expect(try events(store) == ["booking.rescheduled 2026-12-01 1/4 v1", "booking.cancelled 2026-11-23 0/4 v1"])

        // Someone else may not cancel the series; nothing changes.
        let (foreign, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)"}"#, user: "mallory")
        #expect(foreign.errorValue?.code == .notPermitted)
        #expect(try events(store).isEmpty)

        let (cancelled, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)","from":"2026-12-07","reason":"team dissolved"}"#)
        guard case .seriesCancelled(let c) = cancelled else { Issue.record("\(cancelled)"); return }
        #expect(c.id == s.id && c.version == 2)
        #expect(c.cancelled.map(\.date) == ["2026-12-07", "2026-12-14"])
        #expect(c.cancelled.allSatisfy { $0.status == .cancelled && $0.cancelReason == "team dissolved" && $0.series?.version == 2 })
        #expect(try events(store) == ["booking.cancelled 2026-12-07 2/4 v2", "booking.cancelled 2026-12-14 3/4 v2"])

        // The rest: only the moved one is still active.
        let (rest, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)"}"#, user: "ops")
        guard case .seriesCancelled(let r) = rest else { Issue.record("\(rest)"); return }
        #expect(r.cancelled.map(\.id) == [s.bookings[1].id] && r.version == 3)
        let (nothing, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)"}"#)
        #expect(nothing == .seriesCancelled(SeriesCancelled(id: s.id, version: 3, cancelled: [])), "nothing left: same version")
    }

    /// The room's buffer holds between a series' own occurrences as between
    /// any two blocking bookings (contract v1.2): daily 00:00–23:45 with a
    /// 30-minute buffer leaves 15 minutes between consecutive days.
    @Test(arguments: StoreKind.allCases)
    func aSeriesKeepsTheRoomsBufferBetweenItsOwnOccurrences(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        _ = try await p.upsertRooms(fileContents: Data(#"[{"name": "Lab", "capacity": 4, "opens": "00:00", "closes": "23:45", "bufferMinutes": 30}]"#.utf8))
        _ = try events(store)
        let (refused, _) = try await run(p, .createBooking, series(room: "Lab", start: "00:00", end: "23:45", #"{"frequency":"daily","count":2}"#))
        #expect(refused.errorValue?.code == .overlap && refused.errorValue?.conflictDates == ["2026-11-24"], "\(refused)")
        #expect(try events(store).isEmpty, "nothing was booked")

        let (skipping, _) = try await run(p, .createBooking,
                                          series(room: "Lab", start: "00:00", end: "23:45", #"{"frequency":"daily","count":3}"#, onConflict: "skip"))
        guard case .series(let s) = skipping else { Issue.record("\(skipping)"); return }
        #expect(s.bookings.map(\.date) == ["2026-11-23", "2026-11-25"])
        #expect(s.skipped.map(\.date) == ["2026-11-24"] && s.skipped.first?.code == .overlap, "\(s.skipped)")

        // Exactly the buffer apart is allowed, as for single bookings.
        let (apart, _) = try await run(p, .createBooking,
                                       series(room: "Lab", date: "2026-11-30", start: "00:00", end: "23:30", #"{"frequency":"daily","count":2}"#))
        guard case .series(let ok) = apart else { Issue.record("\(apart)"); return }
        #expect(ok.bookings.map(\.date) == ["2026-11-30", "2026-12-01"])

        // A waiting occurrence counts too: a sibling inside its buffer would
        // keep it from ever being promoted.
        let (taken, _) = try await run(p, .createBooking, single("2026-12-07", "00:00", "23:45", room: "Lab"), user: "bob")
        #expect(taken.bookingValue?.status == .confirmed)
        let (waiting, _) = try await run(p, .createBooking, series(room: "Lab", date: "2026-12-07", start: "00:00", end: "23:45",
                                                                    #"{"frequency":"daily","count":2}"#, onConflict: "skip")
                                              .replacingOccurrences(of: #""recurrence""#, with: #""ifTaken":"waitlist","recurrence""#))
        guard case .series(let w) = waiting else { Issue.record("\(waiting)"); return }
        #expect(w.bookings.map(\.date) == ["2026-12-07"] && w.bookings.first?.status == .waitlisted, "\(w.bookings)")
        #expect(w.skipped.map(\.date) == ["2026-12-08"] && w.skipped.first?.code == .overlap, "\(w.skipped)")
    }

    /// A room's approver ends the occurrence in progress of a series booked
    /// without `user_id`: the reply lists it in the busy view, as a single
    /// cancel's reply would (contract v1.2), and a repeat of the command
    /// gets the same bytes; the requester's own cancel still gets it whole.
    @Test(arguments: StoreKind.allCases)
    func anApproverCancellingAnotherCallersSeriesGetsTheBusyView(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, _) = try await setUp(fixture)
        defer { fixture.remove() }
        _ = try await p.upsertRooms(fileContents: Data(#"[{"name": "Front", "capacity": 8, "approvers": ["desk"]}]"#.utf8))
        let (reply, _) = try await run(p, .createBooking, series(room: "Front", #"{"frequency":"daily","count":1}"#), user: nil)
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        clock.set(utc("2026-11-23T08:30:00Z"))  // 09:30 in Berlin: the occurrence has started
        while try await p.applyDueTimer() != nil {}

        let key = UUID().uuidString
        let command = IncomingCommand(body: Array(#"{"seriesId":"\#(s.id)"}"#.utf8), typeProperty: "booking.cancel",
                                      routingKey: "booking.cancel", messageID: key, idempotencyKeyHeader: nil, userID: "desk")
        for attempt in ["first", "repeat"] {
            guard case .handled(let reply, _, _, let stored) = try await p.process(command),
                  case .seriesCancelled(let c) = reply else {
                Issue.record("\(attempt): no series reply"); return
            }
            #expect(c.cancelled.map(\.id) == [s.bookings[0].id] && c.cancelled.allSatisfy(\.isBusy), "\(attempt)")
            let json = try stored ?? ContractJSON.encode(reply)
            let text = String(decoding: json, as: UTF8.self)
            #expect(!text.contains("Weekly") && !text.contains("carol@example.com") && !text.contains("Carol"), "\(attempt): \(text)")
            let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
            let series = try #require(object["series"] as? [String: Any])
            let listed = try #require((series["cancelled"] as? [[String: Any]])?.first)
            #expect(listed["id"] as? String == s.bookings[0].id && listed["status"] as? String == "cancelled", "\(attempt)")
            #expect(listed["title"] == nil && listed["attendees"] == nil, "\(attempt): busy view")
            let view = try ContractJSON.decode(BookingView.self, from: try JSONSerialization.data(withJSONObject: listed))
            #expect(view.isBusy && view.series?.id == s.id, "\(attempt)")
        }
        // An admin's cancel of a series lists its occurrences whole.
        let (again, _) = try await run(p, .createBooking, series(room: "Front", date: "2026-11-30", #"{"frequency":"daily","count":2}"#),
                                       user: "alice")
        guard case .series(let own) = again else { Issue.record("\(again)"); return }
        let (byAdmin, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(own.id)"}"#, user: "ops")
        guard case .seriesCancelled(let whole) = byAdmin else { Issue.record("\(byAdmin)"); return }
        #expect(whole.cancelled.count == 2 && whole.cancelled.allSatisfy { !$0.isBusy && $0.attendees?.first?.email == "carol@example.com" })
    }

    @Test(arguments: StoreKind.allCases)
    func cancelBySeriesKeepsOccurrencesInsideTheCutoffAndRefusesBadBodies(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, _) = try await setUp(fixture)
        defer { fixture.remove() }
        // Strict: no cancel within 24 h of the start. 2026-11-21 09:00 is 23 h away.
        let (reply, _) = try await run(p, .createBooking, series(room: "Strict", date: "2026-11-21", #"{"frequency":"daily","count":3}"#))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        let (cancelled, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)"}"#)
        guard case .seriesCancelled(let c) = cancelled else { Issue.record("\(cancelled)"); return }
        #expect(c.cancelled.map(\.date) == ["2026-11-22", "2026-11-23"])
        #expect(c.skipped.map(\.date) == ["2026-11-21"] && c.skipped.first?.code == .tooLateToChange)
        #expect(c.skipped.first?.bookingId == s.bookings[0].id)

        let (unknown, _) = try await run(p, .cancelBooking, #"{"seriesId":"nope"}"#)
        #expect(unknown.errorValue?.code == .bookingNotFound && unknown.errorValue?.field == "seriesId")
        let (both, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)","bookingId":"\#(s.bookings[0].id)"}"#)
        #expect(both.errorValue?.field == "bookingId")
        let (badFrom, _) = try await run(p, .cancelBooking, #"{"seriesId":"\#(s.id)","from":"next week"}"#)
        #expect(badFrom.errorValue?.field == "from")
    }

    @Test(arguments: StoreKind.allCases)
    func occurrencesNeedingApprovalArePendingEachAndApprovedOneByOne(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let (reply, _) = try await run(p, .createBooking, series(room: "Desk", #"{"frequency":"daily","count":2}"#))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        #expect(s.bookings.allSatisfy { $0.status == .pending })
        #expect(try events(store) == ["booking.created 2026-11-23 0/2 v1", "booking.created 2026-11-24 1/2 v1"])
        let (confirmed, _) = try await run(p, .confirmBooking, #"{"bookingId":"\#(s.bookings[1].id)"}"#, user: "desk")
        #expect(confirmed.bookingValue?.status == .confirmed)
        #expect(try events(store) == ["booking.confirmed 2026-11-24 1/2 v1"])
    }

    @Test(arguments: StoreKind.allCases)
    func listBySeriesId(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store) = try await setUp(fixture)
        defer { fixture.remove() }
        let (reply, _) = try await run(p, .createBooking, series(#"{"frequency":"weekly","count":3}"#))
        guard case .series(let s) = reply else { Issue.record("\(reply)"); return }
        _ = try await run(p, .createBooking, single("2026-11-24"))
        let reader = BookingReader(store: store, policy: CallerPolicy(), now: { [clock] in clock.now })
        let query = ListBookings(from: .date("2026-11-20"), to: .date("2027-01-01"), seriesId: s.id)
        guard case .bookings(let list, nil) = try await reader.list(query, caller: .user("alice")) else { Issue.record("no list"); return }
        #expect(list.map(\.id) == s.bookings.map(\.id))
        #expect(list.map(\.series) == s.bookings.map(\.series))
        guard case .bookings(let none, nil) = try await reader.list(ListBookings(from: .date("2026-11-20"), to: .date("2027-01-01"), seriesId: "x"),
                                                                    caller: .user("alice")) else { Issue.record("no list"); return }
        #expect(none.isEmpty)
    }
}
