import BookingContracts
import Foundation

/// A command as it arrived: the body and the AMQP properties that matter.
public struct IncomingCommand: Sendable {
    public var body: [UInt8]
    /// The `type` property (may be absent: then the routing key names the command).
    public var typeProperty: String?
    public var routingKey: String
    public var messageID: String?
    /// The `idempotency-key` header, for clients that cannot set `message_id`.
    public var idempotencyKeyHeader: String?
    /// The authenticated broker user (`user_id`, checked by RabbitMQ).
    public var userID: String?
    /// Where the reply goes (`reply_to`); checked by ``ReplyAddress``.
    public var replyTo: String?

    public init(body: [UInt8], typeProperty: String?, routingKey: String, messageID: String?,
                idempotencyKeyHeader: String?, userID: String?, replyTo: String? = nil) {
        self.body = body
        self.typeProperty = typeProperty
        self.routingKey = routingKey
        self.messageID = messageID
        self.idempotencyKeyHeader = idempotencyKeyHeader
        self.userID = userID
        self.replyTo = replyTo
    }

    /// The idempotency key: `message_id`, else the `idempotency-key` header.
    public var idempotencyKey: String? {
        MessageProperties.idempotencyKey(messageID: messageID, idempotencyKeyHeader: idempotencyKeyHeader)
    }
}

/// What became of a command.
public enum ProcessingResult: Sendable, Equatable {
    /// Executed (or recognised as a repeat): reply with `reply`, whose
    /// encoding is `json` when the store has it (else nil: encode it).
    case handled(CommandReply, type: CommandType, duplicate: Bool, json: Data? = nil)
    /// Not a command we can run (no usable type, not JSON, wrong shape):
    /// reply with `reply` and dead-letter it with `reason`.
    case poison(CommandReply, reason: String)
    /// Not executed and not answered, because its `reply_to` names a queue
    /// the sender may not reply into (``ReplyAddress``): dead-letter it
    /// with `reason`.
    case refused(reason: String)
    /// A permitted `booking.replay` (``ReplayBookings/replayId`` filled in):
    /// the consumer publishes the state to the queue, then replies. Not
    /// recorded in the inbox: repeating a replay is harmless.
    case replay(ReplayBookings)
}

/// Turns commands into effects, events and replies, one database
/// transaction each (see ``BookingStore``).
public struct CommandProcessor: Sendable {
    let store: any BookingStore
    /// Who may do what (docs/security.md).
    public let policy: CallerPolicy
    let now: @Sendable () -> Date
    let newID: @Sendable () -> String
    /// Where holds and promotions are counted.
    let waitlistMetrics: WaitlistMetrics

    /// - Parameters:
    ///   - policy: the caller model: admins, room managers, replayers,
    ///     whether `user_id` is required.
    public init(store: any BookingStore, policy: CallerPolicy = CallerPolicy(),
                now: @escaping @Sendable () -> Date = { Date() },
                newID: @escaping @Sendable () -> String = { RandomID.uuidString() }) {
        self.init(store: store, policy: policy, now: now, newID: newID, waitlistMetrics: .shared)
    }

    init(store: any BookingStore, policy: CallerPolicy = CallerPolicy(), now: @escaping @Sendable () -> Date = { Date() },
         newID: @escaping @Sendable () -> String = { RandomID.uuidString() }, waitlistMetrics: WaitlistMetrics) {
        self.store = store
        self.policy = policy
        self.now = now
        self.newID = newID
        self.waitlistMetrics = waitlistMetrics
    }

    /// Processes one command. Throws only for infrastructure failures
    /// (database), which the caller retries by redelivery.
    ///
    /// Order of checks, cheapest and least revealing first: where the reply
    /// would go (a forbidden `reply_to` is never answered), the command type,
    /// the caller's admission (``CallerPolicy/admit(_:caller:)``), the body,
    /// then the inbox (scoped by caller) and the command's own rules.
    public func process(_ command: IncomingCommand) async throws -> ProcessingResult {
        let caller = Caller(userID: command.userID)
        if let reason = ReplyAddress.refusal(command.replyTo, caller: caller) {
            return .refused(reason: reason)
        }
        guard let type = CommandType.resolve(typeProperty: command.typeProperty, routingKey: command.routingKey) else {
            let name = command.typeProperty ?? command.routingKey
            return .poison(.failure(.unknownCommand, "unknown command type '\(name.prefix(100))'"),
                           reason: "unknown command type")
        }
        if let refusal = policy.admit(type, caller: caller) {
            return .handled(.error(refusal), type: type, duplicate: false)
        }
        let decoded: Command
        do {
            decoded = try Command.decode(type: type, body: command.body)
        } catch {
            let replyError = ContractJSON.replyError(for: error)
            return .poison(.error(replyError), reason: "\(replyError.code.rawValue) \(replyError.text)")
        }
        if ContractLimits.hasNULString(command.body) {
            // Refused on every engine alike, before the store sees it.
            return .handled(.failure(.invalidField, ContractLimits.nulRefusal), type: type, duplicate: false)
        }
        if case .replayBookings(let request) = decoded {
            return authorizeReplay(request)
        }
        if let key = command.idempotencyKey, key.unicodeScalars.contains("\u{0}") {
            // PostgreSQL's text cannot hold it; refused on every engine alike.
            return .handled(.failure(.invalidField, "message_id (or the idempotency-key header) must not contain U+0000",
                                     field: "message_id"), type: type, duplicate: false)
        }
        if let key = command.idempotencyKey, key.utf8.count > MessageProperties.maxIdempotencyKeyBytes {
            // message_id is an AMQP short string (≤ 255 bytes); the header
            // is held to the same, so a key cannot make inbox rows large.
            return .handled(.failure(.invalidField, "the idempotency-key header is longer than \(MessageProperties.maxIdempotencyKeyBytes) bytes",
                                     field: "idempotency-key"), type: type, duplicate: false)
        }
        let now = self.now()
        let requester = caller.name
        let key = command.idempotencyKey.map {
            InboxKey(caller: caller, key: $0, commandType: type.rawValue, body: command.body)
        }
        let outcome: StoreOutcome
        if case .createBooking(let create) = decoded, create.recurrence != nil {
            let prepared = prepareSeries(create, requester: requester, now: now)
            outcome = try await store.execute(key: key, commandType: type.rawValue) { [self] tx in
                try commitSeries(prepared, create, tx, caller: caller, now: now)
            }
        } else if case .createBooking(let create) = decoded, let prepared = prepare(create, requester: requester, now: now) {
            outcome = try await store.execute(key: key, commandType: type.rawValue) { [self] tx in
                try commit(prepared, create, tx, caller: caller, now: now)
            }
        } else {
            outcome = try await store.execute(key: key, commandType: type.rawValue) { [self] tx in
                try apply(decoded, tx, caller: caller, now: now)
            }
        }
        return .handled(outcome.reply, type: type, duplicate: outcome.duplicate, json: outcome.json)
    }

    // MARK: Creating bookings outside the write lock

    /// A `booking.create` validated, built and encoded before its
    /// transaction, against the room as this process last saw it.
    ///
    /// Why: SQLite runs one write transaction at a time, so everything done
    /// inside one is done by one thread for all commands. Validation
    /// (libphonenumber, time zones) and JSON encoding are most of a create's
    /// work and need nothing from the database but the room; done here they
    /// run concurrently for all commands in flight. Only what needs the lock
    /// stays inside: the inbox check, the room check, the overlap query and
    /// the inserts.
    struct PreparedCreate: Sendable {
        /// The room's JSON this was validated against; the transaction
        /// re-reads the row and falls back to ``apply(_:_:caller:now:)``
        /// when it differs.
        let roomJSON: Data
        let result: Result<PreparedBooking, ReplyError>
    }

    /// A new booking ready to insert: encoded once, its events built.
    struct PreparedBooking: Sendable {
        let encoded: EncodedBooking
        let room: Room
        let slot: BookingSlot
        /// Whether a conflict puts it on the waitlist (`ifTaken`, v1.2).
        let waitlist: Bool
        /// Each event's body and the value it encodes (``OutboxEvent/value``).
        let events: [(type: EventType, id: String, body: Data, value: BookingEvent)]
    }

    /// Nil when the room is not cached (first command for it in this
    /// process, or unknown): the command then runs entirely inside its
    /// transaction, which caches the room for the next one.
    func prepare(_ create: CreateBooking, requester: String?, now: Date) -> PreparedCreate? {
        guard let cached = store.cachedRoom(named: create.room) else { return nil }
        switch BookingRules.validateCreate(create, room: cached.room, now: now) {
        case .failure(let error):
            return PreparedCreate(roomJSON: cached.json, result: .failure(error))
        case .success(let valid):
            guard let prepared = try? newBooking(valid, requester: requester, now: now) else { return nil }
            return PreparedCreate(roomJSON: cached.json, result: .success(prepared))
        }
    }

    func commit(_ prepared: PreparedCreate, _ create: CreateBooking, _ tx: any StoreTransaction,
                caller: Caller, now: Date) throws -> ReplyBody {
        switch prepared.result {
        case .failure(let error):
            guard try tx.roomJSON(named: create.room) == prepared.roomJSON else {
                // Re-registered (perhaps by another process) since it was cached.
                return try apply(.createBooking(create), tx, caller: caller, now: now)
            }
            return ReplyBody(.error(error))
        case .success(let booking):
            // The room, its closures and the overlap read at once (one
            // round trip on PostgreSQL instead of three); the checks still
            // apply in their order.
            let checks = try tx.createChecks(room: booking.room.name, slot: DateInterval(start: booking.slot.startsAt, end: booking.slot.endsAt),
                                             window: Self.overlapWindow(booking.room, booking.slot))
            guard checks.roomJSON == prepared.roomJSON else {
                return try apply(.createBooking(create), tx, caller: caller, now: now)
            }
            return try insert(booking, tx, caller: caller, now: now, checks: checks)
        }
    }

    func newBooking(_ valid: ValidatedCreate, requester: String?, now: Date, series: SeriesRef? = nil) throws -> PreparedBooking {
        let booking = Booking(
            id: newID(), room: valid.room.name, date: valid.slot.date, start: valid.slot.start, end: valid.slot.end,
            timeZone: valid.slot.timeZone, startsAt: ContractFormat.timestamp(valid.slot.startsAt),
            endsAt: ContractFormat.timestamp(valid.slot.endsAt), title: valid.title, description: valid.description,
            status: valid.status, attendees: valid.attendees, requestedBy: requester, version: 1, series: series,
            holdExpiresAt: valid.holdExpiresAt.map(ContractFormat.timestamp))
        let encoded = EncodedBooking(booking)
        // A booking that needs no approval is confirmed at once: consumers
        // that act on confirmation (passes) get the same event as for
        // an approved one, with the same version.
        let types: [EventType] = booking.status == .confirmed ? [.bookingCreated, .bookingConfirmed] : [.bookingCreated]
        let occurredAt = ContractFormat.timestamp(now)
        return PreparedBooking(encoded: encoded, room: valid.room, slot: valid.slot, waitlist: valid.waitlist, events: types.map { type in
            let id = newID()
            return (type, id, encoded.event(eventId: id, occurredAt: occurredAt),
                    BookingEvent(eventId: id, occurredAt: occurredAt, booking: booking))
        })
    }

    /// The locked part of a create: quota, closures and overlap, then the
    /// row and its events. Under the write lock, so no other command's
    /// insert can come between a check and this one's.
    /// `checks`: the reads of ``StoreTransaction/createChecks(room:slot:window:)``
    /// when the caller made them in this transaction; nil reads them here.
    func insert(_ prepared: PreparedBooking, _ tx: any StoreTransaction, caller: Caller, now: Date,
                checks: CreateChecks? = nil) throws -> ReplyBody {
        let closure = try checks.map { $0.closures.first }
            ?? tx.closures(room: prepared.room.name, from: prepared.slot.startsAt, to: prepared.slot.endsAt).first
        if let closure { return ReplyBody(.error(BookingRules.closedRefusal(closure, room: prepared.room.name))) }
        if let refusal = try quotaRefusal(prepared.room, caller: caller, adding: 1, tx, now: now) {
            return ReplyBody(.error(refusal))
        }
        if let conflict = try overlap(prepared.room, prepared.slot, tx, excluding: nil, known: checks?.conflicts) {
            guard prepared.waitlist else { return ReplyBody(conflict) }
            return try enqueueWaiter(prepared.encoded.booking, room: prepared.room, slot: prepared.slot, tx, caller: caller, now: now)
        }
        try tx.save(prepared.encoded, startsAt: prepared.slot.startsAt, endsAt: prepared.slot.endsAt)
        if prepared.encoded.booking.status == .held {
            let metrics = waitlistMetrics
            tx.afterCommit { metrics.holdsCreated.increment() }
        }
        try tx.enqueueAll(prepared.events.map { event in
            NewOutboxEvent(routingKey: event.type.rawValue, messageID: event.id, body: event.body,
                           orderKey: OutboxKey.booking(prepared.encoded.booking.id), value: event.value)
        })
        return ReplyBody(.booking(prepared.encoded.booking), json: prepared.encoded.reply)
    }

    /// Loads rooms from a `ROOMS_FILE` body (a JSON array of `room.register`
    /// bodies) and upserts them, each with its `room.registered` event.
    public func upsertRooms(fileContents: Data) async throws -> [Room] {
        let commands = try ContractJSON.decoder().decode([RegisterRoom].self, from: fileContents)
        var rooms: [Room] = []
        for (index, command) in commands.enumerated() {
            switch BookingRules.validateRoom(command) {
            case .failure(let error):
                throw RoomsFileError(description: "room #\(index + 1) (\(command.name)): \(error.text)")
            case .success(let room):
                rooms.append(room)
            }
        }
        let now = self.now()
        let valid = rooms
        // Rooms stored exactly as the file has them are not written again
        // (on PostgreSQL two statements a room, about 4,000 round trips at
        // every start of a 2,000-room office), and their waitlists are not
        // walked (promotion follows a change of hours or buffer; an
        // unchanged room has none). Their `room.registered` still goes out,
        // so that a projector started on an empty model learns every room;
        // queued together (on PostgreSQL one insert per thousand rooms).
        let stored = Dictionary(try await store.replayRooms().map { ($0.room.name, $0) }) { first, _ in first }
        try await store.transaction { [self] tx in
            // An unchanged room is announced as registered when it was, as
            // a replay announces it: not as newer than a change made since.
            let unchanged = valid.compactMap { room in stored[room.name].flatMap { $0.room == room ? $0 : nil } }
            try tx.enqueueAll(try unchanged.map { try roomRegistered($0.room, at: $0.updatedAt) })
            for room in valid where stored[room.name]?.room != room {
                let registered = try tx.upsertRoom(room, at: now)
                try enqueueRoomRegistered(room, tx, at: registered)
                try promoteWaiters(room: room.name, tx, now: now)
            }
        }
        return rooms
    }

    // MARK: Replay

    /// Where a replay may go (docs/contract/README.md, "Replay
    /// (booking.replay)"); who may ask was checked by
    /// ``CallerPolicy/admit(_:caller:)`` (REPLAY_USERS and ADMIN_USERS). The
    /// queue must start with `availability-projector.`, so the state
    /// (attendees included) only reaches queues of the service that already
    /// receives every event. Otherwise 2003.
    func authorizeReplay(_ request: ReplayBookings) -> ProcessingResult {
        let type = CommandType.replayBookings
        guard request.queue.hasPrefix(ReplayStream.queuePrefix), request.queue.utf8.count <= 255 else {
            return .handled(.failure(.notPermitted, "booking.replay may only publish to queues starting with '\(ReplayStream.queuePrefix)'",
                                     field: "queue"), type: type, duplicate: false)
        }
        if let id = request.replayId, id.isEmpty || id.utf8.count > 200 {
            return .handled(.failure(.invalidField, "replayId must be 1 to 200 bytes", field: "replayId"),
                            type: type, duplicate: false)
        }
        if let size = request.bookingsPerMessage, !(1...ReplayStream.maxBookingsPerMessage).contains(size) {
            return .handled(.failure(.invalidField, "bookingsPerMessage must be 1 to \(ReplayStream.maxBookingsPerMessage)",
                                     field: "bookingsPerMessage"),
                            type: type, duplicate: false)
        }
        var filled = request
        filled.replayId = request.replayId ?? newID()
        return .replay(filled)
    }

    // MARK: Commands

    func apply(_ command: Command, _ tx: any StoreTransaction, caller: Caller, now: Date) throws -> ReplyBody {
        let requester = caller.name
        switch command {
        case .registerRoom(let c):
            switch BookingRules.validateRoom(c) {
            case .failure(let error): return ReplyBody(.error(error))
            case .success(let room):
                let registered = try tx.upsertRoom(room, at: now)
                try enqueueRoomRegistered(room, tx, at: registered)
                // New hours or a smaller buffer may free waiters' slots.
                try promoteWaiters(room: room.name, tx, now: now)
                return ReplyBody(.room(room))
            }

        case .createBooking(let c):
            let room = try tx.room(named: c.room)
            switch BookingRules.validateCreate(c, room: room, now: now) {
            case .failure(let error): return ReplyBody(.error(error))
            case .success(let valid): return try insert(try newBooking(valid, requester: requester, now: now), tx, caller: caller, now: now)
            }

        case .confirmBooking(let c):
            return try change(c.bookingId, .confirm, tx, caller: caller, now: now) { booking, room in
                guard booking.status == .held else { return (booking, .bookingConfirmed) }
                // A hold confirmed by its requester (v1.2): confirmed, or
                // submitted to the approvers of a room that requires them.
                if let lapsed = BookingRules.holdLapsed(booking, now: now) { throw lapsed }
                let metrics = waitlistMetrics
                tx.afterCommit { metrics.holdsConfirmed.increment() }
                return (booking, room.requiresApproval ? .bookingSubmitted : .bookingConfirmed)
            }

        case .cancelBooking(let c):
            if let error = BookingRules.reason(c.reason) { return ReplyBody(.error(error)) }
            return try change(c.bookingId, .cancel, tx, caller: caller, now: now) { booking, _ in
                // In progress: it ends at the next 15-minute step, and the
                // rest of its slot is free again.
                var b = booking.status == .inProgress
                    ? BookingRules.cutShort(booking, now: now, zone: TimeZone(identifier: booking.timeZone) ?? .gmt)
                    : booking
                b.cancelReason = c.reason
                return (b, .bookingCancelled)
            }

        case .cancelSeries(let c):
            return try cancelSeries(c, tx, caller: caller, now: now)

        case .checkinBooking(let c):
            return try change(c.bookingId, .checkin, tx, caller: caller, now: now) { booking, room in
                if let refusal = BookingRules.checkinRefusal(booking, room: room, now: now) { throw refusal }
                return (booking, .bookingStarted)
            }

        case .rejectBooking(let c):
            if let error = BookingRules.reason(c.reason) { return ReplyBody(.error(error)) }
            return try change(c.bookingId, .reject, tx, caller: caller, now: now) { booking, _ in
                var b = booking
                b.cancelReason = c.reason
                return (b, .bookingRejected)
            }

        case .updateBooking(let c):
            return try change(c.bookingId, .update, tx, caller: caller, now: now) { booking, room in
                try BookingRules.applyUpdate(c, to: booking, room: room).get()
            }

        case .rescheduleBooking(let c):
            return try change(c.bookingId, .reschedule, tx, caller: caller, now: now) { booking, room in
                let slot: BookingSlot
                switch BookingRules.slot(room: room, date: c.date, start: c.start, end: c.end, now: now) {
                case .failure(let error): throw error
                case .success(let s): slot = s
                }
                if let closed = try closedRefusal(room, slot, tx) { throw closed }
                if case .error(let error)? = try overlap(room, slot, tx, excluding: booking.id) { throw error }
                var b = booking
                b.date = slot.date
                b.start = slot.start
                b.end = slot.end
                b.timeZone = slot.timeZone
                b.startsAt = ContractFormat.timestamp(slot.startsAt)
                b.endsAt = ContractFormat.timestamp(slot.endsAt)
                return (b, .bookingRescheduled)
            }

        case .closeRoom(let c):
            return try closeRoom(c, tx, caller: caller, now: now)

        case .reopenRoom(let c):
            return try reopenRoom(c, tx, now: now)

        case .replayBookings:
            // Handled by process(_:) before any transaction; never stored.
            return ReplyBody(.failure(.unknownCommand, "booking.replay is not a transactional command"))
        }
    }

    /// The common path of the commands on an existing booking: load,
    /// authorise (``CallerPolicy/refusal(_:of:in:caller:)``), check the
    /// status transition and the change window
    /// (``BookingRules/tooLate(_:booking:room:now:isAdmin:)``), let `modify`
    /// change the booking, then ``record(_:from:event:_:now:released:promoted:)``. A `ReplyError` thrown by `modify`
    /// becomes the reply (and nothing is written).
    private func change(
        _ id: String, _ action: BookingAction, _ tx: any StoreTransaction, caller: Caller, now: Date,
        _ modify: (Booking, Room) throws -> (Booking, EventType)
    ) throws -> ReplyBody {
        guard let booking = try tx.booking(id: id) else {
            return ReplyBody(.failure(.bookingNotFound, "booking '\(id.prefix(100))' not found", field: "bookingId"))
        }
        guard let room = try tx.room(named: booking.room) else {
            if let error = policy.mayChange(booking, caller: caller) { return ReplyBody(.error(error)) }
            return ReplyBody(.failure(.unknownRoom, "room '\(booking.room)' no longer exists", field: "room"))
        }
        if let refusal = policy.refusal(action, of: booking, in: room, caller: caller) { return ReplyBody(.error(refusal)) }
        let status: BookingStatus
        switch BookingRules.transition(action, from: booking.status, requiresApproval: room.requiresApproval) {
        case .failure(let error): return ReplyBody(.error(error))
        case .success(let s): status = s
        }
        if let late = BookingRules.tooLate(action, booking: booking, room: room, now: now, isAdmin: policy.isAdmin(caller)) {
            return ReplyBody(.error(late))
        }
        var changed: Booking
        let event: EventType
        do {
            (changed, event) = try modify(booking, room)
        } catch let error as ReplyError {
            return ReplyBody(.error(error))
        }
        changed.status = status
        var encoded = try record(changed, from: booking, event: event, tx, now: now)
        // A waiter that now has fewer attendees may fit a room it was too
        // many for ("any change to a room's bookings" runs the walk; no
        // other update can let a waiter in).
        let mayFit = action == .update && booking.status == .waitlisted && changed.attendees.count < booking.attendees.count
        if action.mayFreeTime || mayFit {
            // The same transaction, under the same lock (contract v1.2).
            let promoted = try promoteWaiters(room: booking.room, tx, now: now)
            // Promoted by its own update: the reply is the booking as the
            // command leaves it.
            if let own = promoted.first(where: { $0.id == booking.id }) { encoded = EncodedBooking(own) }
        }
        // An approver (or an in-progress cancel by one) may act on a booking
        // it sees only busy, e.g. one made without user_id: the reply then
        // carries the busy view, as every read would (contract v1.2).
        let view = BookingReader.visibility(requestedBy: booking.requestedBy, approvers: room.approvers ?? [],
                                            caller: caller, administrators: policy.administrators)
        return ReplyBody(.booking(encoded.booking), json: view == .full ? encoded.reply : encoded.busyReply)
    }

    /// Stores `changed` as the next version of `booking` and queues `event`
    /// for it, in `tx`. Every event after a booking's first carries
    /// `previous` (v1.1): consumers see what changed without keeping
    /// history themselves. `released` marks a release for want of check-in.
    func record(_ changed: Booking, from booking: Booking, event: EventType, _ tx: any StoreTransaction, now: Date,
                released: Bool = false, promoted: Bool = false) throws -> EncodedBooking {
        var changed = changed
        changed.version = booking.version + 1
        guard let startsAt = ContractFormat.parseTimestamp(changed.startsAt),
              let endsAt = ContractFormat.parseTimestamp(changed.endsAt) else {
            throw StoreCorruption(description: "booking \(booking.id) has unreadable instants")
        }
        let encoded = EncodedBooking(changed)
        try tx.save(encoded, startsAt: startsAt, endsAt: endsAt)
        let eventID = newID()
        let snapshot = BookingSnapshot(booking)
        let previous = snapshot.json
        let occurredAt = ContractFormat.timestamp(now)
        try tx.enqueue(routingKey: event.rawValue, messageID: eventID,
                       body: encoded.event(eventId: eventID, occurredAt: occurredAt, previous: previous, released: released,
                                           promoted: promoted),
                       orderKey: OutboxKey.booking(changed.id),
                       value: BookingEvent(eventId: eventID, occurredAt: occurredAt, booking: encoded.booking, previous: snapshot,
                                           released: released ? true : nil, promoted: promoted ? true : nil))
        return encoded
    }

    /// 2000 when a blocking booking of the room lies within the room's
    /// buffer of `slot` (contract v1.2: `a.start < b.end + buffer` and
    /// `b.start < a.end + buffer`, on instants), naming the neighbours.
    /// `known`: the conflicts already read for this window (and no `excluding`).
    func overlap(_ room: Room, _ slot: BookingSlot, _ tx: any StoreTransaction, excluding: String?,
                 known: [String]? = nil) throws -> CommandReply? {
        let window = Self.overlapWindow(room, slot)
        let ids = try known ?? tx.conflicts(room: room.name, startsAt: window.start, endsAt: window.end, excluding: excluding)
        guard let first = ids.first else { return nil }
        let existing = try tx.booking(id: first)
        let when = existing.map { "\($0.start)-\($0.end)" } ?? "\(slot.start)-\(slot.end)"
        let buffer = (room.bufferMinutes ?? 0) > 0 ? " (with its \(room.bufferMinutes ?? 0)-minute buffer between bookings)" : ""
        return .failure(.overlap, "\(room.name) is already booked \(when)\(buffer)", field: "start", conflicts: ids)
    }

    /// The instants a booking of `slot` must keep clear: the slot widened by
    /// the room's buffer on both sides (contract v1.2).
    static func overlapWindow(_ room: Room, _ slot: BookingSlot) -> DateInterval {
        DateInterval(start: slot.startsAt.addingTimeInterval(-room.bufferSeconds), end: slot.endsAt.addingTimeInterval(room.bufferSeconds))
    }

    /// 1113 when the caller's active bookings of `room` plus `adding` go
    /// beyond its ``Room/maxActiveBookings``. Admins are excepted; a
    /// booking without `user_id` has no requester to count.
    func quotaRefusal(_ room: Room, caller: Caller, adding: Int, _ tx: any StoreTransaction, now: Date) throws -> ReplyError? {
        guard room.maxActiveBookings != nil, let requester = caller.name, !policy.isAdmin(caller) else { return nil }
        let active = try tx.activeBookings(room: room.name, requestedBy: requester, at: now)
        return BookingRules.quotaRefusal(room: room, active: active, adding: adding)
    }

    // MARK: Events

    /// `registered`: the instant ``StoreTransaction/upsertRoom(_:at:)``
    /// stored, which a replay of the room carries too.
    private func enqueueRoomRegistered(_ room: Room, _ tx: any StoreTransaction, at registered: Date) throws {
        let event = try roomRegistered(room, at: registered)
        try tx.enqueue(routingKey: event.routingKey, messageID: event.messageID, body: event.body, orderKey: event.orderKey)
    }

    private func roomRegistered(_ room: Room, at registered: Date) throws -> NewOutboxEvent {
        let event = RoomRegistered(eventId: newID(), occurredAt: ContractFormat.timestamp(registered), room: room)
        return NewOutboxEvent(routingKey: EventType.roomRegistered.rawValue, messageID: event.eventId,
                              body: try ContractJSON.encode(event), orderKey: OutboxKey.room(room.name))
    }
}

/// `ROOMS_FILE` holds something that is not a valid list of rooms.
public struct RoomsFileError: Error, CustomStringConvertible {
    public let description: String
}

/// A stored row could not be read back.
struct StoreCorruption: Error, CustomStringConvertible {
    let description: String
}
