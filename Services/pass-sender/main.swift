import AMQPClient
import BookingContracts
import Foundation
import PassSender
import ServiceSupport

// pass-sender: sends an access pass to every attendee of a confirmed or
// rescheduled booking, retrying per attendee. Settings: docs/pass-sender.md.
let (settings, logger) = await ServiceRunner.start(service: "pass-sender", defaultHTTPPort: 8082)
do {
    let passSettings: PassSenderSettings
    do {
        passSettings = try PassSenderSettings(environment: ProcessInfo.processInfo.environment)
    } catch {
        FileHandle.standardError.write(Data("pass-sender: configuration error: \(error)\n".utf8))
        exit(2)
    }
    let dataDirectory = try settings.ensureDataDirectory()
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "pass-sender"), logger: logger)
    let app = try await PassSenderApp.build(connection: connection, settings: passSettings, dataDirectory: dataDirectory,
                                            httpPort: settings.httpPort, logger: logger)
    logger.info("ready", metadata: ["data_dir": .string(dataDirectory)])
    try await ServiceRunner.run(app.services, logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("pass-sender failed", metadata: ["error": "\(error)"])
    exit(1)
}
