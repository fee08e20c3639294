import BookingContracts
import Foundation

/// A checked availability query, ready to run against the index.
public struct CheckedQuery: Sendable, Equatable {
    public var date: AvailabilityDate
    public var name: String?
    public var equipment: [String]
    public var minCapacity: Int?
    /// Required free slots from `freeFrom`/`freeTo` (`freeTo` alone starts at opening: `from` is nil).
    public var freeFrom: Int?
    public var freeTo: Int?
    public var availableNextHour: Bool
    /// v1.2: days from `date` on (1–31); more than one adds `days` to each room.
    public var days: Int = 1
}

/// Turns availability queries (RPC bodies, HTTP query strings) into
/// answers from an ``AvailabilityIndex``. See docs/projector.md for the
/// semantics of `now`, the filters and the errors.
public struct QueryEngine: Sendable {
    public let index: AvailabilityIndex
    let now: @Sendable () -> Date

    public init(index: AvailabilityIndex, now: @escaping @Sendable () -> Date = { Date() }) {
        self.index = index
        self.now = now
    }

    // MARK: Parsing

    /// Checks a decoded query: dates in the calendar, times `HH:mm`,
    /// `freeTo` after `freeFrom`.
    public static func check(_ q: AvailabilityQuery) -> Result<CheckedQuery, ReplyError> {
        let date = q.date ?? .date(.today)
        if case .date(let spec) = date, !spec.isValid {
            return .failure(ReplyError(code: .invalidField, text: "date '\(spec)' is not a calendar date", field: "date"))
        }
        var from: Int?, to: Int?
        if let text = q.freeFrom {
            guard let m = ContractFormat.minutes(ofTime: text) else {
                return .failure(ReplyError(code: .invalidField, text: "freeFrom must be HH:mm", field: "freeFrom"))
            }
            from = m
        }
        if let text = q.freeTo {
            guard let m = ContractFormat.minutes(ofTime: text) else {
                return .failure(ReplyError(code: .invalidField, text: "freeTo must be HH:mm", field: "freeTo"))
            }
            to = m
        }
        if let from, let to, to <= from {
            return .failure(ReplyError(code: .endNotAfterStart, text: "freeTo must be after freeFrom", field: "freeTo"))
        }
        if let min = q.minCapacity, min < 0 {
            return .failure(ReplyError(code: .invalidField, text: "minCapacity must not be negative", field: "minCapacity"))
        }
        let days = q.days ?? 1
        guard SuggestContract.daysRange.contains(days) else {
            return .failure(ReplyError(code: .invalidField, text: "days must be 1 to 31", field: "days"))
        }
        let name = q.name.flatMap { $0.isEmpty ? nil : $0.lowercased() }
        let equipment = RoomInfo.equipmentFilter(q.equipment)
        return .success(CheckedQuery(date: date, name: name, equipment: equipment, minCapacity: q.minCapacity,
                                     freeFrom: from, freeTo: to, availableNextHour: q.availableNextHour ?? false,
                                     days: days))
    }

    /// Parses an RPC body (a JSON object, every field optional). A body over
    /// 256 KiB is refused with 1000 before decoding (``AvailabilityQuery/decode(body:)``).
    public static func parse(body: [UInt8]) -> Result<CheckedQuery, ReplyError> {
        let query: AvailabilityQuery
        do {
            query = try AvailabilityQuery.decode(body: body)
        } catch {
            return .failure(ContractJSON.replyError(for: error))
        }
        return check(query)
    }

    /// Parses HTTP query parameters (`name → values`, repeated keys kept).
    /// `equipment` may repeat or be comma-separated; unknown keys are ignored.
    public static func parse(parameters: [(String, String)]) -> Result<CheckedQuery, ReplyError> {
        func first(_ key: String) -> String? { parameters.first { $0.0 == key }?.1 }
        var q = AvailabilityQuery()
        if let text = first("date") {
            guard let date = AvailabilityDate(queryValue: text) else {
                return .failure(ReplyError(code: .invalidField, text: "date must be YYYY-MM-DD, today, now or UNIX seconds",
                                           field: "date"))
            }
            q.date = date
        }
        q.name = first("name")
        let equipment = parameters.filter { $0.0 == "equipment" }.flatMap { $0.1.split(separator: ",").map(String.init) }
        q.equipment = equipment.isEmpty ? nil : equipment
        if let text = first("minCapacity"), !text.isEmpty {
            guard let n = Int(text) else {
                return .failure(ReplyError(code: .invalidField, text: "minCapacity must be a whole number", field: "minCapacity"))
            }
            q.minCapacity = n
        }
        if let text = first("days"), !text.isEmpty {
            guard let n = Int(text) else {
                return .failure(ReplyError(code: .invalidField, text: "days must be a whole number", field: "days"))
            }
            q.days = n
        }
        q.freeFrom = first("freeFrom").flatMap { $0.isEmpty ? nil : $0 }
        q.freeTo = first("freeTo").flatMap { $0.isEmpty ? nil : $0 }
        if let text = first("availableNextHour") {
            switch text.lowercased() {
            case "", "true", "1", "yes": q.availableNextHour = true
            case "false", "0", "no": q.availableNextHour = false
            default:
                return .failure(ReplyError(code: .invalidField, text: "availableNextHour must be true or false",
                                           field: "availableNextHour"))
            }
        }
        return check(q)
    }

    // MARK: Answering

    /// One room's answer on a resolved local date.
    public struct Answer: Sendable {
        public var info: RoomInfo
        public var date: String
        public var occupancy: DayOccupancy
        public var free: SlotMask
        /// Not bookable: outside opening hours or skipped by a DST change.
        public var closed: SlotMask
        /// Why the whole day is closed (v1.2: weekly hours or closures), or nil.
        public var closedReason: String? = nil
        /// The closures touching the day, in start order (v1.2).
        public var closures: [ClosureSpan] = []
    }

    /// Per zone: the local date the query names and, for `now`, the first
    /// slot still reported.
    private struct ZoneDay {
        var date: String
        var fromSlot: Int?
        var minute: Int
        /// Wall-clock slots of `date` that do not exist in the zone.
        var missing: SlotMask = .empty
    }

    /// The rooms matching `query`, ordered by name. With `dayOffset` > 0,
    /// the day that many days after the query's date, whole (no `now`
    /// trimming) and without the free-time filters (`freeFrom`/`freeTo`,
    /// `availableNextHour`), which select rooms by the first day.
    public func answers(_ query: CheckedQuery, state: AvailabilityIndex.State? = nil, dayOffset: Int = 0) -> [Answer] {
        let state = state ?? index.snapshot
        let instant = now()
        var zoneDays: [String: ZoneDay?] = [:]
        var result: [Answer] = []
        result.reserveCapacity(state.sortedRooms.count)
        for info in state.sortedRooms {
            let room = info.room
            if let name = query.name, !info.lowerName.contains(name) { continue }
            if let min = query.minCapacity, room.capacity < min { continue }
            if !query.equipment.allSatisfy(info.lowerEquipment.contains) { continue }
            let zoneKey = info.zone.identifier
            let zoneDay: ZoneDay?
            if let cached = zoneDays[zoneKey] {
                zoneDay = cached
            } else {
                var resolved = resolve(query, zone: info.zone, at: instant)
                if dayOffset != 0, let first = resolved?.date {
                    resolved?.date = LocalClock.adding(days: dayOffset, to: first) ?? first
                    resolved?.fromSlot = nil
                }
                if let date = resolved?.date { resolved?.missing = index.missingSlots(date: date, zone: info.zone) }
                zoneDay = resolved
                zoneDays[zoneKey] = zoneDay
            }
            guard let day = zoneDay else { continue }
            var answer = dayAnswer(info, date: day.date, missing: day.missing, state: state)
            if let from = day.fromSlot { answer.free = answer.free.intersection(.from(slot: from)) }
            if dayOffset == 0, query.freeFrom != nil || query.freeTo != nil {
                let start = query.freeFrom ?? info.open(on: day.date).runs.first?.start ?? 0
                let end = query.freeTo ?? (start + SlotMask.minutes)
                guard end > start, SlotMask(fromMinute: start, toMinute: end).isSubset(of: answer.free) else { continue }
            }
            if dayOffset == 0, query.availableNextHour {
                guard day.minute + 60 <= 24 * 60,
                      SlotMask(fromMinute: day.minute, toMinute: day.minute + 60).isSubset(of: answer.free) else { continue }
            }
            result.append(answer)
        }
        return result
    }

    /// One room's whole local day under `state`: free slots (buffers and
    /// closures counted), closed slots, and why the day is closed, if it is.
    func dayAnswer(_ info: RoomInfo, date: String, missing: SlotMask, state: AvailabilityIndex.State) -> Answer {
        let roomDay = RoomDay(room: info.room.name, date: date)
        let occupancy = state.occupancy(roomDay)
        // Closures (v1.2): rare, so looked up only for rooms that have some.
        let closures = state.closures[info.room.name] == nil ? [] : state.closures(on: roomDay, zone: info.zone)
        let closedByClosures = closures.isEmpty ? SlotMask.empty : state.closedSlots(roomDay, zone: info.zone)
        let neighbours = index.neighbourBusy(roomDay, info, in: state)
        let free = info.free(on: date, occupancy: occupancy, missing: missing, busyBefore: neighbours.before,
                             busyAfter: neighbours.after).subtracting(closedByClosures)
        let open = info.open(on: date).subtracting(missing)
        let closedReason = info.closedReason(on: date)
            ?? (closures.isEmpty ? nil : state.closureReason(roomDay, zone: info.zone, open: open))
        return Answer(info: info, date: date, occupancy: occupancy, free: free,
                      closed: SlotMask.all.subtracting(open).union(closedByClosures),
                      closedReason: closedReason, closures: closures)
    }

    private func resolve(_ query: CheckedQuery, zone: TimeZone, at instant: Date) -> ZoneDay? {
        let local = LocalClock.local(instant, zone: zone)
        switch query.date {
        case .now:
            return ZoneDay(date: local.date, fromSlot: local.minute / SlotMask.minutes, minute: local.minute)
        case .date(let spec):
            if query.availableNextHour { return ZoneDay(date: local.date, fromSlot: nil, minute: local.minute) }
            switch spec {
            case .today: return ZoneDay(date: local.date, fromSlot: nil, minute: local.minute)
            case .calendarDate(let text): return ZoneDay(date: text, fromSlot: nil, minute: local.minute)
            case .unixSeconds(let seconds):
                let d = LocalClock.local(Date(timeIntervalSince1970: TimeInterval(seconds)), zone: zone)
                return ZoneDay(date: d.date, fromSlot: nil, minute: local.minute)
            }
        }
    }

    /// The reply in the legacy `getrooms` shape.
    public func reply(_ query: CheckedQuery) -> AvailabilityReply {
        answers(query).map { RoomAvailability(room: $0.info.room, avail: $0.free.availStrings, closed: $0.closedReason) }
    }

    /// The reply as JSON bytes, written directly (same bytes as encoding
    /// ``reply(_:)`` with `ContractJSON`: sorted keys, no escaped slashes).
    /// With `days` > 1 see ``replyBody(_:)``.
    public func replyJSON(_ query: CheckedQuery) -> [UInt8] {
        Self.encode(answers(query))
    }

    /// The reply body of any query: ``replyJSON(_:)`` for one day; with
    /// `days` > 1 each room also carries `days` (the query's date and the
    /// days after it; `avail` stays the first day's), or 1100 (`days`)
    /// when rooms × days exceeds ``SuggestContract/maxRoomDays``.
    public func replyBody(_ query: CheckedQuery) -> Result<[UInt8], ReplyError> {
        guard query.days > 1 else { return .success(replyJSON(query)) }
        let state = index.snapshot
        let first = answers(query, state: state)
        guard first.count * query.days <= SuggestContract.maxRoomDays else {
            return .failure(ReplyError(
                code: .invalidField,
                text: "\(first.count) rooms × \(query.days) days is more than \(SuggestContract.maxRoomDays): narrow the filter",
                field: "days"))
        }
        // One pass: the rooms the first day selected, then each of their
        // later days directly (the dates are per zone; computed once per
        // first date). Written by hand like the one-day reply.
        var later: [String: [String]] = [:]
        var out: [UInt8] = []
        out.reserveCapacity(first.count * (256 + query.days * 64) + 2)
        out.append(UInt8(ascii: "["))
        for (i, answer) in first.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            let dates: [String]
            if let known = later[answer.date] {
                dates = known
            } else {
                dates = (1..<query.days).map { LocalClock.adding(days: $0, to: answer.date) ?? answer.date }
                later[answer.date] = dates
            }
            var days = [answer]
            days.reserveCapacity(query.days)
            for date in dates {
                days.append(dayAnswer(answer.info, date: date, missing: index.missingSlots(date: date, zone: answer.info.zone),
                                      state: state))
            }
            Self.appendEntry(answer, days: days, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return .success(out)
    }

    static func encode(_ answers: [Answer]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(answers.count * 256 + 2)
        out.append(UInt8(ascii: "["))
        for (i, answer) in answers.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            appendEntry(answer, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// One room's entry, keys in `ContractJSON`'s sorted order: `avail`,
    /// `capacity`, `closed`, `days`, then the room's constant fields.
    static func appendEntry(_ answer: Answer, days: [Answer]? = nil, to out: inout [UInt8]) {
        let tail = answer.info.jsonTail
        // The tail is `"capacity":N,…}`: `closed` and `days` go after the number.
        guard tail.starts(with: Array(#""capacity":"#.utf8)), let comma = tail.firstIndex(of: UInt8(ascii: ",")) else {
            let entry = RoomAvailability(room: answer.info.room, avail: answer.free.availStrings, closed: answer.closedReason,
                                         days: days?.map(\.dayAvailability))
            out.append(contentsOf: (try? ContractJSON.encode(entry)).map { [UInt8]($0) } ?? [])
            return
        }
        out.append(contentsOf: #"{"avail":"#.utf8)
        appendAvail(answer.free, to: &out)
        out.append(UInt8(ascii: ","))
        out.append(contentsOf: tail[...comma])
        if let reason = answer.closedReason {
            out.append(contentsOf: #""closed":"#.utf8)
            appendString(reason, to: &out)
            out.append(UInt8(ascii: ","))
        }
        if let days {
            out.append(contentsOf: #""days":["#.utf8)
            for (j, day) in days.enumerated() {
                if j > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: #"{"avail":"#.utf8)
                appendAvail(day.free, to: &out)
                if let reason = day.closedReason {
                    out.append(contentsOf: #","closed":"#.utf8)
                    appendString(reason, to: &out)
                }
                out.append(contentsOf: #","date":""#.utf8)
                out.append(contentsOf: day.date.utf8)
                out.append(contentsOf: #""}"#.utf8)
            }
            out.append(contentsOf: "],".utf8)
        }
        out.append(contentsOf: tail[(comma + 1)...])
    }

    /// `["HH:mm - HH:mm",…]`: the free runs of a day.
    static func appendAvail(_ free: SlotMask, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (j, run) in free.runs.enumerated() {
            if j > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: SlotMask.clock(run.start).utf8)
            out.append(contentsOf: " - ".utf8)
            out.append(contentsOf: SlotMask.clock(run.end).utf8)
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "]"))
    }

    /// A JSON string as `ContractJSON` writes it (closure reasons are free
    /// text, so through the encoder; they are rare).
    static func appendString(_ text: String, to out: inout [UInt8]) {
        if let data = try? ContractJSON.encode(text) {
            out.append(contentsOf: data)
        } else {
            out.append(contentsOf: #""""#.utf8)
        }
    }
}

extension QueryEngine.Answer {
    /// The day as the contract's `days` entry.
    var dayAvailability: DayAvailability { DayAvailability(date: date, avail: free.availStrings, closed: closedReason) }
}
