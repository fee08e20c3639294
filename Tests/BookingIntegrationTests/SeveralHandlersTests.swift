import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// Two booking-handler processes on one PostgreSQL database and one broker
/// (as two hosts would run them), every slot asked for twice so that the
/// two race for it, and `kill -9` of one of them in the middle: every
/// command is answered, every slot booked exactly once, every booking's
/// events published.
@Suite("Several booking handlers on PostgreSQL")
struct SeveralHandlersTests {
    @Test func killDashNineOfOneOfTwoHandlersLosesNothingAndBooksNothingTwice() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("ha")
        let databaseURL = try TestPostgres.url(schemaPrefix: "ha")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("ha-data"))
        func dataDirectory(_ name: String) throws -> String {
            let path = base.appendingPathComponent(name).path
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            return path
        }
        let log = base.appendingPathComponent("handlers.log")
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "ha-client"),
                                                      logger: testLogger("ha"))
        let replies = "\(url.user).\(uniqueName("replies"))", events = uniqueName("events")
        try await client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]) + [
            .queue(QueueDeclaration(replies, type: .classic)),
            .queue(QueueDeclaration(events, type: .classic)),
            .binding(QueueBinding(queue: events, exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])

        // 240 slots, each asked for by two commands.
        var commands: [(id: String, slot: String, json: String)] = []
        for room in ["Berlin", "Hamburg"] {
            for day in 1...10 {
                for hour in 7..<19 {
                    let date = TestDates.berlinDate(daysFromNow: day)
                    let json = createJSON(room: room, date: date, start: String(format: "%02d:00", hour), end: String(format: "%02d:00", hour + 1))
                    for copy in 0..<2 { commands.append(("ha-\(commands.count)-\(copy)", "\(room) \(date) \(hour)", json)) }
                }
            }
        }
        let slotOf = Dictionary(uniqueKeysWithValues: commands.map { ($0.id, $0.slot) })
        for command in commands {
            try await client.publish(Array(command.json.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                     properties: .persistentJSON(type: "booking.create", messageID: command.id, replyTo: replies,
                                                                 userID: url.user),
                                     mandatory: true)
        }

        let environment = ["DATABASE_URL": databaseURL, "HTTP_PORT": "0"]
        let first = try CrashRecoveryTests.launch(url: url, dataDirectory: try dataDirectory("first"), log: log, environment: environment)
        let second = try CrashRecoveryTests.launch(url: url, dataDirectory: try dataDirectory("second"), log: log, environment: environment)
        defer {
            for handler in [first, second] where handler.isRunning { handler.terminate() }
        }

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
        kill(first.processIdentifier, SIGKILL)
        let killedAt = ContinuousClock.now
        let answeredAtKill = answered.withLock { $0.count }
        #expect(answeredAtKill < expected.count, "the kill must land mid-stream")
        first.waitUntilExit()
        #expect(first.terminationReason == .uncaughtSignal)

        // The survivor takes over what the killed one held (requeued by the
        // broker) and its unpublished events (once their lease ends).
        let done = try await withTimeout(120, "every command answered by the survivor") { await milestones.first { _ in true } }
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

        // Every booking's created and confirmed events, whichever process committed them.
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
        // Time to recover: from the kill to the first new answer after it
        // (the survivor may not even have paused), and to the last.
        let after = times.withLock { $0 }.filter { $0 > killedAt }
        let recovery = after.first.map { killedAt.duration(to: $0) } ?? .zero
        let finished = after.last.map { killedAt.duration(to: $0) } ?? .zero
        print("several handlers: killed one of two after \(answeredAtKill) of \(commands.count) replies; lost \(lost.count), slots booked twice \(duplicated); first answer after the kill \(recovery) later, the last \(finished) later; \(eventCount) booking events for \(bookingIDs.count) bookings (\(eventCount - 2 * bookingIDs.count) repeats)")

        second.terminate()
        second.waitUntilExit()
        #expect(second.terminationStatus == 0)
        eventConsumer.stop()
        replyConsumer.stop()
        _ = await collecting.result
        await client.close()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(at: base)
    }
}
