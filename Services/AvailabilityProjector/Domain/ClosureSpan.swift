import BookingContracts
import Foundation

/// A closure of a room (contract v1.2) as the read model keeps it: the
/// closure and its instants, turned into local slots per day in the room's
/// zone when asked.
public struct ClosureSpan: Sendable, Equatable {
    public let closure: RoomClosure
    public let from: Date
    public let to: Date

    /// Nil when the closure's instants are unreadable.
    public init?(_ closure: RoomClosure) {
        guard let from = ProjectorStore.instant(closure.from), let to = ProjectorStore.instant(closure.to), to > from else {
            return nil
        }
        self.closure = closure
        self.from = from
        self.to = to
    }

    /// The wall-clock slots of local `date` the closure covers in `zone`
    /// (partly covered slots count as closed).
    public func slots(on date: String, zone: TimeZone) -> SlotMask {
        let start = LocalClock.local(from, zone: zone), end = LocalClock.local(to, zone: zone)
        guard date >= start.date, date <= end.date else { return .empty }
        let first = date == start.date ? start.minute : 0
        let last = date == end.date ? end.minute : 24 * 60
        guard last > first else { return .empty }
        let step = SlotMask.minutes
        return SlotMask.within(fromMinute: first / step * step, toMinute: min(24 * 60, (last + step - 1) / step * step))
    }

    /// The local dates the closure touches in `zone`, in order (at most
    /// a year and two days: the handler refuses longer closures).
    public func dates(zone: TimeZone) -> [String] {
        let start = LocalClock.local(from, zone: zone), end = LocalClock.local(to, zone: zone)
        var dates: [String] = []
        var date = start.date
        while date < end.date || (date == end.date && end.minute > 0), dates.count < 400 {
            dates.append(date)
            guard let next = LocalClock.adding(days: 1, to: date) else { break }
            date = next
        }
        return dates
    }

    /// ``dates(zone:)`` in UTC (when the room is not known).
    public var dates: [String] { dates(zone: .gmt) }
}

extension AvailabilityIndex.State {
    /// Adds (or, `removed`, drops) a closure of its room.
    mutating func setClosure(_ closure: RoomClosure, removed: Bool) {
        var spans = closures[closure.room, default: []].filter { $0.closure.id != closure.id }
        if !removed, let span = ClosureSpan(closure) {
            spans.append(span)
            spans.sort { ($0.from, $0.closure.id) < ($1.from, $1.closure.id) }
        }
        closures[closure.room] = spans.isEmpty ? nil : spans
    }

    /// The slots of `day` closed by closures of its room.
    public func closedSlots(_ day: RoomDay, zone: TimeZone) -> SlotMask {
        guard let spans = closures[day.room] else { return .empty }
        return spans.reduce(SlotMask.empty) { $0.union($1.slots(on: day.date, zone: zone)) }
    }

    /// The closures of `day`'s room that touch it, in start order.
    public func closures(on day: RoomDay, zone: TimeZone) -> [ClosureSpan] {
        closures[day.room]?.filter { !$0.slots(on: day.date, zone: zone).isEmpty } ?? []
    }

    /// Why `day` is closed all day by closures: the reason of the first
    /// closure touching it, when they leave none of `open` (the day's
    /// opening slots) open; else nil.
    public func closureReason(_ day: RoomDay, zone: TimeZone, open: SlotMask) -> String? {
        let touching = closures(on: day, zone: zone)
        guard let first = touching.first, !open.isEmpty, open.isSubset(of: closedSlots(day, zone: zone)) else { return nil }
        return first.closure.reason
    }
}
