import AMQPClient
import Foundation
import ServiceLifecycle
import Testing
import TestSupport

/// `AMQPConsumerService.preparing`: the prepare step runs in delivery
/// order, one delivery at a time, and only once the delivery's task can
/// start — whatever it reserves (the pass sender: a place in a booking's
/// queue) always has a task that will release it.
@Suite("Consumer service: the prepare step", .serialized)
struct ConsumerPrepareTests {
    struct State: Sendable {
        var prepared: [Int] = []
        /// Deliveries handed to a task and not finished when each delivery
        /// was prepared (each one prepared before it is handed on).
        var inFlightAtPrepare: [Int] = []
        var started: [Int] = []
        var finished: [Int] = []
        var released = false
    }

    @Test func prepareRunsInDeliveryOrderAndOnlyWhenATaskCanStart() async throws {
        let logger = testLogger("prepare")
        let url = try TestBroker.isolatedURL("prepare")
        let connection = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "prepare"),
                                                          logger: logger)
        let queue = uniqueName("prepare")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        let count = 6
        for i in 0..<count {
            try await connection.publish(Array("\(i)".utf8), routingKey: queue, properties: AMQPProperties(deliveryMode: .persistent))
        }
        let state = Observed(State())
        let service = AMQPConsumerService.preparing(connection: connection, queue: queue, prefetch: 10, concurrency: 2,
                                                    logger: logger) { delivery in
            let n = Int(String(decoding: delivery.body, as: UTF8.self)) ?? -1
            state.update {
                $0.inFlightAtPrepare.append($0.prepared.count - $0.finished.count)
                $0.prepared.append(n)
            }
            return { delivery in
                state.update { $0.started.append(n) }
                // The first two hold both slots until the test lets them go.
                if n < 2 { try? await state.wait("released") { $0.released } }
                try? await delivery.ack()
                state.update { $0.finished.append(n) }
            }
        }
        let (group, running) = ServiceGroup.startInProcess([connection, service], logger: logger)
        try await state.wait("both slots taken") { $0.started.count == 2 }
        // Every message is with the consumer (none ready): the third waits
        // in the consuming loop for a slot, not yet prepared.
        try await withTimeout(60, "all delivered") {
            while try await connection.queueInfo(queue).messageCount > 0 { try await Task.sleep(for: .milliseconds(20)) }
        }
        state.update { $0.released = true }
        try await state.wait("all handled") { $0.finished.count == count }
        let s = state.current
        #expect(s.prepared == Array(0..<count), "prepared in delivery order")
        #expect(s.inFlightAtPrepare.allSatisfy { $0 < 2 }, "prepared only with a slot free: \(s.inFlightAtPrepare)")
        await group.triggerGracefulShutdown()
        try await withTimeout(30, "stopped") { try await running.value }
        let setup = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "prepare-cleanup"),
                                                     logger: logger)
        try await setup.deleteQueue(queue)
        await setup.close()
    }
}
