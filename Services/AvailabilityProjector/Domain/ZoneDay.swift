import BookingContracts
import Foundation

/// How a local date of a zone maps to instants, for suggestions.
///
/// Most days are *regular*: the zone's offset is the same from the start of
/// the day before to the end of the day after, so wall-clock minutes of the
/// three days map to instants by one subtraction and a room's buffer can be
/// laid on the 15-minute masks (across midnight too). A day near a
/// daylight-saving change (or any other change of offset) is not regular;
/// suggestions check its candidates one by one on instants.
public struct ZoneDay: Sendable, Equatable {
    /// The date's midnight read as if it were UTC (UNIX seconds).
    public let wallMidnight: Int64
    /// True when the offset is constant over the day before, the day and
    /// the day after, and a whole number of quarter-hours.
    public let regular: Bool
    /// The offset (seconds east of UTC) on a regular day.
    public let offset: Int

    /// The instant (UNIX seconds) of wall minute `minute` on a regular day.
    @inline(__always)
    func instant(minute: Int) -> Int64 { wallMidnight + Int64(minute * 60 - offset) }

    /// Computes the facts of `date` in `zone`; nil for an unreadable date.
    public init?(date: String, zone: TimeZone) {
        guard let d = ContractFormat.calendarDate(date) else { return nil }
        wallMidnight = CivilDays.days(year: d.year, month: d.month, day: d.day) * 86_400
        // From before the day before begins anywhere (offsets are at most
        // ±14 h) to after the day after ends, every 3 hours: an offset
        // change shows as two probes that differ.
        let first = wallMidnight - 86_400 - 14 * 3600, last = wallMidnight + 2 * 86_400 + 14 * 3600
        let offset = zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(first)))
        var regular = true
        var probe = first + 3 * 3600
        while probe <= last + 3 * 3600 {
            if zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(min(probe, last)))) != offset {
                regular = false
                break
            }
            probe += 3 * 3600
        }
        // An offset off the quarter-hour (historic local mean time) puts
        // instants between the masks' slots: checked one by one too.
        self.regular = regular && offset % (SlotMask.minutes * 60) == 0
        self.offset = offset
    }
}

extension LocalClock {
    /// Every instant (UNIX seconds) at which wall minute `minute` of local
    /// `date` occurs in `zone`, earliest first: one on an ordinary day,
    /// none in a spring-forward gap, two in a fall-back overlap (the
    /// booking handler's rule, so both sides read a local time alike).
    public static func instants(date: String, minute: Int, zone: TimeZone) -> [Int64] {
        guard let d = ContractFormat.calendarDate(date) else { return [] }
        return instants(wall: CivilDays.days(year: d.year, month: d.month, day: d.day) * 86_400 + Int64(minute) * 60,
                        zone: zone)
    }

    /// ``instants(date:minute:zone:)`` of a wall time read as UTC seconds.
    static func instants(wall: Int64, zone: TimeZone) -> [Int64] {
        var offsets: [Int] = []
        for step in -6...6 {
            let offset = zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(wall + Int64(step) * 6 * 3600)))
            if !offsets.contains(offset) { offsets.append(offset) }
        }
        var result: [Int64] = []
        for offset in offsets {
            let candidate = wall - Int64(offset)
            if zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(candidate))) == offset,
               !result.contains(candidate) {
                result.append(candidate)
            }
        }
        return result.sorted()
    }

    /// The instant a booking's wall time stands for: the first occurrence,
    /// or, in a gap, the time moved forward by the gap (as the booking
    /// handler and Foundation's calendar resolve it).
    static func firstInstant(wall: Int64, zone: TimeZone) -> Int64 {
        if let first = instants(wall: wall, zone: zone).first { return first }
        let before = zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(wall - 86_400)))
        return wall - Int64(before)
    }

    /// The start of local `date` in `zone` (its first instant; a midnight
    /// skipped by a change is the first instant of the day).
    static func startOfDay(_ date: String, zone: TimeZone) -> Int64? {
        guard let d = ContractFormat.calendarDate(date) else { return nil }
        return firstInstant(wall: CivilDays.days(year: d.year, month: d.month, day: d.day) * 86_400, zone: zone)
    }
}
