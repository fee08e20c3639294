import AMQPClient
import BookingContracts
import Foundation
import GRDB
import Testing
import TestSupport

/// Contract v1.2: a hold's expiry is a durable timer like the others. A
/// hold that lapses while its handler lies dead after `kill -9` is
/// cancelled once, by one of two processes started afterwards, within 5 s
/// of them running — and the waiter behind it is promoted in the same
/// transaction.
@Suite("Hold expiry across kill -9")
struct HoldExpiryCrashTests {
    @Test func aHoldThatLapsedDuringDowntimeIsCancelledOnceAndItsWaiterPromoted() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("holdcrash")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("holdcrash-data")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }

        // The hold is made by a handler whose clock reads 50 s ago: a
        // one-minute hold that lapses 10 s from now.
        let maker = try await HandlerHarness.start(url: url, dataDirectory: dataDirectory, now: { Date().addingTimeInterval(-50) })
        let events = uniqueName("hold-events")
        try await maker.client.declare([
            .queue(QueueDeclaration(events, type: .classic)),
            .binding(QueueBinding(queue: events, exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])
        let hold = try #require(try await maker.send("booking.create", json: String(createJSON(start: "09:00", end: "10:00").dropLast())
                                                     + #","hold":{"minutes":1}}"#).bookingValue)
        let waiter = try #require(try await maker.send("booking.create", json: String(createJSON(start: "09:00", end: "10:00").dropLast())
                                                       + #","ifTaken":"waitlist"}"#).bookingValue)
        #expect(hold.status == .held && waiter.status == .waitlisted)
        let expiry = try #require(hold.holdExpiresAt.flatMap(ContractFormat.parseTimestamp))
        await maker.stop()

        // A handler runs, and is killed before the hold lapses.
        let log = URL(fileURLWithPath: dataDirectory).appendingPathComponent("handlers.log")
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "holdcrash-client"),
                                                      logger: testLogger("holdcrash-client"))
        let consumers: @Sendable () async throws -> Int = { try await client.queueInfo(Topology.handlerCommandsQueue).consumerCount }
        let a = try CrashRecoveryTests.launch(url: url, dataDirectory: dataDirectory, log: log, environment: ["HTTP_PORT": "0"])
        defer { if a.isRunning { a.terminate() } }
        try await withTimeout(30, "handler A consumes") { while try await consumers() < 1 { try await Task.sleep(for: .milliseconds(50)) } }
        try #require(Date() < expiry, "the machine was too slow to kill the handler before the hold lapsed")
        kill(a.processIdentifier, SIGKILL)
        a.waitUntilExit()
        #expect(a.terminationReason == .uncaughtSignal)

        // The downtime: the hold lapses while no handler runs.
        let wait = expiry.timeIntervalSinceNow + 1
        if wait > 0 { try await Task.sleep(for: .milliseconds(Int(wait * 1000))) }
        #expect(try await client.queueInfo(Topology.handlerCommandsQueue).consumerCount == 0)

        let launched = Date()
        let b = try CrashRecoveryTests.launch(url: url, dataDirectory: dataDirectory, log: log, environment: ["HTTP_PORT": "0"])
        let c = try CrashRecoveryTests.launch(url: url, dataDirectory: dataDirectory, log: log, environment: ["HTTP_PORT": "0"])
        defer { for p in [b, c] where p.isRunning { p.terminate() } }
        let consumer = try await client.consume(queue: events, prefetch: 100)
        try await withTimeout(30, "handlers B and C consume") { while try await consumers() < 2 { try await Task.sleep(for: .milliseconds(50)) } }
        let (cancelled, promoted, seenAt) = try await withTimeout(30, "the lapse and the promotion") {
            var cancelled: BookingEvent?, promoted: BookingEvent?
            for try await message in consumer {
                try await message.ack()
                let event = try ContractJSON.decode(BookingEvent.self, from: message.body)
                if message.routingKey == "booking.cancelled", event.booking.id == hold.id { cancelled = event }
                if message.routingKey == "booking.confirmed", event.booking.id == waiter.id { promoted = event }
                if cancelled != nil, promoted != nil { break }
            }
            return (cancelled!, promoted!, Date())
        }
        print("hold expiry after kill -9: applied and published \(String(format: "%.2f", seenAt.timeIntervalSince(launched))) s after the restart")
        #expect(cancelled.booking.cancelReason == "expired: hold not confirmed" && cancelled.booking.version == 2)
        #expect(promoted.promoted == true && promoted.previous?.status == .waitlisted)
        #expect(seenAt.timeIntervalSince(launched) < 5, "within 5 s of the handlers starting (process start included)")

        for p in [b, c] {
            p.terminate()
            p.waitUntilExit()
            #expect(p.terminationStatus == 0, "\((try? String(contentsOf: log, encoding: .utf8))?.suffix(4000) ?? "no log")")
        }
        // Once: one cancellation and one promotion committed, whoever applied them.
        let queue = try DatabaseQueue(path: dataDirectory + "/booking-handler.sqlite")
        let counts = try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT routingKey, count(*) FROM outbox WHERE routingKey IN ('booking.cancelled', 'booking.confirmed') GROUP BY routingKey")
                .map { "\($0[0] as String)=\($0[1] as Int)" }
        }
        #expect(Set(counts) == ["booking.cancelled=1", "booking.confirmed=1"])
        consumer.stop()
        await client.close()
    }
}
