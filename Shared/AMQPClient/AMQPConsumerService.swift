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
    private let prepare: @Sendable (AMQPDelivery) async -> @Sendable (AMQPDelivery) async -> Void
    /// Readiness of this consumer.
    public let status = ConsumerStatus()

    /// - Parameters:
    ///   - concurrency: how many deliveries are handled at once (1 keeps
    ///     the queue's order).
    public init(
        connection: AMQPConnection, queue: String, prefetch: UInt16 = 32, concurrency: Int = 1,
        logger: Logger, handler: @escaping @Sendable (AMQPDelivery) async -> Void
    ) {
        self.init(connection: connection, queue: queue, prefetch: prefetch, concurrency: concurrency, logger: logger,
                  steps: { _ in handler })
    }

    /// A consumer that handles each delivery in two steps. `prepare` runs
    /// in the consuming loop, one delivery at a time in the order the
    /// broker delivered them (keep it short: the next delivery waits for
    /// it); the handler it returns then runs concurrently with the others,
    /// in the delivery's consumer span. With `concurrency` above 1 the
    /// tasks reach any lock in the order they happen to run: `prepare` is
    /// where a delivery takes its place in an order of the service's own
    /// (per booking, say).
    public static func preparing(
        connection: AMQPConnection, queue: String, prefetch: UInt16 = 32, concurrency: Int = 1,
        logger: Logger, _ prepare: @escaping @Sendable (AMQPDelivery) async -> @Sendable (AMQPDelivery) async -> Void
    ) -> AMQPConsumerService {
        AMQPConsumerService(connection: connection, queue: queue, prefetch: prefetch, concurrency: concurrency, logger: logger,
                            steps: prepare)
    }

    private init(
        connection: AMQPConnection, queue: String, prefetch: UInt16, concurrency: Int,
        logger: Logger, steps prepare: @escaping @Sendable (AMQPDelivery) async -> @Sendable (AMQPDelivery) async -> Void
    ) {
        self.connection = connection
        self.queue = queue
        self.prefetch = prefetch
        self.concurrency = max(1, concurrency)
        self.logger = logger
        self.prepare = prepare
    }

    public func run() async throws {
        let consumer = try await connection.consume(queue: queue, prefetch: prefetch)
        status.set(true)
        defer { status.set(false) }
        logger.info("consuming", metadata: ["amqp.queue": "\(queue)", "amqp.prefetch": "\(prefetch)"])
        try await withGracefulShutdownHandler {
            // Each delivery is handled in its consumer span, whose
            // context the handler's logs, store work and publishes see.
            let prepare = self.prepare, queue = self.queue
            if concurrency == 1 {
                for try await delivery in consumer {
                    await MessageTracing.withConsumeSpan(delivery, queue: queue, await prepare(delivery))
                }
            } else {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    var running = 0
                    for try await delivery in consumer {
                        if running >= concurrency {
                            try await group.next()
                            running -= 1
                        }
                        // Prepared only once its task can start: whatever
                        // `prepare` takes (a place in a queue) has a task
                        // that will release it.
                        let handler = await prepare(delivery)
                        group.addTask { await MessageTracing.withConsumeSpan(delivery, queue: queue, handler) }
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
