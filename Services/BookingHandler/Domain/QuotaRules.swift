import BookingContracts
import Foundation

extension BookingRules {
    /// 1113 when `requester` may not hold `adding` more bookings of `room`
    /// beside the `active` ones it holds (contract v1.2,
    /// ``Room/maxActiveBookings``): at exactly the limit a new booking is
    /// refused, one below it is allowed. Nil when the room has no quota.
    ///
    /// Who is counted is the caller's business (``CommandProcessor``):
    /// admins and bookings without `user_id` never are.
    public static func quotaRefusal(room: Room, active: Int, adding: Int = 1) -> ReplyError? {
        guard let limit = room.maxActiveBookings, active + adding > limit else { return nil }
        let held = active == 1 ? "1 active booking" : "\(active) active bookings"
        return ReplyError(code: .quotaExceeded,
                          text: "you already hold \(held) of \(room.name), which allows \(limit) per requester",
                          field: "room", limit: limit)
    }
}
