import AMQPClient
import BookingHandler
import Foundation
import ServiceSupport

// booking-handler: validates and stores booking commands, replies to the
// sender and publishes events through its outbox. Settings: docs/configuration.md.
exit(await ServiceRunner.main(service: "booking-handler", defaultHTTPPort: 8081,
                              settings: { try HandlerSettings(environment: $0) }) { start in
    let (settings, logger) = (start.common, start.logger)
    let dataDirectory = try settings.ensureDataDirectory()
    let policy = start.settings.policy
    if !policy.requireUserID {
        // Loud on purpose: anonymous commands may change each other's bookings.
        logger.warning("REQUIRE_USER_ID is off: commands without user_id are accepted, and any anonymous caller may change bookings made without user_id (docs/security.md)")
    }
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "booking-handler"), logger: logger)
    let app = try await BookingHandlerApp.build(
        connection: connection, dataDirectory: dataDirectory, roomsFile: start.settings.roomsFile,
        policy: policy, replayRate: start.settings.replayRate, httpPort: settings.httpPort,
        retentionDays: start.settings.retentionDays, database: start.settings.database, logger: logger)
    logger.info("ready", metadata: [
        "data_dir": .string(dataDirectory), "admin_users": "\(policy.administrators.sorted())",
        "room_managers": "\(policy.roomManagers.sorted())", "replay_users": "\(app.processor.policy.replayUsers.sorted())",
        "require_user_id": "\(policy.requireUserID)",
    ])
    return app.services
})
