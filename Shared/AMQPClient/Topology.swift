/// Broker objects a service declares at start and again after every
/// reconnect. Declarations are idempotent on the broker as long as the
/// arguments stay the same.
public enum TopologyItem: Sendable, Hashable {
    case exchange(ExchangeDeclaration)
    case queue(QueueDeclaration)
    case binding(QueueBinding)
}

/// `exchange.declare`.
public struct ExchangeDeclaration: Sendable, Hashable {
    /// AMQP exchange kinds.
    public enum Kind: String, Sendable {
        case direct, topic, fanout, headers
    }
    public var name: String
    public var kind: Kind
    public var durable: Bool
    public var autoDelete: Bool
    public var isInternal: Bool
    public var arguments: AMQPTable

    /// A durable exchange unless told otherwise.
    public init(_ name: String, kind: Kind, durable: Bool = true, autoDelete: Bool = false,
                isInternal: Bool = false, arguments: AMQPTable = [:]) {
        self.name = name
        self.kind = kind
        self.durable = durable
        self.autoDelete = autoDelete
        self.isInternal = isInternal
        self.arguments = arguments
    }
}

/// `queue.declare`, with the RabbitMQ arguments the services use spelled out.
public struct QueueDeclaration: Sendable, Hashable {
    /// RabbitMQ queue types.
    public enum QueueType: String, Sendable {
        case classic, quorum
    }
    public var name: String
    public var durable: Bool
    public var exclusive: Bool
    public var autoDelete: Bool
    /// Raw `x-` arguments; the typed initializer parameters write into it.
    public var arguments: AMQPTable

    /// A durable queue. Typed parameters become the usual `x-` arguments:
    /// `x-queue-type`, `x-dead-letter-exchange`, `x-dead-letter-routing-key`,
    /// `x-delivery-limit` (quorum only), `x-message-ttl` (ms), `x-max-length`.
    public init(
        _ name: String, type: QueueType = .quorum, durable: Bool = true, exclusive: Bool = false,
        autoDelete: Bool = false, deadLetterExchange: String? = nil, deadLetterRoutingKey: String? = nil,
        deliveryLimit: Int? = nil, messageTTLMilliseconds: Int? = nil, maxLength: Int? = nil,
        arguments: AMQPTable = [:]
    ) {
        self.name = name
        self.durable = durable
        self.exclusive = exclusive
        self.autoDelete = autoDelete
        var args = arguments
        args["x-queue-type"] = .string(type.rawValue)
        if let deadLetterExchange { args["x-dead-letter-exchange"] = .string(deadLetterExchange) }
        if let deadLetterRoutingKey { args["x-dead-letter-routing-key"] = .string(deadLetterRoutingKey) }
        if let deliveryLimit { args["x-delivery-limit"] = .int64(Int64(deliveryLimit)) }
        if let messageTTLMilliseconds { args["x-message-ttl"] = .int64(Int64(messageTTLMilliseconds)) }
        if let maxLength { args["x-max-length"] = .int64(Int64(maxLength)) }
        self.arguments = args
    }
}

/// `queue.bind`.
public struct QueueBinding: Sendable, Hashable {
    public var queue: String
    public var exchange: String
    public var routingKey: String
    public var arguments: AMQPTable

    /// Binds `queue` to `exchange` with `routingKey`.
    public init(queue: String, exchange: String, routingKey: String, arguments: AMQPTable = [:]) {
        self.queue = queue
        self.exchange = exchange
        self.routingKey = routingKey
        self.arguments = arguments
    }
}
