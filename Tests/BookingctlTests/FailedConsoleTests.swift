import AMQPClient
import BookingContracts
import BrokerObjects
import FailedMessages
import Foundation
import PassSender
import ServiceSupport
import Testing
import TestSupport

/// `bookingctl failed …` against the real broker with the shipped users,
/// permissions and queues (`deploy/rabbitmq/definitions.json`): the CLI
/// logs in as `bookingctl`, two outside systems (`partner-a`, `partner-b`)
/// send commands, the services' own users publish events and retries.
/// Dead letters are made the way RabbitMQ makes them: a message is
/// rejected from its service queue and dead-lettered by the broker.
@Suite("bookingctl failed", .serialized)
struct FailedConsoleTests {
    /// A shipped vhost, connections per user, and a tap on
    /// `booking.dead-letter` that says when the broker has dead-lettered.
    final class World: Sendable {
        let vhost: ShippedVhost
        let admin: AMQPConnection
        let tap: AMQPConsumer
        private let connections = LockedBox<[String: AMQPConnection]>([:])

        init() async throws {
            vhost = try ShippedBroker.vhost("failed", outsideSystems: ["partner-a", "partner-b"])
            admin = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: vhost.adminURL, connectionName: "admin"),
                                                     logger: testLogger("admin"))
            let tapQueue = uniqueName("tap")
            try await admin.declare([
                .queue(QueueDeclaration(tapQueue, type: .classic, durable: false, exclusive: true, autoDelete: true)),
                .binding(QueueBinding(queue: tapQueue, exchange: Topology.deadLetterExchange, routingKey: "#")),
            ])
            tap = try await admin.consume(queue: tapQueue)
        }

        func connection(_ user: String) async throws -> AMQPConnection {
            if let c = connections.withLock({ $0[user] }) { return c }
            let c = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: vhost.url(user), connectionName: user),
                                                     logger: testLogger(user))
            connections.withLock { $0[user] = c }
            return c
        }

        /// Takes the next `count` messages of `queue` and rejects them, as a
        /// failing consumer would; returns once the broker dead-lettered them.
        func deadLetter(from queue: String, count: Int) async throws {
            for _ in 0..<count {
                let delivery = try #require(try await admin.get(queue: queue), "a message in \(queue)")
                try await delivery.reject(requeue: false)
            }
            _ = try await withTimeout(60, "\(count) dead letters from \(queue)") { [tap] in try await tap.take(count) }
        }

        /// Five `booking.create` from `partner-a` (ids `<idPrefix>-0`…`-4`),
        /// dead-lettered into `booking-handler.commands.dead` in that order.
        func deadLetterFiveCreates(idPrefix: String) async throws {
            let c = try await connection("partner-a")
            for i in 0..<5 {
                var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: "\(idPrefix)-\(i)")
                properties.userID = "partner-a"
                try await c.publish(Array(FailedConsoleTests.create(start: "0\(i + 1):00", end: "0\(i + 1):30",
                                                                    email: "a@example.com").utf8),
                                    exchange: Topology.commandsExchange, routingKey: "booking.create", properties: properties,
                                    mandatory: true)
            }
            try await deadLetter(from: Topology.handlerCommandsQueue, count: 5)
        }

        var cli: CLIRunner { CLIRunner(url: vhost.url("bookingctl")) }

        func stop() async {
            for c in connections.withLock({ Array($0.values) }) { await c.close() }
            tap.stop()
            await admin.close()
            vhost.delete()
        }
    }

    static func create(start: String, end: String, email: String) -> String {
        #"{"room": "Berlin", "date": "\#(localDate(daysFromNow: 3))", "start": "\#(start)", "end": "\#(end)", "title": "T", "attendees": [{"name": "Ada", "email": "\#(email)", "phone": "0170 1234567"}]}"#
    }

    func json(_ result: CLIRunner.Result) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
    }

    func messages(_ result: CLIRunner.Result) throws -> [[String: Any]] {
        try #require(try json(result)["messages"] as? [[String: Any]])
    }

    /// A command dead-lettered while the handler could not run it is retried
    /// by the operator: it runs as the user who sent it (requestedBy, its
    /// reply queue), exactly once — retrying again finds nothing, and the
    /// sender's own resend of the same message_id is answered from the
    /// inbox, so the retry ran in that sender's idempotency scope.
    @Test func aRetriedCommandRunsOnceAsItsOriginalSender() async throws {
        let w = try await World()
        let dead = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        for (user, key, start, end) in [("partner-a", "a-1", "09:00", "10:00"), ("partner-b", "b-1", "11:00", "12:00")] {
            let c = try await w.connection(user)
            try await c.declare([.queue(QueueDeclaration("\(user).replies", type: .classic, durable: false))])
            var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: key, replyTo: "\(user).replies")
            properties.userID = user
            try await c.publish(Array(Self.create(start: start, end: end, email: "\(user)@example.com").utf8),
                                exchange: Topology.commandsExchange, routingKey: "booking.create", properties: properties,
                                mandatory: true)
        }
        // No handler yet: both commands fail in its queue and are dead-lettered.
        try await w.deadLetter(from: Topology.handlerCommandsQueue, count: 2)

        let cli = w.cli
        let listed = try await cli.run(["failed", "list", "--queue", dead, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let first = try messages(listed)
        #expect(first.map { $0["originalUser"] as? String } == ["partner-a", "partner-b"])
        #expect(first.allSatisfy { $0["type"] as? String == "booking.create" && $0["reason"] as? String == "rejected" })
        #expect((first[0]["retryTo"] as? [String: String]) == ["exchange": "booking.commands", "routingKey": "booking.create"])
        let again = try messages(try await cli.run(["failed", "list", "--queue", dead, "--json"]))
        let ids = first.compactMap { $0["id"] as? String }
        #expect(again.compactMap { $0["id"] as? String } == ids, "ids and order are stable across listings")
        #expect(Set(ids).count == 2)

        let handler = try await Handler(administrators: ["bookingctl"], url: w.vhost.url("booking-handler"))
        defer { Task { await handler.stop() } }

        // Retry partner-a's command by an id prefix: it runs as partner-a.
        let retried = try await cli.run(["failed", "retry", String(ids[0].prefix(8))])
        #expect(retried.status == 0, "\(retried.stderr)")
        #expect(retried.stdout.contains("retried 1 message"), "\(retried.stdout)")
        let a = try await w.connection("partner-a")
        let repliesA = try await a.consume(queue: "partner-a.replies")
        let replyA = try await withTimeout(60, "partner-a's reply") { try await repliesA.take(1) }[0]
        let bookingA = try #require(try ContractJSON.decode(CommandReply.self, from: replyA.body).bookingValue)
        #expect(bookingA.requestedBy == "partner-a", "the retried command ran as its sender")
        #expect(replyA.properties.correlationID == "a-1")

        // Once: the dead copy is gone, a second retry finds nothing.
        let twice = try await cli.run(["failed", "retry", ids[0]])
        #expect(twice.status == 3, "\(twice.stdout) \(twice.stderr)")
        // Same idempotency scope: partner-a's own resend gets the stored reply.
        var resend = AMQPProperties.persistentJSON(type: "booking.create", messageID: "a-1")
        resend.userID = "partner-a"
        let stored = try await a.call(Array(Self.create(start: "09:00", end: "10:00", email: "partner-a@example.com").utf8),
                                      exchange: Topology.commandsExchange, routingKey: "booking.create", properties: resend,
                                      timeout: .seconds(60))
        #expect(try ContractJSON.decode(CommandReply.self, from: stored.body).bookingValue?.id == bookingA.id,
                "answered from partner-a's inbox: the retry was partner-a's command, run once")

        // A group: partner-b's command, as partner-b.
        let group = try await cli.run(["failed", "retry", "--queue", dead, "--group", "type:booking.create", "--json"])
        #expect(group.status == 0, "\(group.stderr)")
        #expect(try json(group)["count"] as? Int == 1)
        let b = try await w.connection("partner-b")
        let repliesB = try await b.consume(queue: "partner-b.replies")
        let replyB = try await withTimeout(60, "partner-b's reply") { try await repliesB.take(1) }[0]
        #expect(try ContractJSON.decode(CommandReply.self, from: replyB.body).bookingValue?.requestedBy == "partner-b")
        let empty = try await cli.run(["failed", "list", "--queue", dead, "--json"])
        #expect(try json(empty)["count"] as? Int == 0)
        repliesA.stop()
        repliesB.stop()
        await w.stop()
    }

    /// A queue longer than one run reads: `--all` must not look done.
    /// (65,535 in bookingctl; 3 here.)
    @Test func aRunThatCouldNotReadTheWholeQueueSaysSo() async throws {
        let w = try await World()
        let dead = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        try await w.deadLetterFiveCreates(idPrefix: "long")
        let console = FailedConsole(connection: try await w.connection("bookingctl"), perQueue: 3)
        try await console.prepare(lockTimeout: 30)
        #expect(try await console.list([dead]).incomplete == [dead])
        let first = try await console.discard([dead], reason: "test", by: "test") { _ in true }
        #expect(first.done.map(\.properties.messageID) == ["long-0", "long-1", "long-2"])
        #expect(first.incomplete == [dead], "two more wait unread")
        let second = try await console.discard([dead], reason: "test", by: "test") { _ in true }
        #expect(second.done.map(\.properties.messageID) == ["long-3", "long-4"] && second.incomplete.isEmpty)
        try await console.finish()
        await w.stop()
    }

    /// The broker drops the run's connections halfway through `failed
    /// retry` (here: closed by rabbitmqctl before the third message is
    /// moved). The run ends there, as bookingctl's connection does not
    /// reconnect: the two moved are reported, the third and the rest stay
    /// in the dead-letter queue, and none is in both places. With a
    /// reconnecting connection the third was published over the new
    /// connection after the dead copy had gone back: a duplicate.
    @Test func aLostConnectionEndsTheWalkWithoutADuplicate() async throws {
        let w = try await World()
        let dead = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        try await w.deadLetterFiveCreates(idPrefix: "lost")

        let name = uniqueName("operator")
        var configuration = AMQPConfiguration(url: w.vhost.url("bookingctl"), connectionName: name)
        configuration.reconnectsAfterLoss = false  // as bookingctl connects
        let op = try await AMQPConnection.connect(configuration: configuration, logger: testLogger(name))
        let console = FailedConsole(connection: op)
        try await console.prepare(lockTimeout: 30)
        let vhost = w.vhost.vhost
        var asked = 0
        let outcome = try await console.retry([dead], by: "test") { _ in
            asked += 1
            guard asked == 3 else { return true }
            // The operator's connection and the snapshot's, as when the broker goes away.
            // (A client's own name is in its client properties, `connection_name`.)
            let rows = (try? TestBroker.ctl(["list_connections", "-s", "pid", "vhost", "client_properties"])) ?? ""
            for row in rows.split(separator: "\n") {
                let f = row.split(separator: "\t", maxSplits: 2)
                guard f.count == 3, f[1] == vhost, f[2].contains("\"\(name)\"") || f[2].contains("\"snapshot \(dead)\"") else { continue }
                _ = try? TestBroker.ctl(["close_connection", String(f[0]), "test: the broker went away"])
            }
            // The loss is seen before the third move begins.
            let lost = DispatchSemaphore(value: 0)
            op.whenDisconnected { lost.signal() }
            #expect(lost.wait(timeout: .now() + 30) == .success, "the loss was seen")
            return true
        }
        #expect(outcome.done.map(\.properties.messageID) == ["lost-0", "lost-1"])
        #expect(outcome.connectionLost)
        #expect(outcome.failed.map(\.message.properties.messageID) == ["lost-2"], "\(outcome.failed.map(\.error))")
        #expect(outcome.stopped != nil, "lost-3 and lost-4 were chosen and not reached")
        #expect(op.reconnectCount == 0)

        // The broker put the held three back; the two retried wait in the
        // handler's queue (no handler runs). None is in both.
        try await withTimeout(30, "the held messages back in \(dead)") {
            while try await w.admin.queueInfo(dead).messageCount < 3 { try await Task.sleep(for: .milliseconds(20)) }
        }
        func ids(_ queue: String) async throws -> [String] {
            var out: [String] = []
            while let m = try await w.admin.get(queue: queue) { out.append(m.properties.messageID ?? "") }
            return out
        }
        let stayed = try await ids(dead), retried = try await ids(Topology.handlerCommandsQueue)
        #expect(stayed.sorted() == ["lost-2", "lost-3", "lost-4"])
        #expect(retried.sorted() == ["lost-0", "lost-1"])
        #expect(Set(stayed).isDisjoint(with: retried))
        await op.close()
        await w.stop()
    }

    /// bookingctl does not reconnect: when the broker drops its connection
    /// while it waits for another operator's lock (`--timeout 120`), it
    /// ends at once with 69 instead of waiting on over a new connection.
    @Test func bookingctlEndsAtALostConnectionInsteadOfWaitingOn() async throws {
        let w = try await World()
        let other = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: w.vhost.url("bookingctl"), connectionName: "another-operator"),
            logger: testLogger("another-operator"))
        try await QueueLock.acquire(FailedQueues.lock, on: other, waitingUpTo: 5)
        let vhost = w.vhost.vhost
        // The broker drops bookingctl's connection once its channels are
        // open. A close during the start-up's own set-up is only a failed
        // first attempt (retried within --timeout), so it is repeated until
        // the run ends; the run must end long before --timeout.
        let closer = Task {
            while !Task.isCancelled {
                let rows = (try? TestBroker.ctl(["list_connections", "-s", "pid", "vhost", "channels", "client_properties"])) ?? ""
                for f in rows.split(separator: "\n").map({ $0.split(separator: "\t", maxSplits: 3) })
                where f.count == 4 && f[1] == vhost && (Int(f[2]) ?? 0) > 0 && f[3].contains("\"bookingctl\"") {
                    _ = try? TestBroker.ctl(["close_connection", String(f[0]), "test: the broker went away"])
                }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        let result = try await w.cli.run(["failed", "list", "--timeout", "120"])
        closer.cancel()
        #expect(result.status == 69, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("operators' lock"), "\(result.stderr)")
        await other.close()
        await w.stop()
    }

    /// A copy the booking handler re-published (forbidden reply_to) names its
    /// sender only in x-original-user-id: the retry restores it, so the
    /// handler judges the retried command as partner-a's again.
    @Test func aHandlerCopyIsRetriedAsTheSenderItNames() async throws {
        let w = try await World()
        let handler = try await Handler(administrators: ["bookingctl"], url: w.vhost.url("booking-handler"))
        defer { Task { await handler.stop() } }
        let dead = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        let a = try await w.connection("partner-a")
        var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: "a-foreign",
                                                       replyTo: "partner-b.replies")
        properties.userID = "partner-a"
        try await a.publish(Array(Self.create(start: "13:00", end: "14:00", email: "a@example.com").utf8),
                            exchange: Topology.commandsExchange, routingKey: "booking.create", properties: properties)
        _ = try await withTimeout(60, "the handler's dead-letter copy") { [tap = w.tap] in try await tap.take(1) }
        let cli = w.cli
        let listed = try messages(try await cli.run(["failed", "list", "--queue", dead, "--json"]))
        #expect(listed.count == 1)
        #expect(listed.first?["originalUser"] as? String == "partner-a")
        #expect((listed.first?["properties"] as? [String: Any])?["userId"] as? String == "booking-handler")
        let id = try #require(listed.first?["id"] as? String)
        let shown = try await cli.run(["failed", "show", id])
        #expect(shown.status == 0 && shown.stdout.contains("partner-b.replies") && shown.stdout.contains("sender      partner-a"),
                "\(shown.stdout)")

        let retried = try await cli.run(["failed", "retry", id])
        #expect(retried.status == 0, "\(retried.stderr)")
        // Still partner-a's: refused again for the same reason, named as partner-a.
        let again = try await withTimeout(60, "the retried copy dead-lettered again") { [tap = w.tap] in try await tap.take(1) }[0]
        #expect(again.properties.headers["x-original-user-id"]?.stringValue == "partner-a")
        #expect(again.properties.headers["x-retried-from"]?.stringValue == dead)
        await w.stop()
    }

    /// The pass sender's copy of a poison event (``DeadLetterCopy``, as its
    /// consumer makes it) under the shipped permissions: it may route
    /// copies only to its own dead-letter queues; `failed list` shows its
    /// reason and the event's verified sender, and an event retried from
    /// there is the booking handler's again, back in the pass sender's
    /// queue only. A "copy" it puts into the handler's dead-letter queue
    /// through the default exchange is believed in nothing.
    @Test func aPassSenderCopySaysWhyAndCannotLandElsewhere() async throws {
        let w = try await World()
        let handlerUser = try await w.connection("booking-handler")
        var event = AMQPProperties.persistentJSON(type: "booking.confirmed", messageID: "ev-poison")
        event.userID = "booking-handler"
        event.timestamp = 1_600_000_000  // the sender's clock, not when it failed
        try await handlerUser.publish(Array("not json".utf8), exchange: Topology.eventsExchange, routingKey: "booking.confirmed",
                                      properties: event, mandatory: true)
        _ = try await w.admin.purgeQueue(Topology.projectorEventsQueue)
        let passSender = try await w.connection("pass-sender")
        let copiedFrom = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let delivery = try #require(try await passSender.get(queue: Topology.passSenderEventsQueue))
        #expect(try await DeadLetterCopy.publish(delivery, from: Topology.passSenderEventsQueue,
                                                 reason: "body is not a booking event: not json", by: "pass-sender",
                                                 on: passSender))
        try await delivery.ack()
        let copy = try await withTimeout(60, "the pass sender's copy") { [tap = w.tap] in try await tap.take(1) }[0]
        #expect(copy.routingKey == Topology.passSenderEventsQueue)

        // Not into another service's dead-letter queue (topic permission).
        let refused = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: w.vhost.url("pass-sender"), connectionName: "pass-sender-refused"),
            logger: testLogger("pass-sender-refused"))
        await #expect(throws: AMQPError.self, "the pass sender may not route copies to the handler's dead-letter queue") {
            try await refused.publish(Array("forged".utf8), exchange: Topology.deadLetterExchange,
                                      routingKey: Topology.handlerCommandsQueue,
                                      properties: .persistentJSON(type: "booking.create", messageID: "forged-copy"),
                                      mandatory: true)
        }
        await refused.close()

        let cli = w.cli
        let listed = try messages(try await cli.run(["failed", "list", "--queue", "pass-sender.events.dead", "--json"]))
        #expect(listed.count == 1)
        #expect(listed.first?["reason"] as? String == "body is not a booking event: not json", "\(listed)")
        #expect(listed.first?["originalUser"] as? String == "booking-handler")
        let failedText = listed.first?["failedAt"] as? String
        let failedAt = try #require(failedText.flatMap { ContractFormat.parseTimestamp($0) }, "\(listed)")
        #expect(failedAt >= copiedFrom && failedAt <= Date(), "the copy's x-dead-lettered-at: \(failedAt)")
        // Under another name for the pass sender the header is not believed.
        let untrusted = try messages(try await cli.run(["failed", "list", "--queue", "pass-sender.events.dead", "--json",
                                                        "--pass-sender-user", "someone-else"]))
        #expect(untrusted.first?["reason"] as? String == "unknown", "\(untrusted)")

        let retried = try await cli.run(["failed", "retry", "--queue", "pass-sender.events.dead", "--all"])
        #expect(retried.status == 0, "\(retried.stderr)")
        let back = try #require(try await w.admin.get(queue: Topology.passSenderEventsQueue))
        #expect(back.properties.userID == "booking-handler" && back.routingKey == Topology.passSenderEventsQueue)
        try await back.ack()
        #expect(try await w.admin.queueInfo(Topology.projectorEventsQueue).messageCount == 0, "not sent on to booking.events")

        var planted = AMQPProperties.persistentJSON(type: "booking.cancel", messageID: "planted", headers: [
            "x-death-reason": "looks fine", "x-original-user-id": "partner-b",
            "x-original-exchange": .string(Topology.commandsExchange), "x-original-routing-key": "booking.cancel",
        ])
        planted.userID = "pass-sender"
        try await passSender.publish(Array("{}".utf8), routingKey: Topology.deadLetterQueue(for: Topology.handlerCommandsQueue),
                                     properties: planted, mandatory: true)
        let inHandlers = try messages(try await cli.run(["failed", "list", "--queue", "booking-handler.commands.dead", "--json"]))
        let forged = try #require(inHandlers.first { ($0["properties"] as? [String: Any])?["messageId"] as? String == "planted" })
        #expect(forged["reason"] as? String == "unknown" && forged["originalUser"] as? String == "pass-sender", "\(forged)")
        await w.stop()
    }

    /// A dead letter's body and headers come from any outside system: a
    /// terminal must not obey the control characters in them (a `CR` and
    /// `ESC [2K` rewrite the line with the id, OSC 52 writes the clipboard,
    /// U+202E turns text around). bookingctl writes them as `\uXXXX`,
    /// keeps `--json` parseable, and cuts a long body off in `show`. The
    /// reason it lists is RabbitMQ's, not the sender's `x-death-reason`.
    @Test func controlCharactersFromADeadLetterReachNoTerminal() async throws {
        let w = try await World()
        let a = try await w.connection("partner-a")
        var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: "escape-\u{1B}[31m")
        properties.userID = "partner-a"
        properties.headers["x-death-reason"] = .string("\r\u{1B}[2Kall fine\u{202E}")
        let hostile = "\u{1B}]52;c;ZWNobyBwd25lZA==\u{07}\r\u{1B}[2K\u{9B}31m"
        let body = hostile + String(repeating: "x", count: 100_000)
        try await a.publish(Array(body.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                            properties: properties)
        try await w.deadLetter(from: Topology.handlerCommandsQueue, count: 1)
        let dead = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        let cli = w.cli
        let listedJSON = try await cli.run(["failed", "list", "--queue", dead, "--json"])
        let listed = try messages(listedJSON)
        let id = try #require(listed.first?["id"] as? String, "--json stays JSON: \(listedJSON.stdout.prefix(500))")
        for args in [["failed", "list", "--queue", dead], ["failed", "show", id]] {
            let result = try await cli.run(args)
            #expect(result.status == 0, "\(args): \(result.stderr)")
            let forbidden = result.stdout.unicodeScalars.filter { scalar in
                switch scalar.value {
                case 0x0A, 0x09: false
                case 0x00...0x1F, 0x7F...0x9F, 0x202A...0x202E: true
                default: false
                }
            }
            #expect(forbidden.isEmpty, "\(args) wrote \(forbidden.map { String($0.value, radix: 16) })")
            if args[1] == "show" { #expect(result.stdout.contains("\\u001b"), "the escape is shown, not obeyed") }
        }
        #expect(listed.first?["reason"] as? String == "rejected", "the sender's own x-death-reason is not the reason")
        let shown = try await cli.run(["failed", "show", id])
        #expect(shown.stdout.contains("bytes more (--json has them all)") && shown.stdout.utf8.count < 70_000,
                "a 100 kB body is cut off at 64 KiB")
        await w.stop()
    }

    /// Events stay the booking handler's, retry messages the pass sender's;
    /// a retried event and an operator retry of a failed pass go on in
    /// their message's trace with a span id of their own; discard keeps an audit copy that purge-archived removes by age; the
    /// exit statuses of the passes commands.
    @Test func eventsAndPassRetriesKeepTheirSenderDiscardArchives() async throws {
        let w = try await World()
        let handlerUser = try await w.connection("booking-handler")
        var event = AMQPProperties.persistentJSON(type: "booking.confirmed", messageID: "ev-1")
        event.userID = "booking-handler"
        let eventTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        event.headers["traceparent"] = .string(eventTrace)
        event.headers["tracestate"] = .string("vendor=kept")
        try await handlerUser.publish(Array(#"{"booking": {"id": "b-1", "version": 2}}"#.utf8), exchange: Topology.eventsExchange,
                                      routingKey: "booking.confirmed", properties: event, mandatory: true)
        try await w.deadLetter(from: Topology.passSenderEventsQueue, count: 1)
        _ = try await w.admin.purgeQueue(Topology.projectorEventsQueue)

        // The pass sender's retry queues, as it declares them at start.
        try await w.admin.declare(PassQueues.ownQueues(delays: []))
        let passSender = try await w.connection("pass-sender")
        let retryBody = #"{"schemaVersion": 1, "kind": "backoff", "bookingId": "b-1", "version": 2, "passes": []}"#
        var retry = AMQPProperties.persistentJSON(type: PassQueues.retryMessageType, messageID: "r-1")
        retry.userID = "pass-sender"
        try await passSender.publish(Array(retryBody.utf8), routingKey: PassQueues.retry, properties: retry, mandatory: true)
        try await w.deadLetter(from: PassQueues.retry, count: 1)

        // A pass the pass sender gave up on, in passes.failed.
        let now = ContractFormat.timestamp(Date())
        let failedPass = FailedPass(bookingId: "b-1", version: 2, attendeeIndex: 0, name: "Ada", email: "ada@example.com",
                                    phone: "+491701234567", attempts: 5, firstFailureAt: now, lastFailureAt: now,
                                    lastErrorCode: nil, lastErrorText: "gateway down", room: "Berlin", date: "2026-11-24",
                                    start: "09:00", end: "10:00", title: "T")
        var failedProperties = AMQPProperties.persistentJSON(type: Topology.passesFailedQueue, messageID: failedPass.passKey)
        failedProperties.userID = "pass-sender"
        let passTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        failedProperties.headers["traceparent"] = .string(passTrace)
        try await passSender.publish([UInt8](try ContractJSON.encode(failedPass)), routingKey: Topology.passesFailedQueue,
                                     properties: failedProperties, mandatory: true)

        let cli = w.cli
        let listed = try await cli.run(["failed", "list", "--group-by", "queue"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("failed messages: 3"), "\(listed.stdout)")
        for queue in ["pass-sender.events.dead", "pass-sender.retry.dead", "passes.failed"] {
            #expect(listed.stdout.contains("1      queue:\(queue)"), "\(listed.stdout)")
        }
        let byDay = try json(try await cli.run(["failed", "list", "--group-by", "day", "--json"]))
        // All failed within this test: today's UTC day (or yesterday's, run across midnight).
        let days = try #require(byDay["groups"] as? [[String: Any]])
        #expect(days.compactMap { $0["count"] as? Int }.reduce(0, +) == 3)
        #expect(days.contains { $0["group"] as? String == "day:\(now.prefix(10))" }, "\(byDay)")

        // passes.failed through the same console: back to the pass sender
        // as an operator retry (attempts reset), as `passes failed retry` does.
        let pass = try await cli.run(["failed", "retry", "--queue", "passes.failed", "--group", "reason:pass failed: gateway down"])
        #expect(pass.status == 0, "\(pass.stderr)")
        let operatorRetry = try #require(try await w.admin.get(queue: PassQueues.retry))
        #expect(operatorRetry.properties.userID == "bookingctl")
        let message = try ContractJSON.decode(PassRetryMessage.self, from: operatorRetry.body)
        #expect(message.kind == .operator && message.bookingId == "b-1" && message.passes.map(\.attempts) == [0])
        Self.expectChild(operatorRetry.properties.headers["traceparent"]?.stringValue, of: passTrace)
        try await operatorRetry.ack()

        let events = try await cli.run(["failed", "retry", "--queue", "pass-sender.events.dead", "--all"])
        #expect(events.status == 0, "\(events.stderr)")
        let back = try #require(try await w.admin.get(queue: Topology.passSenderEventsQueue))
        #expect(back.properties.userID == "booking-handler", "the event is still the booking handler's")
        #expect(back.routingKey == "booking.confirmed" && back.properties.messageID == "ev-1")
        // A send of its own in the event's trace: same trace id and flags,
        // a new span id; the tracestate as it was.
        Self.expectChild(back.properties.headers["traceparent"]?.stringValue, of: eventTrace)
        #expect(back.properties.headers["tracestate"]?.stringValue == "vendor=kept")
        try await back.ack()
        let projector = try #require(try await w.admin.get(queue: Topology.projectorEventsQueue),
                                     "republished to booking.events: every subscriber sees it (and drops it by version)")
        try await projector.ack()

        let sweep = try await cli.run(["failed", "retry", "--queue", "pass-sender.retry.dead", "--all", "--json"])
        #expect(sweep.status == 0, "\(sweep.stderr)")
        let swept = try #require(try await w.admin.get(queue: PassQueues.retry))
        #expect(swept.properties.userID == "pass-sender" && swept.properties.messageID == "r-1")
        #expect(swept.body == Array(retryBody.utf8))
        // Retried again after another failure: the same message, one more retry.
        try await swept.reject(requeue: false)
        _ = try await withTimeout(60, "dead again") { [tap = w.tap] in try await tap.take(1) }

        // Discard it with a reason: gone, an audit copy in the archive.
        let list = try messages(try await cli.run(["failed", "list", "--queue", "pass-sender.retry.dead", "--json"]))
        let id = try #require(list.first?["id"] as? String)
        #expect((list.first?["headers"] as? [String: Any])?["x-retry-count"] as? Int == 1)
        let missingReason = try await cli.run(["failed", "discard", id])
        #expect(missingReason.status == 64)
        let discarded = try await cli.run(["failed", "discard", id, "--reason", "bug 123, passes re-sent by hand"])
        #expect(discarded.status == 0, "\(discarded.stderr)")
        let none = try await cli.run(["failed", "discard", id, "--reason", "again"])
        #expect(none.status == 3)
        let unknownQueue = try await cli.run(["failed", "list", "--queue", "no.such.dead"])
        #expect(unknownQueue.status == 64)
        let everything = try json(try await cli.run(["failed", "list", "--json"]))
        #expect(everything["count"] as? Int == 0, "\(everything)")

        let archive = try await FailedConsole(connection: w.admin).archived()
        #expect(archive.count == 1)
        #expect(archive.first?.properties.headers["x-archive-reason"]?.stringValue == "bug 123, passes re-sent by hand")
        #expect(archive.first?.properties.headers["x-archived-from"]?.stringValue == "pass-sender.retry.dead")
        #expect(archive.first?.properties.headers["x-archived-id"]?.stringValue == id)
        #expect(archive.first?.properties.headers["x-archived-user-id"]?.stringValue == "pass-sender")
        let young = try await cli.run(["failed", "purge-archived", "--older-than", "1h"])
        #expect(young.status == 0 && young.stdout.contains("purged 0"), "\(young.stdout) \(young.stderr)")
        let old = try await cli.run(["failed", "purge-archived", "--older-than", "0s", "--json"])
        #expect(old.status == 0, "\(old.stderr)")
        #expect(try json(old)["purged"] as? Int == 1)
        #expect(try await w.admin.queueInfo(FailedQueues.archive).messageCount == 0)
        await w.stop()
    }

    /// A purge removes only the copies archived before the cut-off: a young
    /// copy, one whose `x-archived-at` cannot be read and one without it
    /// stay, in their order, whatever lies between the old ones.
    @Test func purgeRemovesOnlyOldCopiesAndKeepsUnreadableOnes() async throws {
        let w = try await World()
        let now = Date()
        let copies: [(id: String, archivedAt: String?)] = [
            ("old-1", ContractFormat.timestamp(now - 2 * 3600)), ("young", ContractFormat.timestamp(now - 60)),
            ("unreadable", "yesterday"), ("unstamped", nil), ("old-2", ContractFormat.timestamp(now - 3 * 3600)),
        ]
        for copy in copies {
            let headers: AMQPTable = copy.archivedAt.map { ["x-archived-at": .string($0)] } ?? [:]
            try await w.admin.publish(Array(#"{"copy":"\#(copy.id)"}"#.utf8), exchange: Topology.defaultExchange,
                                      routingKey: FailedQueues.archive,
                                      properties: .persistentJSON(type: "booking.create", messageID: copy.id, headers: headers),
                                      mandatory: true)
        }
        let purged = try await w.cli.run(["failed", "purge-archived", "--older-than", "1h", "--json"])
        #expect(purged.status == 0, "\(purged.stdout) \(purged.stderr)")
        #expect(try json(purged)["purged"] as? Int == 2, "\(purged.stdout)")
        let left = try await FailedConsole(connection: w.admin).archived()
        #expect(left.map { $0.properties.messageID } == ["young", "unreadable", "unstamped"])
        await w.stop()
    }

    /// `retried` is a `traceparent` in the trace of `original` (same trace
    /// id and flags) with a span id of its own.
    static func expectChild(_ retried: String?, of original: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let parts = (retried ?? "").split(separator: "-"), originalParts = original.split(separator: "-")
        #expect(parts.count == 4 && parts[0] == "00" && parts[1] == originalParts[1] && parts[3] == originalParts[3]
                && parts[2].count == 16 && parts[2] != originalParts[2] && parts[2] != "0000000000000000",
                "retried with \(retried ?? "no traceparent"), the original was \(original)", sourceLocation: sourceLocation)
    }

    /// Who may do what around the console, with the shipped users: an
    /// outside system can neither run it nor send as somebody else; the
    /// operators' user may send as others, but only where its permissions
    /// reach (booking and room events, not the pass sender's).
    @Test func onlyTheOperatorsUserImpersonatesAndOnlyWhereItMayWrite() async throws {
        let w = try await World()
        let refused = try await CLIRunner(url: w.vhost.url("partner-a")).run(["failed", "list"])
        #expect(refused.status == 1, "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stderr.contains(FailedQueues.lock), "\(refused.stderr)")

        let partner = try await w.connection("partner-a")
        var forged = AMQPProperties.persistentJSON(type: "booking.create", messageID: "forged")
        forged.userID = "partner-b"
        await #expect(throws: AMQPError.self, "partner-a may not send as partner-b") {
            try await partner.publish(Array("{}".utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                      properties: forged, mandatory: true)
        }
        let operators = try await w.connection("bookingctl")
        var asHandler = AMQPProperties.persistentJSON(type: "booking.cancelled", messageID: "ok")
        asHandler.userID = "booking-handler"
        try await operators.publish(Array("{}".utf8), exchange: Topology.eventsExchange, routingKey: "booking.cancelled",
                                    properties: asHandler, mandatory: true)
        var asPassSender = AMQPProperties.persistentJSON(type: "pass.delivered", messageID: "no")
        asPassSender.userID = "pass-sender"
        await #expect(throws: AMQPError.self, "the operators' topic permission on booking.events stops at room.* and booking.*") {
            try await operators.publish(Array("{}".utf8), exchange: Topology.eventsExchange, routingKey: "pass.delivered",
                                        properties: asPassSender, mandatory: false)
        }
        await w.stop()
    }

    /// Thousands of dead letters, listed again and again by two operators at
    /// once while a service keeps adding more: every listing is the queue in
    /// its order with nothing missing, and the queue afterwards is exactly
    /// what was published, in order. Then a discard of every seventh keeps
    /// the order of the rest.
    @Test func listingNeverLosesOrReordersWhileDeadLettersArrive() async throws {
        let url = try TestBroker.isolatedURL("failed-order")
        defer { TestBroker.deleteVhost(url.vhost) }
        let queue = Topology.deadLetterQueue(for: Topology.availabilityQueriesQueue)
        func connect(_ name: String) async throws -> AMQPConnection {
            try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: name), logger: testLogger(name))
        }
        let producer = try await connect("producer")
        try await producer.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        func publish(_ range: Range<Int>) async throws {
            let batch = range.map { n in
                OutgoingMessage(body: Array("\(n)".utf8), routingKey: queue,
                                properties: AMQPProperties.persistentJSON(type: "availability.query", messageID: "q-\(n)"))
            }
            for error in await producer.publish(batch: batch) { if let error { throw error } }
        }
        let initial = 3000, total = 5000
        try await publish(0..<initial)

        let operators = [try await connect("operator-1"), try await connect("operator-2")]
        let consoles = operators.map { FailedConsole(connection: $0) }
        let adding = Task {
            for start in stride(from: initial, to: total, by: 100) { try await publish(start..<min(start + 100, total)) }
        }
        let listings = try await withThrowingTaskGroup(of: [[Int]].self) { group in
            for console in consoles {
                group.addTask {
                    var seen: [[Int]] = []
                    for _ in 0..<3 {
                        try await console.prepare(lockTimeout: 120)
                        let listing = try await console.list([queue])
                        try await console.finish()
                        seen.append(listing.messages.map { Int(String(decoding: $0.body, as: UTF8.self)) ?? -1 })
                    }
                    return seen
                }
            }
            var all: [[Int]] = []
            for try await seen in group { all += seen }
            return all
        }
        try await adding.value
        #expect(listings.count == 6)
        for (index, numbers) in listings.enumerated() {
            #expect(numbers.count >= initial, "listing \(index) has every message published before it")
            #expect(numbers == Array(0..<numbers.count), "listing \(index): in order, nothing missing")
        }
        let final = try await consoles[0].list([queue])
        #expect(final.messages.map { String(decoding: $0.body, as: UTF8.self) } == (0..<total).map(String.init))
        let ids = final.messages.map(\.id)
        #expect(Set(ids).count == total, "every message its own id")
        #expect(try await consoles[1].list([queue]).messages.map(\.id) == ids, "ids stable across listings and connections")

        let removed = try await consoles[0].discard([queue], reason: "test", by: "test") { m in
            (Int(String(decoding: m.body, as: UTF8.self)) ?? 0) % 7 == 0
        }
        #expect(removed.done.count == (0..<total).filter { $0 % 7 == 0 }.count && removed.failed.isEmpty)
        let rest = try await consoles[1].list([queue]).messages.map { Int(String(decoding: $0.body, as: UTF8.self)) ?? -1 }
        #expect(rest == (0..<total).filter { $0 % 7 != 0 })
        let archived = try await consoles[0].archived().map { Int(String(decoding: $0.body, as: UTF8.self)) ?? -1 }
        #expect(archived == (0..<total).filter { $0 % 7 == 0 }, "audit copies in the order they were discarded")
        for c in operators { await c.close() }
        await producer.close()
    }

    /// Every queue the console reads has an alert unit test and a runbook
    /// line (promtool itself runs in scripts/container-test.sh).
    @Test func alertsAndRunbookCoverEveryFailedQueue() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let runbook = try String(contentsOf: root.appendingPathComponent("docs/operations.md"), encoding: .utf8)
        let alertTests = try String(contentsOf: root.appendingPathComponent("deploy/prometheus/alerts.test.yml"), encoding: .utf8)
        for queue in FailedQueues.all {
            #expect(runbook.contains("| `\(queue)` |"), "docs/operations.md has a runbook line for \(queue)")
            #expect(alertTests.contains("queue=\"\(queue)\""), "alerts.test.yml tests an alert on \(queue)")
        }
        #expect(FailedQueues.all.contains("booking.queries.dead") && FailedQueues.all.contains("pass-sender.retry.dead"))
    }
}
