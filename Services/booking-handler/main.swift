import AMQPClient
import BookingHandler
import Foundation
import ServiceSupport
import TraceExport

// booking-handler: validates and stores booking commands, replies to the
// sender and publishes events through its outbox. Settings: docs/configuration.md.
exit(await ServiceRunner.main(service: "booking-handler", defaultHTTPPort: 8081,
                              settings: { try HandlerSettings(environment: $0) },
                              traceExporter: OTelExport.bootstrap) { start in
    let (settings, logger) = (start.common, start.logger)
    let dataDirectory = try settings.ensureDataDirectory()
    let policy = start.settings.policy
    if !policy.requireUserID {
        // Loud on purpose: anonymous commands may change each other's bookings.
        logger.warning("REQUIRE_USER_ID is off: commands without user_id are accepted, and any anonymous caller may change bookings made without user_id (docs/security.md)")
    }
    if start.settings.database != nil, start.settings.listCursorKey == nil {
        // Several instances answer one queue: a cursor signed by one must
        // verify at the next, which needs one key for all.
        logger.warning("DATABASE_URL is set but LIST_CURSOR_KEY is not: each instance signs booking.list cursors with a key of its own, so a next page answered by another instance is refused; give every instance the same LIST_CURSOR_KEY")
    }
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "booking-handler"), logger: logger)
    let app = try await BookingHandlerApp.build(settings: start, connection: connection)
    logger.info("ready", metadata: [
        "data_dir": .string(dataDirectory), "admin_users": "\(policy.administrators.sorted())",
        "room_managers": "\(policy.roomManagers.sorted())", "replay_users": "\(app.processor.policy.replayUsers.sorted())",
        "require_user_id": "\(policy.requireUserID)", "caller_rate": .string(start.settings.callerRate?.description ?? "off"),
    ])
    return app.services
})
