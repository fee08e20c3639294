import BookingContracts
import Foundation
import Testing
@testable import AvailabilityProjector

/// `availability.suggest`'s limits and `days` on `availability.query` (contract v1.2).
@Suite("Suggestion queries and multi-day answers")
struct SuggestQueryTests {
    func field(_ q: SuggestQuery) -> String? {
        if case .failure(let error) = QueryEngine.check(q) { return error.field }
        return nil
    }

    @Test func limitsAreTheContractsWithTheFieldNamed() {
        let ok = SuggestQuery(from: "2026-11-30", to: "2026-12-04", durationMinutes: 60)
        #expect(field(ok) == nil)
        var q = ok
        q.from = nil
        #expect(field(q) == "from")
        q = ok
        q.to = "2026-11-30"
        #expect(field(q) == "to", "to must be after from")
        q.to = "2026-12-31"
        #expect(field(q) == nil, "31 calendar days is the most")
        q.to = "2027-01-01"
        #expect(field(q) == "to", "32 days")
        q = ok
        q.from = "2026-11-30T08:00:00Z"
        q.to = "2026-12-31T08:00:00Z"
        #expect(field(q) == nil, "31 × 24 hours is allowed")
        q.to = "2026-12-31T08:00:01Z"
        #expect(field(q) == "to")
        q.to = "tomorrow"
        #expect(field(q) == "to")
        for (duration, expected) in [(nil, "durationMinutes"), (10, "durationMinutes"), (50, "durationMinutes"),
                                     (735, "durationMinutes"), (15, nil), (720, nil)] as [(Int?, String?)] {
            q = ok
            q.durationMinutes = duration
            #expect(field(q) == expected, "\(String(describing: duration))")
        }
        for (step, expected) in [(0, "stepMinutes"), (20, "stepMinutes"), (255, "stepMinutes"), (240, nil)] as [(Int, String?)] {
            q = ok
            q.stepMinutes = step
            #expect(field(q) == expected)
        }
        for (limit, expected) in [(0, "limit"), (101, "limit"), (100, nil)] as [(Int, String?)] {
            q = ok
            q.limit = limit
            #expect(field(q) == expected)
        }
        q = ok
        q.minCapacity = -1
        #expect(field(q) == "minCapacity")
    }

    @Test func httpParametersUseTheBodysNames() throws {
        let checked = try QueryEngine.parseSuggest(parameters: [
            ("from", "2026-11-30"), ("to", "2026-12-04"), ("durationMinutes", "60"), ("minCapacity", "6"),
            ("equipment", "beamer,TV"), ("equipment", "whiteboard,Beamer,tv"), ("name", "Ber"), ("limit", "5"), ("stepMinutes", "30"),
        ]).get()
        #expect(checked.durationMinutes == 60 && checked.minCapacity == 6 && checked.limit == 5 && checked.stepMinutes == 30)
        #expect(checked.equipment == ["beamer", "tv", "whiteboard"] && checked.name == "ber")
        guard case .failure(let error) = QueryEngine.parseSuggest(parameters: [("from", "2026-11-30"), ("to", "2026-12-01"),
                                                                              ("durationMinutes", "an hour")]) else {
            Issue.record("a word for a number was accepted"); return
        }
        #expect(error.code == .invalidField && error.field == "durationMinutes")
        guard case .failure(let body) = QueryEngine.parseSuggest(body: Array(#"{"from": 1}"#.utf8)) else {
            Issue.record("a number for from was accepted"); return
        }
        #expect(body.code == .invalidField)
    }

    @Test func theResponderPicksTheQueryByTypeThenRoutingKey() {
        #expect(QueryResponder.Kind(typeProperty: "availability.suggest", routingKey: "availability.queries") == .suggest)
        #expect(QueryResponder.Kind(typeProperty: nil, routingKey: "availability.suggest") == .suggest)
        #expect(QueryResponder.Kind(typeProperty: "", routingKey: "availability.suggest") == .suggest)
        #expect(QueryResponder.Kind(typeProperty: nil, routingKey: "availability.queries") == .availability)
        #expect(QueryResponder.Kind(typeProperty: "availability.query", routingKey: "availability.suggest") == .availability)
    }

    @Test func daysCarryEachDayAndAvailStaysTheFirsts() throws {
        var state = AvailabilityIndex.State()
        state.upsert(Room(name: "Berlin", capacity: 8, hours: ["sat": nil, "sun": nil]))
        state.upsert(Room(name: "Hamburg", capacity: 4))
        state.set(RoomDay(room: "Berlin", date: "2026-11-28"), DayOccupancy())
        state.set(RoomDay(room: "Berlin", date: "2026-11-27"),
                  DayOccupancy(confirmed: SlotMask(fromMinute: 9 * 60, toMinute: 10 * 60)))
        state.setClosure(RoomClosure(id: "x", room: "Hamburg", from: "2026-11-26T23:00:00Z", to: "2026-11-27T23:00:00Z",
                                     reason: "move"), removed: false)
        let index = AvailabilityIndex()
        index.replace(with: state)
        let engine = QueryEngine(index: index, now: { Date(timeIntervalSince1970: 0) })
        let query = try QueryEngine.check(AvailabilityQuery(date: .date(.calendarDate("2026-11-26")), days: 3)).get()
        let reply = try ContractJSON.decode(AvailabilityReply.self, from: try engine.replyBody(query).get())
        #expect(reply.map(\.name) == ["Berlin", "Hamburg"])
        let berlin = try #require(reply[0].days)
        #expect(berlin.map(\.date) == ["2026-11-26", "2026-11-27", "2026-11-28"])
        #expect(berlin[1].avail == ["07:00 - 09:00", "10:00 - 19:00"])
        #expect(berlin[2] == DayAvailability(date: "2026-11-28", avail: [], closed: "closed on Saturdays"))
        #expect(reply[0].avail == berlin[0].avail)
        #expect(reply[1].days?[1] == DayAvailability(date: "2026-11-27", avail: [], closed: "move"))
        // One day: the v1.1 shape, no `days`.
        let one = try QueryEngine.check(AvailabilityQuery(date: .date(.calendarDate("2026-11-26")))).get()
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: try engine.replyBody(one).get()).allSatisfy { $0.days == nil })
        // Out of range, and too many room-days.
        guard case .failure(let range) = QueryEngine.check(AvailabilityQuery(days: 32)) else { Issue.record("32 days"); return }
        #expect(range.field == "days")
        for i in 0..<99 { state.upsert(Room(name: "Room \(i)", capacity: 2)) }
        index.replace(with: state)
        let wide = try QueryEngine.check(AvailabilityQuery(date: .date(.calendarDate("2026-11-26")), days: 20)).get()
        guard case .failure(let tooMany) = engine.replyBody(wide) else { Issue.record("101 rooms × 20 days answered"); return }
        #expect(tooMany.code == .invalidField && tooMany.field == "days")
        let narrow = try QueryEngine.check(AvailabilityQuery(date: .date(.calendarDate("2026-11-26")), days: 19)).get()
        #expect((try? engine.replyBody(narrow).get()) != nil, "101 × 19 = 1,919 room-days is within the limit")
    }

    /// The multi-day reply is written by hand; it must be the bytes
    /// `ContractJSON` writes for the same rooms and days (sorted keys,
    /// escaped reasons, `closed` on the room and on a day).
    @Test func daysAreWrittenAsTheEncoderWouldWriteThem() throws {
        var state = AvailabilityIndex.State()
        state.upsert(Room(name: "Berlin", location: "2nd floor", equipment: ["beamer"], size: "22m2", capacity: 8,
                          images: ["https://example.com/a.png"], hours: ["sat": nil, "sun": nil], bufferMinutes: 15))
        state.upsert(Room(name: "Hamburg", capacity: 4))
        state.upsert(Room(name: "New York", capacity: 12, timeZone: "America/New_York"))
        state.set(RoomDay(room: "Berlin", date: "2026-11-27"),
                  DayOccupancy(confirmed: SlotMask(fromMinute: 9 * 60, toMinute: 10 * 60)))
        state.setClosure(RoomClosure(id: "x", room: "Hamburg", from: "2026-11-26T23:00:00Z", to: "2026-11-27T23:00:00Z",
                                     reason: #"the "move" / Umzug — ünter \ way"#), removed: false)
        state.setClosure(RoomClosure(id: "y", room: "Berlin", from: "2026-11-26T12:00:00Z", to: "2026-11-26T13:00:00Z",
                                     reason: "lunch"), removed: false)
        let index = AvailabilityIndex()
        index.replace(with: state)
        let engine = QueryEngine(index: index, now: { Date(timeIntervalSince1970: 0) })
        for days in [2, 4, 9] {
            let query = try QueryEngine.check(AvailabilityQuery(date: .date(.calendarDate("2026-11-26")), days: days)).get()
            let reference = engine.answers(query).map { first in
                RoomAvailability(room: first.info.room, avail: first.free.availStrings, closed: first.closedReason,
                                 days: [first.dayAvailability] + (1..<days).compactMap { offset in
                                     engine.answers(query, dayOffset: offset).first { $0.info.room.name == first.info.room.name }?
                                         .dayAvailability
                                 })
            }
            #expect(reference.count == 3 && reference.allSatisfy { $0.days?.count == days })
            let written = try engine.replyBody(query).get()
            #expect(written == [UInt8](try ContractJSON.encode(reference)),
                    "\(String(decoding: written, as: UTF8.self))")
        }
    }
}
