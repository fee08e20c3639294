import BookingContracts
import Foundation

/// Waitlists (contract v1.2, "Holds and waitlists"): queueing a booking
/// whose slot is taken, and promoting waiters when a room's bookings,
/// closures, hours or buffer change.
///
/// Race-free because every caller runs inside a command's or a timer's
/// write transaction, which holds the store's write lock (SQLite's
/// `BEGIN IMMEDIATE`, PostgreSQL's advisory lock) across every process on
/// the database: the walk reads the waiters and the blocking bookings and
/// writes its promotions with no other writer in between, and a later
/// walk sees them.
extension CommandProcessor {
    /// Stores `booking` as `waitlisted` (its slot was refused only for a
    /// conflict, every other rule held) with its `booking.created`, and
    /// replies with its place.
    func enqueueWaiter(_ booking: Booking, room: Room, slot: BookingSlot, _ tx: any StoreTransaction,
                       caller: Caller, now: Date) throws -> ReplyBody {
        var waiting = booking
        waiting.status = .waitlisted
        waiting.holdExpiresAt = nil
        let encoded = EncodedBooking(waiting)
        try tx.save(encoded, startsAt: slot.startsAt, endsAt: slot.endsAt)
        let id = newID(), occurredAt = ContractFormat.timestamp(now)
        try tx.enqueue(routingKey: EventType.bookingCreated.rawValue, messageID: id,
                       body: encoded.event(eventId: id, occurredAt: occurredAt),
                       orderKey: OutboxKey.booking(waiting.id),
                       value: BookingEvent(eventId: id, occurredAt: occurredAt, booking: waiting))
        let waiters = try tx.waiters(room: room.name).map(\.booking)
        let metrics = waitlistMetrics, length = waiters.count
        tx.afterCommit { metrics.waitlistLength(room: room.name).record(length) }
        var reply = waiting
        reply.waitlist = WaitlistPlace(position: BookingRules.waitlistPosition(of: waiting.id, in: waiters,
                                                                             bufferSeconds: room.bufferSeconds))
        return ReplyBody(.booking(reply))
    }

    /// Walks the room's waiters in waitlist order and promotes each that
    /// passes every rule against the state that includes the promotions
    /// before it (``promotionRefusal(_:room:_:now:)``); the others keep
    /// waiting. A promoted booking becomes confirmed (`booking.confirmed`
    /// with `promoted: true` and `previous`) or, in a room that requires
    /// approval, pending (`booking.submitted`, also `promoted: true`).
    /// Returns the promoted bookings.
    @discardableResult
    func promoteWaiters(room name: String, _ tx: any StoreTransaction, now: Date) throws -> [Booking] {
        guard let room = try tx.room(named: name) else { return [] }
        let waiters = try tx.waiters(room: name)
        guard !waiters.isEmpty else { return [] }
        var promoted: [Booking] = []
        try BookingRules.walkWaitlist(waiters.map(\.booking), bufferSeconds: room.bufferSeconds) { booking in
            if let refusal = try promotionRefusal(booking, room: room, tx, now: now) {
                // Kept by the slot or by its requester's quota, it still
                // wants that slot; refused for anything else (started, too
                // many attendees, hours, a changed zone) it cannot take it.
                return refusal.code == .overlap || refusal.code == .quotaExceeded ? .waiting : .ineligible
            }
            var changed = booking
            changed.status = room.requiresApproval ? .pending : .confirmed
            let event: EventType = room.requiresApproval ? .bookingSubmitted : .bookingConfirmed
            promoted.append(try record(changed, from: booking, event: event, tx, now: now, promoted: true).booking)
            return .promoted
        }
        let since = Dictionary(waiters.map { ($0.booking.id, $0.waitingSince) }, uniquingKeysWith: { a, _ in a })
        let waited = promoted.compactMap { since[$0.id] ?? nil }.map { max(0, now.timeIntervalSince($0)) }
        let metrics = waitlistMetrics, promotions = promoted.count, length = waiters.count - promoted.count
        tx.afterCommit {
            metrics.promotions.increment(by: promotions)
            for seconds in waited { metrics.promotionWait.recordSeconds(seconds) }
            metrics.waitlistLength(room: name).record(length)
        }
        return promoted
    }

    /// Why `booking` cannot be promoted now, or nil: not started, the
    /// room's hours and policies for its slot (``BookingRules/slot(room:date:start:end:now:)``),
    /// its capacity, closures, the requester's quota, and conflicts with the blocking
    /// bookings (buffers included) — the rules of a create, against the
    /// room as it is now.
    func promotionRefusal(_ booking: Booking, room: Room, _ tx: any StoreTransaction, now: Date) throws -> ReplyError? {
        let slot: BookingSlot
        switch BookingRules.slot(room: room, date: .calendarDate(booking.date), start: booking.start, end: booking.end, now: now) {
        case .failure(let error): return error
        case .success(let s): slot = s
        }
        // A waiter keeps the instants it was made with. If the room's zone
        // has changed since, its local times name another slot: checking
        // that one and promoting the stored one could overlap a booking.
        // It keeps waiting (and lapses at its start, as any waiter).
        guard ContractFormat.parseTimestamp(booking.startsAt) == slot.startsAt,
              ContractFormat.parseTimestamp(booking.endsAt) == slot.endsAt else {
            return ReplyError(code: .statusChangeNotAllowed,
                              text: "booking \(booking.id) was made in \(booking.timeZone); \(room.name) is now in \(room.timeZone)")
        }
        // The room may have been re-registered smaller since the waiter came.
        if booking.attendees.count > room.capacity {
            return ReplyError(code: .overCapacity,
                              text: "\(booking.attendees.count) attendees exceed the room's capacity of \(room.capacity)", field: "attendees")
        }
        if let closed = try closedRefusal(room, slot, tx) { return closed }
        // The waiter is among the requester's active bookings already: the
        // quota holds when the count including it is within the limit.
        if let requester = booking.requestedBy, !requester.isEmpty, room.maxActiveBookings != nil,
           !policy.isAdmin(Caller(userID: requester)) {
            let active = try tx.activeBookings(room: room.name, requestedBy: requester, at: now)
            if let refusal = BookingRules.quotaRefusal(room: room, active: active - 1, adding: 1) { return refusal }
        }
        if case .error(let error)? = try overlap(room, slot, tx, excluding: booking.id) { return error }
        return nil
    }
}

/// What the promotion walk did with one waiter.
public enum WaiterOutcome: Sendable, Equatable {
    /// Promoted.
    case promoted
    /// Stays waiting and wants its slot (it holds it against later waiters).
    case waiting
    /// Stays waiting but cannot take its slot now (it holds nothing).
    case ineligible
}

extension BookingRules {
    /// The promotion walk (contract v1.2): `waiters` in waitlist order,
    /// each offered to `promote`, which checks it against the current
    /// state — including every promotion it made before — and promotes it
    /// (returning true) or leaves it waiting (false).
    ///
    /// "No waiter is passed over by a later one whose slot overlaps it":
    /// a waiter that stays `.waiting` (its slot still taken, or its
    /// requester over the quota: it still wants that slot) holds its slot
    /// (widened by `bufferSeconds`, as positions count) against every
    /// later waiter, which is then not offered and holds its own slot in
    /// turn. A later waiter whose slot overlaps none of them is offered.
    /// Without this, a short waiter took part of a longer earlier one's
    /// slot as soon as that part came free, and the earlier one could then
    /// never be promoted. A waiter that is `.ineligible` (started, too many
    /// attendees for the room now, outside its hours) holds nothing: it
    /// cannot take the slot, and holding it would leave the slot empty.
    public static func walkWaitlist(_ waiters: [Booking], bufferSeconds: Double,
                                    promote: (Booking) throws -> WaiterOutcome) rethrows {
        var held: [(start: Double, end: Double)] = []
        for waiter in waiters {
            guard let range = instants(waiter) else {
                _ = try promote(waiter)
                continue
            }
            if held.contains(where: { $0.start < range.end + bufferSeconds && range.start < $0.end + bufferSeconds }) {
                held.append(range)
                continue
            }
            if try promote(waiter) == .waiting { held.append(range) }
        }
    }

    /// A waiter's place (contract v1.2): 1 + the waiters before it in
    /// `waiters` (waitlist order) whose slot, widened by the room's buffer,
    /// overlaps its own. 1 when it is not in the list.
    public static func waitlistPosition(of id: String, in waiters: [Booking], bufferSeconds: Double) -> Int {
        guard let index = waiters.firstIndex(where: { $0.id == id }),
              let range = instants(waiters[index]) else { return 1 }
        var position = 1
        for earlier in waiters[..<index] {
            guard let other = instants(earlier) else { continue }
            if other.start < range.end + bufferSeconds && range.start < other.end + bufferSeconds { position += 1 }
        }
        return position
    }

    private static func instants(_ booking: Booking) -> (start: Double, end: Double)? {
        guard let start = ContractFormat.parseTimestamp(booking.startsAt),
              let end = ContractFormat.parseTimestamp(booking.endsAt) else { return nil }
        return (start.timeIntervalSince1970, end.timeIntervalSince1970)
    }
}
