import AMQPClient
import BookingContracts
import BrokerObjects
import FailedMessages
import Foundation
import Testing

/// How the console reads one failed message — identity, sender, where a
/// retry goes, groups — from its properties alone (no broker).
@Suite("Failed message reading")
struct FailedMessageTests {
    static let dead = "booking-handler.commands.dead"
    static let handler: Set<String> = ["booking-handler"]

    /// RabbitMQ's own dead-lettering: `x-death` newest first.
    static func xDeath(_ entries: [(queue: String, reason: String, exchange: String, key: String, time: UInt64)]) -> AMQPFieldValue {
        .array(entries.map { e in
            .table(["queue": .string(e.queue), "reason": .string(e.reason), "count": .int64(1), "exchange": .string(e.exchange),
                    "routing-keys": .array([.string(e.key)]), "time": .timestamp(e.time)])
        })
    }

    static func brokerDeadLetter(user: String?, headers extra: AMQPTable = [:]) -> AMQPProperties {
        var headers = extra
        headers["x-death"] = xDeath([("booking-handler.commands", "rejected", "booking.commands", "booking.create", 1_795_000_000)])
        headers["x-first-death-queue"] = "booking-handler.commands"
        headers["x-first-death-reason"] = "rejected"
        var p = AMQPProperties.persistentJSON(type: "booking.create", messageID: "m-1", headers: headers, userID: user)
        p.timestamp = 1_794_999_990
        return p
    }

    @Test func aBrokerDeadLetterIsItsVerifiedSendersAndGoesBackWhereItCameFrom() {
        let m = FailedMessage(queue: Self.dead, position: 0, properties: Self.brokerDeadLetter(user: "partner-a"),
                              body: Array("{}".utf8), serviceUsers: Self.handler)
        #expect(m.originalUser == "partner-a")
        #expect(m.target?.exchange == "booking.commands" && m.target?.routingKey == "booking.create")
        #expect(m.type == "booking.create" && m.reason == "rejected")
        #expect(m.day == "2026-11-18")
        #expect(m.group(.queue) == "queue:\(Self.dead)" && m.isIn(group: "type:booking.create") && m.isIn(group: "reason:rejected"))
    }

    /// Anybody can put `x-original-user-id` on their own message: believed
    /// only from the booking handler's verified user_id.
    @Test func aForgedOriginalUserHeaderIsNotBelieved() {
        let forged = Self.brokerDeadLetter(user: "partner-a", headers: [
            "x-original-user-id": "partner-b", "x-death-reason": "poison", "x-original-exchange": "booking.events",
            "x-original-routing-key": "booking.confirmed",
        ])
        let m = FailedMessage(queue: Self.dead, position: 0, properties: forged, body: [], serviceUsers: Self.handler)
        #expect(m.originalUser == "partner-a")
        #expect(m.target?.exchange == "booking.commands", "RabbitMQ's x-death decides, not the sender's headers")
        #expect(m.reason == "rejected" && !m.isIn(group: "reason:poison"), "nor its reason: \(m.reason)")

        var anonymous = forged
        anonymous.userID = nil
        #expect(FailedMessage(queue: Self.dead, position: 0, properties: anonymous, body: [], serviceUsers: Self.handler)
            .originalUser == nil)
    }

    @Test func aHandlerCopyNamesItsSenderInItsHeaders() {
        var p = AMQPProperties.persistentJSON(type: "booking.create", messageID: "m-2", headers: [
            "x-original-user-id": "partner-a", "x-death-reason": "reply_to 'x' is not allowed", "x-error-code": .int64(2003),
            "x-original-exchange": "booking.commands", "x-original-routing-key": "booking.create",
        ], userID: "booking-handler")
        p.replyTo = "partner-b.replies"
        let m = FailedMessage(queue: Self.dead, position: 3, properties: p, body: [], serviceUsers: Self.handler)
        #expect(m.originalUser == "partner-a")
        #expect(m.target?.exchange == "booking.commands" && m.target?.routingKey == "booking.create")
        #expect(m.reason == "reply_to 'x' is not allowed")
        // Another handler user name (BOOKING_HANDLER_USER): then this one is not it.
        #expect(FailedMessage(queue: Self.dead, position: 3, properties: p, body: [], serviceUsers: ["handler-2"])
            .originalUser == "booking-handler")
    }

    /// A copy is a plain publish: RabbitMQ adds no `x-death`, so any it
    /// carries and its timestamp are the sender's. When it failed is the
    /// service's `x-dead-lettered-at`, believed only on a service's copy.
    @Test func aCopySaysWhenItFailedAndASenderCannot() {
        var p = AMQPProperties.persistentJSON(type: "booking.create", messageID: "m-5", headers: [
            "x-original-user-id": "partner-a", "x-death-reason": "poison", "x-dead-lettered-at": "2026-11-20T10:00:00Z",
            "x-death": Self.xDeath([("booking-handler.commands", "rejected", "booking.commands", "booking.create",
                                     1_700_000_000)]),
        ], userID: "booking-handler")
        p.timestamp = 1_600_000_000
        let copy = FailedMessage(queue: Self.dead, position: 0, properties: p, body: [], serviceUsers: Self.handler)
        #expect(copy.failedAt == ContractFormat.parseTimestamp("2026-11-20T10:00:00Z"))
        #expect(copy.day == "2026-11-20" && copy.isIn(group: "day:2026-11-20"))

        var forged = p
        forged.userID = "partner-a"
        let sent = FailedMessage(queue: Self.dead, position: 0, properties: forged, body: [], serviceUsers: Self.handler)
        #expect(sent.day == "2023-11-14", "a sender's x-dead-lettered-at is not believed; the x-death decides")
    }

    /// Each service's copies are believed only in the dead-letter queues of
    /// its own queues, and another service's copy goes back only into the
    /// queue it died in: a service user can write into any queue through
    /// the default exchange, so a copy it planted naming the handler must
    /// not be sent on to `booking.events` as the handler.
    @Test func eachServicesCopiesAreBelievedOnlyWhereItDeadLetters() {
        let users = ServiceUsers()
        #expect(users.copier(of: "booking-handler.commands.dead") == "booking-handler")
        #expect(users.copier(of: "booking.queries.dead") == "booking-handler")
        #expect(users.copier(of: "pass-sender.events.dead") == "pass-sender")
        #expect(users.copier(of: "pass-sender.retry.dead") == "pass-sender")
        #expect(users.copier(of: "availability.queries.dead") == "availability-projector")
        #expect(users.copier(of: "availability-projector.events.dead") == "availability-projector")
        #expect(users.copier(of: "availability-projector.events.a.dead") == "availability-projector")
        #expect(users.copier(of: "passes.failed") == nil)

        let copy = AMQPProperties.persistentJSON(type: "booking.confirmed", messageID: "e-1", headers: [
            "x-original-user-id": "booking-handler", "x-death-reason": "body is not a booking event",
            "x-original-exchange": "booking.events", "x-original-routing-key": "booking.confirmed",
        ], userID: "pass-sender")
        let own = FailedMessage(queue: "pass-sender.events.dead", position: 0, properties: copy, body: [],
                                serviceUsers: users.copier(of: "pass-sender.events.dead").map { [$0] } ?? [])
        #expect(own.reason == "body is not a booking event" && own.originalUser == "booking-handler")
        #expect(own.target?.exchange == "" && own.target?.routingKey == "pass-sender.events", "back into its queue only")
        // The same "copy" planted in the handler's dead-letter queue: nothing in it is believed.
        let planted = FailedMessage(queue: Self.dead, position: 0, properties: copy, body: [],
                                    serviceUsers: users.copier(of: Self.dead).map { [$0] } ?? [])
        #expect(planted.reason == "unknown" && planted.originalUser == "pass-sender")
        #expect(planted.target?.exchange == "" && planted.target?.routingKey == "booking-handler.commands")
    }

    /// A sender can write its own `x-death` (and RabbitMQ 3.10 may keep it
    /// when it dead-letters the message). A retry goes out as the original
    /// sender with the operators' rights, so a target the message names is
    /// used only where that queue gets its messages from; anything else goes
    /// straight back into the queue it died in.
    @Test func aForgedXDeathCannotSendARetryElsewhere() {
        for (exchange, key) in [("booking.events", "booking.confirmed"), ("", "bookingctl.archive"), ("", "passes.failed"),
                                ("booking.public", "booking.created")] {
            var p = Self.brokerDeadLetter(user: "partner-a")
            p.headers["x-death"] = Self.xDeath([("booking-handler.commands", "rejected", exchange, key, 1_795_000_000)])
            let m = FailedMessage(queue: Self.dead, position: 0, properties: p, body: [], serviceUsers: Self.handler)
            #expect(m.target?.exchange == "" && m.target?.routingKey == "booking-handler.commands", "\(exchange) \(key)")
        }
        // On the handler's own copy its x-original-* headers win over any x-death the sender wrote.
        let copy = AMQPProperties.persistentJSON(type: "booking.create", messageID: "m-3", headers: [
            "x-original-user-id": "partner-a", "x-death-reason": "poison", "x-original-exchange": "booking.commands",
            "x-original-routing-key": "booking.create",
            "x-death": Self.xDeath([("booking-handler.commands", "rejected", "booking.events", "booking.confirmed", 1_795_000_000)]),
        ], userID: "booking-handler")
        let m = FailedMessage(queue: Self.dead, position: 0, properties: copy, body: [], serviceUsers: Self.handler)
        #expect(m.target?.exchange == "booking.commands" && m.target?.routingKey == "booking.create")
        #expect(FailedQueues.mayRetry(from: "pass-sender.events", to: "booking.events", routingKey: "booking.confirmed"))
        #expect(!FailedQueues.mayRetry(from: "pass-sender.events", to: "booking.commands", routingKey: "booking.create"))
        #expect(FailedQueues.mayRetry(from: "pass-sender.retry", to: "", routingKey: "pass-sender.retry"))
    }

    /// A projector replica's events dead-letter queue is read when named,
    /// and its messages go back only where the shipped events queue's would.
    @Test func aReplicasEventsDeadLetterQueueIsKnownAndRetriesLikeTheShippedOnes() {
        #expect(FailedQueues.isKnown("availability-projector.events.a.dead"))
        #expect(FailedQueues.isKnown("availability-projector.events.dead"))
        for name in ["availability-projector.events..dead", "availability-projector.events.A.dead", "availability-projector.events.a",
                     "availability-projector.events.a.b.dead", "availability-projector.replay.a.dead", "bookingctl.archive"] {
            #expect(!FailedQueues.isKnown(name), "\(name)")
        }
        #expect(FailedQueues.mayRetry(from: "availability-projector.events.a", to: "booking.events", routingKey: "booking.created"))
        #expect(!FailedQueues.mayRetry(from: "availability-projector.events.a", to: "booking.commands", routingKey: "booking.create"))
        #expect(!FailedQueues.mayRetry(from: "availability-projector.events.a", to: "booking.public", routingKey: "booking.created"))
        var p = Self.brokerDeadLetter(user: "booking-handler")
        p.headers["x-death"] = Self.xDeath([("availability-projector.events.a", "rejected", "booking.events", "booking.created", 1_795_000_000)])
        let m = FailedMessage(queue: "availability-projector.events.a.dead", position: 0, properties: p, body: [], serviceUsers: Self.handler)
        #expect(m.target?.exchange == "booking.events" && m.target?.routingKey == "booking.created")
    }

    /// The entry for the queue it died in, not the newest one.
    @Test func theTargetComesFromTheDeathInTheSourceQueue() {
        var p = AMQPProperties.persistentJSON(type: PassQueues.retryMessageType, messageID: "r-1", userID: "pass-sender")
        p.headers["x-death"] = Self.xDeath([
            ("pass-sender.retry", "delivery_limit", "", "pass-sender.retry", 1_795_000_100),
            ("pass-sender.retry.delay.1s", "expired", "", "pass-sender.retry.delay.1s", 1_795_000_000),
        ])
        let m = FailedMessage(queue: "pass-sender.retry.dead", position: 0, properties: p, body: [], serviceUsers: Self.handler)
        #expect(m.target?.exchange == "" && m.target?.routingKey == "pass-sender.retry")
        #expect(m.originalUser == "pass-sender" && m.reason == "delivery_limit")
        // Nothing says how it came: straight back into the queue it died in.
        let bare = FailedMessage(queue: "availability.queries.dead", position: 0, properties: AMQPProperties(), body: [],
                                 serviceUsers: Self.handler)
        #expect(bare.target?.exchange == "" && bare.target?.routingKey == "availability.queries")
    }

    /// Stable across listings (quorum queues raise x-delivery-count at each),
    /// different for another queue, body or message id.
    @Test func theIdIsStableAndDistinguishes() {
        let body = Array(#"{"room":"Berlin"}"#.utf8)
        let p = Self.brokerDeadLetter(user: "partner-a")
        let id = FailedMessage(queue: Self.dead, position: 0, properties: p, body: body, serviceUsers: Self.handler).id
        var listedAgain = p
        listedAgain.headers["x-delivery-count"] = .int64(7)
        #expect(FailedMessage(queue: Self.dead, position: 5, properties: listedAgain, body: body, serviceUsers: Self.handler).id == id)
        #expect(id.count == 16 && id.allSatisfy(\.isHexDigit))
        #expect(FailedMessage(queue: "booking.queries.dead", position: 0, properties: p, body: body, serviceUsers: Self.handler).id != id)
        #expect(FailedMessage(queue: Self.dead, position: 0, properties: p, body: Array("{}".utf8), serviceUsers: Self.handler).id != id)
        var other = p
        other.messageID = "m-2"
        #expect(FailedMessage(queue: Self.dead, position: 0, properties: other, body: body, serviceUsers: Self.handler).id != id)
    }

    @Test func aFailedPassIsReadAsOne() throws {
        let pass = FailedPass(bookingId: "b-1", version: 2, attendeeIndex: 1, name: "Ada", email: "ada@example.com",
                              phone: "+491701234567", attempts: 5, firstFailureAt: "2026-11-20T08:00:00Z",
                              lastFailureAt: "2026-11-20T09:00:00Z", lastErrorCode: ErrorCode(3000), lastErrorText: "bad phone",
                              room: "Berlin", date: "2026-11-24", start: "09:00", end: "10:00", title: "T")
        let m = FailedMessage(queue: "passes.failed", position: 0,
                              properties: .persistentJSON(type: "passes.failed", messageID: pass.passKey, userID: "pass-sender"),
                              body: [UInt8](try ContractJSON.encode(pass)), serviceUsers: Self.handler)
        #expect(m.pass == pass && m.target == nil)
        #expect(m.reason == "pass failed: error 3000" && m.type == "pass.failed" && m.day == "2026-11-20")
    }

    @Test func everyDeadLetterQueueOfTheSetIsCovered() {
        let expected = Topology.serviceQueues.map { "\($0.name).dead" } + ["pass-sender.retry.dead", "passes.failed"]
        #expect(FailedQueues.all == expected)
        #expect(FailedQueues.all.contains("booking-handler.commands.dead") && FailedQueues.all.contains("booking.queries.dead"))
        #expect(FailedQueues.sourceQueue(of: "pass-sender.retry.dead") == "pass-sender.retry")
        #expect(FailedQueues.sourceQueue(of: "passes.failed") == nil)
    }
}
