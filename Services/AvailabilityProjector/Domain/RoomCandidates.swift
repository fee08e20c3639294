import BookingContracts
import Foundation

/// One candidate of one room: a local start on a local date and its instants.
struct Candidate: Sendable, Equatable {
    /// Days since 1970-01-01 of the local date.
    var day: Int64
    var startMinute: Int
    var startsAt: Int64
    var endsAt: Int64
}

/// What every room of one suggestion query shares: the query, the
/// snapshot, `now`, and caches of dates and zone days.
final class SuggestContext {
    let query: CheckedSuggest
    let state: AvailabilityIndex.State
    let index: AvailabilityIndex
    let now: Int64
    let durationSlots: Int
    let stepMask: SlotMask
    private var dates: [Int64: String] = [:]
    private var zoneDays: [String: [Int64: ZoneDay?]] = [:]
    private var dayMaps: [Int64: [String: DayOccupancy]] = [:]
    /// Instants of wall times near offset changes, per zone: rooms of one
    /// zone share their hours, and each look-up costs about 15 zone-offset
    /// calls (a 7-day suggest starting the Friday before a change took
    /// 46 ms instead of 1.6 ms, every matching room computed slot by slot).
    private var wallInstants: [String: [Int64: [Int64]]] = [:]

    init(query: CheckedSuggest, state: AvailabilityIndex.State, index: AvailabilityIndex, now: Int64) {
        self.query = query
        self.state = state
        self.index = index
        self.now = now
        durationSlots = query.durationMinutes / SlotMask.minutes
        stepMask = SlotMask.steps(of: query.stepMinutes)
    }

    func date(_ day: Int64) -> String {
        if let text = dates[day] { return text }
        let text = LocalClock.civilString(days: day)
        dates[day] = text
        return text
    }

    func zoneDay(_ day: Int64, zone: TimeZone) -> ZoneDay? {
        let key = zone.identifier
        if let cached = zoneDays[key]?[day] { return cached }
        let value = index.zoneDay(date: date(day), zone: zone)
        zoneDays[key, default: [:]][day] = .some(value)
        return value
    }

    /// The occupancy of a room on a local day (free when nothing is booked).
    func occupancy(_ room: String, _ day: Int64) -> DayOccupancy {
        if let map = dayMaps[day] { return map[room] ?? .free }
        let map = state.days[date(day)] ?? [:]
        dayMaps[day] = map
        return map[room] ?? .free
    }

    /// ``LocalClock/instants(wall:zone:)``, cached for this query.
    func instants(wall: Int64, zone: TimeZone) -> [Int64] {
        let key = zone.identifier
        if let cached = wallInstants[key]?[wall] { return cached }
        let value = LocalClock.instants(wall: wall, zone: zone)
        wallInstants[key, default: [:]][wall] = value
        return value
    }

    /// ``LocalClock/firstInstant(wall:zone:)`` through the cache.
    func firstInstant(wall: Int64, zone: TimeZone) -> Int64 {
        instants(wall: wall, zone: zone).first ?? LocalClock.firstInstant(wall: wall, zone: zone)
    }

    /// No instant whose wall time in `zone` is `wall` or later comes before
    /// this: `wall`'s first occurrence (the first time the wall clock
    /// reaches a time never comes before the first time it reaches an
    /// earlier one), or, when `wall` falls in a gap, `wall` less the
    /// largest offset of the day around it.
    func earliestInstant(fromWall wall: Int64, zone: TimeZone) -> Int64 {
        if let first = instants(wall: wall, zone: zone).first { return first }
        let offsets = [wall - 86_400, wall + 86_400].map { zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval($0))) }
        return wall - Int64(offsets.max() ?? 0)
    }

    /// The local day number of an instant in `zone`.
    static func localDay(_ seconds: Int64, zone: TimeZone) -> Int64 {
        CivilDays.day(ofSeconds: seconds + Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(seconds)))))
    }
}

/// The candidates of one room, a day at a time, in start order: the
/// window `[from, to)` in the room's zone, from now on, up to its
/// horizon; per day the weekday's hours, closures, bookings with buffers,
/// and the duration limits.
struct RoomCandidates {
    let info: RoomInfo
    /// The room's place in capacity-then-name order (the tie-break).
    let rank: Int
    /// The earliest instant a candidate may start (the later of `from` and now).
    let earliest: Int64
    let latestEnd: Int64
    private var nextDay: Int64
    private let lastDay: Int64
    private(set) var current: [Candidate] = []
    var position = 0

    /// Nil when the room's window is empty.
    init?(info: RoomInfo, rank: Int, context: SuggestContext) {
        let zone = info.zone
        guard let from = context.query.from.instant(zone: zone), let to = context.query.to.instant(zone: zone) else { return nil }
        let earliest = max(from, context.now)
        guard earliest < to else { return nil }
        var last = SuggestContext.localDay(to - 1, zone: zone)
        if let horizon = info.room.horizonDays {
            last = min(last, SuggestContext.localDay(context.now, zone: zone) + Int64(horizon))
        }
        let first = SuggestContext.localDay(earliest, zone: zone)
        guard first <= last else { return nil }
        self.info = info
        self.rank = rank
        self.earliest = earliest
        latestEnd = to
        nextDay = first
        lastDay = last
    }

    /// A lower bound of the room's first candidate that costs no booking
    /// look-up: the first step of the hours of its first open day, never
    /// before ``earliest``. On a day near an offset change it is that
    /// step's first occurrence (``SuggestContext/earliestInstant(fromWall:zone:)``):
    /// the window's start instead put every matching room under the same
    /// bound, below any real candidate, so all of them were computed.
    /// Skips the closed weekdays before it; nil when no day is open.
    mutating func openingBound(_ context: SuggestContext) -> Int64? {
        while nextDay <= lastDay {
            let weekday = Int(((nextDay % 7) + 7 + 3) % 7)
            let starts = info.weekly[weekday].intersection(context.stepMask)
            if let first = starts.firstSlot {
                guard let zoneDay = context.zoneDay(nextDay, zone: info.zone) else { return earliest }
                guard zoneDay.regular else {
                    let wall = zoneDay.wallMidnight + Int64(first * SlotMask.minutes * 60)
                    return max(earliest, context.earliestInstant(fromWall: wall, zone: info.zone))
                }
                return max(earliest, zoneDay.instant(minute: first * SlotMask.minutes))
            }
            nextDay += 1
        }
        return nil
    }

    /// Moves to the next day with candidates; false when there is none.
    mutating func advance(_ context: SuggestContext) -> Bool {
        current = []
        position = 0
        while current.isEmpty, nextDay <= lastDay {
            current = candidates(on: nextDay, context)
            nextDay += 1
        }
        return !current.isEmpty
    }

    /// The candidates of one local day, in start order.
    func candidates(on day: Int64, _ context: SuggestContext) -> [Candidate] {
        let weekday = Int(((day % 7) + 7 + 3) % 7)
        let open = info.weekly[weekday]
        guard !open.isEmpty, let zoneDay = context.zoneDay(day, zone: info.zone) else { return [] }
        return zoneDay.regular ? regular(day, zoneDay, open, context) : exact(day, zoneDay, open, context)
    }

    /// A day whose offset is constant around it: everything on the masks.
    private func regular(_ day: Int64, _ zoneDay: ZoneDay, _ open: SlotMask, _ context: SuggestContext) -> [Candidate] {
        let room = info.room, duration = context.query.durationMinutes
        // Elapsed time is the clock's on such a day.
        if let least = room.minMinutes, duration < least { return [] }
        if let most = room.maxMinutes, duration > most { return [] }
        // A booking late the day before or early the day after keeps its
        // buffer across midnight.
        let blocked = info.bufferSlots == 0 ? context.occupancy(room.name, day).busy
            : info.blocked(context.occupancy(room.name, day).busy, busyBefore: context.occupancy(room.name, day - 1).busy,
                           busyAfter: context.occupancy(room.name, day + 1).busy)
        var free = open.subtracting(blocked)
        if context.state.closures[room.name] != nil {
            free = free.subtracting(context.state.closedSlots(RoomDay(room: room.name, date: context.date(day)), zone: info.zone))
        }
        let base = zoneDay.instant(minute: 0)
        // Starts at or after `earliest`, ends by `latestEnd`, in whole slots.
        let slotSeconds = Int64(SlotMask.minutes * 60)
        let firstStart = earliest <= base ? 0 : Int((earliest - base + slotSeconds - 1) / slotSeconds)
        let lastEnd = latestEnd - base >= Int64(SlotMask.count) * slotSeconds ? SlotMask.count
            : Int(floorDiv(latestEnd - base, slotSeconds))
        let lastStart = lastEnd - context.durationSlots
        guard firstStart <= lastStart, firstStart < SlotMask.count else { return [] }
        let starts = free.fits(context.durationSlots).intersection(context.stepMask)
            .intersection(.slots(firstStart, lastStart + 1))
        return starts.slotList.map { slot in
            let startsAt = base + Int64(slot) * slotSeconds
            return Candidate(day: day, startMinute: slot * SlotMask.minutes, startsAt: startsAt,
                             endsAt: startsAt + Int64(duration * 60))
        }
    }

    /// A day near an offset change: each candidate on instants.
    private func exact(_ day: Int64, _ zoneDay: ZoneDay, _ open: SlotMask, _ context: SuggestContext) -> [Candidate] {
        let room = info.room, duration = context.query.durationMinutes, zone = info.zone
        let within = open.fits(context.durationSlots).intersection(context.stepMask)
        guard !within.isEmpty else { return [] }
        let buffer = Int64(info.bufferSlots * SlotMask.minutes * 60)
        // Busy time of the day and its neighbours, as instants (each run
        // of wall-clock slots from its first instant to its end's).
        var busy: [(from: Int64, to: Int64)] = []
        for d in (day - 1)...(day + 1) {
            let wall = d * 86_400
            for run in context.occupancy(room.name, d).busy.runs {
                busy.append((context.firstInstant(wall: wall + Int64(run.start * 60), zone: zone),
                             context.firstInstant(wall: wall + Int64(run.end * 60), zone: zone)))
            }
        }
        let closures = context.state.closures[room.name] ?? []
        var result: [Candidate] = []
        for slot in within.slotList {
            let start = slot * SlotMask.minutes, end = start + duration
            let starts = context.instants(wall: zoneDay.wallMidnight + Int64(start * 60), zone: zone)
            let ends = context.instants(wall: zoneDay.wallMidnight + Int64(end * 60), zone: zone)
            // A start or end that does not exist, or exists twice, is skipped.
            guard starts.count == 1, ends.count == 1 else { continue }
            let s = starts[0], e = ends[0]
            guard s >= earliest, e <= latestEnd else { continue }
            let elapsed = Int((e - s) / 60)
            if let least = room.minMinutes, elapsed < least { continue }
            if let most = room.maxMinutes, elapsed > most { continue }
            let fromSeconds = { (span: ClosureSpan) in Int64(span.from.timeIntervalSince1970.rounded(.down)) }
            let toSeconds = { (span: ClosureSpan) in Int64(span.to.timeIntervalSince1970.rounded(.up)) }
            if closures.contains(where: { s < toSeconds($0) && fromSeconds($0) < e }) { continue }
            if busy.contains(where: { s < $0.to + buffer && $0.from < e + buffer }) { continue }
            result.append(Candidate(day: day, startMinute: start, startsAt: s, endsAt: e))
        }
        return result
    }
}

@inline(__always)
func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
}
