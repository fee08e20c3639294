/// Every message of one queue, held without consuming it, for people who
/// must look at a queue nothing consumes (dead-letter queues,
/// `passes.failed`) and then act on some of its messages.
///
/// How it reads: one `basic.get` (manual ack) after another until the
/// broker answers "empty", keeping every delivery unacknowledged. Nothing
/// leaves the queue until it is acked, and a message is acked only after
/// whatever replaces it (a retry, an audit copy) was confirmed by the
/// broker; if this process dies the broker returns every held message by
/// itself. Held messages that are not acted on are returned with
/// `basic.nack(requeue)` one by one in queue order.
///
/// Why this keeps the order: the queues this is for are quorum queues, and
/// a quorum queue hands out returned messages before any other, in the
/// order they were returned. So returning the held messages oldest first
/// puts them back in front of everything that arrived meanwhile (new dead
/// letters keep coming while a snapshot is held), in their old order. A
/// classic queue gives no such promise (it may put a returned message at
/// its old position or not), so it must not be read this way — and two
/// snapshots of one queue at once would interleave their returns, which
/// is what ``QueueLock`` is for.
///
/// All gets and settlements run on the connection's control channel: a
/// declaration that fails there (404, 405) closes that channel, and the
/// broker then returns every held message in an order of its choosing. So
/// check a queue exists (``AMQPConnection/queueInfo(_:)``) and take locks
/// *before* holding, and hold one queue at a time.
public struct QueueSnapshot: Sendable {
    /// The queue.
    public let queue: String
    /// Every held message, oldest first.
    public let deliveries: [AMQPDelivery]

    /// Holds every message of `queue` (see the type's description). When
    /// reading fails, what was held is returned before the error is thrown.
    public static func hold(_ queue: String, on connection: AMQPConnection) async throws -> QueueSnapshot {
        var held: [AMQPDelivery] = []
        do {
            while let delivery = try await connection.get(queue: queue) {
                held.append(delivery)
            }
        } catch {
            for delivery in held { try? await delivery.nack(requeue: true) }
            throw error
        }
        return QueueSnapshot(queue: queue, deliveries: held)
    }

    /// Returns every held message to the queue, in order.
    public func release() async throws {
        for delivery in deliveries { try await delivery.nack(requeue: true) }
    }

    /// Walks the held messages oldest first: for each, `act` either does
    /// its work and answers `true` (the message is then acked — removed),
    /// or answers `false` (returned to the queue in its place). When `act`
    /// throws, the error is recorded for that message, which is returned,
    /// and the walk goes on: one message that cannot be moved does not keep
    /// the others. Returns, per position, nil (returned untouched), `.done`
    /// or `.failed(error)`.
    public func settle(_ act: (Int, AMQPDelivery) async throws -> Bool) async throws -> [Outcome?] {
        var outcomes: [Outcome?] = Array(repeating: nil, count: deliveries.count)
        for (position, delivery) in deliveries.enumerated() {
            do {
                if try await act(position, delivery) {
                    try await delivery.ack()
                    outcomes[position] = .done
                    continue
                }
            } catch {
                outcomes[position] = .failed(error)
            }
            try await delivery.nack(requeue: true)
        }
        return outcomes
    }

    /// What ``settle(_:)`` did with one held message.
    public enum Outcome: Sendable {
        /// Acted on and removed from the queue.
        case done
        /// The action failed; the message was returned.
        case failed(any Error)
    }
}

/// A broker-wide mutex for operators' tools: an exclusive, auto-deleted
/// queue that only one connection can hold at a time. The broker drops it
/// when that connection closes or dies, so a crashed tool never leaves the
/// lock behind.
///
/// Why: two ``QueueSnapshot``s of one queue at the same time would each see
/// part of it and return their parts interleaved — reordering the queue.
public enum QueueLock {
    /// Takes the lock `name` for the lifetime of `connection`, trying again
    /// while another connection holds it, for at most `seconds`.
    ///
    /// - Throws: ``AMQPError`` `timeout` when it stayed taken, or what the
    ///   broker answered otherwise (e.g. 403 without `configure` on `name`).
    public static func acquire(_ name: String, on connection: AMQPConnection, waitingUpTo seconds: Double) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        let lock = QueueDeclaration(name, type: .classic, durable: false, exclusive: true, autoDelete: true)
        while true {
            let refusal: AMQPError?
            do {
                try await connection.declare([.queue(lock)])
                refusal = nil
            } catch {
                refusal = error
            }
            guard let refusal else { return }
            // RESOURCE_LOCKED: another connection holds it. Polling is all
            // AMQP offers here; the holder is a short CLI run.
            guard refusal.replyCode == 405 else { throw refusal }
            if ContinuousClock.now >= deadline {
                throw AMQPError(.timeout, "another operator's bookingctl holds '\(name)' (still after \(seconds) s)")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Gives the lock `name` back before the connection closes (deletes the
    /// queue; only its holder can).
    public static func release(_ name: String, on connection: AMQPConnection) async throws {
        try await connection.deleteQueue(name)
    }
}
