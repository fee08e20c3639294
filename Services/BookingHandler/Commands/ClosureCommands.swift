import BookingContracts
import Foundation

/// Closures (contract v1.2, "Availability calendars"): `room.close` stores
/// the closure and cancels what it covers, `room.reopen` removes it. Each
/// is one command in one write transaction, under the same write lock as
/// every create, so no booking can slip into a closure while it is made:
/// a create either committed before (and is cancelled by it) or runs after
/// (and gets 1112).
extension CommandProcessor {
    /// `room.close`: the closure, a `booking.cancelled` (with `previous`)
    /// for every pending or confirmed booking of the room overlapping it,
    /// an in-progress one ended at the later of the closure's start and the
    /// next quarter-hour, and `room.closed`; the reply lists the bookings in
    /// the caller's view.
    func closeRoom(_ c: CloseRoom, _ tx: any StoreTransaction, caller: Caller, now: Date) throws -> ReplyBody {
        let valid: ValidatedClosure
        switch BookingRules.validateClosure(c, room: try tx.room(named: c.room)) {
        case .failure(let error): return ReplyBody(.error(error))
        case .success(let v): valid = v
        }
        let closure = RoomClosure(id: newID(), room: valid.room.name, from: ContractFormat.timestamp(valid.from),
                                  to: ContractFormat.timestamp(valid.to), reason: valid.reason)
        try tx.insertClosure(closure, from: valid.from, to: valid.to)
        let reason = BookingRules.closedReason(valid.reason)
        var cancelled: [BookingView] = []
        for id in try tx.conflicts(room: valid.room.name, startsAt: valid.from, endsAt: valid.to) {
            guard let booking = try tx.booking(id: id) else { continue }
            var changed = booking
            if booking.status == .inProgress {
                // Ends as a cancel ends it (the next quarter-hour), but not
                // before the closure starts: the time up to it was open.
                let zone = TimeZone(identifier: booking.timeZone) ?? .gmt
                changed = BookingRules.cutShort(booking, now: max(now, valid.from), zone: zone)
            }
            changed.status = .cancelled
            changed.cancelReason = reason
            let encoded = try record(changed, from: booking, event: .bookingCancelled, tx, now: now)
            let visibility = BookingReader.visibility(requestedBy: booking.requestedBy, approvers: valid.room.approvers ?? [],
                                                      caller: caller, administrators: policy.administrators)
            cancelled.append(BookingView(encoded.booking, visibility: visibility))
        }
        // Waiters inside the closure can never get their slot (v1.2).
        for waiter in try tx.waiters(room: valid.room.name) {
            let booking = waiter.booking
            guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
                  let endsAt = ContractFormat.parseTimestamp(booking.endsAt),
                  startsAt < valid.to, endsAt > valid.from else { continue }
            var changed = booking
            changed.status = .cancelled
            changed.cancelReason = reason
            let encoded = try record(changed, from: booking, event: .bookingCancelled, tx, now: now)
            let visibility = BookingReader.visibility(requestedBy: booking.requestedBy, approvers: valid.room.approvers ?? [],
                                                      caller: caller, administrators: policy.administrators)
            cancelled.append(BookingView(encoded.booking, visibility: visibility))
        }
        try enqueueClosureEvent(.roomClosed, closure, tx, now: now)
        // What it cancelled may have been in the buffer of a waiter outside it.
        try promoteWaiters(room: valid.room.name, tx, now: now)
        return ReplyBody(.closure(ClosureReply(closure: closure, cancelled: cancelled)))
    }

    /// `room.reopen`: removes the closure (2001, field `closureId`, when the
    /// room has none of that id) and publishes `room.reopened`. Bookings it
    /// cancelled stay cancelled.
    func reopenRoom(_ c: ReopenRoom, _ tx: any StoreTransaction, now: Date) throws -> ReplyBody {
        guard try tx.room(named: c.room) != nil else {
            return ReplyBody(.failure(.unknownRoom, "room '\(c.room.prefix(100))' does not exist", field: "room"))
        }
        guard !c.closureId.isEmpty, let closure = try tx.closure(id: c.closureId, room: c.room) else {
            return ReplyBody(.failure(.bookingNotFound, "room \(c.room.prefix(100)) has no closure '\(c.closureId.prefix(100))'",
                                      field: "closureId"))
        }
        try tx.deleteClosure(id: closure.id)
        try enqueueClosureEvent(.roomReopened, closure, tx, now: now)
        try promoteWaiters(room: c.room, tx, now: now)
        return ReplyBody(.closure(ClosureReply(closure: closure, cancelled: nil)))
    }

    /// 1112 when [startsAt, endsAt) of `room` overlaps a closure, naming
    /// the earliest.
    func closedRefusal(_ room: Room, _ slot: BookingSlot, _ tx: any StoreTransaction) throws -> ReplyError? {
        guard let closure = try tx.closures(room: room.name, from: slot.startsAt, to: slot.endsAt).first else { return nil }
        return BookingRules.closedRefusal(closure, room: room.name)
    }

    /// `room.closed` or `room.reopened`, in the room's order (after its
    /// `room.registered`), on `booking.events` (the relay copies it to
    /// `booking.public`: a closure holds nothing private).
    private func enqueueClosureEvent(_ type: EventType, _ closure: RoomClosure, _ tx: any StoreTransaction, now: Date) throws {
        let event = RoomClosureEvent(eventId: newID(), occurredAt: ContractFormat.timestamp(now), closure: closure)
        try tx.enqueue(routingKey: type.rawValue, messageID: event.eventId, body: try ContractJSON.encode(event),
                       orderKey: OutboxKey.room(closure.room))
    }
}
