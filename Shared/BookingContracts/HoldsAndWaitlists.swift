/// `"hold"` of `booking.create` (contract v1.2, "Holds and waitlists"):
/// book the slot as `held` for a few minutes while the requester finishes
/// a multi-step flow, then `booking.confirm` it or let it lapse.
public struct HoldRequest: Codable, Sendable, Equatable {
    /// Shortest hold in minutes.
    public static let minMinutes = 1
    /// Longest hold in minutes.
    public static let maxMinutes = 60
    /// The hold's length when `"hold": {}` names none.
    public static let defaultMinutes = 10

    /// How long the slot is held, 1–60; nil: ``defaultMinutes``.
    public var minutes: Int?

    /// Creates the request.
    public init(minutes: Int? = nil) { self.minutes = minutes }
}

/// `ifTaken` of `booking.create` (contract v1.2): what to do when the slot
/// is taken by other bookings (2000) and every other rule holds.
public enum IfTaken: String, Codable, Sendable, CaseIterable {
    /// Wait for it: the booking is stored as `waitlisted` and promoted
    /// when the slot comes free.
    case waitlist
}

/// `"waitlist"` of a waitlisted booking in replies and reads (contract
/// v1.2): where it stands.
public struct WaitlistPlace: Codable, Sendable, Equatable {
    /// 1 + the number of the room's waitlisted bookings created earlier
    /// whose slot, widened by the room's buffer, overlaps this one.
    public var position: Int

    /// Creates the place.
    public init(position: Int) { self.position = position }
}

/// The `cancelReason`s the handler's timers write for holds and waiters.
public enum HoldReasons {
    /// A hold nobody confirmed by its `holdExpiresAt`.
    public static let holdExpired = "expired: hold not confirmed"
    /// A waitlisted booking that was not promoted by its start.
    public static let waitExpired = "expired: the slot did not come free"
}
