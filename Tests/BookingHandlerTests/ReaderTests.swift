import BookingContracts
import Foundation
import Testing
@testable import BookingHandler

/// `booking.get` and `booking.list` (contract v1.1) on each store (a real
/// SQLite file, the run's PostgreSQL server):
/// the snapshot rule across pages while bookings change, the window in each
/// room's zone, the privacy rule, the refusals.
@Suite("Reading bookings")
struct ReaderTests {
    let clock = TestClock(utc("2026-11-22T10:00:00Z"))

    static let rooms = #"""
        [{"name": "Berlin", "capacity": 8, "opens": "00:00", "closes": "23:45", "approvers": ["desk"]},
         {"name": "Lisbon", "capacity": 8, "timeZone": "Europe/Lisbon", "opens": "00:00", "closes": "23:45"}]
        """#

    func setUp(_ fixture: StoreFixture) async throws -> (CommandProcessor, BookingReader) {
        let clock = self.clock
        let store = try await fixture.open()
        let policy = CallerPolicy(administrators: ["ops"])
        let processor = CommandProcessor(store: store, policy: policy, now: { clock.now })
        _ = try await processor.upsertRooms(fileContents: Data(Self.rooms.utf8))
        return (processor, BookingReader(store: store, policy: policy, now: { clock.now }))
    }

    /// A processor on a fresh store with the rooms, for tests that make
    /// readers of their own.
    func setUpStore(_ fixture: StoreFixture) async throws -> (CommandProcessor, any BookingStore, CallerPolicy) {
        let clock = self.clock
        let store = try await fixture.open()
        let policy = CallerPolicy(administrators: ["ops"])
        let processor = CommandProcessor(store: store, policy: policy, now: { clock.now })
        _ = try await processor.upsertRooms(fileContents: Data(Self.rooms.utf8))
        return (processor, store, policy)
    }

    func run(_ processor: CommandProcessor, _ type: CommandType, _ json: String, user: String?) async throws -> CommandReply {
        let command = IncomingCommand(body: Array(json.utf8), typeProperty: type.rawValue, routingKey: type.rawValue,
                                      messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: user)
        guard case .handled(let reply, _, _, _) = try await processor.process(command) else { throw CancellationError() }
        return reply
    }

    func book(_ p: CommandProcessor, room: String = "Berlin", date: String = "2026-11-23", _ start: String, _ end: String,
              user: String? = "alice", email: String = "carol@example.com") async throws -> Booking {
        let reply = try await run(p, .createBooking, #"""
            {"room":"\#(room)","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"T",
             "attendees":[{"name":"Carol","email":"\#(email)","phone":"0170 1234567"}]}
            """#, user: user)
        return try #require(reply.bookingValue, "\(reply)")
    }

    func page(_ r: BookingReader, _ q: ListBookings, as user: String?) async throws -> ([BookingView], String?) {
        guard case .bookings(let list, let next) = try await r.list(q, caller: Caller(userID: user)) else {
            throw ReplyError(code: .invalidField, text: "not a list")
        }
        return (list, next)
    }

    func day(_ room: String? = "Berlin", limit: Int? = nil, cursor: String? = nil) -> ListBookings {
        ListBookings(from: .date("2026-11-23"), to: .date("2026-11-24"), room: room, limit: limit, cursor: cursor)
    }

    /// U+0000 in a query's string is answered 1100 on both engines, not
    /// sent to the store (PostgreSQL failed on it, and the query was
    /// requeued on every delivery, holding one of the eight query slots).
    @Test(arguments: StoreKind.allCases)
    func aNulInAQueryIsRefusedOnBothEngines(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let (_, reader) = try await setUp(fixture)
        for (type, body) in [("booking.get", #"{"bookingId":"\u0000"}"#),
                             ("booking.list", #"{"room":"Berlin","requestedBy":"a\u0000","from":"2026-11-23","to":"2026-11-24"}"#),
                             ("room.closures", #"{"room":"\u0000"}"#)] {
            let reply = try await QueryResponder.answer(reader: reader, body: Array(body.utf8), typeProperty: type, routingKey: type,
                                                        caller: Caller(userID: "ann"))
            let error = try #require(try ContractJSON.decode(CommandReply.self, from: Data(reply)).errorValue, "\(type)")
            #expect(error.code == .invalidField && error.text == ContractLimits.nulRefusal, "\(type): \(error)")
        }
        let unknown = try await QueryResponder.answer(reader: reader, body: Array(#"{"bookingId":"\\u0000"}"#.utf8),
                                                      typeProperty: "booking.get", routingKey: "booking.get", caller: Caller(userID: "ann"))
        #expect(try ContractJSON.decode(CommandReply.self, from: Data(unknown)).errorValue?.code == .bookingNotFound,
                "a backslash and u0000 is an id like any other")
    }

    @Test(arguments: StoreKind.allCases)
    func pagesReturnTheFirstPagesSnapshotExactlyOnceWhileBookingsChange(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, r) = try await setUp(fixture)
        defer { fixture.remove() }
        var original: [Booking] = []
        for hour in 7..<17 { original.append(try await book(p, String(format: "%02d:00", hour), String(format: "%02d:45", hour))) }

        let (first, cursor1) = try await page(r, day(limit: 3), as: "alice")
        #expect(first.map(\.id) == original.prefix(3).map(\.id))
        let cursor = try #require(cursor1)

        // Between the pages: cancel one not yet listed, move one out of the
        // window, move an already listed one later into the window, add one.
        _ = try await run(p, .cancelBooking, #"{"bookingId":"\#(original[3].id)"}"#, user: "alice")
        _ = try await run(p, .rescheduleBooking, #"{"bookingId":"\#(original[4].id)","date":"2026-11-25","start":"11:00","end":"11:45"}"#, user: "alice")
        _ = try await run(p, .rescheduleBooking, #"{"bookingId":"\#(original[0].id)","date":"2026-11-23","start":"20:00","end":"20:45"}"#, user: "alice")
        let added = try await book(p, "21:00", "21:45")

        var seen = first
        var next: String? = cursor
        while let c = next {
            let (more, n) = try await page(r, day(limit: 3, cursor: c), as: "alice")
            seen += more
            next = n
        }
        #expect(seen.map(\.id) == original.map(\.id), "every booking that matched at the first page, once, in order")
        #expect(seen.allSatisfy { $0.version == 1 && $0.status == .confirmed }, "in its state as of the first page")
        #expect(!seen.contains { $0.id == added.id })

        // A new listing sees the present.
        let (now, last) = try await page(r, day(limit: 1000), as: "alice")
        #expect(last == nil)
        #expect(now.first { $0.id == original[3].id }?.status == .cancelled)
        #expect(!now.contains { $0.id == original[4].id })
        #expect(now.last?.id == added.id)
        #expect(now.first { $0.id == original[0].id }?.start == "20:00")
    }

    /// Contract v1.2: the full view for the requester, the room's
    /// approvers and admins (and, for a booking made without `user_id`,
    /// admins and anonymous callers); the busy view — times and status,
    /// no title, attendees or requester — for everyone else, on every path.
    @Test(arguments: StoreKind.allCases)
    func fullViewOnlyForRequesterApproversAndAdminsElseBusy(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, r) = try await setUp(fixture)
        defer { fixture.remove() }
        let alices = try await book(p, "09:00", "10:00")
        let anonymous = try await book(p, "10:00", "11:00", user: nil, email: "dan@example.com")
        let cases: [(user: String?, alices: Bool, anonymous: Bool)] = [
            ("alice", true, false), ("desk", true, false), ("ops", true, true), ("bob", false, false), (nil, false, true),
        ]
        func check(_ view: BookingView?, full: Bool, _ who: String) {
            guard let view else { Issue.record("missing for \(who)"); return }
            if full {
                #expect(view.title == "T", "\(who)")
                #expect(view.attendees?.first?.email != nil, "\(who)")
                #expect(view.attendees?.first?.phone != nil, "\(who)")
            } else {
                #expect(view.title == nil && view.description == nil && view.attendees == nil && view.requestedBy == nil
                        && view.cancelReason == nil, "\(who) reads the busy view")
                #expect(view.date == "2026-11-23" && view.room == "Berlin" && view.version == 1, "\(who): when and where stay")
            }
        }
        for (user, seesAlices, seesAnonymous) in cases {
            let who = user ?? "anonymous"
            guard case .booking(let view) = try await r.get(GetBooking(bookingId: alices.id), caller: Caller(userID: user)) else {
                Issue.record("no booking for \(who)"); continue
            }
            check(view, full: seesAlices, who)
            guard case .booking(let anon) = try await r.get(GetBooking(bookingId: anonymous.id), caller: Caller(userID: user)) else {
                Issue.record("no booking for \(who)"); continue
            }
            check(anon, full: seesAnonymous, who + " (booking without user_id)")
            let (list, _) = try await page(r, day(), as: user)
            check(list.first { $0.id == alices.id }, full: seesAlices, who + " (list)")
            check(list.first { $0.id == anonymous.id }, full: seesAnonymous, who + " (list, booking without user_id)")
            // The filters on who match only what the caller reads in full.
            var byEmail = day()
            byEmail.attendeeEmail = "Carol@EXAMPLE.com"
            let (matched, _) = try await page(r, byEmail, as: user)
            #expect(matched.map(\.id) == (seesAlices ? [alices.id] : []), "\(who)")
            var byRequester = day()
            byRequester.requestedBy = "alice"
            let (requested, _) = try await page(r, byRequester, as: user)
            #expect(requested.map(\.id) == (seesAlices ? [alices.id] : []), "\(who): requestedBy names someone else")
        }
        #expect(try await r.get(GetBooking(bookingId: "nope"), caller: .user("alice")) == .error(
            ReplyError(code: .bookingNotFound, text: "booking 'nope' not found", field: "bookingId")))
    }

    /// The list reply is spliced from the stored JSON (redacted by SQLite):
    /// it must be byte for byte what the contract's encoder writes for the
    /// same page — with non-ASCII text, escapes, a description and several
    /// attendees, with and without contact details, with and without a
    /// next cursor.
    @Test(arguments: StoreKind.allCases)
    func theSplicedListReplyIsWhatTheEncoderWrites(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, r) = try await setUp(fixture)
        defer { fixture.remove() }
        _ = try await run(p, .createBooking, #"""
            {"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:00","title":"Größe \"quoted\" \\ / tab\t ✓",
             "description":"line\nbreak","attendees":[{"name":"Zoë","email":"zoe@example.com","phone":"0170 1234567"},
             {"name":"Ola","email":"ola@example.com","phone":"+351 912 345 678"}]}
            """#, user: "alice")
        _ = try await book(p, "11:00", "12:00", user: nil)
        _ = try await book(p, "13:00", "14:00", user: "bob")
        for user in ["alice", "bob", nil] as [String?] {
            for limit in [1, 2, 10] {
                let body = try await r.listReply(day(limit: limit), caller: Caller(userID: user))
                let decoded = try ContractJSON.decode(BookingQueryReply.self, from: Data(body))
                guard case .bookings(let list, _) = decoded else { Issue.record("\(decoded)"); continue }
                #expect(list.count == min(limit, 3))
                #expect(String(decoding: body, as: UTF8.self) == String(decoding: try ContractJSON.encode(decoded), as: UTF8.self),
                        "user \(user ?? "none"), limit \(limit)")
            }
        }
        let (list, _) = try await page(r, day(), as: "bob")
        #expect(list[0].title == nil && list[0].attendees == nil, "bob is not alice: the busy view")
        #expect(list[1].title == nil, "a booking without requester is busy for a named caller")
        #expect(list[2].attendees?.first?.email == "carol@example.com", "bob's own booking")
        let (own, _) = try await page(r, day(), as: "alice")
        #expect(own[0].title == "Größe \"quoted\" \\ / tab\t ✓")
        #expect(own[0].description == "line\nbreak")
        #expect(own[0].attendees?.map(\.name) == ["Zoë", "Ola"])
    }

    @Test(arguments: StoreKind.allCases)
    func aDateIsTheLocalDayOfEachRoom(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, r) = try await setUp(fixture)
        defer { fixture.remove() }
        // The same instant, 2026-11-22T23:30Z: already the 23rd in Berlin, still the 22nd in Lisbon.
        let berlin = try await book(p, room: "Berlin", date: "2026-11-23", "00:30", "00:45")
        let lisbon = try await book(p, room: "Lisbon", date: "2026-11-22", "23:30", "23:45")
        #expect(berlin.startsAt == lisbon.startsAt)
        let (dates, _) = try await page(r, day(nil), as: "alice")
        #expect(dates.map(\.id) == [berlin.id])
        let instants = ListBookings(from: .instant(utc("2026-11-22T23:00:00Z")), to: .instant(utc("2026-11-22T23:30:00Z")))
        #expect(try await page(r, instants, as: "alice").0.isEmpty, "[from, to): ending at the start is no overlap")
        let both = ListBookings(from: .instant(utc("2026-11-22T23:44:59Z")), to: .instant(utc("2026-11-23T00:00:00Z")))
        #expect(Set(try await page(r, both, as: "alice").0.map(\.id)) == [berlin.id, lisbon.id])
    }

    @Test(arguments: StoreKind.allCases)
    func filtersByStatusRequesterAndSeries(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, r) = try await setUp(fixture)
        defer { fixture.remove() }
        let a = try await book(p, "09:00", "10:00")
        let b = try await book(p, "10:00", "11:00", user: "bob")
        _ = try await run(p, .cancelBooking, #"{"bookingId":"\#(b.id)"}"#, user: "bob")
        var q = day()
        q.status = ["cancelled"]
        #expect(try await page(r, q, as: "ops").0.map(\.id) == [b.id])
        q.status = nil
        q.requestedBy = "alice"
        #expect(try await page(r, q, as: "ops").0.map(\.id) == [a.id])
        q.requestedBy = nil
        q.seriesId = "s-1"
        #expect(try await page(r, q, as: "ops").0.isEmpty, "no series yet")
    }

    @Test(arguments: StoreKind.allCases)
    func badRequestsAreRefusedWithTheField(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (_, r) = try await setUp(fixture)
        defer { fixture.remove() }
        func field(_ q: ListBookings) async throws -> String? {
            guard case .error(let e) = try await r.list(q, caller: .user("alice")) else { return nil }
            #expect(e.code == .invalidField)
            return e.field
        }
        #expect(try await field(day(limit: 0)) == "limit")
        #expect(try await field(day(limit: 1001)) == "limit")
        #expect(try await field(ListBookings(from: .date("2026-11-24"), to: .date("2026-11-23"))) == "to")
        #expect(try await field(ListBookings(from: .date("2026-01-01"), to: .date("2027-01-03"))) == "to", "367 days")
        #expect(try await field(ListBookings(from: .date("2026-01-01"), to: .date("2027-01-02"))) == nil, "366 days")
        var bad = day()
        bad.status = ["confirmed", "done"]
        #expect(try await field(bad) == "status[1]")
        #expect(try await field(day(cursor: "not-a-cursor")) == "cursor")
        // A cursor continues only its own query.
        for hour in 9..<12 { _ = try await book(try await setUpProcessorOnly(fixture), String(format: "%02d:00", hour), String(format: "%02d:30", hour)) }
        let (_, cursor) = try await page(r, day(limit: 1), as: "alice")
        let c = try #require(cursor)
        #expect(try await field(day(limit: 2, cursor: c)) == "cursor")
        #expect(try await field(day("Lisbon", limit: 1, cursor: c)) == "cursor")
        // … and only for an hour.
        clock.set(clock.now.addingTimeInterval(StoreRules.cursorLifetime + 1))
        #expect(try await field(day(limit: 1, cursor: c)) == "cursor")
    }

    /// Contract v1.2: a cursor is sealed; the client cannot read where it
    /// stopped, and one it altered, made up (a readable cursor with a new
    /// `issuedAt`, to outlive the hour), or sealed with another key is
    /// refused, while the same key in another process (a restart, a second
    /// handler) continues it.
    @Test(arguments: StoreKind.allCases)
    func aCursorIsSignedAndCannotBeForged(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store, policy) = try await setUpStore(fixture)
        let clock = self.clock
        defer { fixture.remove() }
        for hour in 9..<12 { _ = try await book(p, String(format: "%02d:00", hour), String(format: "%02d:30", hour)) }
        let key = CursorKey(text: String(repeating: "k", count: 40))
        let r = BookingReader(store: store, policy: policy, now: { clock.now }, cursorKey: key)
        let (_, next) = try await page(r, day(limit: 1), as: "alice")
        let cursor = try #require(next)
        let box = try #require(ListCursor.data(base64url: cursor))
        #expect(String(decoding: box, as: UTF8.self).contains("\"i\"") == false, "not readable JSON")
        // Another process with the same key continues it.
        let again = BookingReader(store: store, policy: policy, now: { clock.now }, cursorKey: CursorKey(text: String(repeating: "k", count: 40)))
        #expect(try await page(again, day(limit: 1, cursor: cursor), as: "alice").0.count == 1)
        func refused(_ text: String, _ reader: BookingReader) async throws -> Bool {
            guard case .error(let e) = try await reader.list(day(limit: 1, cursor: text), caller: .user("alice")) else { return false }
            return e.field == "cursor"
        }
        // One byte of the box flipped.
        var altered = box
        altered[altered.count / 2] ^= 0x01
        #expect(try await refused(ListCursor.base64url(altered), r), "an altered cursor")
        // A readable cursor of the client's making, fresh and pointing anywhere.
        let madeUp = ListCursor(snapshot: 1, startsAt: 0, id: "", key: "x", issuedAt: clock.now.timeIntervalSince1970)
        #expect(try await refused(ListCursor.base64url(try JSONEncoder().encode(madeUp)), r), "an unsealed cursor")
        #expect(try await refused(cursor, BookingReader(store: store, policy: policy, now: { clock.now })), "another key")
    }

    /// Contract v1.2: a page reads a bounded number of rows whatever the
    /// filter; a filter that matches nothing gives short (here empty) pages
    /// with a cursor until the window is read, and every match still comes
    /// exactly once.
    @Test(arguments: StoreKind.allCases)
    func aPageReadsABoundedNumberOfRows(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (p, store, policy) = try await setUpStore(fixture)
        let clock = self.clock
        defer { fixture.remove() }
        var carols: [String] = []
        for hour in 8..<20 {
            let email = hour == 18 ? "carol@example.com" : "other\(hour)@example.com"
            let booking = try await book(p, String(format: "%02d:00", hour), String(format: "%02d:30", hour), email: email)
            if hour == 18 { carols.append(booking.id) }
        }
        let r = BookingReader(store: store, policy: policy, now: { clock.now }, rowsPerPage: 4)
        var query = day(limit: 1)
        query.attendeeEmail = "carol@example.com"
        var found: [String] = []
        var pages = 0
        var cursor: String?
        repeat {
            query.cursor = cursor
            let (list, next) = try await page(r, query, as: "alice")
            found += list.map(\.id)
            cursor = next
            pages += 1
        } while cursor != nil && pages < 20
        #expect(found == carols)
        // 12 rows, at most 4 read per page: at least 3 pages, the first two empty.
        #expect(pages >= 3)
    }

    /// A second processor on the same file (another handler process).
    func setUpProcessorOnly(_ fixture: StoreFixture) async throws -> CommandProcessor {
        let clock = self.clock
        return CommandProcessor(store: try await fixture.open(),
                                policy: CallerPolicy(administrators: ["ops"]), now: { clock.now })
    }
}
