import BookingContracts
import Foundation

/// Where the booking handler keeps rooms, bookings, the inbox of processed
/// commands and the outbox of events: ``SQLiteBookingStore`` on one machine
/// (the embedded default), ``PostgresBookingStore`` when several handler
/// instances on several hosts share one database (`DATABASE_URL`).
///
/// Both give the same guarantees, which is what the rest of the handler
/// relies on (and one suite of store tests checks against both):
///
/// - **One writer at a time.** Command transactions are serialised across
///   every process sharing the store (SQLite's write lock; a transaction-
///   level advisory lock on PostgreSQL), so an overlap check and the insert
///   it allows can never interleave with another's. PostgreSQL also refuses
///   overlapping active bookings by an exclusion constraint, as a second
///   line.
/// - **Inbox exact.** A command's effect, its events, its reply and its
///   idempotency key commit together (``CommandStore/execute(key:commandType:_:)``).
/// - **Outbox at least once, per process in commit order.** New events are
///   claimed by the process that wrote them and handed to its relay in
///   memory; the table is the fallback, claimed with a lease so that
///   concurrent relays do not publish the same event at the same time.
/// - **Readers see commit order.** `booking_version.seq` grows in commit
///   order, which the snapshot rule of `booking.list` cursors needs.
///
/// Each caller sees only its part: the command processor a
/// ``CommandStore``, the timers a ``TimerStore``, readers a ``ReadStore``,
/// the relay an ``OutboxStore``; this is their composition, which the
/// handler opens once and hands to each.
public protocol BookingStore: CommandStore, ReadStore, OutboxStore {
    /// Closes the store's connections (PostgreSQL); nothing for SQLite.
    func close() async
    /// Counts, for tests and metrics.
    func counts() async throws -> (rooms: Int, bookings: Int, inbox: Int, outboxPending: Int)
}

/// What the durable timers need of the store: one write transaction at a
/// time, under the write lock (`applyDueTimer()`).
public protocol TimerStore: Sendable {
    /// Runs `body` in one write transaction (no inbox involved).
    func transaction<T: Sendable>(_ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T
}

/// What the command processor needs of the store: commands through the
/// inbox, plain write transactions, and the room cache.
public protocol CommandStore: TimerStore {
    /// Runs a command: when `key` is already in the inbox (in the sender's
    /// scope), returns its stored reply — or 1009 when the sender used it
    /// for a different command — and does nothing else; otherwise runs
    /// `body` and stores its effect, its events and its reply in the same
    /// transaction. Commands submitted together may share one transaction
    /// (group commit), each in its own savepoint; a command alone in its
    /// transaction needs none (``CommitEngine``).
    func execute(key: InboxKey?, commandType: String,
                 _ body: @Sendable @escaping (any StoreTransaction) throws -> ReplyBody) async throws -> StoreOutcome

    /// The room as this process last read it, with its stored JSON; no
    /// database access, possibly stale (a hint for validating early).
    func cachedRoom(named name: String) -> CachedRoom?
}

/// What readers need of the store: committed state, never a write
/// (``BookingReader``; `booking.replay` in the command consumer).
public protocol ReadStore: Sendable {
    /// Every room with the instant it was last registered (for `booking.replay`).
    func replayRooms() async throws -> [(room: Room, updatedAt: Date)]
    /// Up to `limit` bookings with ids after `id`, in id order.
    func replayBookings(after id: String?, limit: Int) async throws -> [Booking]
    /// Like ``replayBookings(after:limit:)`` but each booking as its stored
    /// JSON (what ``ContractJSON`` wrote when the version was saved), for a
    /// replay page that passes it on without decoding it.
    func replayBookingJSON(after id: String?, limit: Int) async throws -> [(id: String, json: [UInt8])]
    /// One booking as committed, or nil.
    func booking(id: String) async throws -> Booking?
    /// The newest committed version's `seq`: the snapshot a first page fixes.
    func snapshotSeq() async throws -> Int64
    /// The booking versions visible at snapshot `seq` (committed at or
    /// before it, not yet superseded then) overlapping [`from`, `to`), in
    /// (`startsAt`, `id`) order after `after`, at most `limit`; filtered by
    /// room, statuses, requester and series when given.
    func listVersions(at seq: Int64, from: Date, to: Date, room: String?, statuses: [BookingStatus]?,
                      requestedBy: String?, seriesId: String?, after: (startsAt: Int64, id: String)?, limit: Int)
        async throws -> [ListedVersion]
    /// The room as stored (never the cache), or nil.
    func room(named name: String) async throws -> Room?
    /// The closures of `room` overlapping [from, to), in start order (`room.closures`).
    func closures(room: String, from: Date, to: Date) async throws -> [RoomClosure]
    /// Every stored closure, by room and start (for `booking.replay`).
    func replayClosures() async throws -> [RoomClosure]
    /// The room's waitlisted bookings in waitlist order, as committed (for
    /// the positions reads show).
    func waiters(room: String) async throws -> [Booking]
    /// `db.system.name` in the read spans (``StoreSpans``); nil: not said.
    var systemName: String? { get }
}

/// What the outbox relay needs of the store: the events to publish, from
/// memory or from the table, and the hand-over switches (``OutboxRelay``,
/// ``OutboxHandOver``).
public protocol OutboxStore: Sendable {
    /// Whether the relay must read the table instead of memory.
    var handOverSuspended: Bool { get }
    /// Whether this process recently queued an event behind another
    /// process's unpublished one of the same booking: the relay then sweeps
    /// the table often, for it goes out from there.
    var queuedBehindOthers: Bool { get }
    /// Switches hand-over off after a failed publish, releasing the claims
    /// on `failed` and on every event still waiting in memory.
    func suspendHandOver(releasing failed: [Int64]) async throws
    /// Switches hand-over back on once the relay has caught up with the table.
    func resumeHandOver() async throws
    /// Takes up to `limit` of the events committed by this process, oldest first.
    func takeCommitted(limit: Int) -> [OutboxEvent]
    /// Claims up to `limit` unpublished events nobody holds, oldest first,
    /// for `lease` seconds.
    func claimOutbox(limit: Int, lease: TimeInterval) async throws -> [OutboxEvent]
    /// Marks events published (after the broker confirmed them).
    func markPublished(_ ids: [Int64]) async throws
    /// Gives claims back (publish failed) so the next round retries them.
    func releaseClaims(_ ids: [Int64]) async throws
    /// Deletes published events, inbox entries and superseded versions
    /// older than `age` seconds before `now` (the relay passes the wall
    /// clock; tests pass a fixed time).
    func prune(olderThan age: TimeInterval, now: Date) async throws
}

extension OutboxStore {
    /// ``prune(olderThan:now:)`` as of the wall clock.
    public func prune(olderThan age: TimeInterval) async throws {
        try await prune(olderThan: age, now: Date())
    }
}

extension CommandStore {
    /// ``execute(key:commandType:_:)`` for a body that returns its reply unencoded.
    public func execute(
        key: InboxKey?, commandType: String, _ body: @Sendable @escaping (any StoreTransaction) throws -> CommandReply
    ) async throws -> StoreOutcome {
        try await execute(key: key, commandType: commandType) { tx in ReplyBody(try body(tx)) }
    }
}

extension ReadStore {
    /// A store that does not say what it is (test doubles).
    public var systemName: String? { nil }

    /// ``listVersions(at:from:to:room:statuses:requestedBy:seriesId:after:limit:)`` of any series.
    public func listVersions(at seq: Int64, from: Date, to: Date, room: String?, statuses: [BookingStatus]?,
                             requestedBy: String?, after: (startsAt: Int64, id: String)?, limit: Int)
        async throws -> [ListedVersion]
    {
        try await listVersions(at: seq, from: from, to: to, room: room, statuses: statuses, requestedBy: requestedBy,
                               seriesId: nil, after: after, limit: limit)
    }
}

/// What a command may do inside its transaction. Only valid inside the
/// closure of ``CommandStore/execute(key:commandType:_:)`` or
/// ``TimerStore/transaction(_:)``, on the thread that runs it.
public protocol StoreTransaction {
    /// The room's stored JSON, exactly as written.
    func roomJSON(named name: String) throws -> Data?
    /// The room, decoded once per distinct stored JSON.
    func room(named name: String) throws -> Room?
    /// Registers or replaces a room (and re-arms the timers of its bookings
    /// waiting for a check-in). Returns the registration's instant, whole
    /// seconds: `now`, or one second after the room's previous one if that
    /// is not earlier — so a room's registrations, live and replayed, are
    /// ordered by `occurredAt` without ties.
    func upsertRoom(_ room: Room, at now: Date) throws -> Date
    /// One booking, or nil.
    func booking(id: String) throws -> Booking?
    /// Ids of the room's blocking (pending, confirmed, inProgress, held)
    /// bookings overlapping [startsAt, endsAt), except `excluding`.
    func conflicts(room: String, startsAt: Date, endsAt: Date, excluding: String?) throws -> [String]
    /// The room's waitlisted bookings in waitlist order: by the commit of
    /// the version that first made each wait, then id (contract v1.2's
    /// "creation time, id", in the order the handler committed them).
    func waiters(room: String) throws -> [Waiter]
    /// How many bookings of `room` requested by `requestedBy` have not
    /// ended at `now`: status pending, confirmed, inProgress, held or waitlisted and `endsAt`
    /// after `now` (the quota of contract v1.2, ``Room/maxActiveBookings``).
    /// Read under the write lock, so the count and the insert it allows
    /// cannot interleave with another command's.
    func activeBookings(room: String, requestedBy: String, at now: Date) throws -> Int
    /// Inserts or replaces a booking, stored as its already encoded JSON,
    /// with the due time of its timer, and appends the version for readers.
    func save(_ encoded: EncodedBooking, startsAt: Date, endsAt: Date) throws
    /// Records a new series (version 1).
    func insertSeries(id: String, room: String, requestedBy: String?, recurrence: Recurrence,
                      onConflict: ConflictPolicy, count: Int, now: Date) throws
    /// A series as stored, or nil.
    func series(id: String) throws -> SeriesRow?
    func setSeriesVersion(id: String, _ version: Int) throws
    /// Every occurrence of the series, in start order.
    func bookings(seriesId: String) throws -> [Booking]
    /// The booking whose timer is due earliest at `now` (ties by id), or nil.
    func earliestDue(at now: Date) throws -> (id: String, due: Int64)?
    /// Moves a booking's timer to `due` (nil: none) without changing the booking.
    func setDue(bookingID: String, _ due: Date?) throws
    /// Moves a booking's timer to `due` only while it is still `stored`
    /// (as ``earliestDue(at:)`` read it): a due time another process or a
    /// command set meanwhile is kept.
    func postponeDue(bookingID: String, from stored: Int64, to due: Date) throws
    /// Stores a closure of its room over [from, to) (contract v1.2).
    func insertClosure(_ closure: RoomClosure, from: Date, to: Date) throws
    /// The closure `id` of `room`, or nil.
    func closure(id: String, room: String) throws -> RoomClosure?
    /// Removes the closure `id` (nothing when there is none).
    func deleteClosure(id: String) throws
    /// The closures of `room` overlapping [from, to), in start order.
    func closures(room: String, from: Date, to: Date) throws -> [RoomClosure]
    /// What a create reads under the write lock, together: the room's
    /// stored JSON, the closures overlapping the slot and the blocking
    /// bookings overlapping the slot widened by the room's buffer (see
    /// ``CreateChecks``). One statement on PostgreSQL, where each is a
    /// round trip under the lock; the three reads in process elsewhere.
    func createChecks(room: String, slot: DateInterval, window: DateInterval) throws -> CreateChecks
    /// Queues an event for the relay, in this transaction. Events of one
    /// `orderKey` (`booking:<id>`, `room:<name>`; see ``OutboxKey``) are
    /// published in the order they were queued, across processes too.
    /// `value` is the booking event `body` encodes, when the caller has it:
    /// handed over in memory with the event (``OutboxEvent/value``).
    func enqueue(routingKey: String, messageID: String, body: Data, orderKey: String?, value: BookingEvent?) throws
    /// Checks at once, for many events about to be queued, which `orderKey`s
    /// have no older unpublished event held elsewhere, so that ``enqueue``
    /// need not ask per event (a round trip each on PostgreSQL: 2,000 at a
    /// start that announces 2,000 rooms). Optional: without it, each
    /// ``enqueue`` checks its own key.
    func checkOrderKeys(_ keys: [String]) throws
    /// Queues many events in order, as ``enqueue`` would one by one
    /// (PostgreSQL: in one statement per thousand instead of a round trip
    /// each: a create's `booking.created` and `booking.confirmed` together).
    func enqueueAll(_ events: [NewOutboxEvent]) throws
}

/// An event to queue with ``StoreTransaction/enqueueAll(_:)``.
public struct NewOutboxEvent: Sendable {
    public var routingKey: String
    public var messageID: String
    public var body: Data
    public var orderKey: String?
    /// The booking event `body` encodes, when the caller has it (see ``OutboxEvent/value``).
    public var value: BookingEvent?

    public init(routingKey: String, messageID: String, body: Data, orderKey: String?, value: BookingEvent? = nil) {
        self.routingKey = routingKey
        self.messageID = messageID
        self.body = body
        self.orderKey = orderKey
        self.value = value
    }
}

extension StoreTransaction {
    /// Nothing checked ahead: each ``enqueue`` checks its key (in process, cheap).
    public func checkOrderKeys(_ keys: [String]) throws {}

    /// One ``enqueue`` per event (in process, cheap).
    public func enqueueAll(_ events: [NewOutboxEvent]) throws {
        for event in events {
            try enqueue(routingKey: event.routingKey, messageID: event.messageID, body: event.body, orderKey: event.orderKey,
                        value: event.value)
        }
    }

    /// Runs `action` on the writer once this transaction (for a command in
    /// a group: its savepoint and the group) has committed, never when it
    /// rolls back: what must happen once per committed change — the hold
    /// and waitlist metrics — and not again when a rolled-back command is
    /// redelivered or a timer step retried. A transaction not run by the
    /// commit engine (an in-memory test double) runs it at once.
    func afterCommit(_ action: @escaping () -> Void) {
        if let queuing = self as? any QueuingTransaction {
            queuing.events.afterCommit.append(action)
        } else {
            action()
        }
    }

    /// Queues an event whose value the relay need not see (not a booking
    /// event, or one read back from elsewhere).
    public func enqueue(routingKey: String, messageID: String, body: Data, orderKey: String?) throws {
        try enqueue(routingKey: routingKey, messageID: messageID, body: body, orderKey: orderKey, value: nil)
    }
}

/// The reads of ``StoreTransaction/createChecks(room:slot:window:)``.
public struct CreateChecks: Sendable {
    /// The room's stored JSON (nil: no such room).
    public var roomJSON: Data?
    /// The room's closures overlapping the slot, in start order.
    public var closures: [RoomClosure]
    /// Ids of the room's blocking bookings overlapping the window, in start order.
    public var conflicts: [String]

    public init(roomJSON: Data?, closures: [RoomClosure], conflicts: [String]) {
        self.roomJSON = roomJSON
        self.closures = closures
        self.conflicts = conflicts
    }
}

extension StoreTransaction {
    /// The three reads one after the other (in process, no round trips).
    public func createChecks(room: String, slot: DateInterval, window: DateInterval) throws -> CreateChecks {
        CreateChecks(roomJSON: try roomJSON(named: room), closures: try closures(room: room, from: slot.start, to: slot.end),
                     conflicts: try conflicts(room: room, startsAt: window.start, endsAt: window.end, excluding: nil))
    }

    /// Ids of the room's active bookings overlapping [startsAt, endsAt).
    public func conflicts(room: String, startsAt: Date, endsAt: Date) throws -> [String] {
        try conflicts(room: room, startsAt: startsAt, endsAt: endsAt, excluding: nil)
    }

    /// Inserts or replaces a booking (the caller bumps `version`).
    public func save(_ booking: Booking, startsAt: Date, endsAt: Date) throws {
        try save(EncodedBooking(booking), startsAt: startsAt, endsAt: endsAt)
    }
}

/// Constants and rules every store applies the same way.
public enum StoreRules {
    /// The condition on `booking_version` rows the prune deletes, followed
    /// by the cut-off: superseded versions older than any open cursor. The
    /// partial index `booking_version_superseded` is made for exactly this
    /// (both stores use this text; `StoreTests` checks their plans with it).
    public static let prunableVersionsCondition = "until IS NOT NULL AND supersededAt <"

    /// How long a relay's claim on events it took from the table lasts.
    /// Another process's relay publishes them only after that (the
    /// claimer died) or once they were released (a failed publish).
    public static let claimLease: TimeInterval = 30

    /// How long a `booking.list` cursor stays valid, and so how long a
    /// superseded booking version is kept for the pages of cursors opened
    /// before it changed.
    public static let cursorLifetime: TimeInterval = 3600

    /// No booking is longer than this: a booking lies within one local
    /// day's opening hours. A local day is 24 h plus its clock change —
    /// 25 h 45 min at most today (Antarctica/Troll, 2 h), 48 h for a zone
    /// that repeats a date — so 50 h holds with a margin. Overlap queries
    /// use it as a lower bound on `startsAt`, so their index range is about
    /// two days however long the room's history.
    public static let longestBooking: Int64 = 50 * 3600

    /// Whole seconds, rounded up: a timer never runs before its due instant.
    public static func dueSeconds(_ date: Date) -> Int64 {
        Int64(date.timeIntervalSince1970.rounded(.up))
    }
}

/// The result of a command transaction.
public struct StoreOutcome: Sendable {
    /// The reply to send (stored in the inbox with the effect).
    public var reply: CommandReply
    /// `reply` encoded: the bytes stored in the inbox, and the bytes to send.
    public var json: Data
    /// True when the key was seen before: `reply` is the stored one and
    /// nothing was changed.
    public var duplicate: Bool
    /// True when the sender had used the key for a different command:
    /// `reply` is 1009 and nothing was changed or stored.
    public var keyReused: Bool = false
}

/// An event waiting to be published.
public struct OutboxEvent: Sendable, Equatable {
    public var id: Int64
    public var routingKey: String
    public var messageID: String
    public var body: [UInt8]
    /// The booking event `body` encodes, for events this process committed
    /// and handed over in memory: the relay builds the `booking.public`
    /// copy from it instead of decoding `body` (that decode was 3.6 % of
    /// the handler's CPU). Nil for events read from the table.
    public var value: BookingEvent? = nil
    /// The W3C `traceparent` of the store transaction that queued it, so
    /// its publish — also a later one, from the table — is part of the
    /// command's trace (nil: no trace, or a row from before).
    public var traceParent: String? = nil
    /// The `tracestate` that came with it (for `booking.events`; never
    /// copied onto `booking.public`).
    public var traceState: String? = nil
}

/// One booking version as ``ReadStore/listVersions(at:from:to:room:statuses:requestedBy:seriesId:after:limit:)``
/// reads it: the columns the reader filters on and the JSON it answers
/// with, never decoded on the way on SQLite (a week of a room is some 40
/// bookings; decoding and re-encoding each cost more than the whole query).
public struct ListedVersion: Sendable {
    public let id: String
    public let room: String
    /// The booking's zone (for windows given as local dates).
    public let timeZone: String
    /// UNIX seconds.
    public let startsAt: Int64
    /// UNIX seconds.
    public let endsAt: Int64
    public let requestedBy: String?
    /// The booking as events carry it — the reply's booking with contact
    /// details (contract v1.1 `bookingView`).
    public let json: [UInt8]
    /// The same without attendees' `email` and `phone`, byte for byte what
    /// the encoder writes for it.
    public let redactedJSON: [UInt8]
}

/// A waitlisted booking as ``StoreTransaction/waiters(room:)`` reads it.
public struct Waiter: Sendable {
    public let booking: Booking
    /// When it started waiting (wall clock of the handler that queued it).
    public let waitingSince: Date?
}

/// A series as stored: who booked it where, and its version.
public struct SeriesRow: Sendable, Equatable {
    public let id: String
    public let room: String
    public let requestedBy: String?
    public let version: Int
    public let count: Int
}

/// A reply a command body returns, with its encoding when the body already
/// has it (a booking encoded once for its row, events and reply).
public struct ReplyBody: Sendable {
    public var reply: CommandReply
    /// `ContractJSON.encode(reply)`, or nil to have the store encode it.
    public var json: Data?

    public init(_ reply: CommandReply, json: Data? = nil) {
        self.reply = reply
        self.json = json
    }
}

/// A room with the exact JSON it was decoded from.
public struct CachedRoom: Sendable {
    public var room: Room
    public var json: Data
}


/// The order keys of outbox events: events of one key leave in commit
/// order, whichever process committed them.
enum OutboxKey {
    static func booking(_ id: String) -> String { "booking:" + id }
    static func room(_ name: String) -> String { "room:" + name }
}
