import AMQPClient
import Synchronization

/// Every message of one queue, held without consuming it, for people who
/// must look at a queue nothing consumes (dead-letter queues,
/// `passes.failed`) and then act on some of its messages.
///
/// How it reads: on a connection of its own it consumes the queue with
/// manual acks, and puts a *marker* at the queue's end (a small message
/// with the header ``markerHeader``, published with a confirm through the
/// default exchange). Every delivery before the marker is held
/// unacknowledged; the marker is acked (removed) when it arrives. Nothing
/// else leaves the queue until it is acked, and a message is acked only
/// after whatever replaces it (a retry, an audit copy) was confirmed by the
/// broker. The rest go back when the holding connection closes — also when
/// this process dies.
///
/// Why a marker: a consumer never hears "the queue is empty now", and the
/// count of a passive declare is not ordered with publishes still being
/// committed to a quorum queue (the pass sender's tests caught a listing
/// that missed a just-confirmed message). The marker is: everything
/// enqueued before it comes before it. Messages arriving after it are
/// behind it — delivered to the snapshot or not, they go back in order.
///
/// Why a consumer and a closed connection, not `basic.get` +
/// `basic.nack(requeue)`: RabbitMQ 3.10's quorum queues return messages
/// fetched with `basic.get` in no particular order — nacked one by one, all
/// at once (`multiple`) or by closing the connection alike (a test with
/// 5,000 messages and a pika experiment showed them shuffled). Messages
/// delivered to a *consumer* go back sorted by delivery when it goes away,
/// ahead of every other message. So the untouched messages return in front
/// of whatever arrived meanwhile, in their old order. Two snapshots of one
/// queue at once would split it between them (``QueueLock`` prevents that;
/// nothing else consumes these queues). A classic queue promises none of
/// this; these are all quorum queues.
public final class QueueSnapshot: Sendable {
    /// The queue.
    public let queue: String
    /// Every held message, oldest first.
    public let deliveries: [AMQPDelivery]
    /// False when the queue held more than ``maximumHeld`` messages: the
    /// rest stays in place behind them, unread.
    public let isComplete: Bool
    /// At most this many messages are held (the largest AMQP prefetch).
    public static let maximumHeld = Int(UInt16.max)
    /// The header that marks a snapshot's end marker (its value: the
    /// snapshot's random id). Markers of a snapshot that died before it
    /// removed its own are dropped by the next one.
    public static let markerHeader = "x-queue-snapshot-marker"
    private let holder: AMQPConnection
    private let owner: AMQPConnection
    private let acked = Mutex(0)
    /// The owner's reconnect count when the snapshot was taken: the
    /// operators' lock (an exclusive queue on that connection) does not
    /// survive a reconnect, so neither may the snapshot's work.
    private let ownerConnections: Int

    private init(queue: String, deliveries: [AMQPDelivery], isComplete: Bool, holder: AMQPConnection,
                 owner: AMQPConnection) {
        self.ownerConnections = owner.reconnectCount
        self.queue = queue
        self.deliveries = deliveries
        self.isComplete = isComplete
        self.holder = holder
        self.owner = owner
    }

    /// Holds every message of `queue` on a new connection made like
    /// `connection`, which publishes the end marker (it needs `write` on
    /// the default exchange). See the type's description. When reading
    /// fails, what was held goes back before the error is thrown.
    ///
    /// - Parameter timeout: how long to wait for the marker to come round
    ///   (only a guard against a hang).
    /// - Parameter limit: hold at most this many (at most ``maximumHeld``).
    public static func hold(_ queue: String, like connection: AMQPConnection,
                            timeout: Duration = .seconds(120), limit: Int = maximumHeld) async throws -> QueueSnapshot {
        let limit = max(1, min(limit, maximumHeld))
        let holder = try await connection.sibling(named: "snapshot \(queue)")
        let marker = String(UInt64.random(in: 0...UInt64.max), radix: 16) + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        do {
            let consumer = try await holder.consume(queue: queue, prefetch: UInt16(limit))
            var properties = AMQPProperties(headers: [markerHeader: .string(marker)])
            properties.type = "queue-snapshot-marker"
            try await connection.publish([], exchange: "", routingKey: queue, properties: properties, mandatory: true)
            let (held, complete) = try await withThrowingTaskGroup(of: ([AMQPDelivery], Bool).self) { group in
                group.addTask {
                    var held: [AMQPDelivery] = []
                    var lastTag: UInt64 = 0
                    for try await delivery in consumer {
                        // A consumer the AMQP layer restarted (channel closed,
                        // connection re-established) delivers the held messages
                        // again under new tags: what we hold is no longer the
                        // queue's front. Give it all back and fail.
                        guard holder.reconnectCount == 0, delivery.deliveryTag > lastTag else {
                            throw AMQPError(.connectionLost, "the snapshot's consumer of \(queue) was restarted; nothing was changed, try again")
                        }
                        lastTag = delivery.deliveryTag
                        guard let found = delivery.properties.headers[markerHeader]?.stringValue else {
                            held.append(delivery)
                            if held.count == limit { return (held, false) }
                            continue
                        }
                        // Ours ends the snapshot; another is a dead run's leftover.
                        try await delivery.ack()
                        if found == marker { return (held, true) }
                    }
                    throw AMQPError(.channelClosed, "the consumer of \(queue) ended before the snapshot's end marker")
                }
                group.addTask {
                    try await Task.sleep(for: timeout)
                    throw AMQPError(.timeout, "the end marker of a snapshot of \(queue) did not come round within \(timeout)")
                }
                defer { group.cancelAll() }
                return try await group.next() ?? ([], false)
            }
            // The consumer is deliberately not cancelled: a delivery that
            // overtakes a basic.cancel is rejected on its own (AMQPConsumer),
            // which could put it in front of the held ones. Later arrivals
            // wait unacked in the stream's buffer and go back with the rest,
            // in order, when the holding connection closes.
            return QueueSnapshot(queue: queue, deliveries: held, isComplete: complete, holder: holder, owner: connection)
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
    /// message that cannot be moved does not keep the others. The walk
    /// stops early when a connection was lost or re-established (the held
    /// messages and the operators' lock went with it) or an ack failed.
    /// Then releases the rest (``release()``). Never throws: what was done
    /// is always returned, with why the walk stopped and a failed release.
    public func settle(_ act: (Int, AMQPDelivery) async throws -> Bool) async -> Settled {
        var settled = Settled(outcomes: Array(repeating: nil, count: deliveries.count))
        for (position, delivery) in deliveries.enumerated() {
            // Held messages are only ours while both connections are the
            // ones the snapshot began with: after a reconnect the holder's
            // messages went back (acking them fails) and the lock is gone;
            // a connection that does not reconnect is lost for good. From
            // here on every message stays where it was (the broker returns
            // the held ones when it sees the holder gone).
            guard holder.reconnectCount == 0, owner.reconnectCount == ownerConnections,
                  holder.isConnected, owner.isConnected else {
                settled.stop = (position, AMQPError(.connectionLost,
                    "the connection to the broker was lost during the walk; nothing from here on was touched"))
                break
            }
            let acted: Bool
            do {
                acted = try await act(position, delivery)
            } catch {
                settled.outcomes[position] = .failed(error)
                continue
            }
            guard acted else { continue }
            do {
                try await delivery.ack()
                acked.withLock { $0 += 1 }
                settled.outcomes[position] = .done
            } catch {
                // Its replacement is out but the dead copy could not be
                // removed: it comes back and would be acted on twice by a
                // later run. Going on would do the same to every message
                // after it (the holding channel is gone), so stop here.
                settled.outcomes[position] = .failed(AMQPError(.staleDelivery,
                    "acted on, but the dead copy could not be removed (\(error)); it is back in \(queue): check before acting on it again"))
                settled.stop = (position + 1, AMQPError(.staleDelivery, "the holding channel is gone; nothing from here on was touched"))
                break
            }
        }
        // Read before the release, which closes the holder on purpose.
        settled.connectionLost = !holder.isConnected || !owner.isConnected || holder.reconnectCount > 0
            || owner.reconnectCount != ownerConnections
        do {
            try await release()
        } catch {
            // With a connection gone the broker puts the held messages back
            // by itself; only report a release that failed otherwise.
            if !settled.connectionLost { settled.releaseError = error }
        }
        return settled
    }

    /// What ``settle(_:)`` did.
    public struct Settled: Sendable {
        /// Per position: nil (untouched), `.done` or `.failed(error)`.
        public var outcomes: [Outcome?]
        /// Where the walk stopped early and why: the messages from that
        /// position on were not offered to `act`.
        public var stop: (position: Int, error: AMQPError)?
        /// Whether a connection was lost (or re-established) during the walk.
        public var connectionLost = false
        /// The release failed (the untouched messages were not seen back in
        /// the queue in time): they are back when the broker notices, but
        /// a snapshot right after might not find them in front.
        public var releaseError: (any Error)?
    }

    /// What ``settle(_:)`` did with one held message.
    public enum Outcome: Sendable {
        /// Acted on and removed from the queue.
        case done
        /// The action failed; the message stays in the queue.
        case failed(any Error)
    }
}

/// Errors of an operator's run whose connection does not reconnect.
public enum OperatorRunError {
    /// Whether `error` is the loss of the broker connection, or an
    /// operation refused because the connection closed after one.
    public static func isLoss(_ error: any Error) -> Bool {
        guard let amqp = error as? AMQPError else { return false }
        return amqp.code == .connectionLost || amqp.code == .closed
    }

    /// `error` of a move (a retry or an audit copy) as the operator should
    /// read it: a publish that failed with `connectionLost` was unconfirmed,
    /// not unsent — the broker may have taken it — while one that failed
    /// with `closed` never went out. Other errors are returned as they are.
    public static func unconfirmedMove(_ error: any Error, stays queue: String) -> any Error {
        guard let amqp = error as? AMQPError, amqp.code == .connectionLost else { return error }
        return AMQPError(amqp.code, "the connection was lost before the broker confirmed the copy, which may have gone "
                         + "out; the message stays in \(queue): check before acting on it again (\(amqp.message))")
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
