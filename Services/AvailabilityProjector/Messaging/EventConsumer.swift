import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceSupport
import Tracing

/// Reads a `room.registered` or booking event into a ``ModelChange``.
enum EventReader {
    enum Outcome {
        case change(ModelChange)
        /// Not an event the read model uses (`pass.*`, …): ack and skip.
        case ignored
        /// Unreadable: dead-letter.
        case poison(String)
        /// Not published by the booking handler's user: dead-letter.
        case untrusted(String)
        /// A booking event whose status this projector does not know: a
        /// newer handler's. Contract v1.1 has consumers ignore unknown
        /// status values, so the event is acked and the model keeps what
        /// it knew of the booking — dead-lettering it would fill the dead
        /// letters with every event of an upgrade done handler first.
        case unknownStatus(bookingId: String, status: String)
    }

    static func read(type: String, body: [UInt8]) -> Outcome {
        guard let eventType = EventType(rawValue: type) else {
            // A newer handler's booking event type: every booking event
            // carries the whole booking, so its state counts like any
            // other (a rebuild's count check counts it too). A body that
            // is not a booking event is some other message: ignored.
            // `booking.replay` and the replay's own `booking.replay.*`
            // messages are not booking events; `booking.replayed` would be.
            guard type.hasPrefix("booking."), type != CommandType.replayBookings.rawValue,
                  !type.hasPrefix(CommandType.replayBookings.rawValue + ".") else { return .ignored }
            switch read(type: EventType.bookingUpdated.rawValue, body: body) {
            case .poison: return .ignored
            case let outcome: return outcome
            }
        }
        switch eventType {
        case .roomRegistered:
            guard let event = try? ContractJSON.decode(RoomRegistered.self, from: body) else {
                return .poison("room.registered body does not decode")
            }
            return .change(.room(event.room, occurredAt: event.occurredAt))
        case .roomClosed, .roomReopened:
            guard let event = try? ContractJSON.decode(RoomClosureEvent.self, from: body), ClosureSpan(event.closure) != nil else {
                return .poison("\(type) body does not decode")
            }
            return .change(.closure(event.closure, removed: eventType == .roomReopened))
        case _ where eventType.isBookingEvent:
            // Every booking event carries the whole booking: the newest
            // version wins, whatever the type (v1.1 adds started, completed).
            // Only the fields the read model keeps are decoded (as for
            // pages): the whole booking was 7 % of the projector's CPU per
            // booking.
            guard let b = (try? ContractJSON.decode(SlotEvent.self, from: body))?.booking else {
                return .poison("\(type) body does not decode")
            }
            guard let status = BookingStatus(rawValue: b.status) else {
                return .unknownStatus(bookingId: b.id, status: b.status)
            }
            guard let state = BookingState(id: b.id, room: b.room, date: b.date, start: b.start, end: b.end, status: status,
                                           version: b.version) else {
                return .poison("\(type) has an unreadable date or time")
            }
            return .change(.booking(state))
        default:
            return .ignored
        }
    }

    /// A replay page's bookings (``ReplayPage``) as changes, in page order
    /// (a booking with a status this projector does not know as
    /// ``ModelChange/keepBooking(id:)``); nil when the body does not decode
    /// or one of its bookings has an unreadable date or time.
    ///
    /// Only the fields the read model keeps are decoded: a page of 500
    /// bookings with their attendees is mostly fields the projector never
    /// looks at, and decoding them whole was most of a rebuild's time.
    static func readPage(_ body: [UInt8]) -> [ModelChange]? {
        guard let page = try? ContractJSON.decode(SlotPage.self, from: body) else { return nil }
        var changes: [ModelChange] = []
        changes.reserveCapacity(page.bookings.count)
        for b in page.bookings {
            guard let status = BookingStatus(rawValue: b.status) else {
                guard !b.id.isEmpty else { return nil }
                changes.append(.keepBooking(id: b.id))
                continue
            }
            guard let state = BookingState(id: b.id, room: b.room, date: b.date, start: b.start, end: b.end, status: status,
                                           version: b.version) else { return nil }
            changes.append(.booking(state))
        }
        return changes
    }

    /// What the read model keeps of replayed bookings.
    private struct SlotPage: Decodable {
        struct Slot: Decodable {
            let id: String
            let room: String
            let date: String
            let start: String
            let end: String
            /// Text: an unknown value is ignored, not a decoding error.
            let status: String
            let version: Int
        }
        let bookings: [Slot]
    }

    /// What the read model keeps of a booking event.
    private struct SlotEvent: Decodable {
        let booking: SlotPage.Slot
    }
}

/// Consumes `availability-projector.events` (`room.#`, `booking.#`) into
/// the read model.
///
/// Per delivery: apply in one SQLite transaction (a repeated or older
/// version is a no-op; cancelled bookings stay as tombstones), update the
/// index, publish `availability.changed` for room-days whose free slots
/// changed and wait for the broker's confirm, then ack. An applied change
/// also waits for the announcements of the room-days it wrote that, as of
/// its commit, were an earlier event's (events committed together announce
/// a day once, by the first), so no event is acked on the strength of an
/// announcement the broker may still refuse. A
/// redelivered event that turns out to be a no-op publishes the current
/// `avail` of its room-days, and of those whose announcement the broker
/// refused, again, because its first delivery may have committed without
/// its `availability.changed` being confirmed; the ids are derived as on
/// the first delivery (``cause(of:messageID:)``), so a copy that did reach
/// consumers is dropped by them as a repeat. Unreadable events are
/// dead-lettered (`availability-projector.events.dead`); database errors
/// and unconfirmed changes requeue after a pause.
public struct EventConsumer: Sendable {
    let connection: AMQPConnection
    let store: ProjectorStore
    let publisher: ChangePublisher
    let logger: Logger
    /// Events count only when the booking handler's user published them.
    let sender: SenderCheck

    /// - Parameter sender: whose events to apply; default this connection's
    ///   own user (the one-user embedded set).
    public init(connection: AMQPConnection, store: ProjectorStore, publisher: ChangePublisher, logger: Logger,
                sender: SenderCheck? = nil) {
        self.connection = connection
        self.store = store
        self.publisher = publisher
        self.logger = logger
        self.sender = sender ?? SenderCheck(trustedUser: connection.user)
    }

    public func service(queue: String = Topology.projectorEventsQueue, prefetch: UInt16 = 256,
                        concurrency: Int = 32) -> AMQPConsumerService {
        AMQPConsumerService(connection: connection, queue: queue, prefetch: prefetch,
                            concurrency: concurrency, logger: logger) { delivery in
            await handle(delivery, from: queue)
        }
    }

    /// - Parameter queue: the queue it came from (a replica's own, or the
    ///   shared one): poison goes to that queue's dead-letter queue.
    func handle(_ delivery: AMQPDelivery, from queue: String = Topology.projectorEventsQueue) async {
        let started = DispatchTime.now()
        let type = EventType.name(typeProperty: delivery.properties.type, routingKey: delivery.routingKey)
        let outcome = sender.refusal(delivery.properties).map { EventReader.Outcome.untrusted($0) }
            ?? EventReader.read(type: type, body: delivery.body)
        switch outcome {
        case .untrusted(let reason):
            ProjectorMetrics.events.increment("untrusted-sender")
            await DeadLetterCopy.deadLetter(delivery, from: queue, reason: reason, by: "availability-projector", on: connection,
                                            logger: logger, what: "event from an untrusted sender dead-lettered")
        case .ignored:
            try? await delivery.ack()
            ProjectorMetrics.events.increment("ignored")
        case .unknownStatus(let bookingId, let status):
            UnknownStatus.note(status, bookingId: bookingId, logger: logger)
            try? await delivery.ack()
            ProjectorMetrics.events.increment("unknown-status")
        case .poison(let reason):
            ProjectorMetrics.events.increment("dead-lettered")
            await DeadLetterCopy.deadLetter(delivery, from: queue, reason: reason, by: "availability-projector", on: connection,
                                            logger: logger, what: "unreadable event dead-lettered")
        case .change(let change):
            do {
                let publisher = self.publisher
                let box = TicketBox()
                // The same cause in every replica that applies this state
                // makes the availability.changed ids the same (ChangePublisher).
                let cause = Self.cause(of: change, messageID: delivery.properties.messageID)
                // The store's write in a span of its own; the changes it
                // makes are published in its trace (ChangePublisher runs
                // in a task of its own).
                let outcome = try await withSpan("store apply", ofKind: .internal) { span in
                    // The read model is SQLite only.
                    if span.isRecording { span.attributes = StoreSpans.attributes(system: StoreSpans.sqlite, operation: "transaction") }
                    let trace = ServiceContext.current
                    return try await store.apply(change) { changes, written in
                        box.ticket = publisher.enqueue(changes, cause: cause, trace: trace)
                        // What this commit wrote may have been announced
                        // by an earlier event of its group (a day changed
                        // by several is announced once, by the first):
                        // taken here, in commit order, so later events'
                        // announcements are not waited for.
                        box.earlier = publisher.unconfirmed(written).filter { $0 !== box.ticket }
                    }
                }
                try await box.ticket.wait()
                if !outcome.applied, delivery.redelivered {
                    let days = outcome.touched + publisher.refusedDays().filter { !outcome.touched.contains($0) }
                    if !days.isEmpty { try await republish(days, cause: cause) }
                }
                // The announcements this change's days depended on must
                // be confirmed too (after the republish, which replaces
                // a refused one).
                for earlier in box.earlier { try await earlier.wait() }
                try await delivery.ack()
                ProjectorMetrics.events.increment(outcome.applied ? "applied" : "stale")
            } catch let error as AMQPError {
                logger.warning("could not confirm availability.changed; requeueing", metadata: ["error": "\(error)"])
                await delivery.requeueAfterPause()
            } catch {
                logger.error("read model update failed; requeueing", metadata: ["error": "\(error)"])
                await delivery.requeueAfterPause()
            }
        }
        ProjectorMetrics.eventApply.recordInterval(since: started)
    }

    /// What an `availability.changed` id is derived from: for a booking,
    /// its id and version — not the event's `message_id`. A booking
    /// confirmed at once has two events of one version (`booking.created`,
    /// `booking.confirmed`, the same state), and with concurrent handling
    /// either may be the one that changes a replica's model; by the event's
    /// id, two replicas then published one change under two ids (CI caught
    /// it: `ProjectorReplicaTests`). A room change keeps its event's id.
    static func cause(of change: ModelChange, messageID: String?) -> String? {
        switch change {
        case .booking(let state): "booking:\(state.id)#\(state.version)"
        case .room: messageID
        case .closure(let closure, let removed): "closure:\(closure.id)#\(removed ? "reopened" : "closed")"
        case .keepBooking: messageID
        }
    }

    /// Publishes the current `avail` of `days` again under ids derived from
    /// `cause`, so a copy a consumer (or another replica) already has
    /// carries the same `message_id` and is dropped as a duplicate.
    ///
    /// Read and enqueued as one writer job: a change committed between the
    /// read and the enqueue would otherwise be announced first and then
    /// overtaken by this older state, leaving followers stale.
    private func republish(_ days: [RoomDay], cause: String?) async throws {
        let (store, publisher, trace) = (self.store, self.publisher, ServiceContext.current)
        let ticket = try await store.onWriter {
            let state = store.index.snapshot
            // The dates either side too, for rooms with a buffer: the first
            // delivery may have announced them (a buffer across midnight).
            let changes = state.withNeighbours(Set(days)).sorted().compactMap { day -> DayChange? in
                guard let info = state.rooms[day.room], let free = store.index.free(day, in: state) else { return nil }
                return DayChange(day: day, timeZone: info.room.timeZone, avail: free.availStrings)
            }
            // What the writer job's index repair changed goes out first.
            return publisher.enqueue(store.takeUnannounced() + changes, cause: cause, trace: trace)
        }
        try await ticket.wait()
    }
}

/// Carries the ticket out of the store's writer closure.
final class TicketBox: @unchecked Sendable {  // written once on the writer before the await that reads it
    var ticket: ChangePublisher.Ticket = .done
    /// Earlier, unconfirmed announcements of the room-days the change wrote.
    var earlier: [ChangePublisher.Ticket] = []
}
