import BookingContracts
import Foundation

/// A change of status that time makes, not a command (contract v1.1,
/// "Booking lifecycle"). The handler's timers apply them
/// (``BookingTimers``).
public enum TimedTransition: String, Sendable, Hashable, CaseIterable {
    /// confirmed → inProgress at the start, in a room without
    /// `autoReleaseMinutes`; `booking.started`.
    case start
    /// inProgress → completed at the end; `booking.completed`.
    case complete
    /// confirmed → cancelled when nobody checked in
    /// (``BookingRules/releaseTime(startsAt:endsAt:room:)``);
    /// `booking.cancelled` with `released: true`.
    case release
    /// pending → rejected at the start: nobody approved it; `booking.rejected`.
    case expire
    /// held → cancelled at its `holdExpiresAt`: nobody confirmed it (v1.2);
    /// `booking.cancelled`.
    case lapse
    /// waitlisted → cancelled at the start: the slot did not come free
    /// (v1.2); `booking.cancelled`.
    case giveUp

    /// The event the transition publishes.
    public var event: EventType {
        switch self {
        case .start: .bookingStarted
        case .complete: .bookingCompleted
        case .release: .bookingCancelled
        case .expire: .bookingRejected
        case .lapse, .giveUp: .bookingCancelled
        }
    }

    /// The status it leads to.
    public var status: BookingStatus {
        switch self {
        case .start: .inProgress
        case .complete: .completed
        case .release: .cancelled
        case .expire: .rejected
        case .lapse, .giveUp: .cancelled
        }
    }

    /// The reason it writes into ``Booking/cancelReason``, if any.
    public var reason: String? {
        switch self {
        case .release: BookingRules.releaseReason
        case .expire: BookingRules.expiryReason
        case .lapse: HoldReasons.holdExpired
        case .giveUp: HoldReasons.waitExpired
        case .start, .complete: nil
        }
    }
}

extension BookingRules {
    /// ``Booking/cancelReason`` of a booking released for want of check-in.
    public static let releaseReason = "released: nobody checked in"
    /// ``Booking/cancelReason`` of a pending booking nobody approved by its start.
    public static let expiryReason = "expired"

    /// The next time-driven transition of a booking in `status` with these
    /// instants, in `room` as it is now, and when it is due; nil for a
    /// final status:
    /// - pending: expire at the start;
    /// - confirmed: start at the start, or — in a room with
    ///   `autoReleaseMinutes` — release at ``releaseTime(startsAt:endsAt:room:)``;
    /// - inProgress: complete at the end;
    /// - held: lapse at `holdExpiresAt` (never after the start);
    /// - waitlisted: give up at the start.
    ///
    /// The answer depends on the room's current policy, which is why the
    /// store does not trust a due time it computed earlier: the timer
    /// re-evaluates every booking when its stored due time comes
    /// (``earliestDue(status:startsAt:endsAt:)``).
    public static func nextTransition(status: BookingStatus, startsAt: Date, endsAt: Date, room: Room?,
                                      holdExpiresAt: Date? = nil)
        -> (transition: TimedTransition, due: Date)?
    {
        switch status {
        case .pending: return (.expire, startsAt)
        case .held: return (.lapse, min(holdExpiresAt ?? startsAt, startsAt))
        case .waitlisted: return (.giveUp, startsAt)
        case .confirmed:
            if let release = releaseTime(startsAt: startsAt, endsAt: endsAt, room: room) { return (.release, release) }
            return (.start, startsAt)
        case .inProgress: return (.complete, endsAt)
        case .completed, .cancelled, .rejected: return nil
        }
    }

    /// The due time the store keeps with a booking row without reading its
    /// room: the earliest instant any room policy could make a transition
    /// due (the start for pending and confirmed, the end for inProgress);
    /// nil for final statuses. At that instant the timer asks
    /// ``nextTransition(status:startsAt:endsAt:room:)`` and either applies
    /// it or stores the later due time it names (a release).
    public static func earliestDue(status: BookingStatus, startsAt: Date, endsAt: Date, holdExpiresAt: Date? = nil) -> Date? {
        switch status {
        case .pending, .confirmed, .waitlisted: startsAt
        case .held: min(holdExpiresAt ?? startsAt, startsAt)
        case .inProgress: endsAt
        case .completed, .cancelled, .rejected: nil
        }
    }
}
