import Logging
import ServiceLifecycle
import Synchronization

/// Whether a consumer service is consuming (for readiness probes).
public final class ConsumerStatus: Sendable {
    private let consuming = Atomic<Bool>(false)
    public init() {}
    /// True between the broker accepting the consumer and its stop.
    public var isConsuming: Bool { consuming.load(ordering: .relaxed) }
    func set(_ value: Bool) { consuming.store(value, ordering: .relaxed) }
}

/// Consumes one queue and hands each delivery to `handler`, as a `Service`.
///
/// On graceful shutdown it stops consuming (`basic.cancel`), lets the
/// handlers finish the deliveries already received — they can still ack,
/// because the channel stays open — and returns. Put it *after* its
/// ``AMQPConnection`` in the `ServiceGroup` so the connection outlives it.
///
/// The handler settles each delivery itself (ack after the work is durable,
/// nack/reject for poison) and must not throw: what to do with a failure is
/// a decision of the service, not of the transport.
public struct AMQPConsumerService: Service {
    private let connection: AMQPConnection
    private let queue: String
    private let prefetch: UInt16
    private let concurrency: Int
    private let logger: Logger
    private let handler: @Sendable (AMQPDelivery) async -> Void
    /// Readiness of this consumer.
    public let status = ConsumerStatus()

    /// - Parameters:
    ///   - concurrency: how many deliveries are handled at once (1 keeps
    ///     the queue's order).
    public init(
        connection: AMQPConnection, queue: String, prefetch: UInt16 = 32, concurrency: Int = 1,
        logger: Logger, handler: @escaping @Sendable (AMQPDelivery) async -> Void
    ) {
        self.connection = connection
        self.queue = queue
        self.prefetch = prefetch
        self.concurrency = max(1, concurrency)
        self.logger = logger
        self.handler = handler
    }

    public func run() async throws {
        let consumer = try await connection.consume(queue: queue, prefetch: prefetch)
        status.set(true)
        defer { status.set(false) }
        logger.info("consuming", metadata: ["amqp.queue": "\(queue)", "amqp.prefetch": "\(prefetch)"])
        try await withGracefulShutdownHandler {
            // Each delivery is handled in its consumer span, whose
            // context the handler's logs, store work and publishes see.
            let handler = self.handler, queue = self.queue
            let traced: @Sendable (AMQPDelivery) async -> Void = { delivery in
                await MessageTracing.withConsumeSpan(delivery, queue: queue, handler)
            }
            if concurrency == 1 {
                for try await delivery in consumer { await traced(delivery) }
            } else {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    var running = 0
                    for try await delivery in consumer {
                        if running >= concurrency {
                            try await group.next()
                            running -= 1
                        }
                        group.addTask { await traced(delivery) }
                        running += 1
                    }
                    try await group.waitForAll()
                }
            }
        } onGracefulShutdown: { [status] in
            status.set(false)
            consumer.stop()
        }
        logger.info("consumer stopped", metadata: ["amqp.queue": "\(queue)"])
    }
}
