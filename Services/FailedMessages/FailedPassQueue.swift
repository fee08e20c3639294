import AMQPClient
import BookingContracts
import BrokerObjects
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

/// What operators do with `passes.failed` (used by `bookingctl passes failed`
/// and, for the `passes.failed` part of it, by `bookingctl failed`).
///
/// Reading holds the whole queue as a ``QueueSnapshot`` (no message is
/// consumed; the untouched ones go back in queue order, see there). A
/// message only leaves the queue when it is acked, and that happens only
/// after its replacement (a retry message, or the audit copy of a
/// discarded pass) was confirmed by the broker. If this process dies
/// meanwhile, the broker returns every held message by itself.
public struct FailedPassQueue: Sendable {
    let connection: AMQPConnection
    /// The most messages one read holds (a channel's prefetch is 16 bits);
    /// more wait behind them unread.
    public let perQueue: Int

    public init(connection: AMQPConnection, perQueue: Int = QueueSnapshot.maximumHeld) {
        self.connection = connection
        self.perQueue = perQueue
    }

    /// Passes a read or a run saw, and whether that was the whole queue.
    public struct Listing: Sendable {
        /// Oldest first (for a retry or discard: those moved).
        public var entries: [FailedPassEntry]
        /// False when more than ``FailedPassQueue/perQueue`` messages were
        /// queued: those behind the first were neither seen nor touched.
        public var isComplete: Bool
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
        try await read().entries
    }

    /// The first ``perQueue`` messages, oldest first, and whether that was
    /// all of them; the queue is left as it was.
    public func read() async throws -> Listing {
        let snapshot = try await QueueSnapshot.hold(Topology.passesFailedQueue, like: connection, limit: perQueue)
        try await snapshot.release()
        return Listing(entries: snapshot.deliveries.enumerated().map { FailedPassEntry(position: $0, delivery: $1) },
                       isComplete: snapshot.isComplete)
    }

    /// Moves the matching passes back into the pass sender (`pass-sender.retry`,
    /// attempts reset, publisher confirm), then removes each from
    /// `passes.failed`. Returns the moved entries. Messages that are not
    /// `passes.failed` bodies are never moved. Only the first ``perQueue``
    /// messages are looked at (``Listing/isComplete``).
    public func retry(where matches: (FailedPassEntry) -> Bool) async throws -> Listing {
        try await act(where: matches) { try await sendRetry(of: $0) }
    }

    /// Publishes an operator retry of `entry` to `pass-sender.retry` (attempts
    /// reset, a fresh retry token; in `entry`'s trace with a span id of its
    /// own) and waits for the broker's confirm.
    /// Returns false, publishing nothing, when the body is not a
    /// `passes.failed` message.
    public func sendRetry(of entry: FailedPassEntry) async throws -> Bool {
        guard let pass = entry.pass else { return false }
        let message = PassRetryMessage.operatorRetry(of: pass, token: RandomID.uuidString())
        var properties = AMQPProperties.persistentJSON(type: PassQueues.retryMessageType, messageID: RandomID.uuidString(),
                                                       headers: message.headers)
        properties.appID = "bookingctl"
        // The retry goes on in the failed pass's trace, as a send of its own.
        for header in [MessageTracing.traceParentHeader, MessageTracing.traceStateHeader] {
            properties.headers[header] = entry.headers[header]
        }
        MessageTracing.continueTrace(in: &properties.headers)
        // The pass sender takes retries only from itself and ADMIN_USERS.
        properties.userID = connection.user
        try await connection.publish([UInt8](try ContractJSON.encode(message)), exchange: Topology.defaultExchange,
                                     routingKey: PassQueues.retry, properties: properties, mandatory: true)
        return true
    }

    /// Removes the matching passes, keeping a copy with `reason` (and who
    /// and when) in `pass-sender.discarded`. Returns the discarded entries
    /// (of the first ``perQueue`` messages, as ``retry(where:)``).
    public func discard(reason: String, by operatorName: String,
                        where matches: (FailedPassEntry) -> Bool) async throws -> Listing {
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
    /// original if it returned true; returns the others in order. After
    /// the first failure nothing more is replaced (the rest go back
    /// untouched) and the error is thrown: as it is when nothing was moved
    /// yet, else as ``PartiallyMoved`` listing what was.
    private func act(where matches: (FailedPassEntry) -> Bool,
                     replace: (FailedPassEntry) async throws -> Bool) async throws -> Listing {
        let snapshot = try await QueueSnapshot.hold(Topology.passesFailedQueue, like: connection, limit: perQueue)
        let entries = snapshot.deliveries.enumerated().map { FailedPassEntry(position: $0, delivery: $1) }
        var failed = false
        let settled = await snapshot.settle { position, _ in
            guard !failed, matches(entries[position]) else { return false }
            do {
                return try await replace(entries[position])
            } catch {
                failed = true
                throw OperatorRunError.unconfirmedMove(error, stays: Topology.passesFailedQueue)
            }
        }
        let moved = zip(entries, settled.outcomes).compactMap { entry, outcome -> FailedPassEntry? in
            if case .done? = outcome { return entry }
            return nil
        }
        func stop(at entry: FailedPassEntry?, _ error: any Error) -> any Error {
            moved.isEmpty ? error : PartiallyMoved(moved: moved, stoppedAt: entry, error: error, connectionLost: settled.connectionLost)
        }
        for (entry, outcome) in zip(entries, settled.outcomes) {
            guard case .failed(let error)? = outcome else { continue }
            throw stop(at: entry, error)
        }
        // A stop matters only if a pass it left would have been chosen.
        if let halt = settled.stop, let next = entries[halt.position...].first(where: matches) {
            throw stop(at: next, halt.error)
        }
        if let error = settled.releaseError { throw stop(at: nil, error) }
        return Listing(entries: moved, isComplete: snapshot.isComplete)
    }
}

/// A retry or discard of `passes.failed` that stopped at a pass after
/// others were already moved: those are listed, so the operator knows
/// what is done; the pass it stopped at and the rest stay in the queue.
public struct PartiallyMoved: Error, CustomStringConvertible {
    /// Passes moved (and removed from the queue) before the stop.
    public let moved: [FailedPassEntry]
    /// The first chosen pass that was not moved; nil when every chosen one
    /// was, and only putting the others back failed.
    public let stoppedAt: FailedPassEntry?
    /// Why.
    public let error: any Error
    /// Whether the broker connection was lost during the run.
    public let connectionLost: Bool

    public var description: String {
        guard let stoppedAt else { return "moved every chosen pass, then: \(error)" }
        return "stopped at \(stoppedAt.key): \(error); it and the passes after it stay in \(Topology.passesFailedQueue)"
    }
}

extension FailedPassEntry {
    /// The entry for a `passes.failed` message held at `position`.
    public init(position: Int, delivery: AMQPDelivery) {
        self.init(position: position, messageID: delivery.properties.messageID,
                  pass: try? ContractJSON.decode(FailedPass.self, from: delivery.body), body: delivery.body,
                  headers: delivery.properties.headers,
                  deliveryCount: delivery.properties.headers["x-delivery-count"]?.intValue.map { Int($0) })
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
