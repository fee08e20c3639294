import AMQPClient
import AvailabilityProjector
import BookingContracts
import BookingHandler
import BrokerObjects
import Foundation
import Logging
import PostgresSupport
import ServiceLifecycle
import ServiceSupport
import TestSupport

/// A booking handler and an availability projector running in this process
/// against the real broker, in a vhost of their own, each with a fresh
/// SQLite directory; plus a client connection and a queue that receives
/// every `availability.changed`.
final class ProjectorHarness: Sendable {
    let url: AMQPURL
    let client: AMQPConnection
    let changes: AMQPConsumer
    let httpPort: Int
    let handlerDirectory: String
    let projectorDirectory: String
    let projector: LockedBox<ProjectorApp?>
    private let handlerRun: Task<Void, any Error>
    private let handlerGroup: ServiceGroup
    private let projectorRun: LockedBox<(ServiceGroup, Task<Void, any Error>)?>

    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static var roomsFile: String { repositoryRoot.appendingPathComponent("deploy/rooms.json").path }

    /// Starts the handler, and the projector unless `startProjector` is false
    /// (then call ``startProjector(eventConcurrency:)`` later).
    /// `replayRate`: the handler's `REPLAY_MAX_RATE` (0: none);
    /// `rebuildStallTimeout`: the projector's `REBUILD_STALL_TIMEOUT`.
    static func start(startProjector: Bool = true, eventConcurrency: Int = 32,
                      requireUserID: Bool = false, replayRate: Int = ReplayPacer.defaultRate,
                      rebuildStallTimeout: Duration = .seconds(50), callerRate: CallerRate? = nil,
                      database: PostgresSettings? = nil) async throws -> ProjectorHarness {
        let url = try TestBroker.isolatedURL("projector")
        let temp = FileManager.default.temporaryDirectory
        let handlerDirectory = temp.appendingPathComponent(uniqueName("handler-data")).path
        let projectorDirectory = temp.appendingPathComponent(uniqueName("projector-data")).path
        for dir in [handlerDirectory, projectorDirectory] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        let logger = testLogger("projector-it")
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "client"), logger: logger)
        // The changes queue first, so no availability.changed is missed.
        let changesQueue = uniqueName("changes")
        try await client.declare([
            .exchange(ExchangeDeclaration(Topology.eventsExchange, kind: .topic)),
            .queue(QueueDeclaration(changesQueue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: changesQueue, exchange: Topology.eventsExchange,
                                  routingKey: EventType.availabilityChanged.rawValue)),
        ])
        let changes = try await client.consume(queue: changesQueue, prefetch: 500)
        if startProjector {
            // The projector's queue before the handler publishes its rooms.
            try await client.declare(ContractTopology.declarations(queues: [Topology.projectorEventsQueue]))
        }
        let handlerConnection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: url, connectionName: "handler"), logger: logger)
        let handler = try await BookingHandlerApp.build(connection: handlerConnection, dataDirectory: handlerDirectory,
                                                        roomsFile: roomsFile, replayRate: replayRate, database: database,
                                                        logger: logger)
        let (handlerGroup, handlerRun) = ServiceGroup.startInProcess(handler.services, logger: logger)
        let harness = ProjectorHarness(url: url, client: client, changes: changes, httpPort: try freeTCPPort(),
                                       handlerDirectory: handlerDirectory, projectorDirectory: projectorDirectory,
                                       handlerRun: handlerRun, handlerGroup: handlerGroup)
        if startProjector {
            try await harness.startProjector(eventConcurrency: eventConcurrency, requireUserID: requireUserID,
                                             rebuildStallTimeout: rebuildStallTimeout, callerRate: callerRate)
        }
        return harness
    }

    private init(url: AMQPURL, client: AMQPConnection, changes: AMQPConsumer, httpPort: Int, handlerDirectory: String,
                 projectorDirectory: String, handlerRun: Task<Void, any Error>, handlerGroup: ServiceGroup) {
        self.url = url
        self.client = client
        self.changes = changes
        self.httpPort = httpPort
        self.handlerDirectory = handlerDirectory
        self.projectorDirectory = projectorDirectory
        self.handlerRun = handlerRun
        self.handlerGroup = handlerGroup
        projector = LockedBox(nil)
        projectorRun = LockedBox(nil)
    }


    func startProjector(eventConcurrency: Int = 32, requireUserID: Bool = false,
                        rebuildStallTimeout: Duration = .seconds(50), callerRate: CallerRate? = nil,
                        rateExempt: Set<String> = [], replayPageSize: Int = Rebuilder.defaultReplayPageSize) async throws {
        let logger = testLogger("projector")
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: url, connectionName: "projector"), logger: logger)
        let app = try await ProjectorApp.build(connection: connection, dataDirectory: projectorDirectory, httpPort: httpPort,
                                               logger: logger, rebuildStallTimeout: rebuildStallTimeout, replayPageSize: replayPageSize,
                                               eventConcurrency: eventConcurrency,
                                               requireUserID: requireUserID, callerRate: callerRate, rateExempt: rateExempt)
        projector.withLock { $0 = app }
        projectorRun.withLock { $0 = ServiceGroup.startInProcess(app.services, logger: logger) }
        // Ready when the HTTP server answers and the consumers run.
        try await withTimeout(30, "projector ready") {
            while true {
                if let (status, _) = try? await httpGet("http://127.0.0.1:\(self.httpPort)/readyz"), status == 200 { return }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    var base: String { "http://127.0.0.1:\(httpPort)" }

    /// Sends a command and waits for its reply.
    func send<T: Encodable>(_ type: CommandType, _ command: T, userID: String? = nil) async throws -> CommandReply {
        var properties = AMQPProperties.persistentJSON(type: type.rawValue, messageID: UUID().uuidString)
        properties.correlationID = UUID().uuidString
        properties.userID = userID
        let reply = try await client.call([UInt8](try ContractJSON.encode(command)), exchange: Topology.commandsExchange,
                                          routingKey: type.rawValue, properties: properties, timeout: .seconds(60))
        return try ContractJSON.decode(CommandReply.self, from: reply.body)
    }

    func create(room: String = "Berlin", date: String, start: String, end: String) async throws -> Booking {
        let reply = try await send(.createBooking, CreateBooking(
            room: room, date: .calendarDate(date), start: start, end: end, title: "Test",
            attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")]))
        guard case .booking(let booking) = reply else { throw HarnessError("create failed: \(reply)") }
        return booking
    }

    /// An availability query over RPC.
    func rpc(_ body: String, userID: String? = nil) async throws -> AMQPMessage {
        var properties = AMQPProperties.persistentJSON(messageID: UUID().uuidString)
        properties.correlationID = UUID().uuidString
        properties.userID = userID
        return try await client.call(Array(body.utf8), routingKey: Topology.availabilityQueriesQueue,
                                     properties: properties, timeout: .seconds(30))
    }

    func rooms(_ query: String) async throws -> AvailabilityReply {
        let (status, body) = try await httpGet(base + "/rooms?" + query)
        guard status == 200 else { throw HarnessError("GET /rooms?\(query): \(status) \(body)") }
        return try ContractJSON.decode(AvailabilityReply.self, from: Data(body.utf8))
    }

    /// Polls `GET /rooms?query` until `done` holds (60 s guard).
    @discardableResult
    func waitForRooms(_ query: String, _ what: String, _ done: @escaping @Sendable (AvailabilityReply) -> Bool) async throws
        -> AvailabilityReply {
        try await withTimeout(60, what) {
            while true {
                if let reply = try? await self.rooms(query), done(reply) { return reply }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// The next `count` availability.changed events, acked.
    func nextChanges(_ count: Int) async throws -> [AvailabilityChanged] {
        let changes = self.changes
        return try await withTimeout(60, "\(count) availability.changed") {
            try await changes.take(count).map { try ContractJSON.decode(AvailabilityChanged.self, from: $0.body) }
        }
    }

    /// Publishes an event to booking.events as the handler would.
    func publishEvent(_ type: EventType, _ body: some Encodable, messageID: String = UUID().uuidString) async throws {
        try await client.publish([UInt8](try ContractJSON.encode(body)), exchange: Topology.eventsExchange,
                                 routingKey: type.rawValue,
                                 properties: .persistentJSON(type: type.rawValue, messageID: messageID, userID: client.user))
    }

    /// Stops the projector alone (gracefully: every delivery settled);
    /// the handler and the client stay.
    func stopProjector() async {
        if let run = projectorRun.withLock({ let run = $0; $0 = nil; return run }) {
            await run.0.triggerGracefulShutdown()
            _ = await run.1.result
        }
    }

    /// Stops the booking handler (the projector keeps running).
    func stopHandler() async {
        await handlerGroup.triggerGracefulShutdown()
        _ = await handlerRun.result
    }

    func stop() async {
        if let run = projectorRun.withLock({ $0 }) {
            await run.0.triggerGracefulShutdown()
            _ = await run.1.result
        }
        await handlerGroup.triggerGracefulShutdown()
        _ = await handlerRun.result
        changes.stop()
        await client.close()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(atPath: handlerDirectory)
        try? FileManager.default.removeItem(atPath: projectorDirectory)
    }
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func room(_ reply: AvailabilityReply, _ name: String) -> RoomAvailability? { reply.first { $0.name == name } }
