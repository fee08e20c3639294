import Foundation

/// The AMQP basic properties of a message: every field of the protocol.
public struct AMQPProperties: Sendable, Equatable {
    /// AMQP delivery mode.
    public enum DeliveryMode: UInt8, Sendable {
        case transient = 1
        case persistent = 2
    }

    public var contentType: String?
    public var contentEncoding: String?
    /// Application headers, including broker-added ones such as `x-death`.
    public var headers: AMQPTable
    public var deliveryMode: DeliveryMode?
    public var priority: UInt8?
    public var correlationID: String?
    public var replyTo: String?
    /// Per-message TTL in milliseconds, as a decimal string (AMQP's choice).
    public var expiration: String?
    public var messageID: String?
    /// Seconds since the UNIX epoch.
    public var timestamp: UInt64?
    public var type: String?
    /// The authenticated broker user that published (RabbitMQ validates it).
    public var userID: String?
    public var appID: String?
    public var clusterID: String?

    /// Creates properties; everything defaults to absent.
    public init(
        contentType: String? = nil, contentEncoding: String? = nil, headers: AMQPTable = [:],
        deliveryMode: DeliveryMode? = nil, priority: UInt8? = nil, correlationID: String? = nil,
        replyTo: String? = nil, expiration: String? = nil, messageID: String? = nil,
        timestamp: UInt64? = nil, type: String? = nil, userID: String? = nil,
        appID: String? = nil, clusterID: String? = nil
    ) {
        self.contentType = contentType
        self.contentEncoding = contentEncoding
        self.headers = headers
        self.deliveryMode = deliveryMode
        self.priority = priority
        self.correlationID = correlationID
        self.replyTo = replyTo
        self.expiration = expiration
        self.messageID = messageID
        self.timestamp = timestamp
        self.type = type
        self.userID = userID
        self.appID = appID
        self.clusterID = clusterID
    }

    /// Persistent JSON, the shape of every message in the contract.
    public static func persistentJSON(
        type: String? = nil, messageID: String? = nil, correlationID: String? = nil,
        replyTo: String? = nil, headers: AMQPTable = [:], userID: String? = nil
    ) -> AMQPProperties {
        AMQPProperties(
            contentType: "application/json", headers: headers, deliveryMode: .persistent,
            correlationID: correlationID, replyTo: replyTo, messageID: messageID,
            timestamp: UInt64(Date().timeIntervalSince1970), type: type, userID: userID)
    }

    /// RabbitMQ's `x-death` header, decoded; empty when never dead-lettered.
    public var xDeath: [XDeathEntry] {
        guard case .array(let entries)? = headers["x-death"] else { return [] }
        return entries.compactMap(XDeathEntry.init)
    }
}

/// A message as it comes back from the broker outside of a consumer
/// (an RPC reply or a returned message).
public struct AMQPMessage: Sendable {
    /// The message body.
    public var body: [UInt8]
    /// Its properties.
    public var properties: AMQPProperties
    /// The exchange it was published to.
    public var exchange: String
    /// The routing key it was published with.
    public var routingKey: String

    /// Creates a message value.
    public init(body: [UInt8], properties: AMQPProperties, exchange: String = "", routingKey: String = "") {
        self.body = body
        self.properties = properties
        self.exchange = exchange
        self.routingKey = routingKey
    }
}
