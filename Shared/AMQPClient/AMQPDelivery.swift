import Metrics
import Synchronization

/// A message delivered to a consumer. Settle it exactly once with
/// ``ack()``, ``nack(requeue:)`` or ``reject(requeue:)``; unsettled
/// deliveries are redelivered by the broker when the channel closes.
public struct AMQPDelivery: Sendable {
    /// The message body.
    public let body: [UInt8]
    /// All AMQP properties and headers (including `x-death`).
    public let properties: AMQPProperties
    /// The exchange it was published to ("" for the default exchange).
    public let exchange: String
    /// The routing key it was published with.
    public let routingKey: String
    /// Whether the broker delivered it before (to this or another consumer).
    public let redelivered: Bool
    /// The channel-scoped delivery tag.
    public let deliveryTag: UInt64
    /// The consumer it was delivered to.
    public let consumerTag: String
    /// When the I/O thread decoded it: the start of a delivery's time in
    /// this process, before any hop to the handler's task.
    public let receivedAt: ContinuousClock.Instant

    let settler: DeliverySettler

    /// Acknowledges the message: the broker forgets it.
    public func ack() async throws(AMQPError) {
        try await settler.settle(.ack(deliveryTag))
    }

    /// Negatively acknowledges: requeued, or dead-lettered when `requeue` is
    /// false and the queue has a dead-letter exchange.
    public func nack(requeue: Bool = false) async throws(AMQPError) {
        try await settler.settle(.nack(deliveryTag, requeue: requeue))
    }

    /// Rejects the message (same effect as a single nack).
    public func reject(requeue: Bool = false) async throws(AMQPError) {
        try await settler.settle(.reject(deliveryTag, requeue: requeue))
    }
}

/// How a delivery is settled.
enum Settlement: Sendable {
    case ack(UInt64)
    case nack(UInt64, requeue: Bool)
    case reject(UInt64, requeue: Bool)
}

/// Routes a settlement to the channel incarnation that delivered it.
struct DeliverySettler: Sendable {
    let loop: IOLoop
    let channel: UInt16
    /// The connection generation the delivery came from; after a reconnect
    /// its delivery tag means nothing, so settling fails as stale.
    let generation: UInt64
    /// The queue it came from and its routing key: the metric's dimensions.
    let queue: String
    let routingKey: String

    func settle(_ settlement: Settlement) async throws(AMQPError) {
        try await loop.submit { .settle(channel: channel, generation: generation, settlement, $0) }
        let outcome = switch settlement {
        case .ack: "acked"
        case .nack(_, let requeue), .reject(_, let requeue): requeue ? "requeued" : "rejected"
        }
        Counter(label: "amqp_messages_settled_total",
                dimensions: [("queue", queue), ("type", MessageMetrics.typeLabel(routingKey)),
                             ("outcome", outcome)]).increment()
    }
}

/// Dimensions of the per-queue message metrics.
enum MessageMetrics {
    /// The `type` dimension: the routing key — a command or event type, or
    /// the queue name for messages sent through the default exchange —
    /// rather than the `type` property, which is any text a client chose.
    /// Truncated so a long key cannot bloat the registry, and at most
    /// ``LabelBudget/limit`` different ones per process: a queue's bindings
    /// do not bound the keys that reach it (an alternate exchange takes any
    /// key, and outside users may bind their own exchanges), so a stranger
    /// sending a new key per message would otherwise add series without end.
    static func typeLabel(_ routingKey: String, budget: LabelBudget = MessageMetrics.budget) -> String {
        budget.label(routingKey.isEmpty ? "-" : String(routingKey.prefix(64)))
    }

    static let budget = LabelBudget(limit: 256)
}

/// The `type` dimension of the AMQP layer's per-queue message metrics.
public enum AMQPMetrics {
    /// Names that always keep their own `type` label, outside the budget
    /// of first-come keys: a service reserves its contract's command,
    /// query and event types and queue names at start-up, so a stranger
    /// who sends many new keys early cannot turn them into `other`.
    /// Keys longer than the label's 64 bytes are reserved by their prefix.
    public static func reserveTypeLabels(_ names: some Sequence<String>) {
        MessageMetrics.budget.reserve(names.map { String($0.prefix(64)) })
    }
}

/// Admits label values first come, first served, up to `limit`; later new
/// values are counted as `other`. Reserved values keep their label and do
/// not count towards the limit.
final class LabelBudget: Sendable {
    let limit: Int
    private struct Seen {
        var reserved: Set<String> = []
        var admitted: Set<String> = []
    }
    private let seen = Mutex(Seen())

    init(limit: Int) { self.limit = limit }

    func reserve(_ values: some Sequence<String>) {
        seen.withLock { seen in
            for value in values {
                // A reserved value admitted earlier frees its place.
                seen.admitted.remove(value)
                seen.reserved.insert(value)
            }
        }
    }

    func label(_ value: String) -> String {
        seen.withLock { seen in
            if seen.reserved.contains(value) || seen.admitted.contains(value) { return value }
            guard seen.admitted.count < limit else { return "other" }
            seen.admitted.insert(value)
            return value
        }
    }
}
