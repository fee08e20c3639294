import AMQPClient
@testable import AvailabilityProjector
import BookingContracts
import Foundation
import ServiceSupport
import TestSupport
import Testing

/// Two events of one room-day that commit in one transaction are announced
/// once, by the first (``ProjectorStore/updateIndex``): the second finds
/// the day already as it leaves it. It is acked only once that
/// announcement is confirmed — here the broker refuses it, so both come
/// back, and the second, redelivered, publishes the day again.
@Suite("Projector group commit and acks", .serialized)
struct GroupCommitAckTests {
    /// A projector's store, publisher and consumer on one connection of a
    /// started harness, and a queue of the test's own to feed the consumer.
    struct Fixture {
        let h: ProjectorHarness
        let connection: AMQPConnection
        let dir: URL
        let store: ProjectorStore
        let publisher: ChangePublisher
        let publishing: Task<Void, any Error>
        let consumer: EventConsumer
        let events: String
        let deliveries: AMQPConsumer

        static func start(_ name: String) async throws -> Fixture {
            let h = try await ProjectorHarness.start(startProjector: false)
            let logger = testLogger(name)
            let connection = try await AMQPConnection.connect(
                configuration: AMQPConfiguration(url: h.url, connectionName: "projector"), logger: logger)
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName(name))
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            let store = try ProjectorStore(path: dir.appendingPathComponent("model.sqlite").path)
            _ = try await store.apply(.room(Room(name: "Hamburg", capacity: 4), occurredAt: "2026-11-01T10:00:00Z"))
            let publisher = ChangePublisher(connection: connection, logger: logger)
            let publishing = Task { try await publisher.run() }
            let consumer = EventConsumer(connection: connection, store: store, publisher: publisher, logger: logger)
            let events = h.url.user + "." + uniqueName("events")
            try await h.client.declare([.queue(QueueDeclaration(events, type: .classic, durable: false, autoDelete: false))])
            let deliveries = try await connection.consume(queue: events, prefetch: 10)
            return Fixture(h: h, connection: connection, dir: dir, store: store, publisher: publisher,
                           publishing: publishing, consumer: consumer, events: events, deliveries: deliveries)
        }

        /// Publishes a Hamburg booking event into the test's queue.
        func publish(_ id: String, messageID: String, date: String, _ start: String, _ end: String, version: Int,
                     type: EventType) async throws {
            try await h.client.publish([UInt8](try ContractJSON.encode(ProjectorEndToEndTests.hamburgEvent(
                                           id, date: date, start, end, .confirmed, version))),
                                       routingKey: events,
                                       properties: .persistentJSON(type: type.rawValue, messageID: messageID,
                                                                   userID: h.client.user))
        }

        func stop() async {
            publishing.cancel()
            await connection.close()
            await h.stop()
            try? FileManager.default.removeItem(at: dir)
        }
    }

    @Test func anEventAnnouncedByAnotherIsAckedOnlyWhenThatAnnouncementIsConfirmed() async throws {
        let f = try await Fixture.start("group-commit-ack")
        let (store, publisher, consumer) = (f.store, f.publisher, f.consumer)

        // Two bookings on one day, each event in the test's own queue.
        let date = localDate(daysFromNow: 5)
        for (id, start, end) in [("g1", "09:00", "10:00"), ("g2", "11:00", "12:00")] {
            try await f.publish(id, messageID: id, date: date, start, end, version: 1, type: .bookingConfirmed)
        }
        let firstTwo = try await withTimeout(30, "the two events") { try await f.deliveries.take(2, ack: false) }
        let (first, second) = (firstTwo[0], firstTwo[1])

        // Every publish fails while booking.public is gone (the channel
        // closes on the public copy).
        try await f.h.client.deleteExchange(Topology.publicExchange)
        let before = store.applyTransactions.load(ordering: .relaxed)
        let release = await store.holdWriter()
        async let handledFirst: Void = consumer.handle(first)
        async let handledSecond: Void = consumer.handle(second)
        let deadline = ContinuousClock.now + .seconds(30)
        while store.queuedChanges < 2 {
            try #require(ContinuousClock.now < deadline, "the two changes did not queue")
            await Task.yield()
        }
        release()
        _ = await (handledFirst, handledSecond)
        #expect(store.applyTransactions.load(ordering: .relaxed) - before == 1, "one transaction for both")
        #expect(try await store.booking(id: "g1") != nil)
        #expect(try await store.booking(id: "g2") != nil)

        // Both come back: the second was not acked on the strength of a
        // refused announcement.
        let again = try await withTimeout(30, "both redelivered") { try await f.deliveries.take(2, ack: false) }
        #expect(Set(again.map { $0.properties.messageID ?? "" }) == ["g1", "g2"])
        #expect(again.allSatisfy { $0.redelivered })
        #expect(publisher.unconfirmed([RoomDay(room: "Hamburg", date: date)]).count == 1, "the refused announcement stays")

        // With the exchange back, the second, redelivered and now a repeat,
        // publishes the day again and is acked: nothing about the day
        // waits any more.
        try await f.h.client.declare([.exchange(ExchangeDeclaration(Topology.publicExchange, kind: .topic))])
        let g2 = try #require(again.first { $0.properties.messageID == "g2" })
        await consumer.handle(g2)
        #expect(publisher.unconfirmed([RoomDay(room: "Hamburg", date: date)]).isEmpty, "confirmed: nothing waits")
        let g1 = try #require(again.first { $0.properties.messageID == "g1" })
        await consumer.handle(g1)
        // Settled: nothing comes back once the consumer's channel is gone.
        await f.connection.close()
        let info = try await f.h.client.queueInfo(f.events)
        #expect(info.messageCount == 0, "both acked")
        await f.stop()
    }

    /// A redelivered event republishes, for a room with a buffer, the
    /// dates either side of its booking's too: the first delivery announced
    /// the next date (the buffer reaches across midnight), and a projector
    /// restarted since knows of no refused announcement to send again.
    @Test func aRedeliveryRepublishesTheDatesABufferReachesInto() async throws {
        let f = try await Fixture.start("buffer-republish")
        let night = Room(name: "Night", capacity: 2, opens: "00:00", closes: "23:45", bufferMinutes: 30)
        _ = try await f.store.apply(.room(night, occurredAt: "2026-11-01T10:00:00Z"))
        // Fixed dates: no clock change near them, and none crosses midnight under the test.
        let (before, days) = ("2030-11-18", ["2030-11-19", "2030-11-20"])
        var event = ProjectorEndToEndTests.hamburgEvent("n1", date: days[0], "23:00", "23:45", .confirmed, 1)
        event.booking.room = "Night"
        func deliver() async throws -> AMQPDelivery {
            try await f.h.client.publish([UInt8](try ContractJSON.encode(event)), routingKey: f.events,
                                         properties: .persistentJSON(type: EventType.bookingCreated.rawValue, messageID: "n1",
                                                                     userID: f.h.client.user))
            return try await withTimeout(30, "n1") { try await f.deliveries.take(1, ack: false)[0] }
        }
        func announced(_ count: Int, _ what: String) async throws -> [String: [String]] {
            let copies = try await withTimeout(30, "\(count) announcements \(what)") { try await f.h.changes.take(count) }
            let bodies = try copies.map { try ContractJSON.decode(AvailabilityChanged.self, from: $0.body) }
            return Dictionary(bodies.map { ($0.date, $0.avail) }, uniquingKeysWith: { $1 })
        }
        await f.consumer.handle(try await deliver())
        let first = try await announced(2, "of the first delivery")
        #expect(first == [days[0]: ["00:00 - 22:30"], days[1]: ["00:15 - 23:45"]])

        // As after a restart: another publisher and consumer on the same
        // store, and the event again, a repeat by version.
        let logger = testLogger("buffer-republish-2")
        let publisher = ChangePublisher(connection: f.connection, logger: logger)
        let publishing = Task { try await publisher.run() }
        let consumer = EventConsumer(connection: f.connection, store: f.store, publisher: publisher, logger: logger)
        // Redelivered, as an event whose ack the crash prevented comes back.
        try await deliver().reject(requeue: true)
        let redelivered = try await withTimeout(30, "n1 redelivered") { try await f.deliveries.take(1, ack: false)[0] }
        #expect(redelivered.redelivered)
        await consumer.handle(redelivered)
        // Both dates again, and the (unchanged) date before, as a buffer
        // could reach into it too.
        #expect(try await announced(3, "of the repeat") == first.merging([before: ["00:00 - 23:45"]]) { $1 })
        publishing.cancel()
        await f.stop()
    }

    /// A booking moved twice before its first move was confirmed: the day
    /// it first left is named by no later event (the stored row names the
    /// last two days), yet its redelivered first move announces it again.
    @Test func aDayLeftBehindByARefusedMoveIsAnnouncedByTheRedelivery() async throws {
        let f = try await Fixture.start("refused-move")
        let (publisher, consumer) = (f.publisher, f.consumer)
        let days = (5...7).map { localDate(daysFromNow: $0) }
        /// Publishes version `version` of booking m1, on `date`, and takes its delivery.
        func deliver(_ version: Int, _ date: String) async throws -> AMQPDelivery {
            try await f.publish("m1", messageID: "m1.\(version)", date: date, "09:00", "10:00", version: version,
                                type: .bookingRescheduled)
            return try await withTimeout(30, "m1 v\(version)") { try await f.deliveries.take(1, ack: false)[0] }
        }
        let first = RoomDay(room: "Hamburg", date: days[0])
        await consumer.handle(try await deliver(1, days[0]))
        #expect(publisher.unconfirmed([first]).isEmpty)

        // The move to the second day is refused: its event comes back.
        try await f.h.client.deleteExchange(Topology.publicExchange)
        await consumer.handle(try await deliver(2, days[1]))
        let moved = try await withTimeout(30, "v2 redelivered") { try await f.deliveries.take(1, ack: false)[0] }
        #expect(moved.redelivered && moved.properties.messageID == "m1.2")
        #expect(publisher.refusedDays().contains(first))

        // Moved again, confirmed: it names the second and third days only.
        try await f.h.client.declare([.exchange(ExchangeDeclaration(Topology.publicExchange, kind: .topic))])
        await consumer.handle(try await deliver(3, days[2]))
        #expect(publisher.refusedDays() == [first])

        // The redelivered first move, now a repeat, announces the first day
        // as it is now: free.
        await consumer.handle(moved)
        // (An entry leaves only when an announcement of its day is confirmed.)
        #expect(publisher.unconfirmed([first]).isEmpty, "announced and confirmed")
        #expect(publisher.refusedDays().isEmpty)
        await f.stop()
    }
}
