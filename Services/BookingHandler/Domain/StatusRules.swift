import BookingContracts

/// A change of an existing booking's status, named after its command.
public enum BookingAction: String, Sendable, Hashable, CaseIterable {
    /// `booking.confirm`: pending → confirmed.
    case confirm
    /// `booking.cancel`: pending or confirmed → cancelled.
    case cancel
    /// `booking.reschedule`: pending or confirmed → same status, or pending
    /// when the room requires approval.
    case reschedule
    /// `booking.reject` (v1.1): pending → rejected.
    case reject
    /// `booking.update` (v1.1): pending, confirmed (or inProgress, then
    /// refused as too late) → the same status.
    case update
    /// `booking.checkin` (v1.1): confirmed → inProgress.
    case checkin
}

extension BookingAction {
    /// Whether the action can free time in its room, so that waiters may
    /// be promoted in its transaction (v1.2): cancel, reject, reschedule.
    /// (An update frees nothing, but may make the waiter it changes fit the
    /// room: ``CommandProcessor`` walks for that case alone.)
    public var mayFreeTime: Bool {
        switch self {
        case .cancel, .reject, .reschedule: true
        case .confirm, .update, .checkin: false
        }
    }
}

extension BookingRules {
    /// The status machine. The status after `action` on a booking in
    /// `status`:
    /// - confirm: pending → confirmed; held → confirmed, or pending when
    ///   the room requires approval (v1.2);
    /// - cancel: pending, confirmed, inProgress, held or waitlisted → cancelled;
    /// - reschedule: pending or confirmed → the same status, except that
    ///   when the room `requiresApproval` the moved booking needs approval
    ///   again and becomes pending;
    /// - reject: pending → rejected (final, like cancelled);
    /// - update: pending, confirmed, held or waitlisted → unchanged (details only);
    /// - checkin: confirmed → inProgress.
    ///
    /// Reschedule and update of an inProgress booking pass here and are
    /// refused by ``tooLate(_:booking:room:now:isAdmin:)`` with 2004, the
    /// contract's code for changing a booking that has started.
    /// Rescheduling a held or waitlisted booking is 2002 (v1.2): a hold
    /// is for the slot it holds, a waiter waits for the slot it named.
    /// `completed`, `cancelled` and `rejected` are final. Anything else
    /// (confirming a confirmed or cancelled booking, cancelling a completed
    /// one, checking in a pending one) is 2002, text like
    /// `booking is cancelled; cannot confirm`, without `field`.
    public static func transition(_ action: BookingAction, from status: BookingStatus, requiresApproval: Bool)
        -> Result<BookingStatus, ReplyError>
    {
        switch (action, status) {
        case (.confirm, .pending):
            return .success(.confirmed)
        case (.confirm, .held):
            return .success(requiresApproval ? .pending : .confirmed)
        case (.cancel, .pending), (.cancel, .confirmed), (.cancel, .inProgress), (.cancel, .held), (.cancel, .waitlisted):
            return .success(.cancelled)
        case (.reschedule, .pending), (.reschedule, .confirmed):
            return .success(requiresApproval ? .pending : status)
        case (.reschedule, .inProgress), (.update, .inProgress):
            return .success(status)
        case (.reject, .pending):
            return .success(.rejected)
        case (.update, .pending), (.update, .confirmed), (.update, .held), (.update, .waitlisted):
            return .success(status)
        case (.checkin, .confirmed):
            return .success(.inProgress)
        default:
            return .failure(ReplyError(code: .statusChangeNotAllowed,
                                       text: "booking is \(status.rawValue); cannot \(action.rawValue)"))
        }
    }
}
