/// A message to publish: where it goes, what it carries, and whether it
/// must reach a queue. ``AMQPConnection/publish(_:)`` sends one,
/// ``AMQPConnection/publish(batch:)`` several in order.
public struct OutgoingMessage: Sendable, Equatable {
    /// The exchange (`""`: the default exchange, which routes by queue name).
    public var exchange: String
    /// The routing key.
    public var routingKey: String
    /// The body.
    public var body: [UInt8]
    /// The properties (persistence, type, ids, headers).
    public var properties: AMQPProperties
    /// Fail with `unroutable` when no queue matches, instead of the broker
    /// dropping the message silently.
    public var mandatory: Bool

    public init(body: [UInt8], exchange: String = "", routingKey: String, properties: AMQPProperties = AMQPProperties(),
                mandatory: Bool = false) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.body = body
        self.properties = properties
        self.mandatory = mandatory
    }
}

/// The broker's answers to one ``AMQPConnection/startPublishing(batch:)``:
/// one entry per message, nil when confirmed, else the error. Fulfilled
/// once, by the I/O thread; awaited by any number of tasks.
public final class PendingConfirmations: Sendable {
    let results = OneShot<[AMQPError?]>()

    init() {}

    /// Waits until every message of the batch is confirmed or failed.
    public func confirmations() async -> [AMQPError?] {
        await results.value()
    }

    /// Whether the answers are in (without waiting).
    public var isSettled: Bool { results.isSettled }
}
