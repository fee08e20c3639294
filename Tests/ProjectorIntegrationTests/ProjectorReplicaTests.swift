import AMQPClient
import AvailabilityProjector
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import ServiceLifecycle
import ServiceSettings
import ServiceSupport
import Testing
import TestSupport

/// Availability projectors as independent replicas (`PROJECTOR_INSTANCE`):
/// each has queues and a read model of its own, starts empty and fills
/// itself from the booking handler's replay before it reports ready, and
/// answers like the other; a change both apply is published by both under
/// one `message_id`, which is what consumers drop the copy by.
@Suite("Projector replicas")
struct ProjectorReplicaTests {
    /// One replica running in this process.
    struct Replica {
        let app: ProjectorApp
        let group: ServiceGroup
        let run: Task<Void, any Error>
        let port: Int
        let directory: String

        static func start(_ h: ProjectorHarness, instance: String) async throws -> Replica {
            let logger = testLogger("replica-\(instance)")
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("replica-\(instance)")).path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let connection = try await AMQPConnection.connect(
                configuration: AMQPConfiguration(url: h.url, connectionName: "replica-\(instance)"), logger: logger)
            let port = try freeTCPPort()
            let app = try await ProjectorApp.build(connection: connection, dataDirectory: directory, httpPort: port, logger: logger,
                                                   rebuildStallTimeout: .seconds(50), queues: try ProjectorQueues(instance: instance))
            let (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
            return Replica(app: app, group: group, run: running, port: port, directory: directory)
        }

        func get(_ path: String) async throws -> (status: Int, body: String) {
            try await httpGet("http://127.0.0.1:\(port)\(path)")
        }

        func stop() async {
            await group.triggerGracefulShutdown()
            _ = await run.result
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    @Test func twoReplicasFillThemselvesAnswerAlikeAndPublishEachChangeUnderOneID() async throws {
        let h = try await ProjectorHarness.start(startProjector: false)
        let date = localDate(daysFromNow: 3)
        // Booked before any replica exists: only a replay can tell them.
        for hour in 8..<12 { _ = try await h.create(date: date, start: String(format: "%02d:00", hour), end: String(format: "%02d:30", hour)) }

        let replicas = [try await Replica.start(h, instance: "a"), try await Replica.start(h, instance: "b")]
        for replica in replicas {
            // Ready only once the model is filled (the replay has run).
            try await withTimeout(60, "replica ready") {
                while (try? await replica.get("/readyz"))?.status != 200 { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(replica.app.modelFilled)
            #expect(try await replica.app.store.counts().bookings == 4)
        }
        let query = "/rooms?date=\(date)&room=Berlin"
        let answers = try await [replicas[0].get(query), replicas[1].get(query)]
        #expect(answers[0].status == 200)
        #expect(answers[0].body == answers[1].body, "two replicas answer identically")
        let berlin = try #require(try ContractJSON.decode(AvailabilityReply.self, from: Data(answers[0].body.utf8)).first)
        #expect(!(berlin.avail.contains { $0.hasPrefix("08:00") }), "the replayed bookings are in: \(berlin.avail)")

        // Every replica has its own queue; each sees every event.
        for instance in ["a", "b"] {
            let info = try await h.client.queueInfo("availability-projector.events.\(instance)")
            #expect(info.consumerCount == 1)
        }

        // A new booking: both publish the change, under one message_id.
        let changes = uniqueName("replica-changes")
        try await h.client.declare([
            .queue(QueueDeclaration(changes, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: changes, exchange: Topology.eventsExchange, routingKey: EventType.availabilityChanged.rawValue)),
        ])
        let consumer = try await h.client.consume(queue: changes, prefetch: 10)
        _ = try await h.create(date: date, start: "14:00", end: "15:00")
        let copies = try await withTimeout(30, "two copies of the change") { try await consumer.take(2) }
        let bodies = try copies.map { try ContractJSON.decode(AvailabilityChanged.self, from: $0.body) }
        #expect(Set(copies.map { $0.properties.messageID ?? "" }).count == 1, "one message_id for the change, whichever replica sent it")
        #expect(bodies[0].eventId == bodies[1].eventId)
        #expect(bodies[0].avail == bodies[1].avail)
        #expect(!(bodies[0].avail.contains { $0.hasPrefix("14:00") }))
        consumer.stop()
        let after = try await [replicas[0].get(query), replicas[1].get(query)]
        #expect(after[0].body == after[1].body)

        for replica in replicas { await replica.stop() }
        await h.stop()
    }

    @Test func instanceNamesAreChecked() throws {
        #expect(try ProjectorQueues(instance: "eu-1").events == "availability-projector.events.eu-1")
        for bad in ["", "A", "a.b", "a b", String(repeating: "x", count: 41)] {
            #expect(throws: SettingsError.self, "\(bad)") { try ProjectorQueues(instance: bad) }
        }
    }
}
