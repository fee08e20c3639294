import BookingContracts
import Foundation

extension BookingRules {
    /// How long before its start a booking may be checked in (contract v1.1).
    public static let earlyCheckinMinutes = 15

    /// 2004, "too late to change this booking" (contract v1.1, "Room
    /// policies"), or nil when `action` may still happen at `now`:
    /// - any change of a booking that has ended is refused;
    /// - a reschedule or update of a booking that has started (its start
    ///   has passed, or it was checked in early) is refused;
    /// - a confirm of a pending booking whose start has passed is refused:
    ///   nobody approved it by its start, so it expires (the timer rejects
    ///   it within seconds); the decision must not depend on that lag;
    /// - reschedule, update and cancel of a booking that has not started are refused
    ///   later than the room's `changeCutoffMinutes` before its start —
    ///   exactly at the cutoff is still in time — unless `isAdmin`.
    ///   Cancelling an inProgress booking is allowed whatever the cutoff,
    ///   and so is cancelling a held or waitlisted one: it frees time or
    ///   a place in the queue and binds nobody, while refusing it would
    ///   keep a requester to a hold until it lapses, or to a waiter that
    ///   could still be promoted (and sent a pass) inside the cutoff.
    ///
    /// Rejecting is an approval decision, not a change of the booking's
    /// terms: only the end limits it. Check-in has its own window
    /// (``checkinRefusal(_:room:now:)``). Checked after the status machine,
    /// so a final status still answers 2002.
    public static func tooLate(_ action: BookingAction, booking: Booking, room: Room, now: Date, isAdmin: Bool)
        -> ReplyError?
    {
        // A hold's confirm is answered by its lapse (2002, ``holdLapsed``):
        // a hold lapses by its start at the latest, so "too late" for it is
        // always a lapsed hold, whether or not the timer has run.
        if action == .confirm, booking.status == .held { return nil }
        guard action != .checkin,
              let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
              let endsAt = ContractFormat.parseTimestamp(booking.endsAt) else { return nil }
        if endsAt <= now {
            return ReplyError(code: .tooLateToChange,
                              text: "booking \(booking.id) ended at \(booking.endsAt); it can no longer be changed")
        }
        let started = startsAt <= now || booking.status == .inProgress
        if action == .reschedule || action == .update, started {
            return ReplyError(code: .tooLateToChange,
                              text: "booking \(booking.id) started at \(booking.startsAt); it can no longer be \(action == .update ? "updated" : "rescheduled")")
        }
        if action == .confirm, startsAt <= now {
            return ReplyError(code: .tooLateToChange,
                              text: "booking \(booking.id) was not approved by its start (\(booking.startsAt)); it expires")
        }
        let withdrawal = action == .cancel && (booking.status == .held || booking.status == .waitlisted)
        if action == .cancel || action == .reschedule || action == .update, !isAdmin, !started, !withdrawal,
           let cutoff = room.changeCutoffMinutes, now > startsAt.addingTimeInterval(-Double(cutoff) * 60) {
            return ReplyError(code: .tooLateToChange,
                              text: "\(room.name) takes changes up to \(cutoff) minutes before the start; booking \(booking.id) starts at \(booking.startsAt)")
        }
        return nil
    }

    /// 2005, "check-in not possible now", or nil: a confirmed booking may be
    /// checked in from ``earlyCheckinMinutes`` before its start until its
    /// end — in a room with `autoReleaseMinutes`, until its release
    /// (``releaseTime(_:room:)``), so the outcome never depends on how soon
    /// the release timer runs. Both bounds are exclusive at the end:
    /// at the end (or the release) it is too late.
    public static func checkinRefusal(_ booking: Booking, room: Room, now: Date) -> ReplyError? {
        guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
              let endsAt = ContractFormat.parseTimestamp(booking.endsAt) else { return nil }
        let opens = startsAt.addingTimeInterval(-Double(earlyCheckinMinutes) * 60)
        if now < opens {
            return ReplyError(code: .checkinNotPossible,
                              text: "booking \(booking.id) can be checked in from \(ContractFormat.timestamp(opens)) (\(earlyCheckinMinutes) minutes before its start)")
        }
        let closes = releaseTime(startsAt: startsAt, endsAt: endsAt, room: room) ?? endsAt
        if now >= closes {
            return ReplyError(code: .checkinNotPossible,
                              text: closes < endsAt
                                  ? "booking \(booking.id) was released at \(ContractFormat.timestamp(closes)): nobody checked in within \(room.autoReleaseMinutes ?? 0) minutes of its start"
                                  : "booking \(booking.id) ended at \(booking.endsAt); it can no longer be checked in")
        }
        return nil
    }

    /// When a confirmed booking nobody checked in is released: its start
    /// plus the room's `autoReleaseMinutes`, but never after its end (a
    /// booking shorter than the release time is released at its end, not
    /// after it). Nil for a room without `autoReleaseMinutes`.
    public static func releaseTime(startsAt: Date, endsAt: Date, room: Room?) -> Date? {
        guard let minutes = room?.autoReleaseMinutes else { return nil }
        return min(startsAt.addingTimeInterval(Double(minutes) * 60), endsAt)
    }

    /// An inProgress booking cancelled at `now` ends at the next 15-minute
    /// step (contract v1.1) and frees the rest of its slot: `endsAt` and
    /// `end` move back to the first grid instant at or after `now` when that
    /// is before the old end. A booking checked in early and cancelled
    /// before its start never used the room: its times stay. The grid is
    /// taken in UTC, which is the local grid in every zone (all current
    /// offsets are whole quarter hours).
    public static func cutShort(_ booking: Booking, now: Date, zone: TimeZone) -> Booking {
        guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
              let endsAt = ContractFormat.parseTimestamp(booking.endsAt) else { return booking }
        let step = Double(ContractFormat.gridMinutes * 60)
        let next = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / step).rounded(.up) * step)
        guard next > startsAt, next < endsAt else { return booking }
        var b = booking
        b.endsAt = ContractFormat.timestamp(next)
        let local = Int(next.timeIntervalSince1970) + zone.secondsFromGMT(for: next)
        let minutes = ((local % 86_400) + 86_400) % 86_400 / 60
        b.end = ContractFormat.time(fromMinutes: minutes)
        return b
    }
}
