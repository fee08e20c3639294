import Synchronization

/// Every message of one queue, held without consuming it, for people who
/// must look at a queue nothing consumes (dead-letter queues,
/// `passes.failed`) and then act on some of its messages.
///
/// How it reads: on a connection of its own, it counts the queue's ready
/// messages (N, a passive declare), then consumes with manual acks and a
/// prefetch of N until N deliveries have arrived, keeping every one
/// unacknowledged (at most ``maximumHeld``: the rest of a longer queue
/// stays behind them, unread). Nothing leaves the queue until it is acked, and a
/// message is acked only after whatever replaces it (a retry, an audit
/// copy) was confirmed by the broker. The rest go back when the holding
/// connection closes — also when this process dies.
///
/// Why so, and not `basic.get` + `basic.nack(requeue)`: RabbitMQ 3.10's
/// quorum queues return messages fetched with `basic.get` in no particular
/// order — nacked one by one, all at once (`multiple`) or by closing the
/// connection alike (FailedConsoleTests and a pika experiment showed 2,000
/// messages shuffled). Messages delivered to a *consumer* go back sorted by
/// delivery when the consumer goes away, ahead of every other message. So
/// the untouched messages return in front of whatever arrived meanwhile
/// (new dead letters keep coming while a snapshot is held), in their old
/// order. Counting first tells where the queue ended when the snapshot
/// began (a consumer never hears "empty"); with the prefetch at that count
/// nothing that arrives later is delivered to the snapshot. Nobody else
/// may remove messages meanwhile: two snapshots of one queue at once would
/// split it between them, which ``QueueLock`` prevents; nothing consumes
/// these queues otherwise. (A classic queue promises none of this; these
/// are all quorum queues.)
public final class QueueSnapshot: Sendable {
    /// The queue.
    public let queue: String
    /// Every held message, oldest first.
    public let deliveries: [AMQPDelivery]
    /// Ready messages when the snapshot began; more than ``deliveries``
    /// holds only when that was above ``maximumHeld``.
    public let readyAtStart: Int
    /// At most this many messages are held (the largest AMQP prefetch);
    /// the rest of a longer queue stays in place behind them.
    public static let maximumHeld = Int(UInt16.max)
    private let holder: AMQPConnection
    private let owner: AMQPConnection
    private let acked = Mutex(0)

    private init(queue: String, deliveries: [AMQPDelivery], readyAtStart: Int, holder: AMQPConnection,
                 owner: AMQPConnection) {
        self.queue = queue
        self.deliveries = deliveries
        self.readyAtStart = readyAtStart
        self.holder = holder
        self.owner = owner
    }

    /// Holds every message of `queue` on a new connection made like
    /// `connection` (see the type's description). When reading fails, what
    /// was held goes back before the error is thrown.
    ///
    /// - Parameter timeout: how long to wait for the counted messages to
    ///   arrive (they are sent at once; this only guards against a hang).
    public static func hold(_ queue: String, like connection: AMQPConnection,
                            timeout: Duration = .seconds(120)) async throws -> QueueSnapshot {
        let ready = try await connection.queueInfo(queue).messageCount
        // The prefetch is exactly what is held: a quorum queue reads
        // prefetch 0 as 2,000, not "unlimited", and with the limit at the
        // count no later arrival is delivered to this snapshot at all.
        let count = min(ready, maximumHeld)
        let holder = try await connection.sibling(named: "snapshot \(queue)")
        guard count > 0 else {
            return QueueSnapshot(queue: queue, deliveries: [], readyAtStart: ready, holder: holder, owner: connection)
        }
        do {
            let consumer = try await holder.consume(queue: queue, prefetch: UInt16(count))
            let held = try await withThrowingTaskGroup(of: [AMQPDelivery].self) { group in
                group.addTask {
                    var held: [AMQPDelivery] = []
                    held.reserveCapacity(count)
                    for try await delivery in consumer {
                        held.append(delivery)
                        if held.count == count { break }
                    }
                    return held
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    throw AMQPError(.timeout, "\(queue) had \(count) messages, fewer arrived within \(timeout)")
                }
                defer { group.cancelAll() }
                return try await group.next() ?? []
            }
            // The consumer is deliberately not cancelled: a delivery that
            // overtakes a basic.cancel is rejected on its own (AMQPConsumer),
            // which could put it in front of the held ones. None should
            // come (the prefetch is full); the connection's close ends it.
            guard held.count == count else {
                throw AMQPError(.channelClosed, "the consumer of \(queue) ended after \(held.count) of \(count) messages")
            }
            return QueueSnapshot(queue: queue, deliveries: held, readyAtStart: ready, holder: holder, owner: connection)
        } catch {
            await holder.close()
            throw error
        }
    }

    /// Returns every held message that was not acked to the queue, in
    /// order, by closing the holding connection, and waits (up to 10 s)
    /// until the queue shows them ready again — so that the next snapshot,
    /// which may come right after, finds them in front and not only the
    /// newer ones behind. Idempotent.
    public func release() async throws {
        await holder.close()
        let expected = deliveries.count - acked.withLock { $0 }
        let deadline = ContinuousClock.now + .seconds(10)
        // The broker returns them when it has seen the connection go, which
        // it tells nobody: watching the ready count is the only signal.
        while try await owner.queueInfo(queue).messageCount < expected {
            if ContinuousClock.now >= deadline {
                throw AMQPError(.timeout, "the \(expected) messages of \(queue) held by this snapshot are not back after 10 s")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Walks the held messages oldest first: for each, `act` either does
    /// its work and answers `true` (the message is then acked — removed),
    /// or answers `false` (it stays held). When `act` throws, the error is
    /// recorded for that message, which stays, and the walk goes on: one
    /// message that cannot be moved does not keep the others. Then releases
    /// the rest (``release()``). Returns, per position, nil (untouched),
    /// `.done` or `.failed(error)`.
    public func settle(_ act: (Int, AMQPDelivery) async throws -> Bool) async throws -> [Outcome?] {
        var outcomes: [Outcome?] = Array(repeating: nil, count: deliveries.count)
        for (position, delivery) in deliveries.enumerated() {
            do {
                if try await act(position, delivery) {
                    try await delivery.ack()
                    acked.withLock { $0 += 1 }
                    outcomes[position] = .done
                }
            } catch {
                outcomes[position] = .failed(error)
            }
        }
        try await release()
        return outcomes
    }

    /// What ``settle(_:)`` did with one held message.
    public enum Outcome: Sendable {
        /// Acted on and removed from the queue.
        case done
        /// The action failed; the message stays in the queue.
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
