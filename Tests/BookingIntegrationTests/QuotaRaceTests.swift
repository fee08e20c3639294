import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// Contract v1.2, `maxActiveBookings`, where only several processes can
/// show it: two booking-handler processes on one PostgreSQL database, and
/// twenty creates of one requester sent at once, spread over both. The
/// count and the insert it allows must run in one transaction under the
/// write lock, or two processes each see room for one more.
@Suite("The quota across two handlers on PostgreSQL", .serialized)
struct QuotaRaceTests {
    @Test func twentyConcurrentCreatesThroughTwoHandlersNeverExceedTheQuota() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("quota")
        defer { TestBroker.deleteVhost(url.vhost) }
        let databaseURL = try TestPostgres.url(schemaPrefix: "quota")
        let base = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("quota-data"))
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        let log = base.appendingPathComponent("handlers.log")
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "quota-client"),
                                                      logger: testLogger("quota"))
        let user = url.user
        let replies = "\(user).\(uniqueName("replies"))"
        try await client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]) + [
            .queue(QueueDeclaration(replies)),
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
        func send(_ type: String, _ json: String) async throws {
            try await client.publish(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type,
                                     properties: .persistentJSON(type: type, messageID: uniqueName("m"), replyTo: replies, userID: user),
                                     mandatory: true)
        }
        func collect(_ count: Int) async throws -> [CommandReply] {
            try await withTimeout(120, "\(count) replies") { () async throws -> [CommandReply] in
                var all: [CommandReply] = []
                for try await reply in replyConsumer {
                    try await reply.ack()
                    all.append(try ContractJSON.decode(CommandReply.self, from: reply.body))
                    if all.count == count { break }
                }
                return all
            }
        }
        let quota = 4
        try await send("room.register", #"{"name": "Quota", "capacity": 4, "opens": "07:00", "closes": "19:00", "maxActiveBookings": \#(quota)}"#)
        #expect(try await collect(1).first?.roomValue?.maxActiveBookings == quota)

        // Twenty creates of one requester, on distinct half hours of one
        // day (no overlaps between them: only the quota can refuse).
        let date = TestDates.berlinDate(daysFromNow: 3)
        for i in 0..<20 {
            let start = 7 * 60 + 30 * i
            func time(_ m: Int) -> String { String(format: "%02d:%02d", m / 60, m % 60) }
            try await send("booking.create", createJSON(room: "Quota", date: date, start: time(start), end: time(start + 30)))
        }
        let all = try await collect(20)
        let booked = all.compactMap(\.bookingValue)
        let refused = all.compactMap(\.errorValue)
        print("quota race: \(booked.count) booked, \(refused.count) refused (1113) of 20 through two handlers")
        #expect(booked.count == quota, "exactly the quota, never more")
        #expect(refused.count == 20 - quota)
        for error in refused { #expect(error.code == .quotaExceeded && error.limit == quota, "\(error)") }
        // The database agrees (not only the replies).
        let schema = try #require(URLComponents(string: databaseURL)?.queryItems?.first { $0.name == "schema" }?.value)
        let active = try TestPostgres.control("psql", ["-At", "-c", "SET search_path TO \(schema)",
                                                         "-c", "SELECT count(*) FROM booking WHERE room = 'Quota' AND status IN ('pending', 'confirmed', 'inProgress')"])
        #expect(active.split(separator: "\n").last == "\(quota)")
        for handler in handlers {
            handler.terminate()
            handler.waitUntilExit()
            #expect(handler.terminationStatus == 0)
        }
        replyConsumer.stop()
        await client.close()
    }
}
