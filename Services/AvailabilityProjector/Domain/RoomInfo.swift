import BookingContracts
import Foundation

/// A room as the projector keeps it in memory: the room plus what queries
/// need precomputed (lower-cased name and equipment, zone, opening slots,
/// the constant part of its JSON entry).
public struct RoomInfo: Sendable {
    public let room: Room
    let lowerName: String
    let lowerEquipment: Set<String>
    /// nil when the room's zone is unknown to this system (then Europe/Berlin).
    let zone: TimeZone
    /// Slots between opening and closing, per ISO weekday (0 = Monday):
    /// the room's `hours` of that day, else `opens`/`closes`; empty on a
    /// day it is closed.
    let weekly: [SlotMask]
    /// The room's buffer in slots, left out on both sides of every booking.
    let bufferSlots: Int
    /// `"capacity":…,"equipment":…,…,"size":"…"}`: the entry after `avail`.
    let jsonTail: [UInt8]

    /// A query's `equipment` filter as the engines match it: trimmed,
    /// lower-cased, empty items left out, each item once. Each item is one
    /// look-up per candidate room, so a list repeating one item thousands
    /// of times (a 256 KiB body holds about 28,000) would multiply a
    /// query's cost by that many without changing its answer.
    static func equipmentFilter(_ items: [String]?) -> [String] {
        var seen = Set<String>()
        return (items ?? []).compactMap { item in
            let key = item.trimmingCharacters(in: .whitespaces).lowercased()
            return !key.isEmpty && seen.insert(key).inserted ? key : nil
        }
    }

    public init(room: Room) {
        self.room = room
        lowerName = room.name.lowercased()
        lowerEquipment = Set(room.equipment.map { $0.lowercased() })
        zone = TimeZone(identifier: room.timeZone) ?? TimeZone(identifier: Room.defaultTimeZone)!
        weekly = (0..<7).map { weekday in
            switch room.hours(weekday: weekday) {
            case .open(let opens, let closes): SlotMask.within(fromMinute: opens, toMinute: closes)
            case .closed: .empty
            }
        }
        bufferSlots = (room.bufferMinutes ?? 0) / SlotMask.minutes
        let full = (try? ContractJSON.encode(RoomAvailability(room: room, avail: []))).map { [UInt8]($0) } ?? []
        let prefix = Array(#"{"avail":[],"#.utf8)
        jsonTail = full.starts(with: prefix) ? Array(full.dropFirst(prefix.count)) : Array(#""name":"?"}"#.utf8)
    }

    /// The slots between opening and closing on the local date `date`.
    public func open(on date: String) -> SlotMask {
        WeeklyHours.weekdayIndex(of: date).map { weekly[$0] } ?? .empty
    }

    /// Why the room is closed all of `date` (its weekly hours), or nil.
    public func closedReason(on date: String) -> String? {
        guard let weekday = WeeklyHours.weekdayIndex(of: date), weekly[weekday].isEmpty else { return nil }
        return WeeklyHours.closedText(weekday: weekday)
    }

    /// Free slots on `date` given its occupancy: open, existing, not busy,
    /// and not within the room's buffer of a booking — also of a booking
    /// late on the date before (`busyBefore`) or early on the date after
    /// (`busyAfter`), whose buffer reaches across midnight, as the handler
    /// counts it.
    public func free(on date: String, occupancy: DayOccupancy, missing: SlotMask,
                     busyBefore: SlotMask = .empty, busyAfter: SlotMask = .empty) -> SlotMask {
        open(on: date).subtracting(missing).subtracting(blocked(occupancy.busy, busyBefore: busyBefore, busyAfter: busyAfter))
    }

    /// `busy` widened by the buffer on both sides, with the part of the
    /// neighbouring dates' buffers that falls on this date.
    func blocked(_ busy: SlotMask, busyBefore: SlotMask, busyAfter: SlotMask) -> SlotMask {
        var blocked = busy.dilated(by: bufferSlots)
        guard bufferSlots > 0 else { return blocked }
        if let last = busyBefore.lastSlot, last + 1 + bufferSlots > SlotMask.count {
            blocked = blocked.union(.slots(0, last + 1 + bufferSlots - SlotMask.count))
        }
        if let first = busyAfter.firstSlot, first < bufferSlots {
            blocked = blocked.union(.slots(SlotMask.count + first - bufferSlots, SlotMask.count))
        }
        return blocked
    }
}
