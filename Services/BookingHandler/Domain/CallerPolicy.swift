import BookingContracts

/// The caller model: which kind of caller may do what
/// (docs/security.md has the table; contract v1.1, "What changes for a v1
/// client, on purpose").
///
/// Kinds of caller, all configured, none hard-coded:
/// - **admins** (`ADMIN_USERS`): every command on every booking and room,
///   whatever the cutoff; may confirm their own bookings;
/// - **room managers** (`ROOM_MANAGERS`): `room.register`, `room.close`
///   and `room.reopen`. With either list set, nobody else may create,
///   change, close or reopen rooms; with neither (the embedded one-machine
///   default) these stay open;
/// - **approvers** (a room's `approvers`): confirm or reject pending
///   bookings of that room, except their own;
/// - **replayers** (`REPLAY_USERS`, the projector's user): `booking.replay`;
/// - **outside publishers** (any other user): create bookings and change
///   their own;
/// - **anonymous callers** (no `user_id`): refused outright with
///   `REQUIRE_USER_ID`; otherwise they create bookings without a requester
///   and may change only bookings made without `user_id` — which every
///   other anonymous caller may change too (the embedded default's known
///   weakness, documented loudly).
///
/// Every refusal is 2003 and its text never names another user.
public struct CallerPolicy: Sendable, Equatable {
    /// `ADMIN_USERS`.
    public var administrators: Set<String>
    /// `ROOM_MANAGERS`.
    public var roomManagers: Set<String>
    /// `REPLAY_USERS`: who besides admins may ask for `booking.replay`.
    public var replayUsers: Set<String>
    /// `REQUIRE_USER_ID`: refuse anonymous commands and queries.
    public var requireUserID: Bool

    /// A policy; the defaults are the embedded one-machine set-up (open).
    public init(administrators: Set<String> = [], roomManagers: Set<String> = [], replayUsers: Set<String> = [],
                requireUserID: Bool = false) {
        self.administrators = administrators
        self.roomManagers = roomManagers
        self.replayUsers = replayUsers
        self.requireUserID = requireUserID
    }

    /// Whether `caller` is an admin.
    public func isAdmin(_ caller: Caller) -> Bool {
        caller.name.map(administrators.contains) ?? false
    }

    /// Whether rooms are restricted to room managers and admins.
    public var roomsRestricted: Bool { !administrators.isEmpty || !roomManagers.isEmpty }

    /// The refusal of a command of `type` before anything is read or
    /// written: anonymous callers under `REQUIRE_USER_ID`, `room.register`
    /// from someone who is no room manager or admin while those are named,
    /// `booking.replay` from anyone but replayers and admins. Nil: go on
    /// (the command's own rules may still refuse it).
    public func admit(_ type: CommandType, caller: Caller) -> ReplyError? {
        if requireUserID, caller == .anonymous {
            return ReplyError(code: .notPermitted,
                              text: "commands must carry the AMQP user_id property (REQUIRE_USER_ID is set)")
        }
        switch type {
        case .registerRoom, .closeRoom, .reopenRoom:
            // Closures are room management: the same people (v1.2).
            guard roomsRestricted else { return nil }
            if let name = caller.name, administrators.contains(name) || roomManagers.contains(name) { return nil }
            return ReplyError(code: .notPermitted, text: "\(type.rawValue) is only permitted for ROOM_MANAGERS and ADMIN_USERS")
        case .replayBookings:
            if let name = caller.name, administrators.contains(name) || replayUsers.contains(name) { return nil }
            return ReplyError(code: .notPermitted, text: "booking.replay is only permitted for REPLAY_USERS and ADMIN_USERS")
        default:
            return nil
        }
    }

    /// Whether `caller` may change `booking` (cancel, reschedule); nil when
    /// allowed, else 2003 naming the booking but never its requester.
    ///
    /// - a booking with a requester: that user, or an admin;
    /// - a booking without one (made anonymously): anonymous callers, or an
    ///   admin. A named outside publisher may not touch it: it is not theirs.
    public func mayChange(_ booking: Booking, caller: Caller) -> ReplyError? {
        if isAdmin(caller) { return nil }
        let owner = booking.requestedBy.flatMap { $0.isEmpty ? nil : $0 }
        switch (owner, caller) {
        case (nil, .anonymous):
            return nil
        case (nil, .user):
            return ReplyError(code: .notPermitted,
                              text: "booking \(booking.id) was made without user_id; only anonymous callers and ADMIN_USERS may change it")
        case (.some, .anonymous):
            return ReplyError(code: .notPermitted,
                              text: "booking \(booking.id) can only be changed by its requester; the command has no user_id")
        case (.some(let owner), .user(let name)):
            return name == owner ? nil
                : ReplyError(code: .notPermitted, text: "booking \(booking.id) can only be changed by its requester")
        }
    }

    /// Whether `caller` may confirm the pending `booking` of `room`: an
    /// admin (even its own booking), or one of the room's approvers who is
    /// not the booking's requester. Never anonymous callers, never the
    /// requester otherwise (contract v1.1).
    public func mayApprove(_ booking: Booking, room: Room, caller: Caller) -> ReplyError? {
        if isAdmin(caller) { return nil }
        guard let name = caller.name else {
            return ReplyError(code: .notPermitted,
                              text: "booking \(booking.id) can only be confirmed or rejected by the room's approvers or ADMIN_USERS; the command has no user_id")
        }
        if name == booking.requestedBy {
            return ReplyError(code: .notPermitted,
                              text: "booking \(booking.id) cannot be confirmed or rejected by its own requester; ask the room's approvers")
        }
        if (room.approvers ?? []).contains(name) { return nil }
        return ReplyError(code: .notPermitted,
                          text: "booking \(booking.id) can only be confirmed or rejected by the room's approvers or ADMIN_USERS")
    }

    /// Whether `caller` may take `action` on `booking` in `room`; nil when
    /// allowed (the status machine may still refuse it with 2002).
    ///
    /// Confirming or rejecting a pending booking is an approval decision
    /// (``mayApprove(_:room:caller:)``). Deciding on one that is not pending
    /// is a status error, which whoever may see the booking — its requester,
    /// an approver of the room, an admin — is told as 2002; anyone else
    /// gets 2003 and learns nothing about its status. Reschedule and update:
    /// ``mayChange(_:caller:)``. Check-in, and cancelling a booking that is
    /// in progress (v1.1), are also open to the room's approvers — the desk
    /// that runs the room lets people in and ends a meeting early.
    public func refusal(_ action: BookingAction, of booking: Booking, in room: Room, caller: Caller) -> ReplyError? {
        let isApprover = caller.name.map { (room.approvers ?? []).contains($0) } ?? false
        if action == .checkin || (action == .cancel && booking.status == .inProgress) {
            return isApprover ? nil : mayChange(booking, caller: caller)
        }
        guard action == .confirm || action == .reject else { return mayChange(booking, caller: caller) }
        // Confirming a hold is its requester's step (v1.2), not an approval.
        if action == .confirm && booking.status == .held { return mayChange(booking, caller: caller) }
        let approval = mayApprove(booking, room: room, caller: caller)
        if booking.status == .pending || approval == nil { return approval }
        return mayChange(booking, caller: caller) == nil || isApprover ? nil : approval
    }
}
