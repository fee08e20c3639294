import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Synchronization
import Testing
import TestSupport

/// The outbox relay's rounds from memory overlap (several await their
/// confirms at once), but a round that reads the table runs alone: rows a
/// round in flight still holds would otherwise be read back, and hand-over
/// may only resume with everything confirmed (OutboxRelay.publishAll).
/// The store below records what the relay asks of it; the broker and the
/// SQLite file are real.
@Suite("Outbox relay: overlapping rounds")
struct RelayOverlapTests {
    @Test func theTableIsNeverReadWhileARoundFromMemoryAwaitsItsConfirms() async throws {
        let url = try TestBroker.isolatedURL("relay-overlap")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dir = try TemporaryDirectory("relay-overlap")
        defer { dir.remove() }
        let inner = try SQLiteBookingStore(path: dir.appending("handler.sqlite").path)
        let store = RecordingStore(inner)
        let logger = testLogger("relay-overlap")
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: url, connectionName: "relay-overlap", heartbeatSeconds: 10), logger: logger)
        // A quorum queue behind the exchange: each confirm waits for its
        // durable write, so rounds really are in flight together.
        let queue = "relay-overlap-events"
        try await connection.declare([
            .exchange(ExchangeDeclaration(Topology.eventsExchange, kind: .topic)),
            .exchange(ExchangeDeclaration(Topology.publicExchange, kind: .topic)),
            .queue(QueueDeclaration(queue, type: .quorum)),
            .binding(QueueBinding(queue: queue, exchange: Topology.eventsExchange, routingKey: "#")),
        ])
        // Small batches: more rounds, more of them overlapping.
        let relay = OutboxRelay(store: store, connection: connection, logger: logger, batchSize: 8)
        let running = Task { try await relay.run() }

        // Commands commit events while the relay publishes; `queuedBehindOthers`
        // (always true here) makes the relay sweep the table every 20 ms
        // meanwhile, so table rounds keep coming due while memory rounds
        // are in flight.
        let transactions = 600
        var total = 0
        for n in 0..<transactions {
            let count = 1 + n % 3
            try await inner.transaction { tx in
                for k in 0..<count {
                    try tx.enqueue(routingKey: "room.registered", messageID: "m-\(n)-\(k)", body: Data("{}".utf8), orderKey: nil)
                }
            }
            total += count
            relay.kick()
        }
        // Each mark is an event: after each, see whether every event is published.
        try await withTimeout(60, "the relay publishing every event") {
            for await _ in store.marks where try await inner.counts().outboxPending == 0 { return }
        }
        running.cancel()
        _ = try? await running.value

        let seen = store.observations
        #expect(seen.tableReads > 0, "the relay swept the table during the run")
        #expect(seen.mostRoundsInFlight >= 2, "rounds from memory overlapped (at most \(seen.mostRoundsInFlight) at once)")
        #expect(seen.tableReadsWithRoundsInFlight == 0,
                "\(seen.tableReadsWithRoundsInFlight) of \(seen.tableReads) table reads came while a round from memory awaited its confirms")
        // Every event reached the queue once: nothing was read back and sent twice.
        #expect(try await connection.queueInfo(queue).messageCount == UInt32(total))
        await connection.close()
    }
}

/// A ``BookingStore`` that forwards to a real one and records how the
/// relay's memory rounds and table reads interleave.
private final class RecordingStore: BookingStore {
    struct Observations {
        /// Batches taken from memory and not yet marked published.
        var roundsInFlight: [Set<Int64>] = []
        var mostRoundsInFlight = 0
        var tableReads = 0
        var tableReadsWithRoundsInFlight = 0
    }

    private let inner: any BookingStore
    private let state = Mutex(Observations())
    /// One element after each `markPublished`.
    let marks: AsyncStream<Void>
    private let marked: AsyncStream<Void>.Continuation
    init(_ inner: any BookingStore) {
        self.inner = inner
        (marks, marked) = AsyncStream.makeStream()
    }

    var observations: Observations { state.withLock { $0 } }

    func takeCommitted(limit: Int) -> [OutboxEvent] {
        let events = inner.takeCommitted(limit: limit)
        if !events.isEmpty {
            state.withLock {
                $0.roundsInFlight.append(Set(events.map(\.id)))
                $0.mostRoundsInFlight = max($0.mostRoundsInFlight, $0.roundsInFlight.count)
            }
        }
        return events
    }

    func claimOutbox(limit: Int, lease: TimeInterval) async throws -> [OutboxEvent] {
        state.withLock {
            $0.tableReads += 1
            if !$0.roundsInFlight.isEmpty { $0.tableReadsWithRoundsInFlight += 1 }
        }
        return try await inner.claimOutbox(limit: limit, lease: lease)
    }

    func markPublished(_ ids: [Int64]) async throws {
        // Widens the window in which a round is in flight: marking is what
        // a round does after its confirms and before it counts as done.
        try await Task.sleep(for: .milliseconds(2))
        try await inner.markPublished(ids)
        let marked = Set(ids)
        state.withLock { $0.roundsInFlight.removeAll { $0.isSubset(of: marked) } }
        self.marked.yield()
    }

    /// Always: the relay sweeps the table every 20 ms.
    var queuedBehindOthers: Bool { true }

    // Forwarded unchanged.
    var handOverSuspended: Bool { inner.handOverSuspended }
    func close() async { await inner.close() }
    func execute(key: InboxKey?, commandType: String,
                 _ body: @Sendable @escaping (any StoreTransaction) throws -> ReplyBody) async throws -> StoreOutcome {
        try await inner.execute(key: key, commandType: commandType, body)
    }
    func transaction<T: Sendable>(_ body: @Sendable @escaping (any StoreTransaction) throws -> T) async throws -> T {
        try await inner.transaction(body)
    }
    func cachedRoom(named name: String) -> CachedRoom? { inner.cachedRoom(named: name) }
    func replayRooms() async throws -> [(room: Room, updatedAt: Date)] { try await inner.replayRooms() }
    func replayBookings(after id: String?, limit: Int) async throws -> [Booking] {
        try await inner.replayBookings(after: id, limit: limit)
    }
    func replayBookingJSON(after id: String?, limit: Int) async throws -> [(id: String, json: [UInt8])] {
        try await inner.replayBookingJSON(after: id, limit: limit)
    }
    func booking(id: String) async throws -> Booking? { try await inner.booking(id: id) }
    func snapshotSeq() async throws -> Int64 { try await inner.snapshotSeq() }
    func listVersions(at seq: Int64, from: Date, to: Date, room: String?, statuses: [BookingStatus]?,
                      requestedBy: String?, seriesId: String?, after: (startsAt: Int64, id: String)?, limit: Int)
        async throws -> [ListedVersion] {
        try await inner.listVersions(at: seq, from: from, to: to, room: room, statuses: statuses, requestedBy: requestedBy,
                                     seriesId: seriesId, after: after, limit: limit)
    }
    func room(named name: String) async throws -> Room? { try await inner.room(named: name) }
    func closures(room: String, from: Date, to: Date) async throws -> [RoomClosure] {
        try await inner.closures(room: room, from: from, to: to)
    }
    func replayClosures() async throws -> [RoomClosure] { try await inner.replayClosures() }
    func waiters(room: String) async throws -> [Booking] { try await inner.waiters(room: room) }
    func counts() async throws -> (rooms: Int, bookings: Int, inbox: Int, outboxPending: Int) { try await inner.counts() }
    func suspendHandOver(releasing failed: [Int64]) async throws { try await inner.suspendHandOver(releasing: failed) }
    func resumeHandOver() async throws { try await inner.resumeHandOver() }
    func releaseClaims(_ ids: [Int64]) async throws { try await inner.releaseClaims(ids) }
    func prune(olderThan age: TimeInterval, now: Date) async throws { try await inner.prune(olderThan: age, now: now) }
}
