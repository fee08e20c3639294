import BookingContracts
import Foundation

/// A `booking.create` command that passed every check except the overlap
/// check (which needs the database): the resolved room, slot and normalised
/// texts and attendees, and the status the new booking starts in.
public struct ValidatedCreate: Sendable, Equatable {
    /// The room the booking is for.
    public var room: Room
    /// The resolved slot in the room's time zone.
    public var slot: BookingSlot
    /// The title, trimmed.
    public var title: String
    /// The description, trimmed; nil when absent or blank.
    public var description: String?
    /// The attendees: names trimmed, e-mail domains lowercased, phones E.164.
    public var attendees: [Attendee]
    /// `.pending` when the room requires approval, else `.confirmed`;
    /// `.held` for a hold (v1.2).
    public var status: BookingStatus
    /// When the hold lapses; nil unless ``status`` is `.held`.
    public var holdExpiresAt: Date? = nil
    /// Whether a conflict puts the booking on the waitlist (v1.2).
    public var waitlist: Bool = false

    /// Creates a value from its parts; does not validate (use
    /// ``BookingRules/validateCreate(_:room:now:)`` for that).
    public init(room: Room, slot: BookingSlot, title: String, description: String?, attendees: [Attendee],
                status: BookingStatus) {
        self.room = room
        self.slot = slot
        self.title = title
        self.description = description
        self.attendees = attendees
        self.status = status
    }
}
