import AMQPClient
import BookingContracts
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import ServiceSupport
import Synchronization
import Tracing

/// Publishes `availability.changed` to `booking.events` in the order the
/// read model committed the changes (``enqueue(_:)`` is called on the
/// store's writer), in ordered, confirmed batches. Whoever enqueued waits
/// on the returned ``Ticket`` before acking the event that caused it.
public final class ChangePublisher: Service, Sendable {
    /// Completes when the broker confirmed (or refused) a group of events.
    public final class Ticket: Sendable {
        private let result = OneShot<Result<Void, AMQPError>>()
        private let refusedFlag = Atomic<Bool>(false)

        init() {}

        /// The broker refused (or never confirmed) the events.
        var refused: Bool { refusedFlag.load(ordering: .acquiring) }

        static let done: Ticket = {
            let t = Ticket()
            t.complete(.success(()))
            return t
        }()

        func complete(_ result: Result<Void, AMQPError>) {
            if case .failure = result { refusedFlag.store(true, ordering: .releasing) }
            self.result.fulfil(result)
        }

        /// Waits until the events were confirmed; throws when they were not.
        public func wait() async throws {
            try await result.value().get()
        }
    }

    private struct Pending {
        var events: [AvailabilityChanged]
        var ticket: Ticket
        /// The trace of the event that caused them.
        var trace: ServiceContext?
    }

    private let connection: AMQPConnection
    private let logger: Logger
    /// Settles the confirms of the `booking.public` copies (``PublicCopies``).
    private let publicCopies: PublicCopies
    private let now: @Sendable () -> Date
    private let queue = Mutex<[Pending]>([])
    /// The latest announcement of each room-day not yet confirmed.
    private let unconfirmedDays = Mutex(UnconfirmedDays())
    private let wakeups: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    public init(connection: AMQPConnection, logger: Logger, now: @escaping @Sendable () -> Date = { Date() }) {
        self.connection = connection
        self.logger = logger
        self.publicCopies = PublicCopies(logger: logger)
        self.now = now
        (wakeups, wake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Queues the events of `changes` (call on the store's writer, so the
    /// order is commit order).
    ///
    /// `cause` names what made the change (``EventConsumer/cause(of:messageID:)``:
    /// a booking's id and version, or a room event's id). With it the
    /// `eventId` (and `message_id`) is derived from the cause and the result
    /// — the same in every projector replica that applies that state to the
    /// same model — so consumers drop the copies by `message_id`.
    /// Changes without one (a rebuild's corrections) get a random id.
    ///
    /// `trace` is the context of the work that made the changes: their
    /// publishes continue its trace.
    public func enqueue(_ changes: [DayChange], cause: String? = nil, trace: ServiceContext? = nil) -> Ticket {
        guard !changes.isEmpty else { return .done }
        let occurredAt = ContractFormat.timestamp(now())
        let events = changes.map { change in
            AvailabilityChanged(eventId: cause.map { Self.eventID(cause: $0, change) } ?? RandomID.uuidString(),
                                occurredAt: occurredAt, room: change.day.room,
                                date: change.day.date, timeZone: change.timeZone, avail: change.avail)
        }
        let ticket = Ticket()
        unconfirmedDays.withLock { $0.announced(changes.map(\.day), by: ticket) }
        queue.withLock { $0.append(Pending(events: events, ticket: ticket, trace: trace)) }
        wake.yield()
        return ticket
    }

    /// The announcements of `days` still waiting for the broker, or
    /// refused by it: the latest of each day enqueued so far (call on the
    /// store's writer, at the caller's commit, so that is up to and
    /// including it). An event whose change left a day's free time as an
    /// earlier event of its group announced it waits on these before it
    /// is acked — otherwise it is acked while what it leaves is
    /// unannounced, and should that announcement fail and its event be
    /// dead-lettered, nothing announces the day again. A refused one
    /// stays until a later announcement of its day replaces it: waiting
    /// on it throws, the event is redelivered and publishes the day again.
    public func unconfirmed(_ days: [RoomDay]) -> [Ticket] {
        unconfirmedDays.withLock { $0.tickets(for: days) }
    }

    /// Room-days whose latest announcement the broker refused: a
    /// redelivered event publishes them again with its own, so a day no
    /// later event names (a booking moved twice before its first move was
    /// confirmed leaves its first day behind) is still announced.
    public func refusedDays() -> [RoomDay] {
        unconfirmedDays.withLock { $0.refused }
    }

    /// A UUID-shaped id from two FNV-1a 64 hashes of the cause, the room,
    /// the date and the free ranges. Not a secret: only equality matters.
    static func eventID(cause: String, _ change: DayChange) -> String {
        let text = Array("\(cause)\u{0}\(change.day.room)\u{0}\(change.day.date)\u{0}\(change.avail.joined(separator: ","))".utf8)
        let high = FNV1a64.hash(text), low = FNV1a64.hash(text, seed: 0x84222325_cbf29ce4)
        // Written by hand: `String(format:)` and the joins were 5 % of the
        // projector's CPU per booking.
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(36)
        for (half, value) in [high, low].enumerated() {
            for nibble in 0..<16 {
                let index = half * 16 + nibble
                if index == 8 || index == 12 || index == 16 || index == 20 { out.append(UInt8(ascii: "-")) }
                out.append(digits[Int((value >> UInt64(60 - nibble * 4)) & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    public func run() async throws {
        await withGracefulShutdownHandler {
            for await _ in wakeups { await drain() }
        } onGracefulShutdown: { [wake] in
            wake.finish()
        }
        await drain()
    }

    private func drain() async {
        while true {
            let batch = queue.withLock { q -> [Pending] in
                defer { q.removeAll() }
                return q
            }
            if batch.isEmpty { return }
            var messages: [OutgoingMessage] = []
            var owners: [Int] = []
            var publicCopy: [Bool] = []
            for (i, pending) in batch.enumerated() {
                for event in pending.events {
                    let body = event.jsonBytes
                    var properties = AMQPProperties.persistentJSON(type: EventType.availabilityChanged.rawValue,
                                                                   messageID: event.eventId)
                    properties.appID = "availability-projector"
                    properties.userID = connection.user
                    // The parent of each publish's span (this task has no trace).
                    if let trace = pending.trace { MessageTracing.inject(trace, into: &properties.headers) }
                    messages.append(OutgoingMessage(body: body, exchange: Topology.eventsExchange,
                                                    routingKey: EventType.availabilityChanged.rawValue, properties: properties))
                    owners.append(i)
                    publicCopy.append(false)
                    // v1.1: other systems follow availability on booking.public
                    // (the body has no personal data).
                    properties.headers[MessageTracing.traceStateHeader] = nil
                    messages.append(OutgoingMessage(body: body, exchange: Topology.publicExchange,
                                                    routingKey: EventType.availabilityChanged.rawValue, properties: properties,
                                                    traceState: .drop))
                    owners.append(i)
                    publicCopy.append(true)
                }
            }
            let results = await connection.publish(batch: messages)
            var failures = [AMQPError?](repeating: nil, count: batch.count)
            for (index, (owner, confirmed)) in zip(owners, results).enumerated() {
                // A public copy refused by an outside queue counts as published.
                let result = publicCopy[index]
                    ? publicCopies.settle(confirmed, routingKey: EventType.availabilityChanged.rawValue) : confirmed
                if result != nil { failures[owner] = failures[owner] ?? result }
            }
            unconfirmedDays.withLock { days in
                for (i, pending) in batch.enumerated() where failures[i] == nil {
                    days.confirmed(pending.events.map { RoomDay(room: $0.room, date: $0.date) }, by: pending.ticket)
                }
            }
            for (i, pending) in batch.enumerated() {
                pending.ticket.complete(failures[i].map { .failure($0) } ?? .success(()))
            }
            ProjectorMetrics.availabilityChanged.increment(by: results.enumerated().filter { $0.offset % 2 == 0 && $0.element == nil }.count)
            if let error = failures.compactMap({ $0 }).first {
                logger.warning("availability.changed not confirmed; the events will be redelivered", metadata: ["error": "\(error)"])
            }
        }
    }
}

/// The latest `availability.changed` of each room-day the broker has not
/// confirmed. Ownership: inside ``ChangePublisher``'s mutex; `announced`
/// runs on the store's writer (commit order), `confirmed` on the
/// publisher's task.
struct UnconfirmedDays {
    private var latest: [RoomDay: ChangePublisher.Ticket] = [:]

    /// `ticket` announces `days`, replacing what announced them before.
    mutating func announced(_ days: [RoomDay], by ticket: ChangePublisher.Ticket) {
        for day in days { latest[day] = ticket }
    }

    /// The broker confirmed `ticket`: its days are announced, unless a
    /// later announcement replaced it (that one is then the one to wait for).
    mutating func confirmed(_ days: [RoomDay], by ticket: ChangePublisher.Ticket) {
        for day in days where latest[day] === ticket { latest[day] = nil }
    }

    /// The distinct tickets announcing any of `days`.
    func tickets(for days: [RoomDay]) -> [ChangePublisher.Ticket] {
        var seen = Set<ObjectIdentifier>()
        return days.compactMap { latest[$0] }.filter { seen.insert(ObjectIdentifier($0)).inserted }
    }

    /// Room-days whose latest announcement was refused, in order.
    var refused: [RoomDay] { latest.filter { $0.value.refused }.map(\.key).sorted() }
}
