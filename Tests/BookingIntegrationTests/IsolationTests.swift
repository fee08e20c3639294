import AMQPClient
import BookingContracts
import BookingHandler
import BrokerObjects
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// Contract v1.2, "What changes for a v1.1 client, on purpose", attacked
/// for real: outside systems with the shipped `external-publisher` rights
/// (`partner-a`, `partner-b`) against a handler on the shipped definitions.
/// The bindings are made with pika, an outside system's own client.
@Suite("Outside systems isolated (shipped users)", .serialized)
struct IsolationTests {
    static let outsideClient = HandlerHarness.repositoryRoot.appendingPathComponent("Tests/Tools/outside_client.py").path

    /// Runs the outside client as `user`; its exit status and what it printed.
    static func outside(_ w: CallerModelTests.World, as user: String, _ arguments: [String]) throws -> (Int32, String) {
        let url = w.vhost.url(user)
        let vhost = url.vhost.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? url.vhost
        let pikaURL = "amqp://\(user):\(url.password)@\(url.host):\(url.port)/\(vhost)"
        return try Command.exitStatus("/usr/bin/env", ["python3", outsideClient, pikaURL] + arguments)
    }


    /// An outside user binds `booking.public` into `booking.commands`
    /// (exchange to exchange) and the query queue `booking.queries` to
    /// `booking.public` — both allowed by its rights — so every event of
    /// the set reaches the handler's two queues. Nothing of it is executed,
    /// answered or dead-lettered (before v1.2 each became an "unknown
    /// command" kept forever in `booking-handler.commands.dead`), and the
    /// handler keeps serving.
    @Test func eventsBoundIntoTheHandlersQueuesAreIgnored() async throws {
        let w = try await CallerModelTests.World.start()
        let (e1, o1) = try Self.outside(w, as: "partner-a", ["bind-exchange", Topology.publicExchange, Topology.commandsExchange, "#"])
        #expect(e1 == 0, "the broker allows it: \(o1)")
        let (e2, o2) = try Self.outside(w, as: "partner-a", ["bind-queue", Topology.bookingQueriesQueue, Topology.publicExchange, "#"])
        #expect(e2 == 0, "the broker allows it: \(o2)")
        // A follower of booking.public: once it has an event, the copies the
        // bindings made of the same publish are in the handler's queues.
        let follower = try await w.connection("partner-b")
        try await follower.declare([.queue(QueueDeclaration("partner-b.follow", type: .classic, durable: false, autoDelete: true)),
                                    .binding(QueueBinding(queue: "partner-b.follow", exchange: Topology.publicExchange, routingKey: "#"))])
        let followed = try await follower.consume(queue: "partner-b.follow")
        let created = try #require(try await w.send("booking.create", CallerModelTests.create(), as: "partner-b").booking)
        let seen = try await withTimeout(60, "booking.public events") { try await followed.take(2) }
        #expect(seen.map(\.routingKey) == ["booking.created", "booking.confirmed"])
        // The handler keeps serving commands and queries (whose own events
        // go round the bindings again).
        let second = try #require(try await w.send("booking.create", CallerModelTests.create(start: "11:00", end: "12:00"),
                                                   as: "partner-a").booking)
        // Its events too have been copied in before the handler stops.
        _ = try await withTimeout(60, "the second booking's events") { try await followed.take(2) }
        followed.stop()
        let (reply, _) = try await ReadingBookingsTests.query(w, "booking.get", #"{"bookingId": "\#(created.id)"}"#, as: "partner-b")
        #expect(reply.bookingView?.id == created.id)
        #expect(try await w.bookingCount == 2 && second.requestedBy == "partner-a", "only the two commands executed")
        // A graceful stop settles every delivery: what is left in the
        // queues after it is exact (the broker's passive declare).
        await w.stopHandler()
        let admin = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: w.vhost.adminURL, connectionName: "check"),
                                                     logger: testLogger("check"))
        for queue in [Topology.handlerCommandsQueue, Topology.bookingQueriesQueue] {
            #expect(try await admin.queueInfo(queue).messageCount == 0, "\(queue): every copied event acked")
            #expect(try await admin.queueInfo(Topology.deadLetterQueue(for: queue)).messageCount == 0,
                    "\(queue): nothing dead-lettered")
        }
        await admin.close()
        await w.stop()
    }

    /// The shipped policies reach the queues they are meant for — their
    /// patterns checked against the real names on the real broker: an
    /// outside system's queue gets `outside-queues` (bounded, drops its own
    /// oldest), the set's dead-letter queues `set-dead-letter-queues`
    /// (refuse rather than drop), the consumed queues `set-consumed-queues`
    /// (dead-letter at least once).
    @Test func theShippedBoundsApplyToTheQueuesTheyAreFor() async throws {
        let w = try await CallerModelTests.World.start()
        let (status, output) = try Self.outside(w, as: "partner-a", ["declare-queue", "partner-a.backlog"])
        #expect(status == 0, "\(output)")
        // The pass sender's own queues are not in the shipped definitions:
        // it declares them at start, as it does here under its own user.
        let passSender = try await w.connection("pass-sender")
        try await passSender.declare(PassQueues.ownQueues(delays: [RetryDelay(milliseconds: 1000)]))
        let text = try TestBroker.ctl(["-q", "list_queues", "-p", w.vhost.vhost, "name", "policy", "--formatter", "json"])
        let rows = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]] ?? []
        var policies: [String: String] = [:]
        for row in rows {
            if let name = row["name"] as? String { policies[name] = row["policy"] as? String ?? "" }
        }
        #expect(policies["partner-a.backlog"] == "outside-queues", "\(policies)")
        for queue in [Topology.handlerCommandsQueue, Topology.bookingQueriesQueue, Topology.availabilityQueriesQueue,
                      Topology.passSenderEventsQueue, "pass-sender.retry", Topology.projectorEventsQueue] {
            if let applied = policies[queue] { #expect(applied == "set-consumed-queues", "\(queue)") }
            if let applied = policies[Topology.deadLetterQueue(for: queue)] {
                #expect(applied == "set-dead-letter-queues", "\(Topology.deadLetterQueue(for: queue))")
            }
        }
        #expect(policies[Topology.handlerCommandsQueue] == "set-consumed-queues")
        let setPrefixes = ["booking.", "booking-handler.", "pass-sender.", "passes.", "availability.", "availability-projector.",
                           "bookingctl."]
        for (queue, policy) in policies where setPrefixes.contains(where: { queue.hasPrefix($0) }) {
            #expect(policy != "outside-queues", "\(queue) is the set's, not an outside system's")
        }
        #expect(policies[Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)] == "set-dead-letter-queues")
        // Its retry queue dead-letters at least once like the contract's
        // queues: a copy its dead-letter queue refuses is kept, not dropped.
        #expect(policies[PassQueues.retry] == "set-consumed-queues", "\(policies)")
        #expect(policies[Topology.deadLetterQueue(for: PassQueues.retry)] == "set-dead-letter-queues", "\(policies)")
        await w.stop()
    }

    /// A dead-letter queue at its bound refuses the handler's copy of
    /// poison; the command is answered once and rejected, not dropped: the
    /// broker keeps it and dead-letters it once there is room.
    @Test func aFullDeadLetterQueueKeepsPoisonInsteadOfDroppingIt() async throws {
        // The broker forwards a dead letter its target refused again after
        // `dead_letter_worker_publisher_confirm_timeout` (3 min by default):
        // 2 s for the queues this test declares (a worker reads it at start).
        _ = try TestBroker.ctl(["eval", "application:set_env(rabbit, dead_letter_worker_publisher_confirm_timeout, 2000)."])
        defer { _ = try? TestBroker.ctl(["eval", "application:set_env(rabbit, dead_letter_worker_publisher_confirm_timeout, 180000)."]) }
        let w = try await CallerModelTests.World.start()
        let dlq = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        // The shipped policy's bound, shrunk for the test (a quorum queue
        // takes one message past `max-length` before it refuses).
        _ = try TestBroker.ctl(["set_policy", "-p", w.vhost.vhost, "--apply-to", "queues", "--priority", "1",
                                "set-dead-letter-queues", "\\.dead$", #"{"max-length": 1, "overflow": "reject-publish"}"#])
        let c = try await w.connection("partner-a")
        func poison(_ text: String, replyTo: String? = nil) async throws {
            var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString, replyTo: replyTo)
            properties.userID = "partner-a"
            try await c.publish(Array(text.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                properties: properties)
        }
        try await poison("not json A")
        try await poison("not json B")
        try await withTimeout(60, "the dead-letter queue full") {
            while try await c.queueInfo(dlq).messageCount < 2 { try await Task.sleep(for: .milliseconds(100)) }
        }
        // Replies collect in a queue nobody reads, to be counted.
        try await c.declare([.queue(QueueDeclaration("partner-a.replies", type: .classic, durable: false, autoDelete: false))])
        try await poison("not json C", replyTo: "partner-a.replies")
        try await poison("not json D", replyTo: "partner-a.replies")
        try await withTimeout(60, "both answered") {
            while try await c.queueInfo("partner-a.replies").messageCount < 2 { try await Task.sleep(for: .milliseconds(100)) }
        }
        // Each copy was refused by the full queue, so each command was
        // rejected, not requeued: the broker's at-least-once dead-lettering
        // keeps them in the commands queue. Room again: they arrive, as the
        // broker's dead letters. (A requeue after a pause held a consumer
        // slot a second per delivery, answered again each time and then
        // dead-lettered the handler's own copy.)
        _ = try TestBroker.ctl(["purge_queue", "-p", w.vhost.vhost, dlq])
        // One consumer for both: a second would not get one the first took
        // into its prefetch before it stopped.
        let deadQueue = try await w.handler.client.consume(queue: dlq)
        let dead = try await withTimeout(60, "both dead-lettered") { try await deadQueue.take(2) }
        deadQueue.stop()
        #expect(Set(dead.map { String(decoding: $0.body, as: UTF8.self) }) == ["not json C", "not json D"])
        for letter in dead {
            #expect(letter.properties.headers["x-dead-lettered-by"] == nil, "the broker's dead letter, not a retried copy")
        }
        #expect(try await c.queueInfo("partner-a.replies").messageCount == 2, "each poison answered once")
        _ = try TestBroker.ctl(["delete_queue", "-p", w.vhost.vhost, "partner-a.replies"])
        await w.stop()
    }

    /// `CALLER_RATE`: a bucket per caller and instance; over it a command or
    /// query is answered 1010 with `retryAfterMs`, not executed and not
    /// stored (the same key later is a fresh try); without `reply_to` it is
    /// dead-lettered as `rate-limited`; other callers and admins are not
    /// held back.
    @Test func callersOverTheirRateGet1010AndOthersAreServed() async throws {
        let w = try await CallerModelTests.World.start(callerRate: CallerRate(perSecond: 1, burst: 3))
        var refused: ReplyError?
        var refusedKey = ""
        var booked = 0
        for hour in 8..<14 {
            let key = UUID().uuidString
            let reply = try await w.send("booking.create", CallerModelTests.create(start: String(format: "%02d:00", hour),
                                                                                   end: String(format: "%02d:30", hour)),
                                         as: "partner-a", key: key)
            if let error = reply.error {
                #expect(error.code == .rateLimited, "\(error)")
                if refused == nil { (refused, refusedKey) = (error, key) }
            } else {
                booked += 1
            }
        }
        let error = try #require(refused, "six commands in a burst of three at 1/s: some refused")
        let wait = try #require(error.retryAfterMs)
        #expect(wait >= 1 && wait <= 1000)
        #expect(booked >= 3 && booked < 6)
        #expect(try await w.bookingCount == booked, "refused commands were not executed")
        // Another caller has a bucket of its own; an admin none at all.
        #expect(try await w.send("booking.create", CallerModelTests.create(start: "15:00", end: "15:30"), as: "partner-b").booking != nil)
        for i in 0..<6 {
            let room = #"{"name": "Admin\#(i)", "capacity": 2}"#
            #expect(try await w.send("room.register", room, as: "bookingctl").error == nil)
        }
        // Once a token is back, the refused key is a fresh try: a 1010 was
        // never stored in the inbox. (The wait is the rate itself.)
        try await Task.sleep(for: .milliseconds(1100))
        let retried = try await w.send("booking.create", CallerModelTests.create(start: "08:00", end: "08:30"), as: "partner-a",
                                       key: refusedKey)
        #expect(retried.booking != nil || retried.error?.code == .overlap, "executed, not a stored 1010: \(retried)")
        // Over the rate without reply_to: dead-lettered, never dropped.
        let c = try await w.connection("partner-a")
        for hour in 16..<20 {
            var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
            properties.userID = "partner-a"
            try await c.publish(Array(CallerModelTests.create(start: "\(hour):00", end: "\(hour):30").utf8),
                                exchange: Topology.commandsExchange, routingKey: "booking.create", properties: properties)
        }
        let dead = try await w.nextDeadCommand()
        #expect(dead.properties.headers["x-death-reason"]?.stringValue == "rate-limited")
        #expect(dead.properties.headers["x-error-code"]?.intValue == 1010)
        #expect(dead.properties.headers["x-original-user-id"]?.stringValue == "partner-a")
        await w.stop()
    }
}

extension IsolationTests {
    /// What an outside system may declare for its own queue: one that
    /// refuses every message (`x-overflow: reject-publish` as an argument,
    /// which RabbitMQ lets win over the `outside-queues` policy's
    /// `drop-head`). The broker then nacks every publish routed to it.
    static let refusingQueue = #"{"x-max-length": 0, "x-overflow": "reject-publish"}"#

    /// An outside queue that refuses everything, bound to `booking.public`:
    /// the broker nacks each copy the relay publishes there. That copy is
    /// done for everyone else (the broker routed it to every other queue),
    /// so the relay neither stalls nor repeats — before, one stranger's
    /// queue held up every event of the set.
    @Test func aQueueRefusingPublicEventsHoldsUpNoOne() async throws {
        let w = try await CallerModelTests.World.start()
        let (e1, o1) = try Self.outside(w, as: "partner-a", ["declare-queue", "partner-a.refuses", Self.refusingQueue])
        #expect(e1 == 0, "the broker allows it: \(o1)")
        let (e2, o2) = try Self.outside(w, as: "partner-a", ["bind-queue", "partner-a.refuses", Topology.publicExchange, "#"])
        #expect(e2 == 0, "the broker allows it: \(o2)")
        let follower = try await w.connection("partner-b")
        try await follower.declare([.queue(QueueDeclaration("partner-b.follow", type: .classic, durable: false, autoDelete: true)),
                                    .binding(QueueBinding(queue: "partner-b.follow", exchange: Topology.publicExchange, routingKey: "#"))])
        let followed = try await follower.consume(queue: "partner-b.follow")
        let first = try #require(try await w.send("booking.create", CallerModelTests.create(), as: "partner-b").booking)
        let second = try #require(try await w.send("booking.create", CallerModelTests.create(start: "11:00", end: "12:00"),
                                                   as: "partner-b").booking)
        // Each event once on booking.public for the well-behaved follower,
        // in order — a relay that retried the refused copy would repeat them.
        let seen = try await withTimeout(60, "four booking.public events") { try await followed.take(4) }
        #expect(seen.map(\.properties.messageID).count == Set(seen.map(\.properties.messageID)).count)
        let ids = seen.map { event in
            ((try? JSONSerialization.jsonObject(with: Data(event.body)) as? [String: Any])?["booking"] as? [String: Any])?["id"] as? String
        }
        #expect(ids == [first.id, first.id, second.id, second.id], "\(seen.map(\.routingKey))")
        // The outbox empties: every event counts as published.
        try await withTimeout(30, "the outbox to empty") {
            while try await w.handler.app.store.counts().outboxPending > 0 { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(try await w.handler.client.queueInfo("partner-a.refuses").messageCount == 0)
        followed.stop()
        await w.stopHandler()
        #expect(try await w.handler.app.store.counts().outboxPending == 0)
        await w.stop()
    }

    /// A caller whose own reply queue refuses every reply (`reject-publish`)
    /// gets its command executed once and answered nowhere: the refused
    /// reply is undeliverable, the command acked — not requeued into a
    /// loop of redeliveries — and over its rate a command is refused, not
    /// run (a redelivery takes no token, so a requeue would run it).
    @Test func aReplyQueueRefusingRepliesNeitherLoopsNorBypassesTheRate() async throws {
        let w = try await CallerModelTests.World.start(callerRate: CallerRate(perSecond: 0.01, burst: 1))
        let (e1, o1) = try Self.outside(w, as: "partner-a", ["declare-queue", "partner-a.replies", Self.refusingQueue])
        #expect(e1 == 0, "the broker allows it: \(o1)")
        // Every booking.created, counted exactly after the stop.
        let inspect = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: w.vhost.adminURL, connectionName: "inspect"), logger: testLogger("inspect"))
        try await inspect.declare([.queue(QueueDeclaration("inspect.created", type: .classic, durable: false)),
                                   .binding(QueueBinding(queue: "inspect.created", exchange: Topology.eventsExchange,
                                                         routingKey: "booking.created"))])
        let c = try await w.connection("partner-a")
        for hour in 8..<11 {
            let start = String(format: "%02d:00", hour), end = String(format: "%02d:30", hour)
            var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString,
                                                           replyTo: "partner-a.replies")
            properties.userID = "partner-a"
            try await c.publish(Array(CallerModelTests.create(start: start, end: end).utf8),
                                exchange: Topology.commandsExchange, routingKey: "booking.create", properties: properties)
        }
        // The first (within the burst) is executed: its events arrive.
        let created = try await withTimeout(60, "booking.created") {
            while true {
                let event = try #require(try await w.handler.events.take(1).first)
                if event.routingKey == "booking.created" { return try ContractJSON.decode(BookingEvent.self, from: event.body) }
            }
        }
        #expect(created.booking.requestedBy == "partner-a")
        // A graceful stop settles every delivery; what is left is exact.
        await w.stopHandler()
        #expect(try await inspect.queueInfo(Topology.handlerCommandsQueue).messageCount == 0,
                "no command requeued after its reply was refused")
        #expect(try await inspect.queueInfo("inspect.created").messageCount == 1, "the two over the rate were not run")
        #expect(try await inspect.queueInfo("partner-a.replies").messageCount == 0)
        await inspect.close()
        await w.stop()
    }
}

extension IsolationTests {
    /// Sends a command as `user` and returns the reply's JSON object as sent.
    static func rawReply(_ w: CallerModelTests.World, _ type: String, _ json: String, as user: String,
                         key: String = UUID().uuidString, anonymous: Bool = false) async throws -> [String: Any] {
        let c = try await w.connection(user)
        var properties = AMQPProperties.persistentJSON(type: type, messageID: key)
        properties.userID = anonymous ? nil : user
        let reply = try await c.call(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type,
                                     properties: properties, timeout: .seconds(60))
        return try #require(try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any])
    }

    /// Contract v1.2: the views apply to every reply that carries another
    /// caller's booking. An approver may confirm a booking made without
    /// `user_id`, which named callers see busy: its reply (and the stored
    /// reply a repeat gets) is the busy view; for a booking of a named
    /// requester the approver sees it in full, and so does an admin.
    @Test func anApproverIsAnsweredInTheViewItReads() async throws {
        let w = try await CallerModelTests.World.start(policy: CallerPolicy(administrators: ["bookingctl"],
                                                                            roomManagers: ["facility-desk"]))
        let room = #"{"name": "Council", "capacity": 8, "requiresApproval": true, "approvers": ["facility-desk"]}"#
        #expect(try await w.send("room.register", room, as: "bookingctl").isOK)
        let legacy = try #require(try await w.send("booking.create", CallerModelTests.create(room: "Council"),
                                                   as: "partner-b", anonymous: true).booking)
        #expect(legacy.requestedBy == nil && legacy.status == .pending)
        let key = UUID().uuidString
        let confirm = #"{"bookingId": "\#(legacy.id)"}"#
        let busyKeys: Set<String> = ["id", "room", "date", "start", "end", "startsAt", "endsAt", "timeZone", "status", "version"]
        for attempt in ["first", "repeat"] {
            let reply = try await Self.rawReply(w, "booking.confirm", confirm, as: "facility-desk", key: key)
            #expect(reply["ok"] as? Bool == true, "\(attempt): \(reply)")
            let booking = try #require(reply["booking"] as? [String: Any], "\(attempt)")
            #expect(Set(booking.keys) == busyKeys, "\(attempt): busy view only, got \(booking.keys.sorted())")
            #expect(booking["id"] as? String == legacy.id && booking["status"] as? String == "confirmed")
        }
        #expect(try await w.booking(legacy.id)?.status == .confirmed)
        // A named requester's booking: the approver reads it in full.
        let owned = try #require(try await w.send("booking.create", CallerModelTests.create(start: "11:00", end: "12:00",
                                                                                            room: "Council"),
                                                  as: "partner-a").booking)
        let full = try await Self.rawReply(w, "booking.confirm", #"{"bookingId": "\#(owned.id)"}"#, as: "facility-desk")
        let fullBooking = try #require(full["booking"] as? [String: Any])
        #expect(fullBooking["title"] as? String == "T" && fullBooking["requestedBy"] as? String == "partner-a")
        // An admin reads the legacy booking in full too.
        let cancelled = try await Self.rawReply(w, "booking.cancel", confirm, as: "bookingctl")
        #expect((cancelled["booking"] as? [String: Any])?["attendees"] != nil, "\(cancelled)")
        await w.stop()
    }
}

extension BookingQueryReply {
    /// The booking of a `booking.get` reply.
    var bookingView: BookingView? {
        if case .booking(let view) = self { return view }
        return nil
    }
}
