import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// `kill -9` of the booking-handler process in the middle of a stream of
/// commands, then a restart: no command is lost, no booking is duplicated,
/// and every event is published for every booking version.
@Suite("Booking handler crash recovery")
struct CrashRecoveryTests {
    static var binary: URL { ServiceProcess.binary("booking-handler") }

    /// `environment` adds to or overrides the handler's settings (two
    /// processes on one machine need their own `HTTP_PORT`).
    /// `asNobody` runs it as user `nobody` (setpriv), so that iptables can
    /// tell its packets from everyone else's.
    /// `namespace` runs it inside that network namespace.
    static func launch(url: AMQPURL, dataDirectory: String, log: URL, environment extra: [String: String] = [:],
                       asNobody: Bool = false, namespace: NetworkNamespace? = nil) throws -> Process {
        let wrapper = namespace.map { $0.wrap(binary.path) }
            ?? (asNobody ? ("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", binary.path]) : nil)
        let environment = ["AMQP_URL": url.urlStringWithCredentials, "DATA_DIR": dataDirectory,
                           "ROOMS_FILE": HandlerHarness.roomsFile, "LOG_LEVEL": "warning"]
        return try ServiceProcess.launch(binary, environment: environment.merging(extra) { _, new in new }, log: log,
                                         wrapper: wrapper)
    }

    @Test func killDashNineMidStreamLosesNothingAndDuplicatesNothing() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("crash")
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("crash-data")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let log = URL(fileURLWithPath: dataDirectory).appendingPathComponent("handler.log")

        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "crash-client"),
                                                      logger: testLogger("crash"))
        // Replies may only go to a queue named after the sender (v1.1).
        let replies = "\(url.user).\(uniqueName("replies"))", events = uniqueName("events")
        try await client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]) + [
            .queue(QueueDeclaration(replies, type: .classic)),
            .queue(QueueDeclaration(events, type: .classic)),
            .binding(QueueBinding(queue: events, exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])

        // 480 commands for 480 distinct free slots, published (confirmed) up front.
        var commands: [(id: String, json: String)] = []
        for room in ["Berlin", "Hamburg", "München", "Quiet Room"] {
            for day in 1...10 {
                for hour in 7..<19 {
                    let json = createJSON(room: room, date: TestDates.berlinDate(daysFromNow: day),
                                          start: String(format: "%02d:00", hour), end: String(format: "%02d:00", hour + 1))
                    commands.append(("cmd-\(commands.count)", json))
                }
            }
        }
        for command in commands {
            try await client.publish(Array(command.json.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                     properties: .persistentJSON(type: "booking.create", messageID: command.id, replyTo: replies,
                                                                 userID: url.user),
                                     mandatory: true)
        }

        var handler = try Self.launch(url: url, dataDirectory: dataDirectory, log: log)
        defer { if handler.isRunning { handler.terminate() } }

        // Collect replies in the background; signal at 60 and at "all answered".
        let expected = Set(commands.map(\.id))
        let answered = LockedBox(Set<String>())
        let failures = LockedBox([String]())
        let (milestones, milestone) = AsyncStream<Int>.makeStream()
        let replyConsumer = try await client.consume(queue: replies, prefetch: 500)
        let collecting = Task {
            for try await reply in replyConsumer {
                let id = reply.properties.correlationID ?? ""
                if let decoded = try? ContractJSON.decode(CommandReply.self, from: reply.body), !decoded.isOK {
                    failures.withLock { $0.append("\(id): \(decoded)") }
                }
                try await reply.ack()
                // A reply can come twice (redelivered command answered from
                // the inbox); only a new id moves the count.
                let (isNew, count) = answered.withLock { (set: inout Set<String>) -> (Bool, Int) in
                    (set.insert(id).inserted, set.count)
                }
                if isNew && count == 60 { milestone.yield(60) }
                if isNew && count == expected.count { milestone.yield(count); milestone.finish() }
            }
        }
        // AsyncStream is Sendable and resumable: each `first` takes the next milestone.
        let first = try await withTimeout(60, "first 60 replies") { await milestones.first { _ in true } }
        #expect(first == 60)
        kill(handler.processIdentifier, SIGKILL)
        let answeredAtKill = answered.withLock { $0.count }
        #expect(answeredAtKill < expected.count, "the kill must land mid-stream")
        handler.waitUntilExit()
        #expect(handler.terminationReason == .uncaughtSignal)

        handler = try Self.launch(url: url, dataDirectory: dataDirectory, log: log)
        let all = try await withTimeout(120, "every command answered after the restart") { await milestones.first { _ in true } }
        #expect(all == expected.count)
        #expect(answered.withLock { $0 } == expected)
        #expect(failures.withLock { $0 }.isEmpty)

        // Every booking has its created and confirmed event (version 1);
        // repeats are allowed (consumers drop them by version), gaps are not.
        let eventConsumer = try await client.consume(queue: events, prefetch: 1000)
        let total = commands.count
        let (seen, eventCount) = try await withTimeout(60, "all events") { () async throws -> ([String: Set<String>], Int) in
            var seen: [String: Set<String>] = [:]
            var count = 0
            for try await event in eventConsumer {
                let e = try ContractJSON.decode(BookingEvent.self, from: event.body)
                #expect(e.booking.version == 1)
                seen[e.booking.id, default: []].insert(event.routingKey)
                count += 1
                try await event.ack()
                if seen.count == total && seen.values.allSatisfy({ $0.count == 2 }) { break }
            }
            return (seen, count)
        }
        #expect(seen.count == commands.count, "one booking per command, none duplicated")
        #expect(seen.values.allSatisfy { $0 == ["booking.created", "booking.confirmed"] })
        print("crash test: killed after \(answeredAtKill) replies; \(eventCount) booking events for \(commands.count) bookings (\(eventCount - 2 * commands.count) repeats)")

        handler.terminate()
        handler.waitUntilExit()
        #expect(handler.terminationStatus == 0)
        eventConsumer.stop()
        replyConsumer.stop()
        _ = await collecting.result
        await client.close()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}
