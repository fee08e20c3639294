import AMQPClient
import BookingContracts
import Foundation
import BrokerObjects

/// The operators' console over every failed message of the set
/// (`bookingctl failed …`): list, retry to where a message came from, or
/// discard with an audit copy — without losing, reordering or duplicating
/// one. docs/operations.md ("Failed messages") is the runbook.
///
/// **Reading.** Each queue is held whole as a ``QueueSnapshot`` (consumed
/// unacknowledged on a connection of its own; untouched messages go back in
/// queue order in front of whatever arrived meanwhile when it closes), one
/// queue at a time, under the ``QueueLock`` ``FailedQueues/lock`` so two
/// operators never hold the same queue at once. A message leaves its queue only by an ack, and only after
/// its replacement — the retried message, or the audit copy — was confirmed.
///
/// **Identity of a retry.** A retried message keeps its original sender:
/// it is published with the original `user_id` (a command stays the
/// caller's — same idempotency scope in the handler's inbox, same rights;
/// an event stays the booking handler's, so consumers still trust it).
/// RabbitMQ accepts a `user_id` other than the connection's only from a
/// user with the `impersonator` tag, which the shipped `bookingctl` user
/// has; docs/security.md has the risk. Without the tag the broker refuses
/// the publish and the message stays where it is.
public struct FailedConsole: Sendable {
    /// The operator's connection.
    public let connection: AMQPConnection
    /// The services' broker users, whose re-published dead letters
    /// (`DeadLetterCopy`) say why in `x-death-reason` and name the original
    /// sender in `x-original-user-id` — each believed only in the
    /// dead-letter queues of its own service's queues.
    public let serviceUsers: ServiceUsers
    /// How many messages of one queue a run reads (``QueueSnapshot/maximumHeld``;
    /// fewer in tests).
    public let perQueue: Int

    /// A console on `connection`. Call ``prepare(lockTimeout:)`` first.
    public init(connection: AMQPConnection, serviceUsers: ServiceUsers = ServiceUsers(),
                perQueue: Int = QueueSnapshot.maximumHeld) {
        self.connection = connection
        self.serviceUsers = serviceUsers
        self.perQueue = perQueue
    }

    /// Takes the operators' lock (waiting up to `lockTimeout` seconds for
    /// another operator's run to end) and makes sure the archive queue
    /// exists (the shipped definitions have it; on an embedded broker it is
    /// declared here).
    public func prepare(lockTimeout: Double) async throws {
        try await QueueLock.acquire(FailedQueues.lock, on: connection, waitingUpTo: lockTimeout)
        if try await !exists(FailedQueues.archive) {
            try await connection.declare([.queue(QueueDeclaration(FailedQueues.archive, type: .quorum))])
        }
    }

    /// Gives the operators' lock back (closing the connection does too).
    public func finish() async throws {
        try await QueueLock.release(FailedQueues.lock, on: connection)
    }

    /// What a listing found.
    public struct Listing: Sendable {
        /// Every message, queue by queue in the order asked, oldest first within a queue.
        public var messages: [FailedMessage]
        /// Queues that do not exist on this broker (e.g. `pass-sender.retry.dead`
        /// before the pass sender first started).
        public var missing: [String]
        /// Queues with more than ``FailedConsole/perQueue`` messages: only
        /// the first ones were read.
        public var incomplete: [String] = []
    }

    /// Every message of `queues`; the queues are left as they were.
    public func list(_ queues: [String]) async throws -> Listing {
        var listing = Listing(messages: [], missing: [])
        for queue in queues {
            guard try await exists(queue) else {
                listing.missing.append(queue)
                continue
            }
            let snapshot = try await QueueSnapshot.hold(queue, like: connection, limit: perQueue)
            try await snapshot.release()
            listing.messages += messages(of: snapshot)
            if !snapshot.isComplete { listing.incomplete.append(queue) }
        }
        return listing
    }

    /// What retry or discard did.
    public struct Outcome: Sendable {
        /// Messages moved (retried, or archived) and removed from their queue.
        public var done: [FailedMessage] = []
        /// Messages that matched but could not be moved; each stays where it
        /// was. The text says why.
        public var failed: [(message: FailedMessage, error: String)] = []
        /// Why the run ended before every queue was walked (the queues from
        /// there on were not touched), or nil.
        public var stopped: String?
        /// Whether the connection to the broker was lost during the run:
        /// messages after that point were not touched, and one move may
        /// have gone out unconfirmed (its text says so).
        public var connectionLost = false
        /// Queues with more messages than one run reads: those behind the
        /// first ``FailedConsole/perQueue`` were neither seen nor touched,
        /// however many matched. Run again for them.
        public var incomplete: [String] = []
    }

    /// Retries the matching messages of `queues`: each is published to the
    /// exchange and routing key it originally came by (RabbitMQ's `x-death`,
    /// else the booking handler's `x-original-exchange`/`-routing-key`, else
    /// straight into the queue it died in), as its original sender, with a
    /// publisher confirm; only then is the dead copy removed. Its
    /// `traceparent` gets a new span id in the same trace
    /// (``MessageTracing/continueTrace(in:)``). A
    /// `passes.failed` message goes back to the pass sender as an operator
    /// retry (`pass-sender.retry`, attempts reset), as `bookingctl passes
    /// failed retry` does.
    public func retry(_ queues: [String], by operatorName: String,
                      where matches: (FailedMessage) -> Bool) async throws -> Outcome {
        try await act(queues, where: matches) { message, delivery in
            if message.queue == Topology.passesFailedQueue {
                let entry = FailedPassEntry(position: message.position, delivery: delivery)
                guard try await FailedPassQueue(connection: connection).sendRetry(of: entry) else {
                    throw ConsoleError("not a passes.failed message (unreadable body): nothing to send again")
                }
                return
            }
            guard let target = message.target else { throw ConsoleError("no original exchange or queue known") }
            var properties = message.properties
            for header in Self.deathNotes { properties.headers[header] = nil }
            let count = (properties.headers["x-retry-count"]?.intValue ?? 0) + 1
            properties.headers["x-retry-count"] = .int64(count)
            properties.headers["x-retried-from"] = .string(message.queue)
            properties.headers["x-retried-by"] = .string(operatorName)
            properties.headers["x-retried-at"] = .string(ContractFormat.timestamp(Date()))
            // Same trace, a span id of its own: the retry is a send of its own.
            MessageTracing.continueTrace(in: &properties.headers)
            properties.userID = message.originalUser
            // Dead-lettering dropped any expiration already; a retry is an
            // operator's decision to run it now, so none is set again.
            properties.expiration = nil
            do {
                try await connection.publish(message.body, exchange: target.exchange, routingKey: target.routingKey,
                                             properties: properties, mandatory: true)
            } catch let error as AMQPError where error.code == .channelClosed && error.replyCode == 406 && message.originalUser != nil
                && message.originalUser != connection.user {
                throw ConsoleError("the broker refused user_id '\(message.originalUser ?? "")' from '\(connection.user)': "
                                   + "retrying as the original sender needs a broker user with the impersonator tag "
                                   + "(docs/security.md) — \(error.message)")
            }
        }
    }

    /// Removes the matching messages of `queues`, each after its audit copy
    /// (body and properties as they were, plus `x-archived-from`,
    /// `x-archived-id`, `x-archive-reason`, `x-archived-by`, `x-archived-at`)
    /// was confirmed in ``FailedQueues/archive``.
    public func discard(_ queues: [String], reason: String, by operatorName: String,
                        where matches: (FailedMessage) -> Bool) async throws -> Outcome {
        try await act(queues, where: matches) { message, _ in
            var properties = message.properties
            properties.headers["x-archived-from"] = .string(message.queue)
            properties.headers["x-archived-id"] = .string(message.id)
            properties.headers["x-archive-reason"] = .string(reason)
            properties.headers["x-archived-by"] = .string(operatorName)
            properties.headers["x-archived-at"] = .string(ContractFormat.timestamp(Date()))
            if let user = message.originalUser { properties.headers["x-archived-user-id"] = .string(user) }
            // The copy is the operator's own message: RabbitMQ checks user_id
            // against the publisher, and the original sender is in the header.
            properties.userID = connection.user
            properties.expiration = nil
            properties.deliveryMode = .persistent
            try await connection.publish(message.body, exchange: Topology.defaultExchange,
                                         routingKey: FailedQueues.archive, properties: properties, mandatory: true)
        }
    }

    /// What ``purgeArchived(before:)`` did.
    public struct Purged: Sendable {
        /// Audit copies removed.
        public var removed: Int
        /// Why the purge stopped before every old copy was removed (the
        /// rest stay in the archive); nil when it went through.
        public var stopped: String?
        /// Whether the broker connection was lost on the way.
        public var connectionLost: Bool
    }

    /// Removes the audit copies archived before `cutoff` (oldest first;
    /// copies without a readable `x-archived-at` are kept). A purge that
    /// stops half way reports how many it removed, not only an error: a
    /// script reading `--json` needs the count either way. Throws only
    /// when it could not start.
    public func purgeArchived(before cutoff: Date) async throws -> Purged {
        let snapshot = try await QueueSnapshot.hold(FailedQueues.archive, like: connection)
        func isOld(_ delivery: AMQPDelivery) -> Bool {
            guard let text = delivery.properties.headers["x-archived-at"]?.stringValue,
                  let at = ContractFormat.parseTimestamp(text) else { return false }
            return at < cutoff
        }
        let settled = await snapshot.settle { _, delivery in isOld(delivery) }
        let removed = settled.outcomes.filter { if case .done? = $0 { true } else { false } }.count
        // What counts as stopping: an old copy the broker kept, or a stop
        // before an old copy. A stop among young copies only, or untouched
        // copies not seen back in time, left nothing old behind.
        let failure = settled.outcomes.lazy.compactMap { outcome -> (any Error)? in
            if case .failed(let error)? = outcome { return error }
            return nil
        }.first ?? settled.stop.flatMap { stop in
            snapshot.deliveries[stop.position...].contains(where: isOld) ? stop.error : nil
        }
        if let failure {
            return Purged(removed: removed, stopped: "stopped after removing \(removed): \(failure)",
                          connectionLost: OperatorRunError.isLoss(failure))
        }
        // Removals are acks the broker may not have taken before a loss.
        if settled.connectionLost && removed > 0 {
            return Purged(removed: removed, stopped: "the connection was lost after removing \(removed); removals the broker "
                            + "had not taken yet are back in \(FailedQueues.archive)", connectionLost: true)
        }
        // Copies are archived oldest first: an old last copy means older
        // ones may wait beyond what one snapshot reads.
        if !snapshot.isComplete, snapshot.deliveries.last.map(isOld) == true {
            return Purged(removed: removed, stopped: "\(FailedQueues.archive) holds more copies than one run reads; run it again",
                          connectionLost: false)
        }
        return Purged(removed: removed, stopped: nil, connectionLost: false)
    }

    /// Every audit copy, oldest first (the archive is left as it was).
    public func archived() async throws -> [AMQPDelivery] {
        let snapshot = try await QueueSnapshot.hold(FailedQueues.archive, like: connection)
        try await snapshot.release()
        return snapshot.deliveries
    }

    /// Headers a service or the broker wrote about the failure; a retried
    /// message goes out without the service's (its next failure writes
    /// them afresh). RabbitMQ's own `x-death` history stays with it.
    static let deathNotes = ["x-death-reason", "x-error-code", "x-original-user-id", "x-original-expiration",
                             "x-original-routing-key", "x-original-exchange", "x-dead-lettered-by", "x-dead-lettered-at",
                             "x-delivery-count",
                             "x-original-headers-dropped"]

    private func act(_ queues: [String], where matches: (FailedMessage) -> Bool,
                     move: (FailedMessage, AMQPDelivery) async throws -> Void) async throws -> Outcome {
        var outcome = Outcome()
        for queue in queues {
            let held: [FailedMessage], settled: QueueSnapshot.Settled
            do {
                guard try await exists(queue) else { continue }
                let snapshot = try await QueueSnapshot.hold(queue, like: connection, limit: perQueue)
                if !snapshot.isComplete { outcome.incomplete.append(queue) }
                held = messages(of: snapshot)
                settled = await snapshot.settle { position, delivery in
                    guard matches(held[position]) else { return false }
                    do {
                        try await move(held[position], delivery)
                    } catch {
                        throw OperatorRunError.unconfirmedMove(error, stays: queue)
                    }
                    return true
                }
            } catch {
                // Nothing done yet: the plain error. Otherwise what was done
                // is reported, with where the run stopped.
                if outcome.done.isEmpty && outcome.failed.isEmpty { throw error }
                outcome.stopped = "stopped before \(queue), which was not touched (nor any queue after it): \(error)"
                outcome.connectionLost = outcome.connectionLost || OperatorRunError.isLoss(error)
                return outcome
            }
            for (message, result) in zip(held, settled.outcomes) {
                switch result {
                case .done?: outcome.done.append(message)
                case .failed(let error)?: outcome.failed.append((message, "\(error)"))
                case nil: break
                }
            }
            outcome.connectionLost = outcome.connectionLost || settled.connectionLost
            // A stop matters only if a message it left would have been chosen.
            if let stop = settled.stop, held[stop.position...].contains(where: matches) {
                outcome.stopped = "stopped in \(queue) (\(stop.error.message)); the chosen messages from position \(stop.position) on "
                    + "stay where they were, and no queue after it was touched"
                return outcome
            }
            if let error = settled.releaseError {
                outcome.stopped = "after \(queue) the untouched messages were not seen back in it (\(error)); stopped before the next queue"
                return outcome
            }
            if settled.connectionLost {
                if queues.last != queue { outcome.stopped = "the connection to the broker was lost after \(queue); no queue after it was touched" }
                return outcome
            }
        }
        return outcome
    }

    private func messages(of snapshot: QueueSnapshot) -> [FailedMessage] {
        snapshot.deliveries.enumerated().map {
            FailedMessage(queue: snapshot.queue, position: $0, delivery: $1,
                          serviceUsers: serviceUsers.copier(of: snapshot.queue).map { [$0] } ?? [])
        }
    }

    /// Whether `queue` exists (a passive declare; needs no permission).
    private func exists(_ queue: String) async throws -> Bool {
        let failure: AMQPError?
        do {
            _ = try await connection.queueInfo(queue)
            failure = nil
        } catch {
            failure = error
        }
        guard let failure else { return true }
        if failure.code == .channelClosed && failure.replyCode == 404 { return false }
        throw failure
    }
}

/// A failure of one console action, in words for the operator.
public struct ConsoleError: Error, CustomStringConvertible {
    /// What went wrong.
    public let description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}
