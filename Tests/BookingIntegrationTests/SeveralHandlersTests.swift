import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// Booking-handler processes on one PostgreSQL database (as several hosts
/// would run them), a stream of commands in which every slot is asked for
/// twice so that instances race for it, and a fault in the middle of the
/// stream: `kill -9` of one of two handlers, a PostgreSQL restart, the stop
/// of the RabbitMQ node the handler is connected to (and that leads its
/// queue). Every time: every command answered, every slot booked exactly
/// once, every booking's created and confirmed events published. Each
/// prints the figures docs/high-availability.md reports (lost, duplicated, time to recover).
@Suite("Several booking handlers on PostgreSQL", .serialized)
struct SeveralHandlersTests {
    @Test func killDashNineOfOneOfTwoHandlersLosesNothingAndBooksNothingTwice() async throws {
        let url = try TestBroker.isolatedURL("ha")
        defer { TestBroker.deleteVhost(url.vhost) }
        try await HandlerStream.run("kill -9 of one of two handlers", client: AMQPConfiguration(url: url, connectionName: "ha-client"),
                                    handlerAMQPURL: url.urlStringWithCredentials, handlers: 2) { handlers in
            kill(handlers[0].processIdentifier, SIGKILL)
            handlers[0].waitUntilExit()
            #expect(handlers[0].terminationReason == .uncaughtSignal)
        }
    }

    @Test func aPostgreSQLRestartMidStreamLosesNothingAndBooksNothingTwice() async throws {
        let url = try TestBroker.isolatedURL("pgrestart")
        defer { TestBroker.deleteVhost(url.vhost) }
        try await HandlerStream.run("PostgreSQL restart", client: AMQPConfiguration(url: url, connectionName: "pg-client"),
                                    handlerAMQPURL: url.urlStringWithCredentials, handlers: 2) { _ in
            // Fast shutdown: open transactions are cut off, connections dropped.
            try TestPostgres.control("stop")
            try TestPostgres.control("start")
        }
    }

    /// One of two handlers cut off from the broker and PostgreSQL for 30 s
    /// (it runs as `nobody`; iptables drops that user's packets on
    /// loopback) and let back: its deliveries go to the other when the
    /// broker misses its heartbeats, its open transaction — holding the
    /// write lock — is ended by the server after 15 s idle, and once back it
    /// reconnects and answers what it still has, from the inbox if its
    /// commit had happened.
    @Test func aHandlerCutOffFromBrokerAndDatabaseLosesNothing() async throws {
        try #require(getuid() == 0, "iptables and setpriv need root (CI runs as root)")
        let url = try TestBroker.isolatedURL("partition")
        defer { TestBroker.deleteVhost(url.vhost) }
        let rule = ["OUTPUT", "-o", "lo", "-m", "owner", "--uid-owner", "65534", "-j", "DROP"]
        defer { _ = try? Command.run("/usr/sbin/iptables", ["-D"] + rule) }
        try await HandlerStream.run("network partition of one of two handlers for 30 s",
                                    client: AMQPConfiguration(url: url, connectionName: "partition-client"),
                                    handlerAMQPURL: url.urlStringWithCredentials, handlers: 2, asNobody: [1], days: 20) { _ in
            try Command.run("/usr/sbin/iptables", ["-A"] + rule)
            // The fault's length, not a wait for an event.
            try await Task.sleep(for: .seconds(30))
            try Command.run("/usr/sbin/iptables", ["-D"] + rule)
        }
    }

    /// The same partition with one of two handlers in a network namespace
    /// of its own (its broker and PostgreSQL reached over a veth link and a
    /// forwarder, as another host would): the link goes down for 30 s.
    @Test func aHandlerInItsOwnNetworkNamespacePartitionedLosesNothing() async throws {
        try #require(getuid() == 0, "network namespaces need root (CI runs as root)")
        let url = try TestBroker.isolatedURL("netns")
        defer { TestBroker.deleteVhost(url.vhost) }
        let postgresPort = try #require(URLComponents(string: try TestPostgres.databaseURL())?.port)
        let namespace = try NetworkNamespace(ports: [url.port, postgresPort])
        defer { namespace.remove() }
        try await HandlerStream.run("partition of a handler in its own network namespace for 30 s",
                                    client: AMQPConfiguration(url: url, connectionName: "netns-client"),
                                    handlerAMQPURL: url.urlStringWithCredentials, handlers: 2, namespaces: [1: namespace],
                                    days: 20) { _ in
            // Both consume (the one inside came through its link), or the
            // partition would cut off nothing. Under load the one inside
            // may still be starting when the other has answered 60: wait
            // for its consumer (failing after 60 s), then cut.
            let observer = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "netns-observer"),
                                                            logger: testLogger("netns"))
            try await withTimeout(60, "both handlers consume before the partition") {
                while try await observer.queueInfo(Topology.handlerCommandsQueue).consumerCount < 2 {
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            await observer.close()
            try namespace.setLink(up: false)
            // The fault's length, not a wait for an event.
            try await Task.sleep(for: .seconds(30))
            try namespace.setLink(up: true)
        }
    }

    /// Forty updates of one booking at once, through two handlers on one
    /// database: the instances take turns writing it (the row lock), and
    /// its events must reach `booking.events` in version order, whichever
    /// instance committed them (each instance's relay publishes on its own;
    /// without the outbox's order keys the second instance's event could
    /// leave before the first's).
    @Test func updatesOfOneBookingThroughTwoHandlersArePublishedInVersionOrder() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("order")
        defer { TestBroker.deleteVhost(url.vhost) }
        let databaseURL = try TestPostgres.url(schemaPrefix: "order")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("order-data"))
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        let log = base.appendingPathComponent("handlers.log")
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "order-client"),
                                                      logger: testLogger("order"))
        let user = url.user
        let replies = "\(user).\(uniqueName("replies"))", events = uniqueName("events")
        try await client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]) + [
            .queue(QueueDeclaration(replies)), .queue(QueueDeclaration(events)),
            .binding(QueueBinding(queue: events, exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])
        let handlers = try (0..<2).map { i in
            let directory = base.appendingPathComponent("handler-\(i)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return try CrashRecoveryTests.launch(url: url, dataDirectory: directory, log: log,
                                                 environment: ["DATABASE_URL": databaseURL, "HTTP_PORT": "0",
                                                               "AMQP_URL": url.urlStringWithCredentials])
        }
        defer { for handler in handlers where handler.isRunning { handler.terminate() } }
        try await withTimeout(60, "both handlers consume") {
            while try await client.queueInfo(Topology.handlerCommandsQueue).consumerCount < 2 {
                try await Task.sleep(for: .milliseconds(100))
            }
        }

        let replyConsumer = try await client.consume(queue: replies, prefetch: 100)
        func send(_ type: String, _ json: String, id: String) async throws {
            try await client.publish(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type,
                                     properties: .persistentJSON(type: type, messageID: id, replyTo: replies, userID: user),
                                     mandatory: true)
        }
        try await send("booking.create", createJSON(date: TestDates.berlinDate(daysFromNow: 3)), id: uniqueName("create"))
        let created = try await withTimeout(60, "the create's reply") { () async throws -> Booking? in
            for try await reply in replyConsumer {
                try await reply.ack()
                return try ContractJSON.decode(CommandReply.self, from: reply.body).booking
            }
            return nil
        }
        let booking = try #require(created)
        let updates = 40
        let started = ContinuousClock.now
        for n in 1...updates {
            try await send("booking.update", #"{"bookingId": "\#(booking.id)", "title": "Take \#(n)"}"#, id: uniqueName("update"))
        }
        let answered = try await withTimeout(120, "every update answered") { () async throws -> Int in
            var count = 0
            for try await reply in replyConsumer {
                try await reply.ack()
                #expect(try ContractJSON.decode(CommandReply.self, from: reply.body).booking != nil)
                count += 1
                if count == updates { break }
            }
            return count
        }
        #expect(answered == updates)

        // Arrival order on the queue is publish order (one queue, one
        // consumer); repeats (at-least-once) may come, never an older
        // version after a newer one.
        let eventConsumer = try await client.consume(queue: events, prefetch: 200)
        let versions = try await withTimeout(90, "every update's event") { () async throws -> [Int] in
            var versions: [Int] = []
            for try await event in eventConsumer {
                try await event.ack()
                let e = try ContractJSON.decode(BookingEvent.self, from: event.body)
                if event.routingKey == "booking.updated" { versions.append(e.booking.version) }
                if Set(versions).count == updates { break }
            }
            return versions
        }
        print("order: \(updates) updates through two handlers, every event out \(started.duration(to: .now)) after the first was sent")
        let backwards = zip(versions, versions.dropFirst()).filter { $0 > $1 }
        #expect(backwards.isEmpty, "versions in arrival order: \(versions)")
        #expect(Set(versions) == Set(2...(updates + 1)))
        for handler in handlers {
            handler.terminate()
            handler.waitUntilExit()
            #expect(handler.terminationStatus == 0)
        }
        let pending = try TestPostgres.control("psql", ["-At", "-c", "SET search_path TO \(try #require(URLComponents(string: databaseURL)?.queryItems?.first { $0.name == "schema" }?.value))",
                                                          "-c", "SELECT count(*) FROM outbox WHERE publishedAt IS NULL"])
        #expect(pending.split(separator: "\n").last == "0", "every event marked published once the handlers stopped")

        eventConsumer.stop()
        replyConsumer.stop()
        await client.close()
        try? FileManager.default.removeItem(at: base)
    }

    /// `AMQP_URL` naming the three nodes; the handler and its queues start
    /// on node 1 (quorum queues: a member on every node), node 1 stops.
    @Test func theStopOfTheBrokerNodeTheHandlerIsOnLosesNothing() async throws {
        let nodes = try TestCluster.nodes()
        let urls = nodes.map(\.url)
        let all = urls.map(\.urlStringWithCredentials).joined(separator: ",")
        var client = AMQPConfiguration(url: urls[1], connectionName: "cluster-client", failoverURLs: [urls[2], urls[0]])
        client.reconnect = Backoff(initial: 0.05, maximum: 0.5)
        // Started again whatever happens: the other cluster tests need it.
        defer { _ = try? nodes[0].ctl(["start_app"]) }
        try await HandlerStream.run("stop of the broker node the handler is on", client: client, handlerAMQPURL: all,
                                    handlers: 1, quorumQueues: true, days: 40) { _ in
            let leader = try nodes[0].ctl(["-q", "list_queues", "name", "leader", "--formatter", "json"])
            #expect(leader.contains(nodes[0].name), "node 1 leads the handler's queues: \(leader)")
            try nodes[0].ctl(["stop_app"])
        }
    }
}

/// One run of the fault scenario (see ``SeveralHandlersTests``).
enum HandlerStream {
    /// Runs a system command, throwing with its output when it fails.
    @discardableResult

    static func run(_ fault: String, client configuration: AMQPConfiguration, handlerAMQPURL: String, handlers count: Int,
                    quorumQueues: Bool = false, asNobody: Set<Int> = [], namespaces: [Int: NetworkNamespace] = [:], days: Int = 10,
                    _ inject: @Sendable ([Process]) async throws -> Void) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let databaseURL = try TestPostgres.url(schemaPrefix: "ha")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("ha-data"))
        // Kept when the run fails: the handlers' log is in it.
        let log = base.appendingPathComponent("handlers.log")
        print("fault '\(fault)': handlers log in \(log.path)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        let client = try await AMQPConnection.connect(configuration: configuration, logger: testLogger("ha"))
        let user = configuration.url.user
        let replies = "\(user).\(uniqueName("replies"))", events = uniqueName("events")
        let type: QueueDeclaration.QueueType = quorumQueues ? .quorum : .classic
        try await client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]) + [
            .queue(QueueDeclaration(replies, type: type)),
            .queue(QueueDeclaration(events, type: type)),
            .binding(QueueBinding(queue: events, exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])

        // 24 slots a day (240 for 10 days), each asked for by two commands.
        var commands: [(id: String, slot: String, json: String)] = []
        for room in ["Berlin", "Hamburg"] {
            for day in 1...days {
                for hour in 7..<19 {
                    let date = TestDates.berlinDate(daysFromNow: day)
                    let json = createJSON(room: room, date: date, start: String(format: "%02d:00", hour), end: String(format: "%02d:00", hour + 1))
                    for copy in 0..<2 { commands.append((uniqueName("ha-\(copy)"), "\(room) \(date) \(hour)", json)) }
                }
            }
        }
        let slotOf = Dictionary(uniqueKeysWithValues: commands.map { ($0.id, $0.slot) })
        for command in commands {
            try await client.publish(Array(command.json.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                     properties: .persistentJSON(type: "booking.create", messageID: command.id, replyTo: replies,
                                                                 userID: user),
                                     mandatory: true)
        }

        let environment = ["DATABASE_URL": databaseURL, "HTTP_PORT": "0", "AMQP_URL": handlerAMQPURL]
        let handlers = try (0..<count).map { i in
            let directory = base.appendingPathComponent("handler-\(i)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            if asNobody.contains(i) {
                try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: base.path)
                try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory)
            }
            var own = environment
            if let namespace = namespaces[i] {
                // The servers are another host to it: their URLs name the
                // host's end of its link (no TLS on this test server).
                own["AMQP_URL"] = namespace.rewrite(handlerAMQPURL)
                own["DATABASE_URL"] = namespace.rewrite(databaseURL) + "&sslmode=disable"
            }
            return try CrashRecoveryTests.launch(url: configuration.url, dataDirectory: directory, log: log, environment: own,
                                                 asNobody: asNobody.contains(i), namespace: namespaces[i])
        }
        defer { for handler in handlers where handler.isRunning { handler.terminate() } }

        let expected = Set(commands.map(\.id))
        let answered = LockedBox([String: CommandReply]())
        let times = LockedBox([ContinuousClock.Instant]())
        let (milestones, milestone) = AsyncStream<Int>.makeStream()
        let replyConsumer = try await client.consume(queue: replies, prefetch: 500)
        let collecting = Task {
            for try await reply in replyConsumer {
                let id = reply.properties.correlationID ?? ""
                let decoded = try ContractJSON.decode(CommandReply.self, from: reply.body)
                try await reply.ack()
                // A command redelivered after the fault is answered again
                // (from the inbox): only a new id moves the count.
                let (isNew, count) = answered.withLock { (all: inout [String: CommandReply]) -> (Bool, Int) in
                    let isNew = all[id] == nil
                    if isNew { all[id] = decoded }
                    return (isNew, all.count)
                }
                if isNew { times.withLock { $0.append(.now) } }
                if isNew && (count == 60 || count == expected.count) { milestone.yield(count) }
                if isNew && count == expected.count { milestone.finish() }
            }
        }
        let sixty = try await withTimeout(60, "first 60 replies") { await milestones.first { _ in true } }
        #expect(sixty == 60)
        let faultAt = ContinuousClock.now
        let answeredAtFault = answered.withLock { $0.count }
        try await inject(handlers)
        let faultDone = ContinuousClock.now
        let answeredDuringFault = answered.withLock { $0.count } - answeredAtFault
        #expect(answeredAtFault < expected.count, "the fault must land mid-stream")

        let done = try await withTimeout(180, "every command answered after the fault") { await milestones.first { _ in true } }
        #expect(done == expected.count)
        let all = answered.withLock { $0 }
        let lost = expected.subtracting(all.keys)
        #expect(lost.isEmpty, "lost: \(lost.sorted().prefix(5))")

        var bookingsPerSlot: [String: Set<String>] = [:]
        for (id, reply) in all {
            switch reply {
            case .booking(let booking): bookingsPerSlot[slotOf[id]!, default: []].insert(booking.id)
            case .error(let error): #expect(error.code == .overlap, "\(id): \(error)")
            default: Issue.record("\(id): unexpected \(reply)")
            }
        }
        let duplicated = bookingsPerSlot.values.filter { $0.count > 1 }.count
        #expect(bookingsPerSlot.count == commands.count / 2, "every slot booked")
        #expect(duplicated == 0, "no slot booked twice")

        // And in the database itself, not only in what the replies said.
        let schema = try #require(URLComponents(string: databaseURL)?.queryItems?.first { $0.name == "schema" }?.value)
        let stored = try TestPostgres.control("psql", ["-At", "-c", "SET search_path TO \(schema)", "-c", """
            SELECT (SELECT count(*) FROM booking) || ' ' ||
                   (SELECT count(*) FROM (SELECT room, startsAt FROM booking GROUP BY 1, 2 HAVING count(*) > 1) twice)
            """]).split(separator: "\n").last.map(String.init) ?? ""
        #expect(stored == "\(commands.count / 2) 0", "bookings stored, slots stored twice: \(stored)")

        let bookingIDs = Set(bookingsPerSlot.values.flatMap { $0 })
        let eventConsumer = try await client.consume(queue: events, prefetch: 1000)
        let (seen, eventCount) = try await withTimeout(90, "all events") { () async throws -> ([String: Set<String>], Int) in
            var seen: [String: Set<String>] = [:]
            var count = 0
            for try await event in eventConsumer {
                let e = try ContractJSON.decode(BookingEvent.self, from: event.body)
                seen[e.booking.id, default: []].insert(event.routingKey)
                count += 1
                try await event.ack()
                if seen.count >= bookingIDs.count && seen.values.allSatisfy({ $0.count == 2 }) { break }
            }
            return (seen, count)
        }
        #expect(Set(seen.keys) == bookingIDs, "events only for the bookings the replies name")
        #expect(seen.values.allSatisfy { $0 == ["booking.created", "booking.confirmed"] })
        // Time to recover: from the end of the fault (the kill, the restart,
        // the node's stop returned) to the first new answer after it; and
        // how long the rest of the stream took.
        // The longest stretch without a new answer from the fault's start
        // on: how long the set stood still (a partitioned lock holder, a
        // redelivery that waits for a missed heartbeat).
        let fromFault = [faultAt] + times.withLock { $0 }.filter { $0 > faultAt }
        let stall = zip(fromFault, fromFault.dropFirst()).map { $0.duration(to: $1) }.max() ?? .zero
        let after = times.withLock { $0 }.filter { $0 > faultDone }
        let first = after.first.map { faultDone.duration(to: $0) } ?? .zero
        let last = after.last.map { faultDone.duration(to: $0) } ?? .zero
        let ms = { (d: Duration) in String(format: "%.0f ms", Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15) }
        print("fault '\(fault)': injected at \(answeredAtFault) of \(commands.count) replies, lasted \(ms(faultAt.duration(to: faultDone))) (\(answeredDuringFault) answered meanwhile); lost \(lost.count), slots booked twice \(duplicated); longest stall \(ms(stall)); first new answer \(ms(first)) after it, the last \(ms(last)); \(eventCount) booking events for \(bookingIDs.count) bookings (\(eventCount - 2 * bookingIDs.count) repeats)")

        for handler in handlers where handler.isRunning {
            handler.terminate()
            handler.waitUntilExit()
            #expect(handler.terminationStatus == 0, "a graceful stop after the fault")
        }
        eventConsumer.stop()
        replyConsumer.stop()
        _ = await collecting.result
        if quorumQueues {
            for queue in [replies, events, Topology.handlerCommandsQueue, Topology.bookingQueriesQueue] {
                _ = try? await client.deleteQueue(queue)
            }
        }
        await client.close()
        try? FileManager.default.removeItem(at: base)
    }
}

struct HarnessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
