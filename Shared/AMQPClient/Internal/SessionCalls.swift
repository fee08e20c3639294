/// The rabbitmq-c calls a ``ChannelSession`` asks its driver (the
/// ``IOLoop``) to make, as values, and what a call gave back.
///
/// The session never touches the C connection: it returns `.call(CCall)`
/// and the driver, on the I/O thread, makes the call with
/// ``CConnection/perform(_:)`` and hands the outcome back through
/// ``ChannelSession/callReturned(_:)``. Tests play the driver with
/// outcomes of their choosing, so no socket is needed.
enum CCall: Equatable {
    case openChannel(UInt16)
    case confirmSelect(UInt16)
    case qos(UInt16, prefetch: UInt16)
    case consume(UInt16, queue: String, noAck: Bool, exclusive: Bool, arguments: AMQPTable)
    case cancel(UInt16, consumerTag: String)
    /// Declares a queue, a binding or (for real) an exchange.
    case declare(TopologyItem, channel: UInt16)
    /// A passive exchange declaration: 404 (channel closed) when missing.
    case exchangeExists(String, channel: UInt16)
    case inspectQueue(String, channel: UInt16)
    case deleteQueue(String, channel: UInt16)
    case deleteExchange(String, channel: UInt16)
    case purgeQueue(String, channel: UInt16)
    case get(String, channel: UInt16)
    /// Writes a message's three frames; waits for nothing.
    case publish(channel: UInt16, exchange: String, routingKey: String, mandatory: Bool,
                 properties: AMQPProperties, body: [UInt8])
    case ack(channel: UInt16, deliveryTag: UInt64)
    case nack(channel: UInt16, deliveryTag: UInt64, requeue: Bool)
    case reject(channel: UInt16, deliveryTag: UInt64, requeue: Bool)
}

/// What a successful ``CCall`` gave back.
enum CReturn {
    case done
    /// `basic.consume-ok`'s consumer tag.
    case consumerTag(String)
    /// `queue.declare-ok` of a passive declaration.
    case queueCounts(messages: UInt32, consumers: UInt32)
    /// Messages deleted or purged.
    case messageCount(UInt32)
    /// `basic.get`: a message, or nil when the queue was empty.
    case got(GotMessage?)
}

/// A message fetched with `basic.get`.
struct GotMessage {
    var deliveryTag: UInt64
    var redelivered: Bool
    var exchange: String
    var routingKey: String
    var message: AMQPMessage
}

/// A delivery as the session hands it to the driver, which wraps it into an
/// ``AMQPDelivery`` (the settler needs the loop).
struct InboundDelivery {
    var channel: UInt16
    /// The generation of `channel` it came on (``ChannelTable``).
    var generation: UInt64
    /// The queue consumed ("" for none known), for the metric's dimensions.
    var queue: String
    var consumerTag: String
    var deliveryTag: UInt64
    var redelivered: Bool
    var exchange: String
    var routingKey: String
    var properties: AMQPProperties
    var body: [UInt8]
}

/// The counters a session asks the driver to increment.
enum SessionMetric: Equatable {
    case published
    case publishFailed
    case delivered(queue: String, routingKey: String)
    case truncatedHeaders(Int)
}

/// Answers one caller: a closure over the caller's ``Promise`` and its
/// outcome, made by the session and run by the driver.
struct Resumption {
    let perform: () -> Void
}

/// What waits for a caller's answer: a continuation (the async API) or a
/// callback (tests, and batch publishes).
///
/// `Sendable`: both targets are.
struct Promise<T: Sendable>: Sendable {
    private enum Target: Sendable {
        case continuation(CheckedContinuation<T, any Error>)
        case callback(@Sendable (Result<T, AMQPError>) -> Void)
    }

    private let target: Target

    init(_ continuation: CheckedContinuation<T, any Error>) {
        target = .continuation(continuation)
    }

    init(_ callback: @escaping @Sendable (Result<T, AMQPError>) -> Void) {
        target = .callback(callback)
    }

    func resume(returning value: T) {
        switch target {
        case .continuation(let c): c.resume(returning: value)
        case .callback(let f): f(.success(value))
        }
    }

    func resume(throwing error: AMQPError) {
        switch target {
        case .continuation(let c): c.resume(throwing: error)
        case .callback(let f): f(.failure(error))
        }
    }

    func resume() where T == Void { resume(returning: ()) }
}

/// Collects the outcomes of one `publishBatch`, answering when the last
/// message is settled. Confined to the I/O thread, like the session that
/// holds it.
final class BatchCollector {
    private var results: [AMQPError?]
    private var remaining: Int
    private let done: @Sendable ([AMQPError?]) -> Void

    init(count: Int, done: @escaping @Sendable ([AMQPError?]) -> Void) {
        results = Array(repeating: nil, count: count)
        remaining = count
        self.done = done
        if count == 0 { done([]) }
    }

    func settle(_ index: Int, _ error: AMQPError?) {
        results[index] = error
        remaining -= 1
        if remaining == 0 { done(results) }
    }
}

extension CConnection {
    /// Makes one call a session asked for.
    func perform(_ call: CCall) throws(AMQPError) -> CReturn {
        switch call {
        case .openChannel(let channel):
            try openChannel(channel)
        case .confirmSelect(let channel):
            try confirmSelect(channel)
        case .qos(let channel, let prefetch):
            try qos(channel, prefetch: prefetch)
        case .consume(let channel, let queue, let noAck, let exclusive, let arguments):
            return .consumerTag(try consume(channel, queue: queue, noAck: noAck, exclusive: exclusive, arguments: arguments))
        case .cancel(let channel, let tag):
            try cancel(channel, consumerTag: tag)
        case .declare(let item, let channel):
            try declare(item, channel: channel)
        case .exchangeExists(let name, let channel):
            try exchangeExists(name, channel: channel)
        case .inspectQueue(let name, let channel):
            let r = try inspectQueue(name, channel: channel)
            return .queueCounts(messages: r.messages, consumers: r.consumers)
        case .deleteQueue(let name, let channel):
            return .messageCount(try deleteQueue(name, channel: channel))
        case .deleteExchange(let name, let channel):
            try deleteExchange(name, channel: channel)
        case .purgeQueue(let name, let channel):
            return .messageCount(try purgeQueue(name, channel: channel))
        case .get(let queue, let channel):
            guard let r = try get(channel, queue: queue) else { return .got(nil) }
            return .got(GotMessage(deliveryTag: r.tag, redelivered: r.redelivered, exchange: r.exchange,
                                   routingKey: r.routingKey, message: r.message))
        case .publish(let channel, let exchange, let routingKey, let mandatory, let properties, let body):
            try publish(channel: channel, exchange: exchange, routingKey: routingKey, mandatory: mandatory,
                        properties: properties, body: body)
        case .ack(let channel, let tag):
            try ack(channel: channel, deliveryTag: tag, multiple: false)
        case .nack(let channel, let tag, let requeue):
            try nack(channel: channel, deliveryTag: tag, multiple: false, requeue: requeue)
        case .reject(let channel, let tag, let requeue):
            try reject(channel: channel, deliveryTag: tag, requeue: requeue)
        }
        return .done
    }
}
