import BookingContracts
import Foundation
import Synchronization

/// Where a booking occupies a room: room and local date.
public struct RoomDay: Hashable, Sendable, Comparable {
    public var room: String
    public var date: String
    public init(room: String, date: String) {
        self.room = room
        self.date = date
    }
    public static func < (a: RoomDay, b: RoomDay) -> Bool { (a.date, a.room) < (b.date, b.room) }

    /// The same room `offset` local dates away; nil if `date` is not a date.
    func shifted(by offset: Int) -> RoomDay? {
        LocalClock.adding(days: offset, to: date).map { RoomDay(room: room, date: $0) }
    }
}

/// The in-memory read model queries are answered from: every room and the
/// occupancy of every room-day that has pending or confirmed bookings.
/// Loaded from SQLite at start and after a rebuild, then kept in step by
/// the store's writer (which updates it right after each commit, in
/// commit order). Readers take copy-on-write snapshots under a short lock.
public final class AvailabilityIndex: Sendable {
    public struct State: Sendable {
        public var rooms: [String: RoomInfo] = [:]
        /// Rooms ordered by name.
        public var sortedRooms: [RoomInfo] = []
        /// Rooms ordered by capacity, then name: suggestions' tie order,
        /// and where a `minCapacity` starts (a binary search).
        public var roomsBySize: [RoomInfo] = []
        /// date → room → occupancy (only non-empty days).
        public var days: [String: [String: DayOccupancy]] = [:]
        /// Grows with every change (the page polls it).
        public var revision: Int = 0
        /// room → its closures in start order (v1.2; only rooms with some).
        public var closures: [String: [ClosureSpan]] = [:]

        public init() {}

        public func occupancy(_ day: RoomDay) -> DayOccupancy {
            days[day.date]?[day.room] ?? .free
        }

        /// The busy slots of `room` on `dates` (a date's neighbours, from
        /// ``AvailabilityIndex/neighbourDates(_:)``), whose bookings'
        /// buffers can reach across midnight into the date between.
        func neighbourBusy(_ room: String, _ dates: (before: String?, after: String?)) -> (before: SlotMask, after: SlotMask) {
            (dates.before.map { occupancy(RoomDay(room: room, date: $0)).busy } ?? .empty,
             dates.after.map { occupancy(RoomDay(room: room, date: $0)).busy } ?? .empty)
        }

        /// `days` with, for rooms with a buffer (in this state), the dates
        /// on either side: a change of one date's bookings can change its
        /// neighbours' free time through a buffer across midnight.
        func withNeighbours(_ days: Set<RoomDay>) -> Set<RoomDay> {
            var all = days
            for day in days where (rooms[day.room]?.bufferSlots ?? 0) > 0 {
                if let before = day.shifted(by: -1) { all.insert(before) }
                if let after = day.shifted(by: 1) { all.insert(after) }
            }
            return all
        }

        mutating func set(_ day: RoomDay, _ occupancy: DayOccupancy) {
            if occupancy.isEmpty {
                days[day.date]?[day.room] = nil
                if days[day.date]?.isEmpty == true { days[day.date] = nil }
            } else {
                days[day.date, default: [:]][day.room] = occupancy
            }
        }

        /// Adds or replaces `room`, keeping ``sortedRooms`` (by name) and
        /// ``roomsBySize`` (by capacity, then name) in order by binary
        /// search rather than sorting every room: registering 2,000 rooms
        /// one event at a time sorted 2,000 rooms 2,000 times.
        mutating func upsert(_ room: Room) {
            let info = RoomInfo(room: room)
            let old = rooms.updateValue(info, forKey: room.name)
            let byName = Self.position(in: sortedRooms) { $0.room.name < room.name }
            if old != nil, byName < sortedRooms.count, sortedRooms[byName].room.name == room.name {
                sortedRooms[byName] = info
            } else {
                sortedRooms.insert(info, at: byName)
            }
            if let old {
                let key = (old.room.capacity, old.room.name)
                let at = Self.position(in: roomsBySize) { ($0.room.capacity, $0.room.name) < key }
                if at < roomsBySize.count, roomsBySize[at].room.name == room.name { roomsBySize.remove(at: at) }
            }
            let key = (room.capacity, room.name)
            roomsBySize.insert(info, at: Self.position(in: roomsBySize) { ($0.room.capacity, $0.room.name) < key })
        }

        /// The first index of `sorted` whose element is not `before` the
        /// one looked for (`before` holds for a prefix of `sorted`).
        private static func position(in sorted: [RoomInfo], before: (RoomInfo) -> Bool) -> Int {
            var low = 0, high = sorted.count
            while low < high {
                let mid = (low + high) / 2
                if before(sorted[mid]) { low = mid + 1 } else { high = mid }
            }
            return low
        }

        /// Recomputes ``sortedRooms`` and ``roomsBySize`` from ``rooms``.
        mutating func sortRooms() {
            sortedRooms = rooms.values.sorted { $0.room.name < $1.room.name }
            roomsBySize = sortedRooms.sorted { ($0.room.capacity, $0.room.name) < ($1.room.capacity, $1.room.name) }
        }
    }

    private let state = Mutex(State())
    private let gaps = Mutex([String: SlotMask]())
    private let zoneDays = Mutex([String: ZoneDay]())
    private let neighbours = Mutex([String: (before: String?, after: String?)]())

    public init() {}

    /// A consistent copy of the whole model (cheap: copy-on-write).
    public var snapshot: State { state.withLock { $0 } }
    public var revision: Int { state.withLock { $0.revision } }

    func replace(with new: State) {
        state.withLock { s in
            let revision = s.revision + 1
            s = new
            s.revision = revision
        }
    }

    func update(_ body: (inout State) -> Void) {
        state.withLock { s in
            body(&s)
            s.revision += 1
        }
    }

    /// Slots of `date` that do not exist in `zone` (cached).
    func missingSlots(date: String, zone: TimeZone) -> SlotMask {
        let key = zone.identifier + "|" + date
        if let cached = gaps.withLock({ $0[key] }) { return cached }
        let mask = LocalClock.missingSlots(date: date, zone: zone)
        gaps.withLock { cache in
            if cache.count > 50_000 { cache.removeAll() }
            cache[key] = mask
        }
        return mask
    }

    /// How local `date` of `zone` maps to instants (cached).
    func zoneDay(date: String, zone: TimeZone) -> ZoneDay? {
        let key = zone.identifier + "|" + date
        if let cached = zoneDays.withLock({ $0[key] }) { return cached }
        guard let day = ZoneDay(date: date, zone: zone) else { return nil }
        zoneDays.withLock { cache in
            if cache.count > 50_000 { cache.removeAll() }
            cache[key] = day
        }
        return day
    }

    /// The local dates before and after `date` (cached: a query over many
    /// rooms with buffers asks for the same few dates).
    func neighbourDates(_ date: String) -> (before: String?, after: String?) {
        if let cached = neighbours.withLock({ $0[date] }) { return cached }
        let dates = (before: LocalClock.adding(days: -1, to: date), after: LocalClock.adding(days: 1, to: date))
        neighbours.withLock { cache in
            if cache.count > 50_000 { cache.removeAll() }
            cache[date] = dates
        }
        return dates
    }

    /// The busy slots either side of `day` for a room with a buffer;
    /// empty otherwise (nothing is looked up).
    func neighbourBusy(_ day: RoomDay, _ info: RoomInfo, in state: State) -> (before: SlotMask, after: SlotMask) {
        info.bufferSlots == 0 ? (.empty, .empty) : state.neighbourBusy(day.room, neighbourDates(day.date))
    }

    /// The free slots of a room-day under `state` (nil for an unknown room).
    func free(_ day: RoomDay, in state: State) -> SlotMask? {
        guard let info = state.rooms[day.room] else { return nil }
        let neighbours = neighbourBusy(day, info, in: state)
        return info.free(on: day.date, occupancy: state.occupancy(day),
                         missing: missingSlots(date: day.date, zone: info.zone),
                         busyBefore: neighbours.before, busyAfter: neighbours.after)
            .subtracting(state.closedSlots(day, zone: info.zone))
    }
}
