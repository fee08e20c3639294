import BookingContracts
import Foundation

extension QueryEngine {
    /// The best `limit` candidates of every room matching the filters:
    /// earliest `startsAt`, then the smallest capacity, then the name.
    ///
    /// A lazy k-way merge: each room starts in a min-heap under a *bound*
    /// (the first step of its hours on its first open day in the window,
    /// never before the window or now: no candidate of the room can
    /// precede it) and its rank in capacity-then-name order; only when a
    /// bound reaches the top are that room's candidates computed (a day at
    /// a time), and the room goes back under its first real candidate.
    /// Rooms whose bound never reaches the top before `limit` candidates
    /// are out are never computed. See docs/projector.md, "Suggestions".
    public func suggest(_ query: CheckedSuggest, state: AvailabilityIndex.State? = nil) -> [Suggestion] {
        let state = state ?? index.snapshot
        let context = SuggestContext(query: query, state: state, index: index,
                                     now: Int64(now().timeIntervalSince1970.rounded(.up)))
        var rooms: [RoomCandidates] = []
        var heap = CandidateHeap()
        let bySize = state.roomsBySize
        // Rooms below minCapacity are skipped by a binary search.
        var lo = 0
        if let least = query.minCapacity {
            var hi = bySize.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if bySize[mid].room.capacity < least { lo = mid + 1 } else { hi = mid }
            }
        }
        for rank in lo..<bySize.count {
            let info = bySize[rank]
            if let name = query.name, !info.lowerName.contains(name) { continue }
            if !query.equipment.allSatisfy(info.lowerEquipment.contains) { continue }
            guard var cursor = RoomCandidates(info: info, rank: rank, context: context),
                  let bound = cursor.openingBound(context) else { continue }
            heap.push(.init(startsAt: bound, rank: rank, room: rooms.count, bound: true))
            rooms.append(cursor)
        }
        var result: [Suggestion] = []
        while result.count < query.limit, let top = heap.pop() {
            if top.bound {
                if rooms[top.room].advance(context) {
                    heap.push(.init(startsAt: rooms[top.room].current[0].startsAt, rank: top.rank, room: top.room, bound: false))
                }
                continue
            }
            let cursor = rooms[top.room]
            result.append(Self.suggestion(cursor.current[cursor.position], cursor.info, context))
            rooms[top.room].position += 1
            if rooms[top.room].position < rooms[top.room].current.count || rooms[top.room].advance(context) {
                let next = rooms[top.room].current[rooms[top.room].position]
                heap.push(.init(startsAt: next.startsAt, rank: top.rank, room: top.room, bound: false))
            }
        }
        return result
    }

    static func suggestion(_ c: Candidate, _ info: RoomInfo, _ context: SuggestContext) -> Suggestion {
        Suggestion(room: info.room.name, date: context.date(c.day), start: SlotMask.clock(c.startMinute),
                   end: SlotMask.clock(c.startMinute + context.query.durationMinutes),
                   startsAt: ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(c.startsAt))),
                   endsAt: ContractFormat.timestamp(Date(timeIntervalSince1970: TimeInterval(c.endsAt))),
                   timeZone: info.room.timeZone, capacity: info.room.capacity)
    }

    /// The reply body: `{"ok":true,"suggestions":[…]}`.
    public func suggestJSON(_ query: CheckedSuggest) -> [UInt8] {
        [UInt8]((try? ContractJSON.encode(SuggestReply(suggestions: suggest(query)))) ?? Data())
    }
}

/// A binary min-heap of rooms keyed by (instant, rank); bounds before real
/// candidates of the same key, so a room is computed before a tie is decided.
struct CandidateHeap {
    struct Entry {
        var startsAt: Int64
        var rank: Int
        var room: Int
        var bound: Bool

        @inline(__always)
        static func < (a: Entry, b: Entry) -> Bool {
            if a.startsAt != b.startsAt { return a.startsAt < b.startsAt }
            if a.rank != b.rank { return a.rank < b.rank }
            return a.bound && !b.bound
        }
    }

    private var items: [Entry] = []

    mutating func push(_ entry: Entry) {
        items.append(entry)
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child] < items[parent] else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() -> Entry? {
        guard let first = items.first else { return nil }
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1, right = left + 1
                var smallest = parent
                if left < items.count, items[left] < items[smallest] { smallest = left }
                if right < items.count, items[right] < items[smallest] { smallest = right }
                if smallest == parent { break }
                items.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first
    }
}
