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
    /// Slots between opening and closing.
    public let open: SlotMask
    /// `"capacity":…,"equipment":…,…,"size":"…"}`: the entry after `avail`.
    let jsonTail: [UInt8]

    public init(room: Room) {
        self.room = room
        lowerName = room.name.lowercased()
        lowerEquipment = Set(room.equipment.map { $0.lowercased() })
        zone = TimeZone(identifier: room.timeZone) ?? TimeZone(identifier: Room.defaultTimeZone)!
        open = SlotMask.within(fromMinute: ContractFormat.minutes(ofTime: room.opens) ?? 7 * 60,
                               toMinute: ContractFormat.minutes(ofTime: room.closes) ?? 19 * 60)
        let full = (try? ContractJSON.encode(RoomAvailability(room: room, avail: []))).map { [UInt8]($0) } ?? []
        let prefix = Array(#"{"avail":[],"#.utf8)
        jsonTail = full.starts(with: prefix) ? Array(full.dropFirst(prefix.count)) : Array(#""name":"?"}"#.utf8)
    }

    /// Free slots on `date` given its occupancy: open, existing and not busy.
    public func free(on date: String, occupancy: DayOccupancy, missing: SlotMask) -> SlotMask {
        open.subtracting(missing).subtracting(occupancy.busy)
    }
}
