import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// The caller model against the real broker with the shipped users and
/// permissions (`deploy/rabbitmq/definitions.json`, imported into a vhost
/// of its own): the handler logs in as `booking-handler`, two outside
/// systems (`partner-a`, `partner-b`) and an approver (`facility-desk`)
/// have exactly `external-publisher`'s rights, the operators' `bookingctl`
/// is the admin. Every refusal is checked for its code and for nothing
/// having changed (docs/security.md).
@Suite("Caller model (shipped broker users)", .serialized)
struct CallerModelTests {
    /// What docker-compose sets.
    static let composePolicy = CallerPolicy(administrators: ["bookingctl"], roomManagers: ["facility-desk"],
                                            replayUsers: ["availability-projector"], requireUserID: true)

    /// A handler on a vhost with the shipped definitions.
    struct World {
        let vhost: ShippedVhost
        let handler: HandlerHarness
        private let connections = LockedBox<[String: AMQPConnection]>([:])
        private let handlerStopped = LockedBox(false)

        static func start(policy: CallerPolicy = CallerModelTests.composePolicy,
                          replayRate: Int = ReplayPacer.defaultRate, callerRate: CallerRate? = nil,
                          now: @escaping @Sendable () -> Date = { Date() }) async throws -> World {
            let vhost = try ShippedBroker.vhost("callers", outsideSystems: ["partner-a", "partner-b", "facility-desk"])
            let handler = try await HandlerHarness.start(url: vhost.adminURL, policy: policy, name: "booking-handler",
                                                         handlerURL: vhost.url("booking-handler"), replayRate: replayRate,
                                                         now: now, callerRate: callerRate)
            return World(vhost: vhost, handler: handler)
        }

        /// A connection logged in as `user` (one per user, reused).
        func connection(_ user: String) async throws -> AMQPConnection {
            if let existing = connections.withLock({ $0[user] }) { return existing }
            let c = try await AMQPConnection.connect(
                configuration: AMQPConfiguration(url: vhost.url(user), connectionName: user), logger: testLogger(user))
            connections.withLock { $0[user] = c }
            return c
        }

        /// Sends a command as `user` (its `user_id` set unless `anonymous`)
        /// over direct reply-to and returns the reply.
        func send(_ type: String, _ json: String, as user: String, key: String = UUID().uuidString,
                  anonymous: Bool = false, expiration: String? = nil) async throws -> CommandReply {
            let c = try await connection(user)
            var properties = AMQPProperties.persistentJSON(type: type, messageID: key)
            properties.userID = anonymous ? nil : user
            properties.expiration = expiration
            let reply = try await c.call(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type,
                                         properties: properties, timeout: .seconds(60))
            #expect(reply.properties.userID == "booking-handler", "replies carry the handler's verified user")
            return try ContractJSON.decode(CommandReply.self, from: reply.body)
        }

        func booking(_ id: String) async throws -> Booking? {
            try await handler.app.store.transaction { tx in try tx.booking(id: id) }
        }

        func room(_ name: String) async throws -> Room? {
            try await handler.app.store.transaction { tx in try tx.room(named: name) }
        }

        var bookingCount: Int {
            get async throws { try await handler.app.store.counts().bookings }
        }

        /// The next message in `booking-handler.commands.dead`. Prefetch 1:
        /// a second message must not sit unacked in a consumer this helper
        /// stops, where the next call would not see it until the channel
        /// closes.
        func nextDeadCommand() async throws -> AMQPDelivery {
            let dead = try await handler.client.consume(queue: Topology.deadLetterQueue(for: Topology.handlerCommandsQueue),
                                                        prefetch: 1)
            // Acked after the cancel: while the one delivery is unacked the
            // broker sends no second one, and the cancel goes out first.
            let delivery: AMQPDelivery
            do {
                delivery = try await withTimeout(60, "a dead-lettered command") { try await dead.take(1, ack: false) }[0]
            } catch {
                dead.stop()
                throw error
            }
            dead.stop()
            try await delivery.ack()
            return delivery
        }

        /// Stops the handler gracefully (every delivery settled), keeping
        /// the vhost for inspection; ``stop()`` then skips it.
        func stopHandler() async {
            guard !handlerStopped.withLock({ let was = $0; $0 = true; return was }) else { return }
            await handler.stop()
        }

        func stop() async {
            for c in connections.withLock({ Array($0.values) }) { await c.close() }
            await stopHandler()
            vhost.delete()
        }
    }

    static func create(start: String = "09:00", end: String = "10:00", room: String = "Berlin",
                       attendee: String = "Ada Lovelace", email: String = "ada@example.com") -> String {
        #"{"room": "\#(room)", "date": "\#(TestDates.tomorrow)", "start": "\#(start)", "end": "\#(end)", "title": "T", "attendees": [{"name": "\#(attendee)", "email": "\#(email)", "phone": "0170 1234567"}]}"#
    }

    @Test func roomsAreForRoomManagersAndAdminsOnly() async throws {
        let w = try await World.start()
        let before = try #require(try await w.room("Berlin"))
        let takeover = #"{"name": "Berlin", "capacity": 999, "opens": "00:00", "closes": "23:45", "requiresApproval": false}"#
        for user in ["partner-a", "partner-b"] {
            let refused = try await w.send("room.register", takeover, as: user)
            #expect(refused.error?.code == .notPermitted)
        }
        #expect(try await w.room("Berlin") == before, "the room is unchanged")
        // The room manager and the admin may.
        let managed = try await w.send("room.register", #"{"name": "Annex", "capacity": 4}"#, as: "facility-desk")
        #expect(managed.isOK)
        let admin = try await w.send("room.register", #"{"name": "Annex", "capacity": 6}"#, as: "bookingctl")
        #expect(admin.isOK)
        #expect(try await w.room("Annex")?.capacity == 6)
        await w.stop()
    }

    @Test func idempotencyKeysAreScopedBySender() async throws {
        let w = try await World.start()
        // The same key from two systems: two commands, each its own reply.
        let a = try #require(try await w.send("booking.create", Self.create(start: "09:00", end: "10:00"),
                                              as: "partner-a", key: "shared-key").booking)
        let b = try #require(try await w.send("booking.create",
                                              Self.create(start: "11:00", end: "12:00", attendee: "Bob", email: "bob@example.com"),
                                              as: "partner-b", key: "shared-key").booking)
        #expect(a.id != b.id)
        #expect(b.requestedBy == "partner-b")
        #expect(b.attendees.map(\.email) == ["bob@example.com"], "partner-b never sees partner-a's attendees")
        // Squatting a key first does not pre-empt the other system's command.
        let squat = try await w.send("booking.cancel", #"{"bookingId": "nope"}"#, as: "partner-b", key: "k-squat")
        #expect(squat.error?.code == .bookingNotFound)
        let own = try #require(try await w.send("booking.create", Self.create(start: "13:00", end: "14:00"),
                                                as: "partner-a", key: "k-squat").booking)
        #expect(own.requestedBy == "partner-a")
        // The same key from the same system for another command: 1009.
        let count = try await w.bookingCount
        let reused = try await w.send("booking.create", Self.create(start: "15:00", end: "16:00"), as: "partner-a",
                                      key: "shared-key")
        #expect(reused.error?.code == .idempotencyKeyReused)
        #expect(try await w.bookingCount == count)
        // And the same command again is its stored reply.
        let again = try await w.send("booking.create", Self.create(start: "09:00", end: "10:00"), as: "partner-a",
                                     key: "shared-key")
        #expect(again.booking?.id == a.id)
        await w.stop()
    }

    @Test func pendingBookingsAreApprovedByApproversAndAdminsNotTheirRequester() async throws {
        let w = try await World.start()
        let room = #"{"name": "Council", "capacity": 8, "requiresApproval": true, "approvers": ["facility-desk"]}"#
        #expect(try await w.send("room.register", room, as: "bookingctl").isOK)
        let pending = try #require(try await w.send("booking.create", Self.create(room: "Council"), as: "partner-a").booking)
        #expect(pending.status == .pending)
        let confirm = #"{"bookingId": "\#(pending.id)"}"#
        #expect(try await w.send("booking.confirm", confirm, as: "partner-a").error?.code == .notPermitted)
        #expect(try await w.send("booking.confirm", confirm, as: "partner-b").error?.code == .notPermitted)
        #expect(try await w.booking(pending.id)?.status == .pending, "still pending after the refusals")
        let approved = try #require(try await w.send("booking.confirm", confirm, as: "facility-desk").booking)
        #expect(approved.status == .confirmed)
        // Rejection follows the same rule; the rejected booking's time is free again.
        let second = try #require(try await w.send("booking.create", Self.create(start: "13:00", end: "14:00", room: "Council"),
                                                   as: "partner-b").booking)
        let reject = #"{"bookingId": "\#(second.id)", "reason": "room closed"}"#
        #expect(try await w.send("booking.reject", reject, as: "partner-b").error?.code == .notPermitted)
        #expect(try await w.send("booking.reject", reject, as: "partner-a").error?.code == .notPermitted)
        #expect(try await w.booking(second.id)?.status == .pending)
        let rejected = try #require(try await w.send("booking.reject", reject, as: "facility-desk").booking)
        #expect(rejected.status == .rejected)
        #expect(rejected.cancelReason == "room closed")
        #expect(rejected.version == 2)
        #expect(try await w.send("booking.reject", reject, as: "facility-desk").error?.code == .statusChangeNotAllowed)
        #expect(try await w.send("booking.cancel", #"{"bookingId": "\#(second.id)"}"#, as: "partner-b").error?.code
            == .statusChangeNotAllowed, "rejected is final")
        let again = try await w.send("booking.create", Self.create(start: "13:00", end: "14:00", room: "Council"), as: "partner-a")
        #expect(again.booking?.status == .pending, "the rejected slot is free again")
        // An admin may approve its own booking.
        let own = try #require(try await w.send("booking.create", Self.create(start: "11:00", end: "12:00", room: "Council"),
                                                as: "bookingctl").booking)
        #expect(try await w.send("booking.confirm", #"{"bookingId": "\#(own.id)"}"#, as: "bookingctl").booking?.status
            == .confirmed)
        await w.stop()
    }

    @Test func aForbiddenReplyToIsNeitherExecutedNorAnswered() async throws {
        let w = try await World.start()
        let c = try await w.connection("partner-a")
        let count = try await w.bookingCount
        var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString,
                                                       replyTo: Topology.passesFailedQueue)
        properties.userID = "partner-a"
        try await c.publish(Array(Self.create().utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                            properties: properties)
        let dead = try await w.nextDeadCommand()
        #expect(dead.properties.headers["x-death-reason"]?.stringValue?.contains("reply_to") == true)
        #expect(dead.properties.headers["x-original-user-id"]?.stringValue == "partner-a")
        #expect(dead.properties.userID == "booking-handler")
        #expect(try await w.handler.client.queueInfo(Topology.passesFailedQueue).messageCount == 0)
        #expect(try await w.bookingCount == count, "not executed")
        // Another system's queue is refused the same way; the sender's own works.
        properties.replyTo = "partner-b.replies"
        try await c.publish(Array(Self.create(start: "11:00", end: "12:00").utf8), exchange: Topology.commandsExchange,
                            routingKey: "booking.create", properties: properties)
        let second = try await w.nextDeadCommand()
        #expect(second.properties.headers["x-death-reason"]?.stringValue?.contains("partner-b.replies") == true)
        try await c.declare([.queue(QueueDeclaration("partner-a.replies", type: .classic, durable: false, autoDelete: true))])
        let replies = try await c.consume(queue: "partner-a.replies")
        properties.replyTo = "partner-a.replies"
        try await c.publish(Array(Self.create(start: "13:00", end: "14:00").utf8), exchange: Topology.commandsExchange,
                            routingKey: "booking.create", properties: properties)
        let reply = try await withTimeout(60, "reply in partner-a.replies") { try await replies.take(1) }[0]
        #expect(try ContractJSON.decode(CommandReply.self, from: reply.body).booking?.requestedBy == "partner-a")
        replies.stop()
        #expect(try await w.bookingCount == count + 1)

        // A query with a foreign reply_to: unanswered, and its copy in
        // booking.queries.dead says why (the shipped topic permission
        // lets the handler route copies there).
        let deadQueries = try await w.handler.client.consume(queue: Topology.deadLetterQueue(for: Topology.bookingQueriesQueue))
        var query = AMQPProperties.persistentJSON(type: "booking.list", messageID: UUID().uuidString, replyTo: "partner-b.replies")
        query.userID = "partner-a"
        try await c.publish(Array(#"{"room": "Berlin"}"#.utf8), exchange: Topology.bookingQueriesExchange, routingKey: "booking.list",
                            properties: query)
        let deadQuery = try await withTimeout(60, "the refused query dead-lettered") { try await deadQueries.take(1) }[0]
        #expect(deadQuery.properties.messageID == query.messageID)
        #expect(deadQuery.properties.headers["x-death-reason"]?.stringValue?.contains("partner-b.replies") == true,
                "\(deadQuery.properties.headers)")
        #expect(deadQuery.properties.headers["x-original-user-id"]?.stringValue == "partner-a")
        #expect(deadQuery.properties.userID == "booking-handler")
        deadQueries.stop()
        await w.stop()
    }

    @Test func withRequireUserIDAnonymousCommandsAreRefused() async throws {
        let w = try await World.start()
        let count = try await w.bookingCount
        let refused = try await w.send("booking.create", Self.create(), as: "partner-a", anonymous: true)
        #expect(refused.error?.code == .notPermitted)
        #expect(refused.error?.text.contains("user_id") == true)
        #expect(try await w.bookingCount == count)
        await w.stop()
    }

    @Test func replayIsForTheProjectorAndAdminsOneAtATime() async throws {
        // One message a second: the first replay is still pacing when the second arrives.
        let w = try await World.start(replayRate: 1)
        try await w.handler.client.declare([.queue(QueueDeclaration("availability-projector.replay.t", type: .classic))])
        let replay = #"{"queue": "availability-projector.replay.t"}"#
        #expect(try await w.send("booking.replay", replay, as: "partner-a").error?.code == .notPermitted)
        #expect(try await w.send("booking.replay", replay, as: "partner-b", anonymous: true).error?.code == .notPermitted)
        #expect(try await w.handler.client.queueInfo("availability-projector.replay.t").messageCount == 0)
        // The projector's user may: its first replay is running (its first
        // message arrived, and its six rooms at 1/s take six seconds), so a
        // second one from the same user is refused.
        let replayed = try await w.handler.client.consume(queue: "availability-projector.replay.t")
        let projector = try await w.connection("availability-projector")
        var properties = AMQPProperties.persistentJSON(type: "booking.replay", messageID: UUID().uuidString)
        properties.userID = "availability-projector"
        async let first = projector.call(Array(replay.utf8), exchange: Topology.commandsExchange, routingKey: "booking.replay",
                                         properties: properties, timeout: .seconds(60))
        _ = try await withTimeout(60, "the first replayed message") { try await replayed.take(1) }
        let second = try await w.send("booking.replay", replay, as: "availability-projector")
        #expect(second.error?.code == .notPermitted)
        #expect(second.error?.text.contains("already running") == true)
        let done = try ContractJSON.decode(CommandReply.self, from: try await first.body)
        #expect(done.isOK)
        // Afterwards (and for an admin) a replay runs again.
        #expect(try await w.send("booking.replay", replay, as: "bookingctl").isOK)
        replayed.stop()
        await w.stop()
    }

    /// A replay whose queue refuses its messages (a negative confirm: here
    /// a queue at its bound with `reject-publish`) is redelivered and runs
    /// again, as for a lost connection, until the queue's delivery limit
    /// dead-letters it — it is not taken for a refused dead-letter copy and
    /// rejected at the first refusal.
    @Test func aReplayWhoseQueueRefusesIsRetriedUntilTheDeliveryLimit() async throws {
        let w = try await World.start()
        let queue = "availability-projector.replay.refusing"
        try await w.handler.client.declare([.queue(QueueDeclaration(
            queue, type: .classic, arguments: ["x-max-length": .int64(0), "x-overflow": .string("reject-publish")]))])
        let admin = try await w.connection("bookingctl")
        var properties = AMQPProperties.persistentJSON(type: "booking.replay", messageID: UUID().uuidString)
        properties.userID = "bookingctl"
        try await admin.publish(Array(#"{"queue": "\#(queue)"}"#.utf8), exchange: Topology.commandsExchange,
                                routingKey: "booking.replay", properties: properties)
        let dead = try await w.nextDeadCommand()
        #expect(dead.properties.messageID == properties.messageID)
        // The broker's dead-lettering after the last redelivery, not the
        // rejection of the first attempt.
        guard case .array(let deaths)? = dead.properties.headers["x-death"],
              case .table(let death)? = deaths.first else {
            Issue.record("no x-death on \(dead.properties.headers)")
            await w.stop()
            return
        }
        #expect(death["reason"]?.stringValue == "delivery_limit")
        #expect(dead.properties.headers["x-dead-lettered-by"] == nil, "not a handler's copy")
        await w.stop()
    }

    /// Series (contract v1.1) follow the same caller model as single
    /// bookings, as the shipped users: one partner's idempotency key books
    /// nothing of another's, a partner cannot cancel another's series (or
    /// one of its occurrences), and an admin can.
    @Test func seriesBelongToTheirRequester() async throws {
        let w = try await World.start()
        func series(_ start: String, _ end: String, email: String) -> String {
            #"{"room": "Hamburg", "date": "\#(TestDates.tomorrow)", "start": "\#(start)", "end": "\#(end)", "title": "Weekly", "attendees": [{"name": "A", "email": "\#(email)", "phone": "0170 1234567"}], "recurrence": {"frequency": "weekly", "count": 3}}"#
        }
        let a = try await w.send("booking.create", series("09:00", "10:00", email: "a@example.com"), as: "partner-a", key: "series-key")
        let b = try await w.send("booking.create", series("11:00", "12:00", email: "b@example.com"), as: "partner-b", key: "series-key")
        guard case .series(let mine) = a, case .series(let theirs) = b else { Issue.record("\(a) / \(b)"); return await w.stop() }
        #expect(mine.id != theirs.id, "the same key from two users is two series")
        #expect(mine.bookings.allSatisfy { $0.requestedBy == "partner-a" } && theirs.bookings.allSatisfy { $0.requestedBy == "partner-b" })
        #expect(!String(decoding: try ContractJSON.encode(b), as: UTF8.self).contains("a@example.com"))

        let foreign = try await w.send("booking.cancel", #"{"seriesId": "\#(mine.id)"}"#, as: "partner-b")
        #expect(foreign.error?.code == .notPermitted)
        let occurrence = try await w.send("booking.cancel", #"{"bookingId": "\#(mine.bookings[1].id)"}"#, as: "partner-b")
        #expect(occurrence.error?.code == .notPermitted)
        for booking in mine.bookings { #expect(try await w.booking(booking.id)?.status == .confirmed) }

        let byAdmin = try await w.send("booking.cancel", #"{"seriesId": "\#(mine.id)", "reason": "desk"}"#, as: "bookingctl")
        guard case .seriesCancelled(let cancelled) = byAdmin else { Issue.record("\(byAdmin)"); return await w.stop() }
        #expect(cancelled.cancelled.count == 3 && cancelled.version == 2)
        for booking in theirs.bookings { #expect(try await w.booking(booking.id)?.status == .confirmed, "partner-b's series untouched") }
        await w.stop()
    }

    @Test func poisonFromAnyUserIsDeadLetteredWithItsSenderKept() async throws {
        let w = try await World.start()
        let reply = try await w.send("booking.create", "not json", as: "partner-a", expiration: "600000")
        #expect(reply.error?.code == .invalidJSON)
        let dead = try await w.nextDeadCommand()
        #expect(dead.body == Array("not json".utf8))
        #expect(dead.properties.headers["x-original-user-id"]?.stringValue == "partner-a")
        #expect(dead.properties.headers["x-original-expiration"]?.stringValue == "600000")
        #expect(dead.properties.expiration == nil, "a dead copy never expires")
        #expect(dead.properties.userID == "booking-handler")
        await w.stop()
    }

    /// A poison command whose headers fill nearly a whole frame: the
    /// handler's dead-letter copy, with its own headers added, would not fit
    /// one. It goes without the sender's headers, saying so, and the
    /// handler's connection stays up (a publish too big for a frame used to
    /// send its method alone, and the broker closed the connection: every
    /// unacked command came back, the poison with them).
    @Test func poisonWithHeadersFillingAFrameIsDeadLetteredWithoutThem() async throws {
        let w = try await World.start()
        let partner = try await w.connection("partner-a")
        var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
        properties.userID = "partner-a"
        properties.headers["padding"] = .string(String(repeating: "p", count: 130_700))
        properties.headers["idempotency-key"] = "partner-a-key-1"
        let answer = try await partner.call(Array("not json".utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                            properties: properties, timeout: .seconds(60))
        #expect(try ContractJSON.decode(CommandReply.self, from: answer.body).error?.code == .invalidJSON)
        let dead = try await w.nextDeadCommand()
        #expect(dead.body == Array("not json".utf8))
        #expect(dead.properties.headers["padding"] == nil)
        #expect(dead.properties.headers["x-original-headers-dropped"]?.stringValue == "too large to copy")
        #expect(dead.properties.headers["x-original-user-id"]?.stringValue == "partner-a")
        #expect(dead.properties.headers["idempotency-key"]?.stringValue == "partner-a-key-1", "a retry runs as the same command")
        #expect(dead.properties.headers["x-death-reason"]?.stringValue?.isEmpty == false)
        #expect(dead.redelivered == false && dead.properties.headers["x-delivery-count"] == nil, "dead-lettered on the first delivery")
        // The next caller is answered at once.
        #expect(try await w.send("booking.create", Self.create(), as: "partner-b").booking != nil)
        await w.stop()
    }

    /// An outside user sends the handler's reply back into
    /// `booking.commands`: its reply queue has that exchange as its
    /// dead-letter exchange (its write there allows it), and it rejects the
    /// reply. The copy carries the handler's own `user_id` (exempt from
    /// `CALLER_RATE`); it is ignored as foreign — not run, not answered, not
    /// copied to the dead-letter queue, where a fan-out of such bounces
    /// would otherwise pile the handler's name.
    @Test func aReplyBouncedIntoTheCommandQueueIsIgnored() async throws {
        let w = try await World.start()
        let partner = try await w.connection("partner-a")
        let bounce = "partner-a.bounce-\(UUID().uuidString.prefix(8))"
        try await partner.declare([
            .queue(QueueDeclaration(bounce, type: .classic, durable: false, autoDelete: false, arguments: [
                "x-dead-letter-exchange": .string(Topology.commandsExchange), "x-dead-letter-routing-key": "booking.create",
            ])),
            // Its own way into that queue (it may not write amq.default).
            .exchange(ExchangeDeclaration(bounce, kind: .direct, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: bounce, exchange: bounce, routingKey: "marker")),
        ])
        let replies = try await partner.consume(queue: bounce, prefetch: 1)
        var properties = AMQPProperties.persistentJSON(type: "booking.get", messageID: UUID().uuidString)
        properties.userID = "partner-a"
        properties.replyTo = bounce
        properties.correlationID = "bounce-1"
        try await partner.publish(Array(#"{"bookingId": "nope"}"#.utf8), exchange: Topology.bookingQueriesExchange,
                                  routingKey: "booking.get", properties: properties)
        let reply = try await withTimeout(60, "the handler's reply") { try await replies.take(1, ack: false)[0] }
        #expect(reply.properties.userID == "booking-handler" && reply.properties.type == "booking.reply")
        try await reply.reject(requeue: false)  // into booking.commands, as booking.create
        // Behind it through the same queue, so in that order: a booking of
        // partner-a's own. Once it is booked, the reply has been delivered
        // to the handler; stopping the handler settles what it holds.
        var marker = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
        marker.userID = "partner-a"
        try await partner.publish(Array(Self.create().utf8), exchange: bounce, routingKey: "marker", properties: marker)
        let markerCopy = try await withTimeout(60, "the marker in the bounce queue") { try await replies.take(1, ack: false)[0] }
        try await markerCopy.reject(requeue: false)
        replies.stop()
        _ = try await withTimeout(60, "the marker's booking.created") {
            var seen: [AMQPDelivery] = []
            while seen.last?.routingKey != "booking.created" { seen += try await w.handler.events.take(1) }
            return seen
        }
        await w.stopHandler()
        let admin = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: w.vhost.adminURL, connectionName: "admin"),
                                                     logger: testLogger("admin"))
        let dead = try await admin.queueInfo(Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)).messageCount
        #expect(dead == 0, "the bounced reply was dead-lettered")
        await admin.close()
        await w.stop()
    }

    @Test func eventsCarryTheHandlersUser() async throws {
        let w = try await World.start()
        _ = try #require(try await w.send("booking.create", Self.create(), as: "partner-a").booking)
        let events = try await withTimeout(60, "events up to booking.confirmed") {
            var seen: [AMQPDelivery] = []
            while seen.last?.routingKey != "booking.confirmed" { seen += try await w.handler.events.take(1) }
            return seen
        }
        #expect(events.count > 2)
        #expect(events.allSatisfy { $0.properties.userID == "booking-handler" })
        await w.stop()
    }

    /// A room manager's closure reaches an outside system on
    /// `booking.public` as the shipped broker runs it (contract v1.2:
    /// `room.closed` on both exchanges), and the outbox goes on after it:
    /// a refused copy would leave the closure's row unpublished and every
    /// later event of the room behind it.
    @Test func roomClosuresReachBookingPublicOnTheShippedBroker() async throws {
        let w = try await World.start()
        let follower = try await w.connection("partner-b")
        let queue = "partner-b.closures-\(UUID().uuidString.prefix(8))"
        try await follower.declare([
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: false)),
            .binding(QueueBinding(queue: queue, exchange: Topology.publicExchange, routingKey: "room.#")),
            .binding(QueueBinding(queue: queue, exchange: Topology.publicExchange, routingKey: "booking.created")),
        ])
        let events = try await follower.consume(queue: queue)
        // A day a week out, so the booking below (tomorrow) is not in it.
        let close = #"{"room": "Berlin", "from": "\#(TestDates.berlinDate(daysFromNow: 7))", "to": "\#(TestDates.berlinDate(daysFromNow: 8))", "reason": "holidays"}"#
        guard case .closure(let closed) = try await w.send("room.close", close, as: "facility-desk") else {
            Issue.record("room.close refused to the room manager"); return await w.stop()
        }
        let reopen = #"{"room": "Berlin", "closureId": "\#(closed.closure.id)"}"#
        guard case .closure = try await w.send("room.reopen", reopen, as: "facility-desk") else {
            Issue.record("room.reopen refused to the room manager"); return await w.stop()
        }
        let booked = try #require(try await w.send("booking.create", Self.create(), as: "partner-a").booking)
        let received = try await withTimeout(60, "room.closed, room.reopened and booking.created on booking.public") {
            try await events.take(3)
        }
        #expect(received.map(\.routingKey) == ["room.closed", "room.reopened", "booking.created"], "in commit order")
        #expect(received.allSatisfy { $0.properties.userID == "booking-handler" })
        let closure = try ContractJSON.decode(RoomClosureEvent.self, from: received[0].body)
        #expect(closure.closure == closed.closure)
        #expect(try ContractJSON.decode(PublicBookingEvent.self, from: received[2].body).booking.id == booked.id)
        events.stop()
        await w.stop()
    }

    @Test func embeddedDefaultAnonymousCallersShareOnlyAnonymousBookings() async throws {
        let w = try await World.start(policy: CallerPolicy())
        let anonymous = try #require(try await w.send("booking.create", Self.create(), as: "partner-b", anonymous: true).booking)
        #expect(anonymous.requestedBy == nil)
        let owned = try #require(try await w.send("booking.create", Self.create(start: "11:00", end: "12:00"),
                                                  as: "partner-a").booking)
        // A named system may not touch the anonymous booking …
        #expect(try await w.send("booking.cancel", #"{"bookingId": "\#(anonymous.id)"}"#, as: "partner-a").error?.code
            == .notPermitted)
        // … an anonymous caller may not touch partner-a's …
        #expect(try await w.send("booking.cancel", #"{"bookingId": "\#(owned.id)"}"#, as: "partner-b", anonymous: true)
            .error?.code == .notPermitted)
        #expect(try await w.booking(anonymous.id)?.status == .confirmed)
        #expect(try await w.booking(owned.id)?.status == .confirmed)
        // … and any anonymous caller may change the anonymous one (the
        // documented weakness of the embedded default).
        #expect(try await w.send("booking.cancel", #"{"bookingId": "\#(anonymous.id)"}"#, as: "partner-a", anonymous: true)
            .booking?.status == .cancelled)
        await w.stop()
    }
}
