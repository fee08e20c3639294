import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport

// pass-sender: connects, declares its part of the contract's topology and runs
// until SIGTERM/SIGINT. Its domain logic arrives with its own issue.
let (settings, logger) = await ServiceRunner.start(service: "pass-sender", defaultHTTPPort: 8082)
do {
    let connection = try await AMQPConnection.connect(
        configuration: settings.amqpConfiguration(connectionName: "pass-sender"), logger: logger)
    try await connection.declare(ContractTopology.declarations(queues: [Topology.passSenderEventsQueue, Topology.passesFailedQueue]))
    logger.info("topology declared; running until SIGTERM/SIGINT")
    let ops = OpsServer(port: settings.httpPort, checks: [ReadinessCheck("amqp") { connection.isConnected }], logger: logger)
    try await ServiceRunner.run([ops, connection], logger: logger)
    logger.info("stopped")
} catch {
    logger.critical("pass-sender failed", metadata: ["error": "\(error)"])
    exit(1)
}
