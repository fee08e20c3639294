import BookingContracts
import Foundation

/// A validated, resolved time slot of one room.
///
/// Built by ``BookingRules/slot(room:date:start:end:now:)``: the local
/// calendar date and wall-clock times as the contract carries them, plus the
/// two instants they name in the room's time zone.
public struct BookingSlot: Sendable, Equatable {
    /// Local calendar date `YYYY-MM-DD` in ``timeZone``.
    public var date: String
    /// Local start `HH:mm`, on the 15-minute grid.
    public var start: String
    /// Local end `HH:mm`, on the 15-minute grid, after ``start``.
    public var end: String
    /// The room's IANA time zone.
    public var timeZone: String
    /// The instant of ``date`` at ``start`` in ``timeZone``.
    public var startsAt: Date
    /// The instant of ``date`` at ``end`` in ``timeZone``.
    public var endsAt: Date

    /// Creates a slot from its parts; does not validate (use
    /// ``BookingRules/slot(room:date:start:end:now:)`` for that).
    public init(date: String, start: String, end: String, timeZone: String, startsAt: Date, endsAt: Date) {
        self.date = date
        self.start = start
        self.end = end
        self.timeZone = timeZone
        self.startsAt = startsAt
        self.endsAt = endsAt
    }

    /// ``startsAt`` in the contract's UTC form, `2026-11-23T08:00:00Z`.
    public var startsAtTimestamp: String { ContractFormat.timestamp(startsAt) }

    /// ``endsAt`` in the contract's UTC form, `2026-11-23T09:30:00Z`.
    public var endsAtTimestamp: String { ContractFormat.timestamp(endsAt) }

    /// The slot as an instant range, the shape ``BookingRules/overlaps(_:_:)``
    /// takes for its second argument.
    public var interval: (startsAt: Date, endsAt: Date) { (startsAt, endsAt) }
}
