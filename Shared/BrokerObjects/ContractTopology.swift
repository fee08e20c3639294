import AMQPClient
import BookingContracts

/// Wire contract v1's broker objects as AMQP declarations, so every service
/// declares them identically (RabbitMQ refuses a re-declaration with other
/// arguments).
public enum ContractTopology {
    /// All exchanges of the contract.
    public static var exchanges: [TopologyItem] {
        Topology.exchanges.map { exchange in
            let kind: ExchangeDeclaration.Kind = switch exchange.kind {
            case .direct: .direct
            case .topic: .topic
            case .fanout: .fanout
            }
            var arguments: AMQPTable = [:]
            if let alternate = exchange.alternateExchange { arguments["alternate-exchange"] = .string(alternate) }
            return .exchange(ExchangeDeclaration(exchange.name, kind: kind, isInternal: exchange.isInternal,
                                                 arguments: arguments))
        }
    }

    /// The declaration and bindings of a contract queue.
    public static func queue(_ queue: Topology.Queue) -> [TopologyItem] {
        var items: [TopologyItem] = [
            .queue(QueueDeclaration(
                queue.name, type: queue.quorum ? .quorum : .classic,
                deadLetterExchange: queue.deadLetterExchange, deadLetterRoutingKey: queue.deadLetterRoutingKey,
                deliveryLimit: queue.deliveryLimit)),
        ]
        for binding in queue.bindings {
            items.append(.binding(QueueBinding(queue: queue.name, exchange: binding.exchange, routingKey: binding.key)))
        }
        return items
    }

    /// Exchanges plus the named queues (and, for service queues, their
    /// `.dead` queues) a service owns.
    public static func declarations(queues names: [String]) -> [TopologyItem] {
        var items = exchanges
        for name in names {
            guard let queue = Topology.queue(named: name) else {
                preconditionFailure("\(name) is not a queue of the contract")
            }
            items += self.queue(queue)
            if queue.deadLetterExchange != nil, let dead = Topology.queue(named: Topology.deadLetterQueue(for: name)) {
                items += self.queue(dead)
            }
        }
        return items
    }
}
