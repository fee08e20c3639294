import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport

// booking-handler: connects, declares its part of the contract's topology and runs
// until SIGTERM/SIGINT. Its domain logic arrives with its own issue.
let (settings, logger) = await ServiceRunner.start(service: "booking-handler", defaultHTTPPort: 8081)
do {
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "booking-handler"), logger: logger)
    try await connection.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]))
    logger.info("topology declared; running until SIGTERM/SIGINT")
    try await ServiceRunner.run([connection], logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("booking-handler failed", metadata: ["error": "\(error)"])
    exit(1)
}
