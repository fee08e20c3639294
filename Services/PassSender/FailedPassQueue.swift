import AMQPClient
import BookingContracts
import Foundation

/// One message of `passes.failed` as an operator sees it.
public struct FailedPassEntry: Sendable {
    /// 0-based position in the queue when it was read (0 = oldest).
    public var position: Int
    /// `message_id` (`<bookingId>:<version>:<attendeeIndex>`).
    public var messageID: String?
    /// The decoded body, nil when it is not a `passes.failed` message.
    public var pass: FailedPass?
    /// The raw body.
    public var body: [UInt8]
    /// The AMQP headers.
    public var headers: AMQPTable
    /// How often the broker handed it out before (quorum queues count
    /// listings too; `x-delivery-count`).
    public var deliveryCount: Int?

    /// The pass key, from the body or else the message id.
    public var key: String { pass?.passKey ?? messageID ?? "?" }
}

/// What operators do with `passes.failed` (used by `bookingctl passes failed`).
///
/// Reading: every message is fetched with `basic.get` (manual ack) and,
/// once all are held, those not acted on are returned with
/// `basic.nack(requeue)` one by one in queue order. A quorum queue puts
/// returned messages before the rest in the order they were returned, so
/// the queue keeps its order and nothing is lost: a message only leaves
/// the queue when it is acked, and that happens only after its replacement
/// (a retry message, or the audit copy of a discarded pass) was confirmed
/// by the broker. If this process dies meanwhile, the broker returns every
/// held message by itself.
public struct FailedPassQueue: Sendable {
    let connection: AMQPConnection

    public init(connection: AMQPConnection) {
        self.connection = connection
    }

    /// Declares `passes.failed` and the pass sender's retry and audit queues
    /// (idempotent; the same arguments as the pass sender uses).
    ///
    /// On the shipped broker the operators' user may not configure the pass
    /// sender's queues (only use them): each is looked up passively first,
    /// and only when one is missing (a fresh embedded broker) are they
    /// declared.
    public func declare() async throws {
        let items = ContractTopologyItems.failedAndRetry
        for case .queue(let queue) in items {
            do {
                _ = try await connection.queueInfo(queue.name)
            } catch {
                try await connection.declare(items)
                return
            }
        }
    }

    /// Every message, oldest first; the queue is left as it was.
    public func list() async throws -> [FailedPassEntry] {
        let held = try await fetchAll()
        try await requeue(held.map(\.1))
        return held.map(\.0)
    }

    /// Moves the matching passes back into the pass sender (`pass-sender.retry`,
    /// attempts reset, publisher confirm), then removes each from
    /// `passes.failed`. Returns the moved entries. Messages that are not
    /// `passes.failed` bodies are never moved.
    public func retry(where matches: (FailedPassEntry) -> Bool) async throws -> [FailedPassEntry] {
        try await act(where: matches) { entry in
            guard let pass = entry.pass else { return false }
            let message = PassRetryMessage.operatorRetry(of: pass, token: RandomID.uuidString())
            var properties = AMQPProperties.persistentJSON(type: PassQueues.retryMessageType, messageID: RandomID.uuidString(),
                                                           headers: message.headers)
            properties.appID = "bookingctl"
            // The pass sender takes retries only from itself and ADMIN_USERS.
            properties.userID = connection.user
            try await connection.publish([UInt8](try ContractJSON.encode(message)), exchange: Topology.defaultExchange,
                                         routingKey: PassQueues.retry, properties: properties, mandatory: true)
            return true
        }
    }

    /// Removes the matching passes, keeping a copy with `reason` (and who
    /// and when) in `pass-sender.discarded`. Returns the discarded entries.
    public func discard(reason: String, by operatorName: String,
                        where matches: (FailedPassEntry) -> Bool) async throws -> [FailedPassEntry] {
        try await act(where: matches) { entry in
            var headers = entry.headers
            headers["discard-reason"] = .string(reason)
            headers["discarded-by"] = .string(operatorName)
            headers["discarded-at"] = .string(ContractFormat.timestamp(Date()))
            var properties = AMQPProperties.persistentJSON(type: Topology.passesFailedQueue, messageID: entry.messageID,
                                                           headers: headers)
            properties.appID = "bookingctl"
            try await connection.publish(entry.body, exchange: Topology.defaultExchange, routingKey: PassQueues.discarded,
                                         properties: properties, mandatory: true)
            return true
        }
    }

    /// Holds every message; for each match runs `replace` and acks the
    /// original if it returned true; returns the others in order.
    private func act(where matches: (FailedPassEntry) -> Bool,
                     replace: (FailedPassEntry) async throws -> Bool) async throws -> [FailedPassEntry] {
        let held = try await fetchAll()
        var done: [FailedPassEntry] = []
        var failure: (any Error)?
        for (entry, delivery) in held {
            if failure == nil, matches(entry) {
                do {
                    if try await replace(entry) {
                        try await delivery.ack()
                        done.append(entry)
                        continue
                    }
                } catch {
                    failure = error
                }
            }
            try await delivery.nack(requeue: true)
        }
        if let failure { throw failure }
        return done
    }

    private func fetchAll() async throws -> [(FailedPassEntry, AMQPDelivery)] {
        var held: [(FailedPassEntry, AMQPDelivery)] = []
        do {
            while let delivery = try await connection.get(queue: Topology.passesFailedQueue) {
                let entry = FailedPassEntry(
                    position: held.count, messageID: delivery.properties.messageID,
                    pass: try? ContractJSON.decode(FailedPass.self, from: delivery.body), body: delivery.body,
                    headers: delivery.properties.headers,
                    deliveryCount: delivery.properties.headers["x-delivery-count"]?.intValue.map { Int($0) })
                held.append((entry, delivery))
            }
        } catch {
            try? await requeue(held.map(\.1))
            throw error
        }
        return held
    }

    private func requeue(_ deliveries: [AMQPDelivery]) async throws {
        for delivery in deliveries { try await delivery.nack(requeue: true) }
    }
}

/// Declarations bookingctl needs (no delay queues: their arguments depend
/// on the pass sender's `PASS_RETRY_DELAYS`).
enum ContractTopologyItems {
    static var failedAndRetry: [TopologyItem] {
        var items: [TopologyItem] = [.queue(QueueDeclaration(Topology.passesFailedQueue, type: .quorum))]
        items += PassQueues.ownQueues(delays: [])
        return items
    }
}
