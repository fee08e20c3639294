import AMQPClient
import BookingContracts
import Foundation
import PassSender
import ServiceSupport
import TraceExport

// pass-sender: sends an access pass to every attendee of a confirmed or
// rescheduled booking, retrying per attendee. Settings: docs/pass-sender.md.
exit(await ServiceRunner.main(service: "pass-sender", defaultHTTPPort: 8082,
                              settings: { try PassSenderSettings(environment: $0) },
                              traceExporter: OTelExport.bootstrap) { start in
    let (settings, logger) = (start.common, start.logger)
    let dataDirectory = try settings.ensureDataDirectory()
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "pass-sender"), logger: logger)
    let app = try await PassSenderApp.build(settings: start, connection: connection)
    logger.info("ready", metadata: ["data_dir": .string(dataDirectory)])
    return app.services
})
