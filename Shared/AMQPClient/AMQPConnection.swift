import Logging
import Tracing
import ServiceLifecycle
import Synchronization

/// Queue counters from a passive `queue.declare`.
public struct AMQPQueueInfo: Sendable, Equatable {
    public var name: String
    /// Messages ready for delivery (not counting unacknowledged ones).
    public var messageCount: Int
    public var consumerCount: Int
}

/// A connection to RabbitMQ that survives broker restarts.
///
/// Every operation is an `async` call answered by the connection's own I/O
/// thread, which is the only code touching rabbitmq-c (see `IOLoop` for the
/// threading rules). After a connection loss it reconnects with exponential
/// back-off and jitter, declares the recorded topology again and restarts
/// the consumers; operations that were in flight fail with a retryable
/// ``AMQPError`` (`connectionLost`), never a false success.
///
/// As a `Service`, `run()` waits for graceful shutdown and then closes the
/// connection; put it *before* the services that use it in a
/// `ServiceGroup` so it is shut down after them.
public final class AMQPConnection: Sendable, Service {
    let loop: IOLoop
    private let consumerIDs = Atomic<Int>(0)

    private init(loop: IOLoop) {
        self.loop = loop
    }

    deinit {
        loop.send(.close(nil))
    }

    /// Connects (waiting up to `initialConnectTimeoutSeconds` for an
    /// unreachable broker) and returns the live connection.
    ///
    /// Throws at once for a wrong password (`accessRefused`), unknown vhost
    /// (`vhostNotAllowed`) or, after the wait, `connectionFailed`.
    ///
    /// Cancelling the calling task stops the wait (a SIGTERM while the
    /// broker is still unreachable): the I/O thread closes and this throws
    /// `closed`.
    public static func connect(configuration: AMQPConfiguration, logger: Logger) async throws(AMQPError) -> AMQPConnection {
        let loop = IOLoop(configuration: configuration, logger: logger)
        do {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (startup: CheckedContinuation<Void, any Error>) in
                    loop.start(startup: Promise(startup))
                }
            } onCancel: {
                // A command to the I/O thread: it ends the start-up with `closed`.
                loop.send(.close(nil))
            }
        } catch let error as AMQPError {
            throw error
        } catch {
            throw AMQPError(.protocolError, "\(error)")
        }
        return AMQPConnection(loop: loop)
    }

    /// Opens another connection with this one's configuration and logger
    /// (its own TCP connection and channels), e.g. for `FailedMessages`' queue snapshots,
    /// whose held messages go back to their queue when it closes.
    public func sibling(named name: String) async throws(AMQPError) -> AMQPConnection {
        var configuration = loop.configuration
        configuration.connectionName = name
        return try await Self.connect(configuration: configuration, logger: loop.logger)
    }

    /// The broker user this connection logs in as: the only value RabbitMQ
    /// accepts in the `user_id` property of what it publishes.
    public var user: String { loop.configuration.url.user }

    /// Whether the connection is currently established (for readiness probes).
    public var isConnected: Bool { loop.isConnected }
    /// How many times the connection was re-established since it was created.
    public var reconnectCount: Int { loop.reconnectCount }

    /// Calls `body` once the connection is not established: at once, on
    /// the caller's thread, if it is not now; else on the I/O thread as
    /// soon as the connection is lost or closed (before any reconnect).
    /// `body` must not block: it runs on the thread that serves every
    /// channel. For code that cannot await, such as a synchronous callback
    /// that must not go on until the loss is seen. It runs before the
    /// connection's calls in flight are failed, and cannot be removed: a
    /// `body` that captures this connection keeps it alive until the
    /// connection is lost or closed.
    public func whenDisconnected(_ body: @escaping @Sendable () -> Void) {
        loop.whenDisconnected(body)
    }

    /// The node of the current (or last) connection: `url` or one of the
    /// configuration's failover URLs.
    public var connectedURL: AMQPURL? { loop.connectedEndpoint }

    /// Declares exchanges, queues and bindings, and remembers them so they
    /// are declared again after every reconnect.
    ///
    /// An exchange that already exists is only checked (passive declare,
    /// which needs no `configure` permission; its kind is not compared) and
    /// declared for real only when the broker does not know it, so a service
    /// also starts on a broker whose definitions own the shared exchanges
    /// and deny it `configure` on them. Queues and bindings are always
    /// declared (arguments that differ give `PRECONDITION_FAILED`).
    public func declare(_ items: [TopologyItem]) async throws(AMQPError) {
        for item in items { try AMQPLimits.topology(item) }
        try await loop.submit { .declare(items, $0) }
    }

    /// Publishes a message and returns once the broker confirmed it
    /// (publisher confirms; many publishes may be in flight at once).
    ///
    /// - Throws: `nacked` when the broker refused it, `unroutable` when
    ///   `mandatory` and no queue matched, `connectionLost` when the
    ///   connection dropped before the confirm (the message may or may not
    ///   have been stored: publish again, consumers must be idempotent).
    public func publish(
        _ body: [UInt8], exchange: String = "", routingKey: String,
        properties: AMQPProperties = AMQPProperties(), mandatory: Bool = false
    ) async throws(AMQPError) {
        try await publish(OutgoingMessage(body: body, exchange: exchange, routingKey: routingKey, properties: properties,
                                          mandatory: mandatory))
    }

    /// Publishes `message` and waits for the broker's confirm (see
    /// ``publish(_:exchange:routingKey:properties:mandatory:)``).
    ///
    /// The publish is a producer span (``MessageTracing``) whose context
    /// the message carries in its `traceparent` header.
    public func publish(_ message: OutgoingMessage) async throws(AMQPError) {
        var message = message
        let span = MessageTracing.startPublishSpan(&message)
        defer { span.end() }
        do {
            try AMQPLimits.message(message)
            try await loop.submit { .publish(message, $0) }
        } catch {
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    /// Publishes messages in the given order (they reach the broker's
    /// channel in that order, unlike concurrent `publish` calls) and waits
    /// until each is confirmed or failed. Returns one entry per message:
    /// nil when confirmed, else the error.
    public func publish(batch messages: [OutgoingMessage]) async -> [AMQPError?] {
        await startPublishing(batch: messages).confirmations()
    }

    /// Hands `messages` to the I/O thread before it returns — so they
    /// reach the broker's channel in this order, after everything published
    /// before the call and before everything published after it — and
    /// returns their confirmations to await later. A caller can keep
    /// publishing (say, the next batch) while the broker confirms this one,
    /// in order, without a task per batch.
    ///
    /// Each message is a producer span, ended when its confirmation is
    /// read (``PendingConfirmations/confirmations()``); see
    /// ``MessageTracing`` for its parent.
    public func startPublishing(batch messages: [OutgoingMessage]) -> PendingConfirmations {
        var messages = messages
        let spans = messages.indices.map { MessageTracing.startPublishSpan(&messages[$0]) }
        let pending = PendingConfirmations(spans: spans)
        var outgoing: [OutgoingMessage] = []
        var results: [AMQPError?] = Array(repeating: nil, count: messages.count)
        var positions: [Int] = []
        for (index, message) in messages.enumerated() {
            do {
                try AMQPLimits.message(message)
                outgoing.append(message)
                positions.append(index)
            } catch {
                results[index] = error
            }
        }
        // Messages over the limits are answered without being sent.
        let rejected = results, sentPositions = positions
        loop.send(.publishBatch(outgoing) { sent in
            var all = rejected
            for (position, result) in zip(sentPositions, sent) { all[position] = result }
            pending.results.fulfil(all)
        })
        return pending
    }

    /// Sends a request and waits for its reply through RabbitMQ's direct
    /// reply-to (`amq.rabbitmq.reply-to`). The request is mandatory, so a
    /// request nobody can receive fails fast as `unroutable`.
    ///
    /// `properties.correlationID` is used when set, otherwise generated.
    public func call(
        _ body: [UInt8], exchange: String = "", routingKey: String,
        properties: AMQPProperties = AMQPProperties(), timeout: Duration = .seconds(10)
    ) async throws(AMQPError) -> AMQPMessage {
        var message = OutgoingMessage(body: body, exchange: exchange, routingKey: routingKey, properties: properties,
                                      mandatory: true)
        let span = MessageTracing.startPublishSpan(&message, operation: "call")
        defer { span.end() }
        // Checked as the I/O thread will send it: with direct reply-to as
        // `reply_to`, and a correlation id of the longest made-up form when
        // the caller gave none.
        var checked = message
        checked.properties.replyTo = ChannelSession.replyQueue
        if checked.properties.correlationID == nil { checked.properties.correlationID = "rpc-\(UInt64.max)" }  // RPCRegistry's form
        try AMQPLimits.message(checked)
        let (seconds, attoseconds) = timeout.components
        let deadline = monotonicNanos() + UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
        return try await loop.submit { .rpc(message, deadline: deadline, $0) }
    }

    /// Starts consuming `queue` with manual acknowledgements and at most
    /// `prefetch` unacknowledged deliveries. The consumer is restarted
    /// after reconnects; iterate it once.
    public func consume(
        queue: String, prefetch: UInt16 = 32, exclusive: Bool = false, arguments: AMQPTable = [:]
    ) async throws(AMQPError) -> AMQPConsumer {
        let id = consumerIDs.add(1, ordering: .relaxed).newValue
        let (stream, continuation) = DeliveryStream.makeStream()
        try AMQPLimits.shortString(queue, "queue name")
        try AMQPLimits.table(arguments, "consumer argument")
        let spec = ConsumerSpec(queue: queue, prefetch: prefetch, exclusive: exclusive, arguments: arguments)
        try await loop.submit { .consume(id: id, spec, continuation, $0) }
        return AMQPConsumer(id: id, queue: queue, stream: stream, loop: loop)
    }

    /// Fetches one message with `basic.get` (manual ack), or nil when empty.
    public func get(queue: String) async throws(AMQPError) -> AMQPDelivery? {
        try await loop.submit { .get(queue, $0) }
    }

    /// Message and consumer counts of an existing queue (404 → `channelClosed`).
    public func queueInfo(_ name: String) async throws(AMQPError) -> AMQPQueueInfo {
        try await loop.submit { .inspectQueue(name, $0) }
    }

    /// Deletes a queue; returns how many messages it held.
    @discardableResult
    public func deleteQueue(_ name: String) async throws(AMQPError) -> Int {
        Int(try await loop.submit { .deleteQueue(name, $0) })
    }

    /// Deletes an exchange (and with it every binding from it).
    public func deleteExchange(_ name: String) async throws(AMQPError) {
        try await loop.submit { .deleteExchange(name, $0) }
    }

    /// Removes every ready message of a queue; returns how many.
    @discardableResult
    public func purgeQueue(_ name: String) async throws(AMQPError) -> Int {
        Int(try await loop.submit { .purgeQueue(name, $0) })
    }

    /// Closes gracefully: waits (up to 5 s) for outstanding publisher
    /// confirms, ends consumer streams, closes the connection. Idempotent.
    public func close() async {
        _ = try? await loop.submit { (promise: Promise<Void>) in .close(promise) }
    }

    /// Runs until graceful shutdown, then closes the connection.
    public func run() async throws {
        try? await gracefulShutdown()
        await close()
    }
}

/// The deliveries of one consumer, as an `AsyncSequence`.
///
/// Iterate it once. The sequence ends after ``stop()`` (once deliveries
/// already received are handed out) or when the connection is closed, and
/// throws if the broker cancels the consumer (its queue was deleted) or a
/// connection that does not reconnect (``AMQPConfiguration/reconnectsAfterLoss``)
/// was lost (`connectionLost`).
public final class AMQPConsumer: AsyncSequence, Sendable {
    public typealias Element = AMQPDelivery
    public typealias AsyncIterator = AsyncThrowingStream<AMQPDelivery, any Error>.AsyncIterator

    /// The queue consumed.
    public let queue: String
    let id: Int
    private let stream: AsyncThrowingStream<AMQPDelivery, any Error>
    private let loop: IOLoop

    init(id: Int, queue: String, stream: AsyncThrowingStream<AMQPDelivery, any Error>, loop: IOLoop) {
        self.id = id
        self.queue = queue
        self.stream = stream
        self.loop = loop
    }

    public func makeAsyncIterator() -> AsyncIterator {
        stream.makeAsyncIterator()
    }

    /// Stops new deliveries (`basic.cancel`). Deliveries already received
    /// are still yielded and can be acked; then the sequence ends.
    /// Safe to call from a synchronous graceful-shutdown handler.
    public func stop() {
        loop.send(.stopConsumer(id: id))
    }
}
