import BookingContracts
import Foundation

/// The 96 quarter-hours of a local day as a bit set: bit `i` is the slot
/// starting at `i * 15` minutes after local midnight (wall-clock time).
public struct SlotMask: Hashable, Sendable, CustomStringConvertible {
    /// Slots 0…63.
    public var lo: UInt64
    /// Slots 64…95.
    public var hi: UInt64

    /// Slots in a day.
    public static let count = 96
    /// Minutes per slot.
    public static let minutes = ContractFormat.gridMinutes

    public init(lo: UInt64 = 0, hi: UInt64 = 0) {
        self.lo = lo
        self.hi = hi & 0xFFFF_FFFF
    }

    public static let empty = SlotMask()
    public static let all = SlotMask(lo: .max, hi: 0xFFFF_FFFF)

    /// Every slot that overlaps `[from, to)` (minutes since midnight,
    /// clamped to the day): a start off the grid rounds down, an end rounds up.
    public init(fromMinute from: Int, toMinute to: Int) {
        self.init()
        let first = max(0, from) / Self.minutes
        let last = (min(24 * 60, to) + Self.minutes - 1) / Self.minutes  // exclusive
        guard first < last else { return }
        for i in first..<last { insert(i) }
    }

    /// The slots fully inside `[from, to)`: a start off the grid rounds up,
    /// an end rounds down (opening hours).
    public static func within(fromMinute from: Int, toMinute to: Int) -> SlotMask {
        let first = (max(0, from) + minutes - 1) / minutes
        let last = min(24 * 60, to) / minutes
        var mask = SlotMask()
        if first < last { for i in first..<last { mask.insert(i) } }
        return mask
    }

    public func contains(_ slot: Int) -> Bool {
        slot < 64 ? lo & (1 << UInt64(slot)) != 0 : hi & (1 << UInt64(slot - 64)) != 0
    }

    public mutating func insert(_ slot: Int) {
        if slot < 64 { lo |= 1 << UInt64(slot) } else if slot < 96 { hi |= 1 << UInt64(slot - 64) }
    }

    public var isEmpty: Bool { lo == 0 && hi == 0 }
    public var slotCount: Int { lo.nonzeroBitCount + hi.nonzeroBitCount }

    public func union(_ other: SlotMask) -> SlotMask { SlotMask(lo: lo | other.lo, hi: hi | other.hi) }
    public func intersection(_ other: SlotMask) -> SlotMask { SlotMask(lo: lo & other.lo, hi: hi & other.hi) }
    public func subtracting(_ other: SlotMask) -> SlotMask { SlotMask(lo: lo & ~other.lo, hi: hi & ~other.hi) }
    public func isSubset(of other: SlotMask) -> Bool { subtracting(other).isEmpty }

    /// The slots from `slot` on.
    public static func from(slot: Int) -> SlotMask {
        SlotMask(fromMinute: slot * minutes, toMinute: 24 * 60)
    }

    /// The mask widened by `slots` on both sides of every run (clipped to
    /// the day): what a room's buffer takes around its bookings.
    public func dilated(by slots: Int) -> SlotMask {
        guard slots > 0, !isEmpty else { return self }
        var result = self
        for run in runs {
            let from = max(0, run.start / Self.minutes - slots), to = min(Self.count, run.end / Self.minutes + slots)
            result = result.union(SlotMask(fromMinute: from * Self.minutes, toMinute: to * Self.minutes))
        }
        return result
    }

    /// Maximal runs of set slots as `[start, end)` minutes, in order.
    public var runs: [(start: Int, end: Int)] {
        var result: [(Int, Int)] = []
        var start: Int?
        for i in 0...Self.count {
            let set = i < Self.count && contains(i)
            if set, start == nil { start = i }
            if !set, let s = start {
                result.append((s * Self.minutes, i * Self.minutes))
                start = nil
            }
        }
        return result
    }

    /// The contract's `avail` strings: `"07:00 - 09:00"`, merged, in order.
    /// A run to the end of the day ends at `24:00`, which v1 rooms never
    /// reach (closing is at most 23:59, so at most 23:45).
    public var availStrings: [String] {
        runs.map { SlotMask.clock($0.start) + " - " + SlotMask.clock($0.end) }
    }

    private static let clockTable: [String] = (0...96).map { i in
        let m = i * 15
        return (m / 60 < 10 ? "0" : "") + String(m / 60) + ":" + (m % 60 < 10 ? "0" : "") + String(m % 60)
    }

    /// `HH:mm` of a grid minute (0…1440).
    static func clock(_ minute: Int) -> String {
        minute % 15 == 0 && minute >= 0 && minute <= 1440 ? clockTable[minute / 15] : ContractFormat.time(fromMinutes: minute)
    }

    public var description: String { availStrings.joined(separator: ", ") }
}

/// What occupies one room on one local date: confirmed, pending,
/// in-progress and held bookings (a completed booking counts as confirmed:
/// the room was used).
///
/// The four masks are packed into 48 bytes — what three ``SlotMask``s
/// took before held got its own — because the index keeps one of these
/// per room-day with bookings (2,000 rooms × a year is 730,000 of them):
/// each mask's slots 0…63 have a word of their own, and the slots 64…95 of
/// two masks share one.
public struct DayOccupancy: Hashable, Sendable {
    private var confirmedLo: UInt64 = 0
    private var pendingLo: UInt64 = 0
    private var inProgressLo: UInt64 = 0
    private var heldLo: UInt64 = 0
    /// Slots 64…95 of `confirmed` (low half) and `pending` (high half).
    private var confirmedPendingHi: UInt64 = 0
    /// Slots 64…95 of `inProgress` (low half) and `held` (high half).
    private var inProgressHeldHi: UInt64 = 0

    private static let lowHalf: UInt64 = 0xFFFF_FFFF

    /// Slots of confirmed (and completed) bookings.
    public var confirmed: SlotMask {
        get { SlotMask(lo: confirmedLo, hi: confirmedPendingHi & Self.lowHalf) }
        set { confirmedLo = newValue.lo; confirmedPendingHi = (confirmedPendingHi & ~Self.lowHalf) | newValue.hi }
    }
    /// Slots of pending bookings (awaiting the room's approvers).
    public var pending: SlotMask {
        get { SlotMask(lo: pendingLo, hi: confirmedPendingHi >> 32) }
        set { pendingLo = newValue.lo; confirmedPendingHi = (confirmedPendingHi & Self.lowHalf) | (newValue.hi << 32) }
    }
    /// Slots of bookings in progress (v1.1): checked in or started.
    public var inProgress: SlotMask {
        get { SlotMask(lo: inProgressLo, hi: inProgressHeldHi & Self.lowHalf) }
        set { inProgressLo = newValue.lo; inProgressHeldHi = (inProgressHeldHi & ~Self.lowHalf) | newValue.hi }
    }
    /// Slots of held bookings (v1.2): reserved for minutes, awaiting their
    /// requester's confirmation. Taken like the others; only the page
    /// tells them apart.
    public var held: SlotMask {
        get { SlotMask(lo: heldLo, hi: inProgressHeldHi >> 32) }
        set { heldLo = newValue.lo; inProgressHeldHi = (inProgressHeldHi & Self.lowHalf) | (newValue.hi << 32) }
    }

    public init(confirmed: SlotMask = .empty, pending: SlotMask = .empty, inProgress: SlotMask = .empty,
                held: SlotMask = .empty) {
        self.confirmed = confirmed
        self.pending = pending
        self.inProgress = inProgress
        self.held = held
    }

    public static let free = DayOccupancy()
    /// Slots not bookable because a booking holds them (held ones included).
    public var busy: SlotMask {
        SlotMask(lo: confirmedLo | pendingLo | inProgressLo | heldLo,
                 hi: (confirmedPendingHi | inProgressHeldHi | (confirmedPendingHi >> 32) | (inProgressHeldHi >> 32)) & Self.lowHalf)
    }
    public var isEmpty: Bool {
        confirmedLo == 0 && pendingLo == 0 && inProgressLo == 0 && heldLo == 0 && confirmedPendingHi == 0 && inProgressHeldHi == 0
    }

    /// The statuses that hold a slot. A waitlisted booking (v1.2) holds
    /// nothing.
    public static let holdingStatuses: [BookingStatus] = [.pending, .confirmed, .inProgress, .completed, .held]

    /// Occupancy of a set of bookings (the ``holdingStatuses`` count;
    /// overlaps, which replay or out-of-order events may bring, merge: a
    /// slot shows the most definite state, in progress before confirmed
    /// before pending before held).
    public init(bookings: [(start: Int, end: Int, status: BookingStatus)]) {
        var confirmed = SlotMask.empty, pending = SlotMask.empty, inProgress = SlotMask.empty, held = SlotMask.empty
        for b in bookings {
            let mask = SlotMask(fromMinute: b.start, toMinute: b.end)
            switch b.status {
            case .confirmed, .completed: confirmed = confirmed.union(mask)
            case .pending: pending = pending.union(mask)
            case .held: held = held.union(mask)
            case .inProgress: inProgress = inProgress.union(mask)
            case .cancelled, .rejected, .waitlisted: break
            }
        }
        confirmed = confirmed.subtracting(inProgress)
        pending = pending.subtracting(confirmed).subtracting(inProgress)
        held = held.subtracting(pending).subtracting(confirmed).subtracting(inProgress)
        self.init(confirmed: confirmed, pending: pending, inProgress: inProgress, held: held)
    }
}

/// Local-time facts of a zone: which wall-clock slots of a date do not
/// exist (spring-forward gap), the local date and minute of an instant.
public enum LocalClock {
    /// Days since 1970-01-01 of a proleptic Gregorian date.
    static func days(year: Int, month: Int, day: Int) -> Int64 { CivilDays.days(year: year, month: month, day: day) }

    /// The slots of `date` (`YYYY-MM-DD`) whose wall-clock start does not
    /// occur in `zone` (skipped by a daylight-saving change); empty on
    /// ordinary days and for unparseable input.
    public static func missingSlots(date: String, zone: TimeZone) -> SlotMask {
        guard let d = ContractFormat.calendarDate(date) else { return .empty }
        let midnight = days(year: d.year, month: d.month, day: d.day) * 86_400
        let before = zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(midnight - 86_400)))
        let after = zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(midnight + 2 * 86_400)))
        // A gap only when the offset grows during the day.
        guard after > before else { return .empty }
        var missing = SlotMask()
        for slot in 0..<SlotMask.count {
            let wall = midnight + Int64(slot * SlotMask.minutes * 60)
            let exists = [before, after].contains { offset in
                zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(wall - Int64(offset)))) == offset
            }
            if !exists { missing.insert(slot) }
        }
        return missing
    }

    /// Local date and minute after midnight of `instant` in `zone`.
    public static func local(_ instant: Date, zone: TimeZone) -> (date: String, minute: Int) {
        let seconds = Int64(instant.timeIntervalSince1970.rounded(.down)) + Int64(zone.secondsFromGMT(for: instant))
        let day = CivilDays.day(ofSeconds: seconds)
        let minute = Int((seconds - day * 86_400) / 60)
        return (civilString(days: day), minute)
    }

    static func civilString(days: Int64) -> String {
        let d = CivilDays.civil(days: days)
        return ContractFormat.calendarDateString(year: d.year, month: d.month, day: d.day)
    }

    /// The date `offset` days after `date` (`YYYY-MM-DD`), or nil.
    public static func adding(days offset: Int, to date: String) -> String? {
        guard let d = ContractFormat.calendarDate(date) else { return nil }
        return civilString(days: days(year: d.year, month: d.month, day: d.day) + Int64(offset))
    }
}
