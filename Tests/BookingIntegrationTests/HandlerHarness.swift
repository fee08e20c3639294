import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import ServiceSupport
import Logging
import ServiceLifecycle
import TestSupport

/// A booking handler running in this process against the real broker, in
/// a virtual host of its own, with a fresh SQLite directory; plus a client
/// connection and a queue that sees every event.
final class HandlerHarness: Sendable {
    let url: AMQPURL
    let client: AMQPConnection
    let events: AMQPConsumer
    let eventsQueue: String
    let dataDirectory: String
    let app: BookingHandlerApp
    private let running: Task<Void, any Error>
    private let group: ServiceGroup
    private let ownsVhost: Bool
    /// Made by this harness (not passed in): removed when it stops.
    private let ownsDataDirectory: Bool

    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static var roomsFile: String { repositoryRoot.appendingPathComponent("deploy/rooms.json").path }

    /// Starts a handler. `url`/`dataDirectory` let a second handler share
    /// the first one's vhost and database.
    static func start(url: AMQPURL? = nil, dataDirectory: String? = nil, administrators: Set<String> = [],
                      policy: CallerPolicy? = nil, name: String = "handler",
                      handlerURL: AMQPURL? = nil, replayRate: Int = ReplayPacer.defaultRate,
                      now: @escaping @Sendable () -> Date = { Date() },
                      timerInterval: Duration = .milliseconds(200),
                      callerRate: CallerRate? = nil) async throws -> HandlerHarness {
        let ownsVhost = url == nil, ownsDataDirectory = dataDirectory == nil
        let url = try url ?? TestBroker.isolatedURL("booking")
        let dataDirectory = dataDirectory ?? FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("handler-data")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let logger = testLogger(name)
        // `handlerURL`: the handler logs in as another user than the client
        // (the shipped set's own users).
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: handlerURL ?? url, connectionName: name), logger: logger)
        let app = try await BookingHandlerApp.build(connection: connection, dataDirectory: dataDirectory,
                                                    roomsFile: roomsFile,
                                                    policy: policy ?? CallerPolicy(administrators: administrators),
                                                    replayRate: replayRate, callerRate: callerRate, logger: logger, now: now,
                                                    timerInterval: timerInterval)
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "client"), logger: logger)
        let eventsQueue = uniqueName("events")
        try await client.declare([
            .queue(QueueDeclaration(eventsQueue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: eventsQueue, exchange: Topology.eventsExchange, routingKey: "#")),
        ])
        let events = try await client.consume(queue: eventsQueue, prefetch: 500)
        let (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
        return HandlerHarness(url: url, client: client, events: events, eventsQueue: eventsQueue,
                              dataDirectory: dataDirectory, app: app, running: running, group: group, ownsVhost: ownsVhost,
                              ownsDataDirectory: ownsDataDirectory)
    }

    private init(url: AMQPURL, client: AMQPConnection, events: AMQPConsumer, eventsQueue: String, dataDirectory: String,
                 app: BookingHandlerApp, running: Task<Void, any Error>, group: ServiceGroup, ownsVhost: Bool,
                 ownsDataDirectory: Bool) {
        self.ownsVhost = ownsVhost
        self.ownsDataDirectory = ownsDataDirectory
        self.url = url
        self.client = client
        self.events = events
        self.eventsQueue = eventsQueue
        self.dataDirectory = dataDirectory
        self.app = app
        self.running = running
        self.group = group
    }

    /// Sends a command through `booking.commands` and waits for its reply.
    func send(_ type: String, _ body: [UInt8], messageID: String? = UUID().uuidString, headers: AMQPTable = [:],
              userID: String? = nil, typeProperty: Bool = true, timeout: Duration = .seconds(60)) async throws -> (CommandReply, AMQPMessage) {
        var properties = AMQPProperties.persistentJSON(type: typeProperty ? type : nil, messageID: messageID, headers: headers)
        properties.correlationID = UUID().uuidString
        properties.userID = userID
        let reply = try await client.call(body, exchange: Topology.commandsExchange, routingKey: type,
                                          properties: properties, timeout: timeout)
        return (try ContractJSON.decode(CommandReply.self, from: reply.body), reply)
    }

    func send(_ type: String, json: String, messageID: String? = UUID().uuidString, userID: String? = nil) async throws -> CommandReply {
        try await send(type, Array(json.utf8), messageID: messageID, userID: userID).0
    }

    func send<T: Encodable>(_ type: CommandType, _ command: T, messageID: String? = UUID().uuidString) async throws -> CommandReply {
        try await send(type.rawValue, [UInt8](try ContractJSON.encode(command)), messageID: messageID).0
    }

    /// The next `count` events (type and body), acked.
    func nextEvents(_ count: Int, timeout: Double = 60) async throws -> [(type: String, body: [UInt8], messageID: String?)] {
        let events = self.events
        return try await withTimeout(timeout, "\(count) events") {
            try await events.take(count).map { ($0.routingKey, $0.body, $0.properties.messageID) }
        }
    }

    /// Stops the handler gracefully and closes the client.
    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
        events.stop()
        await client.close()
        if ownsVhost { TestBroker.deleteVhost(url.vhost) }
        if ownsDataDirectory { try? FileManager.default.removeItem(atPath: dataDirectory) }
    }
}

/// Dates relative to now in Europe/Berlin, so the tests never go stale.
enum TestDates {
    static func berlinDate(daysFromNow days: Int) -> String { localDate(daysFromNow: days) }

    static var tomorrow: String { berlinDate(daysFromNow: 1) }
}

func createJSON(room: String = "Berlin", date: String = TestDates.tomorrow, start: String = "09:00", end: String = "10:30",
                title: String = "Sprint review", attendees: String? = nil) -> String {
    let people = attendees ?? #"[{"name": "Ada Lovelace", "email": "ada@example.com", "phone": "0170 1234567"}]"#
    return #"{"room": "\#(room)", "date": "\#(date)", "start": "\#(start)", "end": "\#(end)", "title": "\#(title)", "description": "Q4 demo", "attendees": \#(people)}"#
}

extension CommandReply {
    var booking: Booking? { bookingValue }
    var error: ReplyError? { errorValue }
}
