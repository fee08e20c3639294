import BookingContracts
import Foundation

/// Recurring bookings (contract v1.1, "Recurring bookings"): a series is
/// one command — one `message_id`, one transaction, one reply — so a
/// redelivery finds its reply in the inbox and books nothing twice, and
/// `"reject"` books all occurrences or none even while other handler
/// processes book the same room: the overlap checks and the inserts run in
/// the same write transaction, which SQLite serialises across processes.
extension CommandProcessor {
    /// A series planned and encoded before its transaction (as
    /// ``PreparedCreate`` for one booking), on the assumption that no
    /// occurrence conflicts; the transaction rebuilds only when some do
    /// and are skipped (the survivors' `index` and `count` change).
    struct PreparedSeries: Sendable {
        let roomJSON: Data
        let id: String
        let plan: Result<SeriesPlan, ReplyError>
        let bookings: [PreparedBooking]
    }

    /// Nil when the room is not cached in this process.
    func prepareSeries(_ create: CreateBooking, requester: String?, now: Date) -> PreparedSeries? {
        guard let cached = store.cachedRoom(named: create.room) else { return nil }
        let id = newID()
        let plan = SeriesRules.plan(create, room: cached.room, now: now)
        var bookings: [PreparedBooking] = []
        if case .success(let p) = plan {
            guard let built = try? buildOccurrences(p, seriesID: id, booked: p.occurrences.indices.filter { p.isValid($0) },
                                                    requester: requester, now: now) else { return nil }
            bookings = built
        }
        return PreparedSeries(roomJSON: cached.json, id: id, plan: plan, bookings: bookings)
    }

    /// The locked part of a recurring create.
    func commitSeries(_ prepared: PreparedSeries?, _ create: CreateBooking, _ tx: any StoreTransaction, caller: Caller,
                      now: Date) throws -> ReplyBody {
        let requester = caller.name
        let id: String
        let plan: SeriesPlan
        var built: [PreparedBooking]?
        if let prepared, try tx.roomJSON(named: create.room) == prepared.roomJSON {
            switch prepared.plan {
            case .failure(let error): return ReplyBody(.error(error))
            case .success(let p): (id, plan, built) = (prepared.id, p, prepared.bookings)
            }
        } else {
            // Not prepared, or the room was re-registered since: plan here.
            switch SeriesRules.plan(create, room: try tx.room(named: create.room), now: now) {
            case .failure(let error): return ReplyBody(.error(error))
            case .success(let p): (id, plan, built) = (newID(), p, nil)
            }
        }
        var skipped: [SkippedOccurrence] = []
        var conflicts: [(date: String, ids: [String])] = []
        var free: [Int] = []
        // Occurrences among `free` that wait for their slot (v1.2).
        var waiting: Set<Int> = []
        // The occurrences kept so far that will block (not waiting): the
        // buffer holds between them too, as between any two blocking
        // bookings of the room (contract v1.2).
        var blocking: [(date: String, startsAt: Date, endsAt: Date)] = []
        // The closure refusal of each date skipped for one (its `closure`).
        var closedOn: [String: ReplyError] = [:]
        for (index, occurrence) in plan.occurrences.enumerated() {
            switch occurrence.slot {
            case .failure(let error):
                skipped.append(SkippedOccurrence(date: occurrence.date, code: error.code, text: error.text))
            case .success(let slot):
                if let closed = try closedRefusal(plan.room, slot, tx) {
                    // Closed then (v1.2): refused whole, or skipped.
                    if plan.policy == .reject {
                        var whole = closed
                        whole.date = occurrence.date
                        whole.text = "\(occurrence.date): " + closed.text
                        return ReplyBody(.error(whole))
                    }
                    skipped.append(SkippedOccurrence(date: occurrence.date, code: .roomClosed, text: closed.text))
                    closedOn[occurrence.date] = closed
                    continue
                }
                let buffer = plan.room.bufferSeconds
                if let near = blocking.first(where: { slot.startsAt < $0.endsAt.addingTimeInterval(buffer)
                                                      && $0.startsAt < slot.endsAt.addingTimeInterval(buffer) }) {
                    let text = "\(occurrence.date) is within the room's \(Int(buffer / 60))-minute buffer of the series' occurrence on \(near.date)"
                    if plan.policy == .reject {
                        return ReplyBody(.error(ReplyError(code: .overlap, text: "\(text); nothing was booked", field: "start",
                                                           conflictDates: [occurrence.date])))
                    }
                    skipped.append(SkippedOccurrence(date: occurrence.date, code: .overlap, text: text))
                    continue
                }
                // The room's buffer counts as for a single booking.
                let ids = try tx.conflicts(room: plan.room.name, startsAt: slot.startsAt.addingTimeInterval(-buffer),
                                           endsAt: slot.endsAt.addingTimeInterval(buffer))
                if ids.isEmpty {
                    free.append(index)
                    blocking.append((occurrence.date, slot.startsAt, slot.endsAt))
                } else if plan.waitlist {
                    free.append(index)
                    waiting.insert(index)
                    // A sibling inside its buffer would keep it from ever
                    // being promoted: it counts as blocking here.
                    blocking.append((occurrence.date, slot.startsAt, slot.endsAt))
                } else {
                    conflicts.append((occurrence.date, ids))
                    skipped.append(SkippedOccurrence(date: occurrence.date, code: .overlap,
                                                     text: "\(plan.room.name) is already booked on \(occurrence.date)",
                                                     conflicts: ids))
                }
            }
        }
        if plan.policy == .reject, !conflicts.isEmpty {
            return ReplyBody(.error(SeriesRules.conflictRefusal(room: plan.room, conflicts: conflicts)))
        }
        // The quota (v1.2): a series that would go beyond it is refused
        // whole, or with "skip" keeps its earliest occurrences up to it.
        if !free.isEmpty, let limit = plan.room.maxActiveBookings, let requester, !policy.isAdmin(caller) {
            let active = try tx.activeBookings(room: plan.room.name, requestedBy: requester, at: now)
            if let refusal = BookingRules.quotaRefusal(room: plan.room, active: active, adding: free.count) {
                let allowed = max(0, limit - active)
                if plan.policy == .reject || allowed == 0 {
                    var whole = refusal
                    whole.text = "the series' \(free.count) occurrences would go beyond your quota: " + refusal.text
                    return ReplyBody(.error(whole))
                }
                for index in free[allowed...] {
                    skipped.append(SkippedOccurrence(date: plan.occurrences[index].date, code: .quotaExceeded,
                                                     text: "beyond the quota of \(limit) active bookings per requester"))
                }
                free = Array(free[..<allowed])
            }
        }
        skipped.sort { $0.date < $1.date }
        guard !free.isEmpty else {
            // Booking nothing is not a success, whatever the policy.
            let first = skipped[0]
            let text = "no occurrence of the series can be booked; \(first.date): \(first.text)"
            if var closed = closedOn[first.date] {
                // 1112 carries the closure (contract v1.2), as for one booking.
                closed.text = text
                closed.date = first.date
                return ReplyBody(.error(closed))
            }
            return ReplyBody(.failure(first.code, text, field: first.code == .overlap ? "start" : "date", conflicts: first.conflicts))
        }
        // Built before the transaction for every valid occurrence; again
        // here when conflicts were skipped (index and count change).
        var bookings = if let built, built.count == free.count {
            built
        } else {
            try buildOccurrences(plan, seriesID: id, booked: free, requester: requester, now: now)
        }
        for (position, index) in free.enumerated() where waiting.contains(index) {
            bookings[position] = waiter(bookings[position], now: now)
        }
        let reply = CommandReply.series(SeriesBooked(id: id, recurrence: plan.recurrence, version: 1,
                                                     bookings: bookings.map(\.encoded.booking), skipped: skipped))
        let json = try ContractJSON.encode(reply)
        if json.count > SeriesRules.maxReplyBytes {
            return ReplyBody(.failure(.invalidField, "the series' reply would be \(json.count) bytes, more than \(SeriesRules.maxReplyBytes) "
                                      + "(\(bookings.count) occurrences with these attendees and texts); book fewer occurrences "
                                      + "or shorten the description", field: "recurrence"))
        }
        for booking in bookings {
            try tx.save(booking.encoded, startsAt: booking.slot.startsAt, endsAt: booking.slot.endsAt)
            for event in booking.events {
                try tx.enqueue(routingKey: event.type.rawValue, messageID: event.id, body: event.body,
                               orderKey: OutboxKey.booking(booking.encoded.booking.id), value: event.value)
            }
        }
        try tx.insertSeries(id: id, room: plan.room.name, requestedBy: requester, recurrence: plan.recurrence,
                            onConflict: plan.policy, count: bookings.count, now: now)
        guard !waiting.isEmpty else { return ReplyBody(reply, json: json) }
        // Waiting occurrences show their place, as a single waiter's reply does.
        let waiters = try tx.waiters(room: plan.room.name).map(\.booking)
        let placed = bookings.map { prepared -> Booking in
            var booking = prepared.encoded.booking
            if booking.status == .waitlisted {
                booking.waitlist = WaitlistPlace(position: BookingRules.waitlistPosition(of: booking.id, in: waiters,
                                                                                       bufferSeconds: plan.room.bufferSeconds))
            }
            return booking
        }
        return ReplyBody(.series(SeriesBooked(id: id, recurrence: plan.recurrence, version: 1, bookings: placed, skipped: skipped)))
    }

    /// `prepared` as a waitlisted booking: status `waitlisted`, and only
    /// its `booking.created`.
    func waiter(_ prepared: PreparedBooking, now: Date) -> PreparedBooking {
        var booking = prepared.encoded.booking
        booking.status = .waitlisted
        let encoded = EncodedBooking(booking)
        let id = newID(), occurredAt = ContractFormat.timestamp(now)
        return PreparedBooking(encoded: encoded, room: prepared.room, slot: prepared.slot, waitlist: true,
                               events: [(.bookingCreated, id, encoded.event(eventId: id, occurredAt: occurredAt),
                                         BookingEvent(eventId: id, occurredAt: occurredAt, booking: booking))])
    }

    /// The occurrences at `booked` (indices into the plan, date order) as
    /// new bookings with their events, `series.index` counting only these.
    func buildOccurrences(_ plan: SeriesPlan, seriesID: String, booked: [Int], requester: String?, now: Date) throws
        -> [PreparedBooking]
    {
        try booked.enumerated().map { position, index in
            guard case .success(let slot) = plan.occurrences[index].slot else {
                throw StoreCorruption(description: "occurrence \(index) of a series plan has no slot")
            }
            let valid = ValidatedCreate(room: plan.room, slot: slot, title: plan.title, description: plan.description,
                                        attendees: plan.attendees, status: plan.status)
            return try newBooking(valid, requester: requester, now: now,
                                  series: SeriesRef(id: seriesID, index: position, count: booked.count, version: 1))
        }
    }

    /// `booking.cancel` by `seriesId`: every active occurrence on or after
    /// `from` is cancelled as `booking.cancel` would (an occurrence in
    /// progress ends at the next quarter hour), each with its own
    /// `booking.cancelled`, and the series' version grows by one. The
    /// caller needs the right to cancel every one of them (else 2003 and
    /// nothing changes); occurrences inside the room's change cutoff stay
    /// and are listed in `skipped` (2004).
    func cancelSeries(_ c: CancelSeries, _ tx: any StoreTransaction, caller: Caller, now: Date) throws -> ReplyBody {
        if c.bookingId != nil {
            return ReplyBody(.failure(.invalidField, "booking.cancel takes bookingId or seriesId, not both", field: "bookingId"))
        }
        if let error = BookingRules.reason(c.reason) { return ReplyBody(.error(error)) }
        if let from = c.from, ContractFormat.calendarDate(from) == nil {
            return ReplyBody(.failure(.invalidField, "from \"\(from.prefix(40))\" is not a calendar date (YYYY-MM-DD)", field: "from"))
        }
        guard !c.seriesId.isEmpty, let series = try tx.series(id: c.seriesId) else {
            return ReplyBody(.failure(.bookingNotFound, "series '\(c.seriesId.prefix(100))' not found", field: "seriesId"))
        }
        let room = try tx.room(named: series.room)
        let targets = try tx.bookings(seriesId: series.id).filter { booking in c.from.map { booking.date >= $0 } ?? true }
        var plans: [(booking: Booking, status: BookingStatus)] = []
        var skipped: [SkippedOccurrence] = []
        for booking in targets {
            let refusal = room.map { policy.refusal(.cancel, of: booking, in: $0, caller: caller) } ?? policy.mayChange(booking, caller: caller)
            if let refusal { return ReplyBody(.error(refusal)) }
            // Ended occurrences (cancelled, rejected, completed) are simply past.
            guard case .success(let status) = BookingRules.transition(.cancel, from: booking.status,
                                                                      requiresApproval: room?.requiresApproval ?? false) else { continue }
            if let room, let late = BookingRules.tooLate(.cancel, booking: booking, room: room, now: now, isAdmin: policy.isAdmin(caller)) {
                skipped.append(SkippedOccurrence(date: booking.date, code: late.code, text: late.text, bookingId: booking.id))
                continue
            }
            plans.append((booking, status))
        }
        let version = plans.isEmpty ? series.version : series.version + 1
        var cancelled: [Booking] = []
        for (booking, status) in plans {
            var changed = booking.status == .inProgress
                ? BookingRules.cutShort(booking, now: now, zone: TimeZone(identifier: booking.timeZone) ?? .gmt)
                : booking
            changed.status = status
            changed.cancelReason = c.reason
            changed.series?.version = version
            cancelled.append(try record(changed, from: booking, event: .bookingCancelled, tx, now: now).booking)
        }
        if version != series.version { try tx.setSeriesVersion(id: series.id, version) }
        if !cancelled.isEmpty { try promoteWaiters(room: series.room, tx, now: now) }
        // An approver may end occurrences in progress of a series it sees
        // only busy (one booked without user_id): they are listed in the
        // busy view, as a single cancel's reply and every read give them
        // (contract v1.2).
        let views = cancelled.map { booking in
            BookingView(booking, visibility: BookingReader.visibility(
                requestedBy: booking.requestedBy, approvers: room?.approvers ?? [], caller: caller,
                administrators: policy.administrators))
        }
        return ReplyBody(.seriesCancelled(SeriesCancelled(id: series.id, version: version, cancelled: views, skipped: skipped)))
    }
}

extension SeriesPlan {
    /// Whether occurrence `index` passed every room rule.
    func isValid(_ index: Int) -> Bool {
        if case .success = occurrences[index].slot { return true }
        return false
    }
}
