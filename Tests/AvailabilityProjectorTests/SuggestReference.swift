import BookingContracts
import Foundation
@testable import AvailabilityProjector

/// A brute-force `availability.suggest`, written from the contract's text
/// and sharing nothing with the projector's engine but the contract types:
/// every local date around the window, every step of the day, each
/// candidate checked on instants against every booking and closure.
/// Slow and plain on purpose; the engine must agree with it.
enum SuggestReference {
    struct Booking {
        var room: String
        var date: String
        var start: Int
        var end: Int
        var status: BookingStatus
    }

    /// The statuses that block time (contract v1.2: not cancelled,
    /// rejected or waitlisted).
    static let blocking: Set<BookingStatus> = [.pending, .confirmed, .inProgress, .completed]

    /// Every instant whose local wall time in `zone` is `wall` (UTC-read
    /// seconds): each quarter-hour offset from −14 h to +14 h tried.
    static func instants(wall: Int64, zone: TimeZone) -> [Int64] {
        var result: [Int64] = []
        for k in -56...56 {
            let offset = k * 900
            let t = wall - Int64(offset)
            if zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(t))) == offset { result.append(t) }
        }
        return result.sorted()
    }

    static func dayNumber(_ date: String) -> Int64 {
        let d = ContractFormat.calendarDate(date)!
        return CivilDays.days(year: d.year, month: d.month, day: d.day)
    }

    static func localDayNumber(_ t: Int64, zone: TimeZone) -> Int64 {
        let local = t + Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(t))))
        return local >= 0 ? local / 86_400 : (local - 86_399) / 86_400
    }

    /// The first instant of local day `day`: midnight, or the first quarter-hour after a gap.
    static func startOfDay(_ day: Int64, zone: TimeZone) -> Int64 {
        var minute = 0
        while true {
            if let first = instants(wall: day * 86_400 + Int64(minute * 60), zone: zone).first { return first }
            minute += 15
        }
    }

    static func bound(_ text: String, zone: TimeZone) -> Int64 {
        if text.count == 10 { return startOfDay(dayNumber(text), zone: zone) }
        return Int64(ProjectorStore.instant(text)!.timeIntervalSince1970.rounded(.down))
    }

    static func suggest(rooms: [Room], bookings: [Booking], closures: [RoomClosure], now: Date,
                        query: SuggestQuery) -> [Suggestion] {
        let duration = query.durationMinutes!, step = query.stepMinutes ?? 15, limit = query.limit ?? 10
        let nowSeconds = now.timeIntervalSince1970
        var found: [(s: Int64, capacity: Int, name: String, suggestion: Suggestion)] = []
        for room in rooms {
            if let name = query.name, !name.isEmpty, !room.name.lowercased().contains(name.lowercased()) { continue }
            if let least = query.minCapacity, room.capacity < least { continue }
            let wanted = (query.equipment ?? []).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
            if !wanted.allSatisfy(Set(room.equipment.map { $0.lowercased() }).contains) { continue }
            let zone = TimeZone(identifier: room.timeZone)!
            let from = bound(query.from!, zone: zone), to = bound(query.to!, zone: zone)
            let buffer = Int64((room.bufferMinutes ?? 0) * 60)
            let busy: [(Int64, Int64)] = bookings.filter { $0.room == room.name && blocking.contains($0.status) }.map { b in
                let day = dayNumber(b.date) * 86_400
                return (instants(wall: day + Int64(b.start * 60), zone: zone).first!,
                        instants(wall: day + Int64(b.end * 60), zone: zone).first!)
            }
            let shut: [(Int64, Int64)] = closures.filter { $0.room == room.name }.map {
                (Int64(ProjectorStore.instant($0.from)!.timeIntervalSince1970), Int64(ProjectorStore.instant($0.to)!.timeIntervalSince1970))
            }
            let today = localDayNumber(Int64(nowSeconds.rounded(.down)), zone: zone)
            for day in (localDayNumber(from, zone: zone) - 1)...(localDayNumber(to, zone: zone) + 1) {
                let date = LocalClock.civilString(days: day)
                guard case .open(let opens, let closes) = room.hours(on: date) else { continue }
                if let horizon = room.horizonDays, day - today > Int64(horizon) { continue }
                for start in stride(from: 0, to: 24 * 60, by: step) {
                    let end = start + duration
                    guard start >= opens, end <= closes else { continue }
                    let starts = instants(wall: day * 86_400 + Int64(start * 60), zone: zone)
                    let ends = instants(wall: day * 86_400 + Int64(end * 60), zone: zone)
                    guard starts.count == 1, ends.count == 1 else { continue }
                    let s = starts[0], e = ends[0]
                    guard s >= from, e <= to, Double(s) >= nowSeconds else { continue }
                    let elapsed = Int(e - s) / 60
                    if let least = room.minMinutes, elapsed < least { continue }
                    if let most = room.maxMinutes, elapsed > most { continue }
                    if shut.contains(where: { s < $0.1 && $0.0 < e }) { continue }
                    if busy.contains(where: { s < $0.1 + buffer && $0.0 < e + buffer }) { continue }
                    let suggestion = Suggestion(
                        room: room.name, date: date, start: ContractFormat.time(fromMinutes: start),
                        end: ContractFormat.time(fromMinutes: end),
                        startsAt: ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(s))),
                        endsAt: ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(e))),
                        timeZone: room.timeZone, capacity: room.capacity)
                    found.append((s, room.capacity, room.name, suggestion))
                }
            }
        }
        found.sort { ($0.s, $0.capacity, $0.name) < ($1.s, $1.capacity, $1.name) }
        return found.prefix(limit).map(\.suggestion)
    }
}
