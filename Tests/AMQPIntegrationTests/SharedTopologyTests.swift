import AMQPClient
import BookingContracts
import BrokerObjects
import ServiceSupport
import Foundation
import Testing
import TestSupport

/// A service on a broker whose definitions own the shared exchanges and
/// deny it `configure` on them (deploy/rabbitmq/definitions.json): its
/// declarations must still go through, because an exchange that exists is
/// only declared passively.
@Suite("Topology on a broker that owns the shared exchanges")
struct SharedTopologyTests {
    /// Each service, logged in as its shipped user, declares exactly what it
    /// declares at start-up (its queues, their bindings, their dead-letter
    /// queues; the shared exchanges passively). A binding the definitions do
    /// not permit — as the projector's `availability.query` binding once
    /// was — fails here with 403 instead of in the container test.
    @Test(arguments: [
        ("booking-handler", [Topology.handlerCommandsQueue, Topology.bookingQueriesQueue]),
        ("pass-sender", [Topology.passSenderEventsQueue, Topology.passesFailedQueue]),
        ("availability-projector", [Topology.projectorEventsQueue, Topology.availabilityQueriesQueue]),
    ])
    func everyServiceDeclaresItsTopologyWithItsShippedPermissions(user: String, queues: [String]) async throws {
        let vhost = try ShippedBroker.vhost("service-topology")
        defer { vhost.delete() }
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: vhost.url(user), connectionName: user), logger: testLogger(user))
        try await connection.declare(ContractTopology.declarations(queues: queues))
        // Twice: a restart declares the same again.
        try await connection.declare(ContractTopology.declarations(queues: queues))
        await connection.close()
    }

    @Test func userWithoutConfigureOnExistingExchangesStartsAndRecovers() async throws {
        let adminURL = try TestBroker.isolatedURL("shared-topology")
        defer { TestBroker.deleteVhost(adminURL.vhost) }
        let commands = "shared.commands", events = "shared.events"
        let user = uniqueName("limited")
        let queue = "\(user).work", dead = "\(user).work.dead"

        // The "definitions": the broker's administrator declares the exchanges.
        let admin = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: adminURL, connectionName: "shared-admin"), logger: testLogger("shared-admin"))
        try await admin.declare([
            .exchange(ExchangeDeclaration(commands, kind: .direct)),
            .exchange(ExchangeDeclaration(events, kind: .topic)),
        ])

        // A service user like the shipped ones: configure only on its own
        // queues; write/read on the exchanges it publishes to or binds from.
        var userURL = try TestBroker.addUser(user, to: adminURL)
        defer { _ = try? TestBroker.ctl(["delete_user", user]) }
        let own = "\(NSRegularExpression.escapedPattern(for: user))\\..*"
        _ = try TestBroker.ctl(["set_permissions", "-p", adminURL.vhost, user,
                                "^\(own)$", "^(shared\\.events|\(own))$", "^(shared\\.commands|\(own))$"])
        userURL.vhost = adminURL.vhost

        let service = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: userURL, connectionName: "shared-service"), logger: testLogger("shared-service"))
        // What ContractTopology hands a service: the exchanges, its queues,
        // their bindings. Before the change the first item failed with 403.
        let topology: [TopologyItem] = [
            .exchange(ExchangeDeclaration(commands, kind: .direct)),
            .exchange(ExchangeDeclaration(events, kind: .topic)),
            .queue(QueueDeclaration(queue, type: .quorum, deadLetterExchange: events, deadLetterRoutingKey: queue,
                                    deliveryLimit: 10)),
            .queue(QueueDeclaration(dead, type: .quorum)),
            .binding(QueueBinding(queue: queue, exchange: commands, routingKey: "room.register")),
        ]
        try await service.declare(topology)

        // It really has no configure on the exchanges: declaring a new one fails ...
        let refused = await #expect(throws: AMQPError.self) {
            try await service.declare([.exchange(ExchangeDeclaration("shared.other", kind: .topic))])
        }
        #expect(refused?.code == .channelClosed)
        #expect(refused?.replyCode == 403)
        // ... and the connection carries on: the same declarations again, and
        // a command routed through the shared exchange reaches its queue.
        try await service.declare(topology)
        try await admin.publish([1], exchange: commands, routingKey: "room.register")
        #expect(try await service.queueInfo(queue).messageCount == 1)

        // After a reconnect the topology is declared again the same way.
        let before = service.reconnectCount
        let rows = try TestBroker.ctl(["list_connections", "-s", "pid", "user"])
        for row in rows.split(separator: "\n") where row.hasSuffix("\t\(user)") {
            _ = try TestBroker.ctl(["close_connection", String(row.split(separator: "\t")[0]), "test: reconnect"])
        }
        try await withTimeout(60) {
            while service.reconnectCount == before || !service.isConnected {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        try await admin.publish([2], exchange: commands, routingKey: "room.register")
        #expect(try await service.queueInfo(queue).messageCount == 2)

        await service.close()
        await admin.close()
    }

    @Test func aMissingExchangeIsStillCreated() async throws {
        // The embedded default: one user with full rights, no definitions.
        let connection = try await AMQPConnection.connect(configuration: TestBroker.configuration("missing-exchange-created"),
                                                          logger: testLogger("missing-exchange-created"))
        let exchange = uniqueName("created"), queue = uniqueName("created-q")
        try await connection.declare([
            .exchange(ExchangeDeclaration(exchange, kind: .topic, durable: false, autoDelete: true)),
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: queue, exchange: exchange, routingKey: "#")),
        ])
        try await connection.publish([1], exchange: exchange, routingKey: "a.b")
        #expect(try await connection.queueInfo(queue).messageCount == 1)
        await connection.close()
    }
}
