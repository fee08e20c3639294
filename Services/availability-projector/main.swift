import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport

// availability-projector: connects, declares its part of the contract's topology and runs
// until SIGTERM/SIGINT. Its domain logic arrives with its own issue.
let (settings, logger) = await ServiceRunner.start(service: "availability-projector", defaultHTTPPort: 8080)
do {
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "availability-projector"), logger: logger)
    try await connection.declare(ContractTopology.declarations(queues: [Topology.projectorEventsQueue, Topology.availabilityQueriesQueue]))
    logger.info("topology declared; running until SIGTERM/SIGINT")
    let ops = OpsServer(port: settings.httpPort, checks: [ReadinessCheck("amqp") { connection.isConnected }], logger: logger)
    try await ServiceRunner.run([ops, connection], logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("availability-projector failed", metadata: ["error": "\(error)"])
    exit(1)
}
