import BookingContracts
import Foundation

/// What `hold` and `ifTaken` of a `booking.create` ask for (contract v1.2,
/// "Holds and waitlists"), checked.
public struct HoldOptions: Sendable, Equatable {
    /// Minutes to hold the slot; nil: no hold.
    public var holdMinutes: Int?
    /// Whether a conflict puts the booking on the waitlist.
    public var waitlist: Bool

    /// Neither: book or fail.
    public static let none = HoldOptions(holdMinutes: nil, waitlist: false)
}

extension BookingRules {
    /// `hold` and `ifTaken` checked (1100): `hold.minutes` 1–60 (10 when
    /// `"hold": {}`); a hold with `recurrence` or with `ifTaken` is refused
    /// (field `hold`); `ifTaken` other than `"waitlist"` is refused (field
    /// `ifTaken`).
    public static func holdOptions(_ command: CreateBooking) -> Result<HoldOptions, ReplyError> {
        var waitlist = false
        if let ifTaken = command.ifTaken {
            guard IfTaken(rawValue: ifTaken) == .waitlist else {
                return .failure(ReplyError(code: .invalidField,
                                           text: "ifTaken must be \"waitlist\", got \"\(ifTaken.prefix(40))\"", field: "ifTaken"))
            }
            waitlist = true
        }
        guard let hold = command.hold else { return .success(HoldOptions(holdMinutes: nil, waitlist: waitlist)) }
        if command.recurrence != nil {
            return .failure(ReplyError(code: .invalidField, text: "a hold cannot be a series (hold with recurrence)", field: "hold"))
        }
        if waitlist {
            return .failure(ReplyError(code: .invalidField, text: "a hold cannot wait for a taken slot (hold with ifTaken)",
                                       field: "hold"))
        }
        let minutes = hold.minutes ?? HoldRequest.defaultMinutes
        guard (HoldRequest.minMinutes...HoldRequest.maxMinutes).contains(minutes) else {
            return .failure(ReplyError(code: .invalidField,
                                       text: "hold.minutes must be \(HoldRequest.minMinutes) to \(HoldRequest.maxMinutes), got \(minutes)",
                                       field: "hold.minutes"))
        }
        return .success(HoldOptions(holdMinutes: minutes, waitlist: false))
    }

    /// When a hold made at `now` for `minutes` lapses: the earlier of
    /// `now + minutes` and the booking's start, on whole seconds (the
    /// contract's timestamps have no fractions).
    public static func holdExpiry(now: Date, minutes: Int, startsAt: Date) -> Date {
        let end = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + Double(minutes * 60)).rounded(.down))
        return min(end, startsAt)
    }

    /// 2002 when a hold is confirmed at or after its `holdExpiresAt` (the
    /// timer may not have cancelled it yet; it will).
    public static func holdLapsed(_ booking: Booking, now: Date) -> ReplyError? {
        guard booking.status == .held, let text = booking.holdExpiresAt,
              let expiry = ContractFormat.parseTimestamp(text), now >= expiry else { return nil }
        return ReplyError(code: .statusChangeNotAllowed, text: "the hold on booking \(booking.id) lapsed at \(text); cannot confirm")
    }
}
