import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import GRDB
import Testing
import TestSupport

/// The durable timers across `kill -9` and with two handler processes on one
/// database: every due transition is committed exactly once, the missed ones
/// in due order, and every committed one is published.
@Suite("Booking timers across kill -9, two processes")
struct TimerCrashTests {
    @Test func twoProcessesAndAKillApplyEveryMissedTransitionOnceInDueOrder() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("timers")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("timer-data")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }

        // The downtime: bookings made by a handler whose clock reads ten days
        // ago, for the days after that — all of them in the past by now, none
        // of their transitions applied.
        let back: TimeInterval = 10 * 86_400
        let maker = try await HandlerHarness.start(url: url, dataDirectory: dataDirectory, administrators: ["guest"],
                                                   now: { Date().addingTimeInterval(-back) })
        let events = uniqueName("timer-events")
        try await maker.client.declare([
            .queue(QueueDeclaration(events, type: .classic)),
            .binding(QueueBinding(queue: events, exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])
        for room in [#"{"name": "Desk", "capacity": 4, "autoReleaseMinutes": 15}"#,
                     #"{"name": "Board", "capacity": 4, "requiresApproval": true}"#] {
            #expect(try await maker.send("room.register", json: room, userID: "guest").error == nil)
        }
        var expected: [String: [String]] = [:]  // booking id → its timed events
        for day in 1...3 {
            let date = localDate(daysFromNow: day - 10)
            for hour in 7..<19 {
                let (start, end) = (String(format: "%02d:00", hour), String(format: "%02d:45", hour))
                for (room, timed) in [("Berlin", ["booking.started v2", "booking.completed v3"]),
                                      ("Hamburg", ["booking.started v2", "booking.completed v3"]),
                                      ("Desk", ["booking.cancelled v2"]), ("Board", ["booking.rejected v2"])] {
                    let reply = try await maker.send("booking.create", json: createJSON(room: room, date: date, start: start, end: end))
                    expected[try #require(reply.booking, "\(reply)").id] = timed
                }
            }
        }
        let total = expected.values.map(\.count).reduce(0, +)
        await maker.stop()

        // Two handler processes on the same database, the real clock; one is
        // killed once the first transitions are out.
        let log = URL(fileURLWithPath: dataDirectory).appendingPathComponent("handlers.log")
        let a = try CrashRecoveryTests.launch(url: url, dataDirectory: dataDirectory, log: log,
                                              environment: ["HTTP_PORT": "\(try freeTCPPort())"])
        let b = try CrashRecoveryTests.launch(url: url, dataDirectory: dataDirectory, log: log,
                                              environment: ["HTTP_PORT": "\(try freeTCPPort())"])
        defer { for p in [a, b] where p.isRunning { p.terminate() } }
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "timer-client"),
                                                      logger: testLogger("timer-client"))
        let consumer = try await client.consume(queue: events, prefetch: 1000)
        let pid = a.processIdentifier
        // id → "type vN" seen; "id vN" → event ids; how many were out at the kill.
        let (seen, byVersion, killedAfter) = try await withTimeout(240, "every timed event") {
            var seen: [String: Set<String>] = [:]
            var byVersion: [String: Set<String>] = [:]
            var killedAfter = 0
            var count = 0
            for try await message in consumer {
                try await message.ack()
                guard !["booking.created", "booking.confirmed"].contains(message.routingKey) else { continue }
                let event = try ContractJSON.decode(BookingEvent.self, from: message.body)
                byVersion["\(event.booking.id) v\(event.booking.version)", default: []].insert(event.eventId)
                if seen[event.booking.id, default: []].insert("\(message.routingKey) v\(event.booking.version)").inserted {
                    count += 1
                }
                if killedAfter == 0, count >= 20 {
                    killedAfter = count
                    kill(pid, SIGKILL)
                }
                if count >= total { break }
            }
            return (seen, byVersion, killedAfter)
        }
        a.waitUntilExit()
        #expect(a.terminationReason == .uncaughtSignal,
                "handler A ended by itself (status \(a.terminationStatus)): \((try? String(contentsOf: log, encoding: .utf8))?.suffix(4000) ?? "no log")")
        #expect(killedAfter > 0 && killedAfter < total, "the kill must land mid-stream")
        #expect(seen.mapValues { Set($0) } == expected.mapValues { Set($0) }, "each booking exactly its transitions")
        #expect(byVersion.values.allSatisfy { $0.count == 1 },
                "one event per booking version: repeats on the wire carry the same event id, never a second commit")

        // Committed in due order: the outbox keeps commit order.
        b.terminate()
        b.waitUntilExit()
        #expect(b.terminationStatus == 0, "\((try? String(contentsOf: log, encoding: .utf8))?.suffix(4000) ?? "no log")")
        let queue = try DatabaseQueue(path: dataDirectory + "/booking-handler.sqlite")
        let dues = try await queue.read { db in
            try Row.fetchAll(db, sql: """
                SELECT routingKey, body FROM outbox
                WHERE routingKey IN ('booking.started', 'booking.completed', 'booking.cancelled', 'booking.rejected')
                ORDER BY id
                """).map { row -> Date in
                let event = try ContractJSON.decode(BookingEvent.self, from: row["body"] as Data)
                let start = ContractFormat.parseTimestamp(event.booking.startsAt)!
                switch row["routingKey"] as String {
                case "booking.completed": return ContractFormat.parseTimestamp(event.booking.endsAt)!
                case "booking.cancelled": return start.addingTimeInterval(15 * 60)
                default: return start
                }
            }
        }
        #expect(dues.count == total)
        #expect(dues == dues.sorted(), "transitions committed in due order")
        let statuses = try await queue.read { db in
            try String.fetchAll(db, sql: "SELECT status FROM booking")
        }
        #expect(Set(statuses) == ["completed", "cancelled", "rejected"])
        print("timer crash test: \(total) transitions by two processes, one killed after \(killedAfter)")
        consumer.stop()
        await client.close()
    }
}
