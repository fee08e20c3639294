import AMQPClient
import Foundation
import Testing
import TestSupport

/// The three-node cluster the tests of running beyond one machine use
/// (scripts/rabbitmq-cluster.sh), and the AMQP layer against it: a quorum
/// queue declared on one node is replicated to all three, what is confirmed
/// on one node is delivered from another, and it stays so while a node is
/// down.
@Suite("RabbitMQ cluster on loopback", .serialized)
struct ClusterTests {
    @Test func quorumQueuesReplicateAcrossTheNodesAndSurviveOneNodeDown() async throws {
        let nodes = try TestCluster.nodes()
        #expect(nodes.count == 3)
        #expect(Set(nodes.map(\.url.port)).count == 3, "each node its own AMQP port")
        let status = try nodes[0].ctl(["-q", "cluster_status", "--formatter", "json"])
        let running = try #require(try JSONSerialization.jsonObject(with: Data(status.utf8)) as? [String: Any])["running_nodes"] as? [String]
        #expect(Set(running ?? []) == Set(nodes.map(\.name)), "every node runs in one cluster: \(status)")

        func connect(_ node: TestCluster.Node, _ name: String) async throws -> AMQPConnection {
            try await AMQPConnection.connect(configuration: AMQPConfiguration(url: node.url, connectionName: name),
                                             logger: testLogger(name))
        }
        let queue = uniqueName("cluster-q")
        let first = try await connect(nodes[0], "cluster-node1")
        try await first.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        let members = try nodes[0].ctl(["-q", "list_queues", "name", "members", "--formatter", "json"])
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(members.utf8)) as? [[String: Any]])
        let row = try #require(rows.first { $0["name"] as? String == queue })
        #expect(Set(row["members"] as? [String] ?? []) == Set(nodes.map(\.name)), "a member on each node: \(row)")

        // Confirmed on node 1, delivered from node 3, in order.
        let properties = AMQPProperties(deliveryMode: .persistent)
        for result in await first.publish(batch: (0..<100).map { OutgoingMessage(body: Array("a\($0)".utf8), routingKey: queue,
                                                                                   properties: properties) }) {
            #expect(result == nil)
        }
        await first.close()
        let third = try await connect(nodes[2], "cluster-node3")
        let consumer = try await third.consume(queue: queue, prefetch: 200)
        let before = try await withTimeout(60, "100 messages from node 3") { try await consumer.take(100) }
        #expect(before.map { String(decoding: $0.body, as: UTF8.self) } == (0..<100).map { "a\($0)" })

        // Node 1 down: the two others are a majority; node 2 takes what
        // node 3 then delivers.
        try nodes[0].ctl(["stop_app"])
        do {
            let second = try await connect(nodes[1], "cluster-node2")
            for result in await second.publish(batch: (0..<100).map { OutgoingMessage(body: Array("b\($0)".utf8), routingKey: queue,
                                                                                        properties: properties) }) {
                #expect(result == nil, "confirmed with one node of three down")
            }
            await second.close()
            let after = try await withTimeout(60, "100 messages with node 1 down") { try await consumer.take(100) }
            #expect(after.map { String(decoding: $0.body, as: UTF8.self) } == (0..<100).map { "b\($0)" })
        } catch {
            _ = try? nodes[0].ctl(["start_app"])
            throw error
        }
        try nodes[0].ctl(["start_app"])
        consumer.stop()
        _ = try await third.deleteQueue(queue)
        await third.close()
    }

    /// `AMQP_URL` with the three nodes: a connection on node 1 moves to
    /// another node when node 1 stops, restores its consumer there, and what
    /// is published after the move is confirmed and delivered.
    @Test func aConnectionMovesToAnotherNodeWhenItsNodeStops() async throws {
        let nodes = try TestCluster.nodes()
        let urls = nodes.map(\.url)
        var configuration = AMQPConfiguration(url: urls[0], connectionName: "cluster-failover",
                                              failoverURLs: Array(urls.dropFirst()))
        configuration.reconnect = Backoff(initial: 0.05, maximum: 0.5)
        let connection = try await AMQPConnection.connect(configuration: configuration, logger: testLogger("failover"))
        #expect(connection.connectedURL == urls[0])
        let queue = uniqueName("failover-q")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        let consumer = try await connection.consume(queue: queue, prefetch: 100)
        let properties = AMQPProperties(deliveryMode: .persistent)
        @Sendable func send(_ prefix: String) async throws {
            // A publish caught by the node stopping fails (never silently
            // dropped); at-least-once means sending it again.
            for i in 0..<50 {
                let message = OutgoingMessage(body: Array("\(prefix)\(i)".utf8), routingKey: queue, properties: properties)
                var attempts = 0
                while true {
                    do {
                        try await connection.publish(message)
                        break
                    } catch {
                        attempts += 1
                        if attempts > 20 { throw error }
                    }
                }
            }
        }
        try await send("a")
        let before = try await withTimeout(60, "50 messages on node 1") { try await consumer.take(50) }
        #expect(before.map { String(decoding: $0.body, as: UTF8.self) } == (0..<50).map { "a\($0)" })

        try nodes[0].ctl(["stop_app"])
        do {
            try await withTimeout(60, "publishing with node 1 down") { try await send("b") }
            let after = try await withTimeout(60, "50 messages after the move") { try await consumer.take(50) }
            let bodies = after.map { String(decoding: $0.body, as: UTF8.self) }
            #expect(Set(bodies) == Set((0..<50).map { "b\($0)" }), "nothing lost after moving nodes")
            #expect(connection.reconnectCount >= 1)
            let now = try #require(connection.connectedURL)
            #expect(now != urls[0], "moved off the stopped node")
            #expect(urls.contains(now))
        } catch {
            _ = try? nodes[0].ctl(["start_app"])
            throw error
        }
        try nodes[0].ctl(["start_app"])
        consumer.stop()
        _ = try await connection.deleteQueue(queue)
        await connection.close()
    }
}
