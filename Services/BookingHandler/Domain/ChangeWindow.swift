import BookingContracts
import Foundation

extension BookingRules {
    /// 2004, "too late to change this booking" (contract v1.1, "Room
    /// policies"), or nil when `action` may still happen at `now`:
    /// - any change of a booking that has ended is refused;
    /// - a reschedule or update of a booking that has started is refused;
    /// - reschedule, update and cancel of a booking that has not started are refused
    ///   later than the room's `changeCutoffMinutes` before its start —
    ///   exactly at the cutoff is still in time — unless `isAdmin`.
    ///
    /// Confirming and rejecting are approval decisions, not changes of the
    /// booking's terms: only the end limits them. Checked after the status machine, so a final
    /// status still answers 2002.
    public static func tooLate(_ action: BookingAction, booking: Booking, room: Room, now: Date, isAdmin: Bool)
        -> ReplyError?
    {
        guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
              let endsAt = ContractFormat.parseTimestamp(booking.endsAt) else { return nil }
        if endsAt <= now {
            return ReplyError(code: .tooLateToChange,
                              text: "booking \(booking.id) ended at \(booking.endsAt); it can no longer be changed")
        }
        if action == .reschedule || action == .update, startsAt <= now {
            return ReplyError(code: .tooLateToChange,
                              text: "booking \(booking.id) started at \(booking.startsAt); it can no longer be \(action == .update ? "updated" : "rescheduled")")
        }
        if action == .cancel || action == .reschedule || action == .update, !isAdmin, let cutoff = room.changeCutoffMinutes, startsAt > now,
           now > startsAt.addingTimeInterval(-Double(cutoff) * 60) {
            return ReplyError(code: .tooLateToChange,
                              text: "\(room.name) takes changes up to \(cutoff) minutes before the start; booking \(booking.id) starts at \(booking.startsAt)")
        }
        return nil
    }
}
