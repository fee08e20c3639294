import BookingContracts

extension BookingRules {
    /// `booking.update` (contract v1.1, "Changing a booking's details"):
    /// `booking` with the given fields replaced, each checked with the
    /// create rules — ``text(title:description:)`` and
    /// ``attendees(_:capacity:)`` against the room's capacity — and the
    /// event to publish. Status and time stay. A refusal is the rule's
    /// `ReplyError` (the caller turns it into the reply, nothing written).
    ///
    /// Decisions where the contract is silent: an update that gives none of
    /// `title`, `description`, `attendees` is 1100 (field `bookingId`: there
    /// is nothing to change, and a version without a change would only make
    /// noise downstream); `description: ""` removes the description; the
    /// attendee list is replaced as a whole, and an attendee is identified
    /// by their normalised e-mail address, so two entries with the same
    /// address are 1111.
    public static func applyUpdate(_ command: UpdateBooking, to booking: Booking, room: Room)
        -> Result<(Booking, EventType), ReplyError>
    {
        guard command.title != nil || command.description != nil || command.attendees != nil else {
            return .failure(ReplyError(code: .invalidField,
                                       text: "booking.update needs at least one of title, description, attendees",
                                       field: "bookingId"))
        }
        var updated = booking
        let texts: (title: String, description: String?)
        switch text(title: command.title ?? booking.title,
                    description: command.description ?? booking.description) {
        case .success(let value): texts = value
        case .failure(let error): return .failure(error)
        }
        updated.title = texts.title
        updated.description = texts.description
        if let input = command.attendees {
            switch attendees(input, capacity: room.capacity) {
            case .success(let people):
                var seen: Set<String> = []
                for (index, person) in people.enumerated() where !seen.insert(person.email).inserted {
                    return .failure(ReplyError(code: .attendeeEmailInvalid,
                                               text: "attendee \(person.email) is listed twice",
                                               field: "attendees[\(index)].email"))
                }
                updated.attendees = people
            case .failure(let error):
                return .failure(error)
            }
        }
        return .success((updated, .bookingUpdated))
    }
}
