import AMQPClient
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
import TestSupport

/// Recovery and shutdown. The broker-restart scenarios run against a
/// private RabbitMQ node so they cannot disturb other tests.
@Suite("Recovery and graceful shutdown", .serialized)
struct RecoveryTests {
    /// Publishes `total` persistent messages, retrying each on retryable
    /// errors, and reports every confirmed id; signals `milestone` after
    /// `milestoneAt` confirms.
    static func publishAll(_ connection: AMQPConnection, queue: String, total: Int, milestoneAt: Int,
                           milestone: AsyncStream<Void>.Continuation) async throws -> Set<Int> {
        var confirmed = Set<Int>()
        var failures = 0
        for i in 0..<total {
            let body: [UInt8] = Array("\(i)".utf8)
            let properties = AMQPProperties(deliveryMode: .persistent, messageID: "\(i)")
            var done = false
            while !done {
                do {
                    try await connection.publish(body, routingKey: queue, properties: properties)
                    done = true
                } catch {
                    // connectionLost while the broker restarts: publish again
                    // (at-least-once; the consumer side deduplicates by id).
                    failures += 1
                    if !error.isRetryable || failures >= 10_000 { throw error }
                }
            }
            confirmed.insert(i)
            if confirmed.count == milestoneAt { milestone.yield() }
        }
        milestone.finish()
        return confirmed
    }

    /// How the recovery tests reach the broker: every recovery path must
    /// work the same through rabbitmq-c's OpenSSL socket (with the write
    /// buffer under it) as through its TCP socket.
    enum Transport: String, CaseIterable, CustomTestStringConvertible {
        case plain, tls
        var testDescription: String { rawValue }

        /// A configuration for `node` over this transport.
        func configuration(_ node: RabbitMQNode, _ name: String, heartbeat: Int) throws -> AMQPConfiguration {
            switch self {
            case .plain:
                return AMQPConfiguration(url: node.url, connectionName: name, heartbeatSeconds: heartbeat)
            case .tls:
                let tls = try node.tls
                return AMQPConfiguration(url: tls.url, connectionName: name, heartbeatSeconds: heartbeat,
                                         tlsCACertificatePath: tls.caFile)
            }
        }

        /// A configuration for the shared test broker over this transport.
        func shared(_ name: String) throws -> AMQPConfiguration {
            switch self {
            case .plain:
                return try TestBroker.configuration(name)
            case .tls:
                let tls = try TestBroker.tls()
                return AMQPConfiguration(url: tls.url, connectionName: name, tlsCACertificatePath: tls.caFile)
            }
        }
    }

    @Test(arguments: Transport.allCases)
    func brokerRestartConnectionResetAndMissedHeartbeatsAreRecovered(_ transport: Transport) async throws {
        let node = try RabbitMQNode.start()
        defer { node.stop() }
        var configuration = try transport.configuration(node, "recovery-publisher", heartbeat: 2)
        configuration.reconnect = Backoff(initial: 0.05, maximum: 1)
        let publisher = try await AMQPConnection.connect(configuration: configuration, logger: testLogger("publisher"))
        configuration.connectionName = "recovery-consumer"
        let consumerConnection = try await AMQPConnection.connect(configuration: configuration, logger: testLogger("consumer"))
        let queue = uniqueName("recovery")
        try await publisher.declare([.queue(QueueDeclaration(queue, type: .quorum))])

        let consumer = try await consumerConnection.consume(queue: queue, prefetch: 50)
        let received = LockedBox(Set<Int>())
        let consuming = Task {
            for try await delivery in consumer {
                if let id = Int(String(decoding: delivery.body, as: UTF8.self)) {
                    received.withLock { (set: inout Set<Int>) in _ = set.insert(id) }
                }
                // After a reconnect the old delivery tags are stale: the
                // broker redelivers those messages, so a failed ack is fine.
                try? await delivery.ack()
            }
        }

        for scenario in ["stop_app/start_app", "close_all_connections"] {
            let (milestones, milestone) = AsyncStream<Void>.makeStream()
            let publishing = Task {
                try await Self.publishAll(publisher, queue: queue, total: 1500, milestoneAt: 300, milestone: milestone)
            }
            var iterator = milestones.makeAsyncIterator()
            _ = await iterator.next()  // 300 confirmed: break the broker mid-stream
            let reconnectsBefore = publisher.reconnectCount
            if scenario == "stop_app/start_app" {
                try node.stopApp()
                try node.startApp()
            } else {
                try node.closeAllConnections()
            }
            let confirmed = try await withTimeout(120, "publishing through \(scenario)") { try await publishing.value }
            #expect(confirmed.count == 1500)
            #expect(publisher.reconnectCount > reconnectsBefore, "\(scenario) should force a reconnect")

            // Every confirmed message reaches the consumer (resumed after its reconnect).
            try await withTimeout(120, "consuming after \(scenario)") {
                while !received.withLock({ (set: inout Set<Int>) -> Bool in confirmed.isSubset(of: set) }) {
                    await Task.yield()
                    try await Task.sleep(for: .milliseconds(20))  // polling a condition owned by another task
                }
            }
            received.withLock { $0.removeAll() }
            try await withTimeout(30, "queue drained") {
                // Redeliveries of messages acked just before the break may still trickle in.
                while try await publisher.queueInfo(queue).messageCount > 0 {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            received.withLock { $0.removeAll() }
        }
        #expect(consumerConnection.reconnectCount >= 2)
        consumer.stop()
        _ = await consuming.result
        await consumerConnection.close()
        await publisher.close()

        // Missed heartbeats: a frozen broker keeps the TCP connection open
        // but stops answering. With a 1 s heartbeat the client must notice
        // within a few seconds, and reconnect once the broker is back.
        var frozenConfiguration = try transport.configuration(node, "heartbeat-watch", heartbeat: 1)
        frozenConfiguration.connectTimeoutSeconds = 2
        frozenConfiguration.reconnect = Backoff(initial: 0.1, maximum: 0.5)
        let watcher = try await AMQPConnection.connect(configuration: frozenConfiguration, logger: testLogger("heartbeat-watch"))
        try node.freeze()
        let noticed = try await withTimeout(30, "noticing missed heartbeats") { () async throws -> Bool in
            while watcher.isConnected { try await Task.sleep(for: .milliseconds(50)) }
            return true
        }
        try node.thaw()
        #expect(noticed)
        try await withTimeout(60, "reconnecting after the broker thawed") {
            while !(watcher.isConnected && watcher.reconnectCount >= 1) { try await Task.sleep(for: .milliseconds(50)) }
        }
        let probe = uniqueName("after-freeze")
        try await watcher.declare([.queue(QueueDeclaration(probe, type: .classic, durable: false, autoDelete: true))])
        try await watcher.publish([1], routingKey: probe)
        #expect(try await watcher.queueInfo(probe).messageCount == 1)
        await watcher.close()
    }


    @Test(arguments: Transport.allCases)
    func gracefulShutdownFinishesInFlightWorkAndLeavesNothingUnacked(_ transport: Transport) async throws {
        let logger = testLogger("graceful")
        let setup = try await AMQPConnection.connect(configuration: transport.shared("graceful-setup"), logger: logger)
        let queue = uniqueName("graceful")
        try await setup.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        for i in 0..<40 {
            try await setup.publish(Array("\(i)".utf8), routingKey: queue, properties: AMQPProperties(deliveryMode: .persistent))
        }

        let connection = try await AMQPConnection.connect(configuration: transport.shared("graceful-worker"), logger: logger)
        let handled = LockedBox<[Int]>([])
        let (fifth, fifthSignal) = AsyncStream<Void>.makeStream()
        let service = AMQPConsumerService(connection: connection, queue: queue, prefetch: 10, logger: logger) { delivery in
            // Simulated work that takes a moment, then the ack (work durable).
            try? await Task.sleep(for: .milliseconds(5))
            do {
                try await delivery.ack()
                let value = Int(String(decoding: delivery.body, as: UTF8.self)) ?? -1
                let count: Int = handled.withLock { (list: inout [Int]) -> Int in
                    list.append(value)
                    return list.count
                }
                if count == 5 { fifthSignal.yield() }
            } catch {
                Issue.record("ack failed during graceful shutdown: \(error)")
            }
        }
        let (group, running) = ServiceGroup.startInProcess([connection, service], logger: logger)
        var iterator = fifth.makeAsyncIterator()
        _ = await iterator.next()
        await group.triggerGracefulShutdown()
        try await withTimeout(30, "graceful shutdown") { try await running.value }

        #expect(connection.isConnected == false)
        let handledValues: [Int] = handled.withLock { $0 }
        let count = handledValues.count
        let distinct = Set(handledValues).count
        #expect(count >= 5)
        #expect(distinct == count, "no message handled twice")
        // Everything not handled is back to ready; nothing is stuck unacked
        // and nothing handled comes back.
        // The broker detaches a closed connection's consumer from a quorum
        // queue asynchronously; wait for that before counting.
        let info = try await withTimeout(60, "broker noticing the closed consumer") {
            while true {
                let info = try await setup.queueInfo(queue)
                if info.consumerCount == 0 { return info }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(info.messageCount == 40 - count)
        try await setup.deleteQueue(queue)
        await setup.close()
    }

    /// Closes every connection of the shared broker named `name` (the
    /// broker's side of a lost connection) and returns how many.
    static func closeConnections(named name: String) throws -> Int {
        var closed = 0
        // The name a client gives is in its client properties
        // (`connection_name`); the `name` column is the address.
        for row in try TestBroker.ctl(["list_connections", "-s", "pid", "client_properties"]).split(separator: "\n") {
            let fields = row.split(separator: "\t", maxSplits: 1)
            guard fields.count == 2, fields[1].contains("\"\(name)\"") else { continue }
            _ = try TestBroker.ctl(["close_connection", String(fields[0]), "test: connection lost"])
            closed += 1
        }
        return closed
    }

    /// With `reconnectsAfterLoss` off, a lost connection stays lost: its
    /// consumer ends with the error instead of quietly, and a publish after
    /// the loss fails at once instead of waiting for a reconnect that
    /// would carry it out on a connection the caller no longer expects.
    @Test func aConnectionThatDoesNotReconnectFailsEverythingAfterTheLoss() async throws {
        let name = uniqueName("no-reconnect")
        var configuration = try TestBroker.configuration(name)
        configuration.reconnectsAfterLoss = false
        let connection = try await AMQPConnection.connect(configuration: configuration, logger: testLogger(name))
        let queue = uniqueName("no-reconnect-q")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true))])
        let consumer = try await connection.consume(queue: queue)
        #expect(try Self.closeConnections(named: name) == 1)
        let ending = await #expect(throws: AMQPError.self) {
            try await withTimeout(30, "the consumer to end") { for try await _ in consumer {} }
        }
        #expect(ending?.code == .connectionLost, "\(String(describing: ending))")
        let publish = await #expect(throws: AMQPError.self) {
            try await withTimeout(30, "the publish to fail") { try await connection.publish([1], routingKey: queue) }
        }
        #expect(publish?.code == .closed, "\(String(describing: publish))")
        #expect(!connection.isConnected)
        #expect(connection.reconnectCount == 0)
        await connection.close()
    }

    /// `whenDisconnected` calls back once per watcher when the connection
    /// is lost (before any reconnect) or closed, and at once for one
    /// registered while it is down.
    @Test func whenDisconnectedCallsBackOnceAtTheLossAndAtTheClose() async throws {
        let name = uniqueName("watched")
        let connection = try await AMQPConnection.connect(configuration: try TestBroker.configuration(name), logger: testLogger(name))
        let calls = Mutex(0)
        let lost = DispatchSemaphore(value: 0)
        connection.whenDisconnected { calls.withLock { $0 += 1 }; lost.signal() }
        #expect(try Self.closeConnections(named: name) == 1)
        #expect(lost.wait(timeout: .now() + 30) == .success, "called at the loss")
        // Reconnected: a watcher registered now waits for the next loss, the close.
        // A publish waits for the reconnect.
        try await withTimeout(30, "a publish after the reconnect") {
            try await connection.publish([1], routingKey: uniqueName("nowhere"))
        }
        #expect(connection.reconnectCount == 1 && connection.isConnected)
        let closed = DispatchSemaphore(value: 0)
        connection.whenDisconnected { calls.withLock { $0 += 10 }; closed.signal() }
        #expect(calls.withLock { $0 } == 1, "the first watcher was called once, the second not yet")
        await connection.close()
        #expect(closed.wait(timeout: .now() + 30) == .success, "called at the close")
        let late = Mutex(false)
        connection.whenDisconnected { late.withLock { $0 = true } }
        #expect(late.withLock { $0 }, "called at once on a closed connection")
        #expect(calls.withLock { $0 } == 11)
    }
}
