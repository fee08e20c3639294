import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// Contract v1.1: a command whose routing key names no command type gets
/// the 1001 reply (through the alternate exchange of `booking.commands`)
/// instead of coming back unroutable — on a fresh broker at once, on one an
/// earlier version set up after `bookingctl topology upgrade`.
@Suite("Unknown command types and the topology upgrade", .serialized)
struct TopologyUpgradeTests {
    /// Sends `booking.frobnicate` (no `type` property) and returns the reply,
    /// or the error when the broker returned it unroutable.
    static func unknownCommand(_ client: AMQPConnection) async -> Result<CommandReply, any Error> {
        do {
            let reply = try await client.call(Array(#"{"bookingId": "x"}"#.utf8), exchange: Topology.commandsExchange,
                                              routingKey: "booking.frobnicate",
                                              properties: AMQPProperties(messageID: UUID().uuidString), timeout: .seconds(30))
            return .success(try ContractJSON.decode(CommandReply.self, from: reply.body))
        } catch {
            return .failure(error)
        }
    }

    @Test func aFreshBrokerAnswersUnknownCommandTypesWith1001() async throws {
        let handler = try await Handler()
        let client = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: handler.url, connectionName: "client"), logger: testLogger("client"))
        let reply = try await Self.unknownCommand(client).get()
        #expect(reply.errorValue?.code == .unknownCommand)
        #expect(reply.errorValue?.text.contains("booking.frobnicate") == true)
        // … and it is dead-lettered with the reason.
        let dead = try await client.consume(queue: Topology.deadLetterQueue(for: Topology.handlerCommandsQueue))
        let got = try await withTimeout(60, "the unknown command dead-lettered") { try await dead.take(1) }
        #expect(got.first?.routingKey == Topology.handlerCommandsQueue)
        #expect(got.first?.properties.headers["x-original-routing-key"]?.stringValue == "booking.frobnicate")
        dead.stop()
        await client.close()
        await handler.stop()
    }

    @Test func upgradingATopologyDeclaredByTheEarlierVersion() async throws {
        let url = try TestBroker.isolatedURL("ctl-upgrade")
        defer { TestBroker.deleteVhost(url.vhost) }
        let client = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: url, connectionName: "client"), logger: testLogger("client"))
        // The topology as the version before v1.1 declared it: booking.commands
        // without the alternate-exchange argument, the handler's queue bound
        // with the command types only.
        let queue = Topology.handlerCommandsQueue
        var old: [TopologyItem] = [
            .exchange(ExchangeDeclaration(Topology.commandsExchange, kind: .direct)),
            .exchange(ExchangeDeclaration(Topology.eventsExchange, kind: .topic)),
            .exchange(ExchangeDeclaration(Topology.deadLetterExchange, kind: .topic)),
            .queue(QueueDeclaration(queue, deadLetterExchange: Topology.deadLetterExchange,
                                    deadLetterRoutingKey: queue, deliveryLimit: Topology.serviceQueueDeliveryLimit)),
        ]
        old += Topology.handlerCommandsBindingKeys.map {
            .binding(QueueBinding(queue: queue, exchange: Topology.commandsExchange, routingKey: $0))
        }
        try await client.declare(old)
        // The new handler starts on it: it never re-declares booking.commands,
        // so unknown types still come back unroutable.
        let handler = try await Handler(url: url)
        guard case .failure(let error) = await Self.unknownCommand(client) else {
            Issue.record("an unknown command type was routed before the upgrade")
            return
        }
        #expect((error as? AMQPError)?.code == .unroutable, "\(error)")
        // The upgrade, as an operator runs it.
        let upgrade = try await CLIRunner(url: url).run(["topology", "upgrade", "--management-url",
                                                          try TestBroker.managementURL(), "--json"])
        #expect(upgrade.status == 0, "\(upgrade.stderr)")
        #expect(upgrade.stdout.contains(Topology.commandsAlternateExchangePolicy.name))
        let reply = try await Self.unknownCommand(client).get()
        #expect(reply.errorValue?.code == .unknownCommand)
        // Known commands still reach the handler as before.
        let known = try await client.call(Array("{}".utf8), exchange: Topology.commandsExchange, routingKey: "booking.cancel",
                                          properties: AMQPProperties(messageID: UUID().uuidString), timeout: .seconds(30))
        #expect(try ContractJSON.decode(CommandReply.self, from: known.body).errorValue?.code == .invalidField)
        // Idempotent.
        #expect(try await CLIRunner(url: url).run(["topology", "upgrade", "--management-url",
                                                    try TestBroker.managementURL()]).status == 0)
        await client.close()
        await handler.stop()
    }

    @Test func upgradeExplainsAWrongManagementURL() async throws {
        let url = try TestBroker.isolatedURL("ctl-upgrade-bad")
        defer { TestBroker.deleteVhost(url.vhost) }
        let result = try await CLIRunner(url: url).run(["topology", "upgrade", "--management-url", "ftp://x"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("--management-url"), "\(result.stderr)")
    }
}
