import AMQPClient
import AvailabilityProjector
import Foundation
import ServiceSupport

// availability-projector: keeps a read model of free slots from the booking
// events, answers availability queries over AMQP (availability.queries) and
// HTTP (GET /rooms), serves the time-bar page at /, publishes
// availability.changed. Settings and design: docs/projector.md.
let (settings, logger) = await ServiceRunner.start(service: "availability-projector", defaultHTTPPort: 8080)
let environment = ProcessInfo.processInfo.environment
let requireUserID: Bool
let queues: ProjectorQueues
do {
    requireUserID = try CommonSettings.boolean(environment["REQUIRE_USER_ID"], name: "REQUIRE_USER_ID", default: false)
    // A replica (several projectors side by side): queues of its own, filled from a replay at start.
    queues = try environment["PROJECTOR_INSTANCE"].flatMap { $0.isEmpty ? nil : $0 }.map { try ProjectorQueues(instance: $0) }
        ?? .shipped
} catch {
    FileHandle.standardError.write(Data("availability-projector: configuration error: \(error)\n".utf8))
    exit(2)
}
do {
    let dataDirectory = try settings.ensureDataDirectory()
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "availability-projector"), logger: logger)
    let app = try await ProjectorApp.build(
        connection: connection, dataDirectory: dataDirectory, httpPort: settings.httpPort, logger: logger,
        eventSender: SenderCheck.bookingHandler(environment: environment, ownUser: connection.user),
        requireUserID: requireUserID, queues: queues)
    let counts = try await app.store.counts()
    logger.info("ready", metadata: ["data_dir": .string(dataDirectory), "http_port": "\(settings.httpPort)",
                                    "events_queue": .string(queues.events),
                                    "rooms": "\(counts.rooms)", "bookings": "\(counts.bookings)"])
    try await ServiceRunner.run(app.services, logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("availability-projector failed", metadata: ["error": "\(error)"])
    exit(1)
}
