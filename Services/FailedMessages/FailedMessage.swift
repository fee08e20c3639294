import AMQPClient
import BookingContracts
import Foundation
import BrokerObjects

/// The queues where the set's failed messages end up, as the operators'
/// console (`bookingctl failed`) sees them. See docs/operations.md,
/// "Failed messages".
public enum FailedQueues {
    /// Every dead-letter queue of the set: `<queue>.dead` of each contract
    /// service queue (``Topology/serviceQueues``, so a service queue added
    /// to the contract is covered without touching this) and of the pass
    /// sender's `pass-sender.retry`.
    public static var deadLetterQueues: [String] {
        Topology.serviceQueues.map { Topology.deadLetterQueue(for: $0.name) }
            + [Topology.deadLetterQueue(for: PassQueues.retry)]
    }

    /// Every queue the console reads, in listing order: the dead-letter
    /// queues, then `passes.failed`.
    public static var all: [String] { deadLetterQueues + [Topology.passesFailedQueue] }

    /// Whether the console may read `queue`: one of ``all``, or the
    /// dead-letter queue of a projector replica's own events queue
    /// (`availability-projector.events.<instance>.dead`, `PROJECTOR_INSTANCE`),
    /// which is read only when named: the broker cannot be asked which
    /// replicas exist without the management API.
    public static func isKnown(_ queue: String) -> Bool {
        all.contains(queue) || replicaEvents(deadLetterQueue: queue) != nil
    }

    /// The replica events queue whose dead letters `queue` holds, if it is one.
    static func replicaEvents(deadLetterQueue queue: String) -> Topology.Queue? {
        let prefix = Topology.projectorEventsQueue + "."
        guard queue.hasPrefix(prefix), let source = sourceQueue(of: queue),
              let replica = try? ProjectorQueues(instance: String(source.dropFirst(prefix.count))),
              let shipped = Topology.queue(named: Topology.projectorEventsQueue) else { return nil }
        return .service(replica.events, bindings: shipped.bindings)
    }

    /// `bookingctl.archive`: the audit copies of discarded messages (quorum,
    /// in the shipped definitions; emptied only by `failed purge-archived`).
    public static let archive = "bookingctl.archive"

    /// The exclusive queue that serialises operators' reads of these
    /// queues (``QueueLock``); `bookingctl passes failed` takes it too.
    public static let lock = "bookingctl.failed.lock"

    /// The service queue whose dead letters `queue` holds (`x.dead` → `x`),
    /// nil for `passes.failed`.
    public static func sourceQueue(of queue: String) -> String? {
        queue.hasSuffix(".dead") ? String(queue.dropLast(".dead".count)) : nil
    }

    /// Whether a retry of a message that died in `source` may go to
    /// `exchange`: an exchange bound to that queue in the contract's
    /// topology, or the default exchange with the queue's own name. What a
    /// message says about where it came from (`x-death`, which a sender can
    /// write into its own message and RabbitMQ 3.10 may keep) must never
    /// send an operator's retry — published as the original sender, with
    /// the operators' wider rights — anywhere else.
    public static func mayRetry(from source: String, to exchange: String, routingKey: String) -> Bool {
        if exchange == Topology.defaultExchange { return routingKey == source }
        guard let queue = Topology.serviceQueues.first(where: { $0.name == source })
                ?? replicaEvents(deadLetterQueue: Topology.deadLetterQueue(for: source)) else { return false }
        return queue.bindings.contains { $0.exchange == exchange }
    }
}

/// The services' broker users, by the queues whose poison each of them
/// re-publishes with its reason (`DeadLetterCopy`). A copy's
/// `x-death-reason` and `x-original-*` headers are believed only from the
/// user of the service that consumes the queue it died in: every service
/// user may write through the default exchange into any queue, so a
/// service's user could otherwise plant a "copy" naming any sender in
/// another service's dead-letter queue, and an operator's retry would then
/// send it as that sender.
public struct ServiceUsers: Sendable, Equatable {
    public var handler: String
    public var passSender: String
    public var projector: String

    /// The shipped names (`deploy/rabbitmq/definitions.json`) by default.
    public init(handler: String = "booking-handler", passSender: String = "pass-sender",
                projector: String = "availability-projector") {
        self.handler = handler
        self.passSender = passSender
        self.projector = projector
    }

    /// Whose copies `deadLetterQueue` holds: the user of the service that
    /// consumes its source queue; nil for `passes.failed` and unknown queues.
    public func copier(of deadLetterQueue: String) -> String? {
        guard let source = FailedQueues.sourceQueue(of: deadLetterQueue) else { return nil }
        switch source {
        case Topology.handlerCommandsQueue, Topology.bookingQueriesQueue: return handler
        case Topology.passSenderEventsQueue, PassQueues.retry: return passSender
        case Topology.availabilityQueriesQueue, Topology.projectorEventsQueue: return projector
        default: return FailedQueues.replicaEvents(deadLetterQueue: deadLetterQueue) != nil ? projector : nil
        }
    }
}

/// What the console groups failed messages by (`--group-by`).
public enum FailedGrouping: String, Sendable, CaseIterable {
    /// Why it failed (the service's `x-death-reason`, else RabbitMQ's
    /// `x-death` reason, else the pass's last error).
    case reason
    /// The queue it waits in.
    case queue
    /// The command, event or query type (its original routing key).
    case type
    /// The UTC day it first failed.
    case day
}

/// One failed message as operators see it: where it waits, why, whose it
/// is and where a retry sends it.
public struct FailedMessage: Sendable {
    /// Stable identity: 16 hex digits of FNV-1a 64 over the queue, the
    /// `message_id`, the first death (queue, reason, time) or the service's
    /// reason header, the original sender and the body — all things that do
    /// not change while the message waits (unlike `x-delivery-count`, which
    /// quorum queues raise at every listing). Two copies of one message in
    /// one queue share an id, and are acted on together: byte-identical
    /// ones, and a service's two copies of one poison delivery whose ack
    /// was lost (they differ only in `x-dead-lettered-at`, left out).
    public var id: String
    /// The queue it waits in.
    public var queue: String
    /// 0-based position in that queue when read (0 = oldest).
    public var position: Int
    /// Why it failed.
    public var reason: String
    /// Command, event or query type: the routing key it was originally
    /// published with, else its AMQP `type`.
    public var type: String
    /// When it failed, if known: a service's copy says so in
    /// `x-dead-lettered-at`; otherwise the oldest `x-death` (its first failure).
    public var failedAt: Date?
    /// The broker user that sent the original message (nil: anonymous).
    /// For copies the booking handler re-published with its own `user_id`
    /// this is its `x-original-user-id` header; see ``FailedConsole``.
    public var originalUser: String?
    /// Where a retry publishes it (exchange, routing key); nil for
    /// `passes.failed`, whose retry goes through the pass sender.
    public var target: (exchange: String, routingKey: String)?
    /// The AMQP properties and headers as they are in the queue.
    public var properties: AMQPProperties
    /// The body.
    public var body: [UInt8]
    /// The decoded body of a `passes.failed` message.
    public var pass: FailedPass?

    /// Reads a held message of `queue`.
    ///
    /// - Parameter serviceUsers: broker users whose re-published copies carry
    ///   the original sender in `x-original-user-id` (the booking handler).
    ///   The header is believed only on a message whose verified `user_id`
    ///   is one of them: anybody can put the header on their own message.
    public init(queue: String, position: Int, delivery: AMQPDelivery, serviceUsers: Set<String>) {
        self.init(queue: queue, position: position, properties: delivery.properties, body: delivery.body,
                  serviceUsers: serviceUsers)
    }

    /// Reads a message of `queue` from its properties and body (see the
    /// other initializer).
    public init(queue: String, position: Int, properties: AMQPProperties, body: [UInt8], serviceUsers: Set<String>) {
        let delivery = (properties: properties, body: body)
        self.queue = queue
        self.position = position
        self.properties = delivery.properties
        self.body = delivery.body
        let headers = delivery.properties.headers
        let source = FailedQueues.sourceQueue(of: queue)
        let deaths = delivery.properties.xDeath
        // Only the death in the queue this dead-letter queue belongs to.
        let death = source.flatMap { s in deaths.first { $0.queue == s } }
        // A copy a service re-published itself (reason in its headers, its
        // own verified user_id), not one RabbitMQ dead-lettered.
        let republishedByService = (delivery.properties.userID.map(serviceUsers.contains) ?? false)
            && headers["x-death-reason"] != nil

        if queue == Topology.passesFailedQueue {
            let pass = try? ContractJSON.decode(FailedPass.self, from: delivery.body)
            self.pass = pass
            reason = pass.map { p in "pass failed: " + (p.lastErrorCode.map { "error \($0.rawValue)" } ?? p.lastErrorText) }
                ?? "pass failed: unreadable body"
            type = "pass.failed"
            failedAt = pass.flatMap { ContractFormat.parseTimestamp($0.firstFailureAt) }
            originalUser = delivery.properties.userID
            target = nil
        } else {
            pass = nil
            // The header only from a service's own copy: on a message the
            // broker dead-lettered it is whatever the sender put there (and
            // `--group reason:` selects by it).
            reason = (republishedByService ? headers["x-death-reason"]?.stringValue : nil) ?? death?.reason ?? "unknown"
            if republishedByService {
                originalUser = headers["x-original-user-id"]?.stringValue
            } else {
                originalUser = delivery.properties.userID
            }
            // A service's own copy: its x-original-* headers, which it set
            // from the delivery itself (any x-death in the copy is the
            // sender's). Else RabbitMQ's x-death entry for the source queue.
            // Either only where FailedQueues.mayRetry allows; otherwise, or
            // when nothing says how it came, back into the queue it died in.
            // Another service's copy goes back only into the queue it died
            // in: published on to an exchange as the sender it names, a
            // forged copy would reach every consumer bound there.
            let handlerCopy = source == Topology.handlerCommandsQueue || source == Topology.bookingQueriesQueue
            var claimed: (exchange: String, routingKey: String)?
            if republishedByService {
                if handlerCopy, let exchange = headers["x-original-exchange"]?.stringValue,
                   let key = headers["x-original-routing-key"]?.stringValue {
                    claimed = (exchange, key)
                }
            } else if let death, let key = death.routingKeys.first {
                claimed = (death.exchange, key)
            }
            if let source, let claimed, FailedQueues.mayRetry(from: source, to: claimed.exchange, routingKey: claimed.routingKey) {
                target = claimed
            } else {
                target = source.map { (Topology.defaultExchange, $0) }
            }
            let routedType = target.flatMap { $0.exchange.isEmpty ? nil : $0.routingKey }
            type = routedType ?? delivery.properties.type ?? target?.routingKey ?? "unknown"
            // A service's copy says when it failed; any x-death on it is
            // the sender's (or an earlier failure's), and its timestamp the
            // sender's.
            let copiedAt = republishedByService
                ? headers["x-dead-lettered-at"]?.stringValue.flatMap(ContractFormat.parseTimestamp) : nil
            let oldest = deaths.last?.time ?? delivery.properties.timestamp
            failedAt = copiedAt ?? oldest.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        }

        var hash = FNV1a64()
        hash.add(field: queue)
        hash.add(field: delivery.properties.messageID ?? "")
        hash.add(field: headers["x-first-death-queue"]?.stringValue ?? "")
        hash.add(field: headers["x-first-death-reason"]?.stringValue ?? "")
        hash.add(field: deaths.last.flatMap { $0.time.map(String.init) } ?? "")
        hash.add(field: headers["x-death-reason"]?.stringValue ?? "")
        hash.add(field: originalUser ?? "")
        hash.add(field: delivery.properties.timestamp.map(String.init) ?? "")
        hash.add(field: delivery.body)
        id = hash.hex
    }

    /// The UTC day (`YYYY-MM-DD`) it failed, or `unknown`.
    public var day: String {
        failedAt.map { String(ContractFormat.timestamp($0).prefix(10)) } ?? "unknown"
    }

    /// Its group under `grouping`, as `<grouping>:<value>` (what `--group` takes).
    public func group(_ grouping: FailedGrouping) -> String {
        switch grouping {
        case .reason: "reason:" + reason
        case .queue: "queue:" + queue
        case .type: "type:" + type
        case .day: "day:" + day
        }
    }

    /// Whether `--group` names this message's group (any grouping).
    public func isIn(group: String) -> Bool {
        FailedGrouping.allCases.contains { self.group($0) == group }
    }
}
