import AMQPClient
import AvailabilityProjector
import Foundation
import ServiceSupport
import TraceExport

// availability-projector: keeps a read model of free slots from the booking
// events, answers availability queries over AMQP (availability.queries) and
// HTTP (GET /rooms), serves the time-bar page at /, publishes
// availability.changed. Settings and design: docs/projector.md.
exit(await ServiceRunner.main(service: "availability-projector", defaultHTTPPort: 8080,
                              settings: { try ProjectorSettings(environment: $0) },
                              traceExporter: OTelExport.bootstrap) { start in
    let (settings, logger) = (start.common, start.logger)
    let dataDirectory = try settings.ensureDataDirectory()
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "availability-projector"), logger: logger)
    let app = try await ProjectorApp.build(settings: start, connection: connection)
    let counts = try await app.store.counts()
    logger.info("ready", metadata: ["data_dir": .string(dataDirectory), "http": "\(settings.httpBind):\(settings.httpPort)",
                                    "events_queue": .string(start.settings.queues.events),
                                    "rooms": "\(counts.rooms)", "bookings": "\(counts.bookings)"])
    return app.services
})
