import AMQPClient
import BookingHandler
import Foundation
import ServiceSupport

// booking-handler: validates and stores booking commands, replies to the
// sender and publishes events through its outbox. Settings: README.md.
let (settings, logger) = await ServiceRunner.start(service: "booking-handler", defaultHTTPPort: 8081)
let handlerSettings: HandlerSettings
do {
    handlerSettings = try HandlerSettings(environment: ProcessInfo.processInfo.environment)
} catch {
    FileHandle.standardError.write(Data("booking-handler: configuration error: \(error)\n".utf8))
    exit(2)
}
do {
    let dataDirectory = try settings.ensureDataDirectory()
    let policy = handlerSettings.policy
    if !policy.requireUserID {
        // Loud on purpose: anonymous commands may change each other's bookings.
        logger.warning("REQUIRE_USER_ID is off: commands without user_id are accepted, and any anonymous caller may change bookings made without user_id (docs/security.md)")
    }
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "booking-handler"), logger: logger)
    let app = try await BookingHandlerApp.build(
        connection: connection, dataDirectory: dataDirectory, roomsFile: handlerSettings.roomsFile,
        policy: policy, replayRate: handlerSettings.replayRate, httpPort: settings.httpPort,
        retentionDays: handlerSettings.retentionDays, database: handlerSettings.database, logger: logger)
    logger.info("ready", metadata: [
        "data_dir": .string(dataDirectory), "admin_users": "\(policy.administrators.sorted())",
        "room_managers": "\(policy.roomManagers.sorted())", "replay_users": "\(app.processor.policy.replayUsers.sorted())",
        "require_user_id": "\(policy.requireUserID)",
    ])
    try await ServiceRunner.run(app.services, logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("booking-handler failed", metadata: ["error": "\(error)"])
    exit(1)
}
