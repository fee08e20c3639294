import BookingContracts
import Foundation
import Testing
@testable import AvailabilityProjector

/// Suggestions (contract v1.2): the engine (masks, lazy merge, exact
/// checks near offset changes) against ``SuggestReference`` on randomized
/// calendars — weekly hours (nights included, so DST hours are reachable),
/// closures, buffers, horizons and duration limits, rooms in zones with
/// 1-hour, 30-minute and no daylight-saving changes, windows on and around
/// the change days, `now` inside and before the window. Every case must
/// agree exactly (same suggestions, same order).
@Suite("Suggestions against a brute-force reference")
struct SuggestReferenceTests {
    /// A small deterministic generator, so a failing case can be re-run by its seed.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Zones and days where their offset changes (2026), plus ordinary days.
    static let zones: [(zone: String, days: [String])] = [
        ("Europe/Berlin", ["2026-03-29", "2026-10-25", "2026-11-23"]),
        ("America/New_York", ["2026-03-08", "2026-11-01", "2026-06-10"]),
        ("Australia/Lord_Howe", ["2026-04-05", "2026-10-04"]),  // 30-minute changes
        ("Asia/Kolkata", ["2026-03-29"]),  // +05:30, no changes
        ("Pacific/Chatham", ["2026-04-05", "2026-09-27"]),  // +12:45/+13:45
        ("UTC", ["2026-10-25"]),
    ]

    static func clock(_ minute: Int) -> String { ContractFormat.time(fromMinutes: minute) }

    struct Case {
        var rooms: [Room] = []
        var bookings: [SuggestReference.Booking] = []
        var closures: [RoomClosure] = []
        var now = Date()
        var query = SuggestQuery()
    }

    static func randomCase(_ rng: inout SplitMix) -> Case {
        var c = Case()
        let (zone, days) = zones.randomElement(using: &rng)!
        let anchor = SuggestReference.dayNumber(days.randomElement(using: &rng)!) + Int64.random(in: -2...1, using: &rng)
        let roomCount = Int.random(in: 1...4, using: &rng)
        for i in 0..<roomCount {
            // Mostly the anchor's zone; sometimes another, so zones mix in one answer.
            let roomZone = Int.random(in: 0..<4, using: &rng) == 0 ? zones.randomElement(using: &rng)!.zone : zone
            let opens = [0, 0, 60, 120, 420, 480].randomElement(using: &rng)!
            let closes = [1380, 1425, 1439, 1080, 600].randomElement(using: &rng)!
            var hours: [String: [String]?]? = nil
            if Bool.random(using: &rng) {
                var h: [String: [String]?] = [:]
                for key in WeeklyHours.keys where Int.random(in: 0..<3, using: &rng) == 0 {
                    if Bool.random(using: &rng) {
                        h[key] = .some(nil)
                    } else {
                        let o = Int.random(in: 0...40, using: &rng) * 15
                        h[key] = [clock(o), clock(min(1425, o + Int.random(in: 4...60, using: &rng) * 15))]
                    }
                }
                hours = h
            }
            let minMinutes = Int.random(in: 0..<4, using: &rng) == 0 ? [15, 30, 60, 90].randomElement(using: &rng)! : nil
            let maxMinutes = Int.random(in: 0..<4, using: &rng) == 0 ? [60, 90, 120, 180].randomElement(using: &rng)! : nil
            c.rooms.append(Room(
                name: ["Alpha", "beta", "Gamma", "delta", "Epsilon"][i] + "-\(i)",
                equipment: [["beamer"], ["Beamer", "tv"], [], ["whiteboard"]].randomElement(using: &rng)!,
                capacity: [4, 6, 6, 8, 12].randomElement(using: &rng)!, timeZone: roomZone,
                opens: clock(min(opens, closes - 60)), closes: clock(closes),
                horizonDays: Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 0...4, using: &rng) : nil,
                minMinutes: minMinutes, maxMinutes: minMinutes.map { max($0, maxMinutes ?? $0) } ?? maxMinutes,
                hours: hours, bufferMinutes: [nil, 0, 15, 30, 60, 240].randomElement(using: &rng)!))
        }
        // Bookings on the days around the anchor, at times that exist.
        for room in c.rooms {
            let tz = TimeZone(identifier: room.timeZone)!
            for _ in 0..<Int.random(in: 0...14, using: &rng) {
                let day = anchor + Int64.random(in: -1...5, using: &rng)
                let start = Int.random(in: 0...90, using: &rng) * 15
                let end = min(1440 - 15, start + Int.random(in: 1...16, using: &rng) * 15)
                guard end > start,
                      !SuggestReference.instants(wall: day * 86_400 + Int64(start * 60), zone: tz).isEmpty,
                      !SuggestReference.instants(wall: day * 86_400 + Int64(end * 60), zone: tz).isEmpty else { continue }
                let status: BookingStatus = [.confirmed, .confirmed, .pending, .inProgress, .completed, .cancelled, .rejected]
                    .randomElement(using: &rng)!
                c.bookings.append(.init(room: room.name, date: LocalClock.civilString(days: day), start: start, end: end,
                                        status: status))
            }
            for k in 0..<Int.random(in: 0...2, using: &rng) {
                let from = (anchor - 1) * 86_400 + Int64.random(in: 0...(6 * 96), using: &rng) * 900
                let to = from + Int64.random(in: 1...(2 * 96), using: &rng) * 900
                c.closures.append(RoomClosure(id: "c\(k)-\(room.name)", room: room.name,
                                              from: ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(from))),
                                              to: ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(to))),
                                              reason: "works"))
            }
        }
        // The window: dates, or instants (on or off the grid).
        let spanDays = Int64.random(in: 1...4, using: &rng)
        var q = SuggestQuery()
        if Bool.random(using: &rng) {
            q.from = LocalClock.civilString(days: anchor)
            q.to = LocalClock.civilString(days: anchor + spanDays)
        } else {
            let from = anchor * 86_400 + Int64.random(in: -40...96, using: &rng) * 900 + [0, 0, 420].randomElement(using: &rng)!
            q.from = ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(from)))
            q.to = ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(from + spanDays * 86_400
                                                                                    - Int64.random(in: 0...40, using: &rng) * 900)))
        }
        q.durationMinutes = [15, 30, 45, 60, 60, 90, 120, 180, 240].randomElement(using: &rng)!
        q.stepMinutes = [nil, 15, 30, 45, 60, 90].randomElement(using: &rng)!
        q.limit = [nil, 1, 5, 100, 100].randomElement(using: &rng)!
        if Int.random(in: 0..<4, using: &rng) == 0 { q.minCapacity = [5, 6, 8].randomElement(using: &rng)! }
        if Int.random(in: 0..<4, using: &rng) == 0 { q.equipment = ["BEAMER"] }
        if Int.random(in: 0..<6, using: &rng) == 0 { q.name = "A" }
        c.query = q
        // Now: well before the window, or inside it at an odd second.
        c.now = Date(timeIntervalSince1970: TimeInterval(Bool.random(using: &rng)
            ? (anchor - 2) * 86_400
            : anchor * 86_400 + Int64.random(in: 0...(3 * 86_400), using: &rng)))
        return c
    }

    static func engine(for c: Case) -> (QueryEngine, AvailabilityIndex.State) {
        var state = AvailabilityIndex.State()
        for room in c.rooms { state.upsert(room) }
        let grouped = Dictionary(grouping: c.bookings) { RoomDay(room: $0.room, date: $0.date) }
        for (day, bookings) in grouped {
            state.set(day, DayOccupancy(bookings: bookings.map { ($0.start, $0.end, $0.status) }))
        }
        for closure in c.closures { state.setClosure(closure, removed: false) }
        let index = AvailabilityIndex()
        index.replace(with: state)
        let now = c.now
        return (QueryEngine(index: index, now: { now }), state)
    }

    @Test func theEngineAgreesWithTheReferenceOnRandomCalendars() throws {
        var rng = SplitMix(state: 20_261_127)
        var compared = 0, nonEmpty = 0, dstCases = 0
        for caseNumber in 0..<600 {
            let c = Self.randomCase(&rng)
            let checked = try QueryEngine.check(c.query).get()
            let (engine, state) = Self.engine(for: c)
            let fast = engine.suggest(checked, state: state)
            let reference = SuggestReference.suggest(rooms: c.rooms, bookings: c.bookings, closures: c.closures,
                                                     now: c.now, query: c.query)
            compared += 1
            if !reference.isEmpty { nonEmpty += 1 }
            if c.rooms.contains(where: { ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"]
                .contains($0.timeZone) }) { dstCases += 1 }
            if fast != reference {
                let firstDifference = zip(fast, reference).first { $0 != $1 }
                Issue.record("""
                    case \(caseNumber): engine \(fast.count), reference \(reference.count); first difference \
                    \(String(describing: firstDifference)); only in engine \(Set(fast).subtracting(reference).prefix(3)); \
                    only in reference \(Set(reference).subtracting(fast).prefix(3)); query \(c.query); now \(c.now); \
                    rooms \(c.rooms.map { "\($0.name) \($0.timeZone) \($0.opens)-\($0.closes) \(String(describing: $0.hours)) buffer \(String(describing: $0.bufferMinutes)) horizon \(String(describing: $0.horizonDays)) min \(String(describing: $0.minMinutes)) max \(String(describing: $0.maxMinutes))" })
                    """)
                return
            }
        }
        // The generator must reach the interesting cases, or agreement means little.
        #expect(compared == 600)
        #expect(nonEmpty > 300, "too few cases with suggestions: \(nonEmpty)")
        #expect(dstCases > 200)
    }

    @Test func skippedAndAmbiguousLocalTimesAreNeverSuggested() throws {
        // Berlin, open all night: 2026-03-29 has no 02:00–03:00; 2026-10-25 has it twice.
        let room = Room(name: "Night", capacity: 4, opens: "00:00", closes: "23:45")
        for (date, excluded) in [("2026-03-29", ["02:00", "02:15", "02:30", "02:45"]),
                                 ("2026-10-25", ["02:00", "02:15", "02:30", "02:45"])] {
            let c = Case(rooms: [room], now: Date(timeIntervalSince1970: 0),
                         query: SuggestQuery(from: date, to: LocalClock.adding(days: 1, to: date)!, durationMinutes: 60, limit: 100))
            let (engine, state) = Self.engine(for: c)
            let starts = engine.suggest(try QueryEngine.check(c.query).get(), state: state).map(\.start)
            for time in excluded { #expect(!starts.contains(time), "\(date) \(time)") }
            // An hour ending in the gap or the repeated hour is skipped too.
            #expect(!starts.contains("01:15"), "\(date)")
            #expect(starts.contains("00:00") && starts.contains("03:00"), "\(date): \(starts)")
        }
    }

    @Test func orderIsEarliestThenSmallestThenName() throws {
        let rooms = [Room(name: "b-large", capacity: 12), Room(name: "a-large", capacity: 12), Room(name: "small", capacity: 4)]
        let c = Case(rooms: rooms, bookings: [.init(room: "small", date: "2026-11-23", start: 420, end: 480, status: .confirmed)],
                     now: Date(timeIntervalSince1970: 0),
                     query: SuggestQuery(from: "2026-11-23", to: "2026-11-24", durationMinutes: 60, limit: 4, stepMinutes: 60))
        let (engine, state) = Self.engine(for: c)
        let got = engine.suggest(try QueryEngine.check(c.query).get(), state: state)
        #expect(got.map { "\($0.start) \($0.room)" } == ["07:00 a-large", "07:00 b-large", "08:00 small", "08:00 a-large"])
        #expect(got[0].startsAt == "2026-11-23T06:00:00Z" && got[0].endsAt == "2026-11-23T07:00:00Z")
        #expect(got[0].timeZone == "Europe/Berlin" && got[0].capacity == 12 && got[0].date == "2026-11-23")
    }

    @Test func theFirstStartIsTheNextStepAfterNow() throws {
        // 2026-11-23 10:07 in Berlin.
        let c = Case(rooms: [Room(name: "Berlin", capacity: 8)], now: Date(timeIntervalSince1970: 1_795_424_820),
                     query: SuggestQuery(from: "2026-11-23", to: "2026-11-24", durationMinutes: 30, limit: 2))
        let (engine, state) = Self.engine(for: c)
        #expect(engine.suggest(try QueryEngine.check(c.query).get(), state: state).map(\.start) == ["10:15", "10:30"])
        var halfHours = c
        halfHours.query.stepMinutes = 30
        let (engine2, state2) = Self.engine(for: halfHours)
        #expect(engine2.suggest(try QueryEngine.check(halfHours.query).get(), state: state2).map(\.start) == ["10:30", "11:00"])
    }
}
