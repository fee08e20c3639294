import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import Testing
import TestSupport

/// Two `booking-handler` processes on one database, both consuming
/// `booking.commands` of a vhost of their own, and a client that sends
/// commands there as the vhost's user and collects the replies: what the
/// race tests need to show that a rule holds across processes (the quota,
/// promotion), not only across tasks of one.
///
/// With `databaseURL` each process has a data directory of its own (as on
/// two hosts) and shares the PostgreSQL schema; without it both share one
/// directory, so one SQLite file. ``stop()`` ends both gracefully and
/// records that they exited 0; the vhost and the directories go with it.
struct HandlerPair {
    let url: AMQPURL
    let base: URL
    let handlers: [Process]
    let client: AMQPConnection
    let replyConsumer: AMQPConsumer
    let replies: String

    /// The vhost's user: who the commands come from.
    var user: String { url.user }

    static func start(_ name: String, databaseURL: String?) async throws -> HandlerPair {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL(name)
        let base = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("\(name)-data"))
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        let log = base.appendingPathComponent("handlers.log")
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "\(name)-client"),
                                                      logger: testLogger(name))
        let replies = "\(url.user).\(uniqueName("replies"))"
        try await client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue]) + [
            .queue(QueueDeclaration(replies)),
        ])
        let handlers = try (0..<2).map { i in
            let directory = databaseURL == nil ? base.path : base.appendingPathComponent("handler-\(i)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            var environment = ["HTTP_PORT": "0", "AMQP_URL": url.urlStringWithCredentials]
            if let databaseURL { environment["DATABASE_URL"] = databaseURL }
            return try CrashRecoveryTests.launch(url: url, dataDirectory: directory, log: log, environment: environment)
        }
        do {
            try await withTimeout(60, "both handlers consume") {
                while try await client.queueInfo(Topology.handlerCommandsQueue).consumerCount < 2 {
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        } catch {
            for handler in handlers where handler.isRunning { handler.terminate() }
            throw error
        }
        let replyConsumer = try await client.consume(queue: replies, prefetch: 200)
        return HandlerPair(url: url, base: base, handlers: handlers, client: client, replyConsumer: replyConsumer,
                           replies: replies)
    }

    /// Publishes one command of `type` with `json` as its body, replies to
    /// this pair's queue.
    func send(_ type: String, _ json: String) async throws {
        try await client.publish(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type,
                                 properties: .persistentJSON(type: type, messageID: uniqueName("m"), replyTo: replies,
                                                             userID: user),
                                 mandatory: true)
    }

    /// The next `count` replies, in arrival order.
    func collect(_ count: Int) async throws -> [CommandReply] {
        let replyConsumer = self.replyConsumer
        return try await withTimeout(120, "\(count) replies") { () async throws -> [CommandReply] in
            var all: [CommandReply] = []
            for try await reply in replyConsumer {
                try await reply.ack()
                all.append(try ContractJSON.decode(CommandReply.self, from: reply.body))
                if all.count == count { break }
            }
            return all
        }
    }

    /// Stops both processes gracefully (each must exit 0), closes the
    /// client, and removes the vhost and the data.
    func stop() async {
        for handler in handlers where handler.isRunning {
            handler.terminate()
            handler.waitUntilExit()
            #expect(handler.terminationStatus == 0, "a graceful stop")
        }
        replyConsumer.stop()
        await client.close()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(at: base)
    }

    /// Ends the processes whatever happened (a `defer` for a failed test).
    func kill() {
        for handler in handlers where handler.isRunning { handler.terminate() }
    }
}
