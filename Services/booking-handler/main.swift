import AMQPClient
import BookingHandler
import Foundation
import ServiceSupport

// booking-handler: validates and stores booking commands, replies to the
// sender and publishes events through its outbox. Settings: README.md.
let (settings, logger) = await ServiceRunner.start(service: "booking-handler", defaultHTTPPort: 8081)
do {
    let environment = ProcessInfo.processInfo.environment
    let dataDirectory = try settings.ensureDataDirectory()
    let administrators = Set((environment["ADMIN_USERS"] ?? "").split(separator: ",")
        .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
    let retentionText = environment["INBOX_RETENTION_DAYS"].flatMap { $0.isEmpty ? nil : $0 } ?? "7"
    let retentionDays = Int(retentionText) ?? -1
    guard (1...3650).contains(retentionDays) else {
        throw SettingsError("INBOX_RETENTION_DAYS: '\(retentionText)' is not a whole number of days 1...3650")
    }
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "booking-handler"), logger: logger)
    let app = try await BookingHandlerApp.build(
        connection: connection, dataDirectory: dataDirectory,
        roomsFile: environment["ROOMS_FILE"].flatMap { $0.isEmpty ? nil : $0 },
        administrators: administrators, httpPort: settings.httpPort, retentionDays: retentionDays, logger: logger)
    logger.info("ready", metadata: ["data_dir": .string(dataDirectory), "admin_users": "\(administrators.sorted())"])
    try await ServiceRunner.run(app.services, logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("booking-handler failed", metadata: ["error": "\(error)"])
    exit(1)
}
