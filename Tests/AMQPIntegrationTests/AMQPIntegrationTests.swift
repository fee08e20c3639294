import AMQPClient
import Foundation
import Testing
import TestSupport

/// The AMQP layer against a real RabbitMQ (the shared test broker). Each
/// test uses its own queues.
@Suite("AMQP layer against RabbitMQ")
struct AMQPIntegrationTests {
    func connect(_ name: String, heartbeat: Int = 10) async throws -> AMQPConnection {
        try await AMQPConnection.connect(configuration: TestBroker.configuration(name, heartbeat: heartbeat),
                                         logger: testLogger(name))
    }

    func classicQueue(_ name: String, _ connection: AMQPConnection, arguments: AMQPTable = [:]) async throws {
        try await connection.declare([.queue(QueueDeclaration(name, type: .classic, durable: false, autoDelete: true, arguments: arguments))])
    }

    @Test func roundTripKeepsEveryPropertyAndHeader() async throws {
        let connection = try await connect("roundtrip")
        let queue = uniqueName("roundtrip")
        try await classicQueue(queue, connection)
        let consumer = try await connection.consume(queue: queue, prefetch: 1)
        let properties = AMQPProperties(
            contentType: "application/json", contentEncoding: "utf-8",
            headers: ["idempotency-key": "k-1", "n": .int64(42), "flag": true, "nested": .table(["a": .array(["x", .int32(7)])]),
                      "ts": .timestamp(1_763_800_000), "pi": .double(3.25)],
            deliveryMode: .persistent, priority: 3, correlationID: "corr-1", replyTo: "replies",
            expiration: "60000", messageID: "msg-1", timestamp: 1_763_800_000, type: "booking.create",
            appID: "tests")
        try await connection.publish(Array("{\"hello\":\"wörld\"}".utf8), routingKey: queue, properties: properties)
        let delivery = try #require(try await withTimeout(60) { try await consumer.take(1).first })
        #expect(String(decoding: delivery.body, as: UTF8.self) == "{\"hello\":\"wörld\"}")
        #expect(delivery.properties == properties)
        #expect(delivery.routingKey == queue)
        #expect(delivery.exchange == "")
        #expect(delivery.redelivered == false)
        consumer.stop()
        await connection.close()
    }

    /// Closing is idempotent: a close after the I/O thread has returned is
    /// answered at once, and so is every other call.
    @Test func aSecondCloseReturnsAndLaterCallsFail() async throws {
        let connection = try await connect("close-twice")
        await connection.close()
        try await withTimeout(30, "the second close") { await connection.close() }
        await #expect(throws: AMQPError.self) {
            try await withTimeout(30, "a declare after close") {
                try await connection.declare([.queue(QueueDeclaration(uniqueName("after-close"), type: .classic,
                                                                      durable: false, autoDelete: true))])
            }
        }
    }

    @Test func tenThousandConfirmedMessagesArriveWithoutLoss() async throws {
        let connection = try await connect("bulk")
        let queue = uniqueName("bulk")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        let total = 10_000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<16 {
                group.addTask {
                    for i in stride(from: worker, to: total, by: 16) {
                        try await connection.publish(Array("\(i)".utf8), routingKey: queue,
                                                     properties: AMQPProperties(deliveryMode: .persistent, messageID: "\(i)"))
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await connection.queueInfo(queue).messageCount == total)
        let consumer = try await connection.consume(queue: queue, prefetch: 500)
        let received = try await withTimeout(60) { try await consumer.take(total) }
        #expect(Set(received.map { String(decoding: $0.body, as: UTF8.self) }) == Set((0..<total).map(String.init)))
        consumer.stop()
        try await connection.deleteQueue(queue)
        await connection.close()
    }

    @Test func batchPublishKeepsItsOrderAndReportsEachMessage() async throws {
        let connection = try await connect("batch")
        let queue = uniqueName("batch")
        try await classicQueue(queue, connection)
        let messages = (0..<500).map { i in
            OutgoingMessage(body: Array("\(i)".utf8), routingKey: queue, properties: AMQPProperties(deliveryMode: .persistent))
        }
        // Concurrent single publishes may interleave; a batch may not.
        async let other: Void = {
            for i in 0..<100 { try await connection.publish(Array("x\(i)".utf8), routingKey: queue + "-elsewhere") }
        }()
        let results = await connection.publish(batch: messages)
        try await other
        #expect(results.count == 500)
        #expect(results.allSatisfy { $0 == nil })
        let consumer = try await connection.consume(queue: queue, prefetch: 500)
        let received = try await withTimeout(60) { try await consumer.take(500) }
        #expect(received.map { String(decoding: $0.body, as: UTF8.self) } == (0..<500).map(String.init))
        // An oversized entry fails alone; the rest still go out.
        let mixed = await connection.publish(batch: [
            OutgoingMessage(body: [1], routingKey: queue),
            OutgoingMessage(body: [2], routingKey: queue, properties: AMQPProperties(messageID: String(repeating: "m", count: 300))),
            // Mandatory in a batch: only the one nobody receives fails.
            OutgoingMessage(body: [3], routingKey: queue + "-nobody", mandatory: true),
            OutgoingMessage(body: [4], routingKey: queue, mandatory: true),
        ])
        #expect(mixed[0] == nil)
        #expect(mixed[1]?.code == .invalidArgument)
        #expect(mixed[2]?.code == .unroutable)
        #expect(mixed[3] == nil)
        consumer.stop()
        await connection.close()
    }

    /// `startPublishing` hands a batch to the channel before it returns, so
    /// batches started one after another (the outbox relay's overlapping
    /// rounds) arrive in that order while earlier ones still await their
    /// confirms; each batch's confirmations can be awaited in any order,
    /// more than once.
    @Test func batchesStartedBackToBackKeepTheirOrderAndAreEachConfirmed() async throws {
        let connection = try await connect("started")
        let queue = uniqueName("started")
        try await classicQueue(queue, connection)
        let batches = (0..<20).map { b in
            (0..<50).map { i in
                OutgoingMessage(body: Array("\(b * 50 + i)".utf8), routingKey: queue,
                                properties: AMQPProperties(deliveryMode: .persistent))
            }
        }
        // Single publishes elsewhere meanwhile, from another task.
        async let other: Void = {
            for i in 0..<100 { try await connection.publish(Array("x\(i)".utf8), routingKey: queue + "-elsewhere") }
        }()
        let pending = batches.map { connection.startPublishing(batch: $0) }
        // Awaited last batch first: any order works.
        for p in pending.reversed() {
            let results = await p.confirmations()
            #expect(results.count == 50)
            #expect(results.allSatisfy { $0 == nil })
        }
        #expect(pending.allSatisfy { $0.isSettled })
        #expect(await pending[0].confirmations().count == 50, "awaited a second time")
        try await other
        let consumer = try await connection.consume(queue: queue, prefetch: 1000)
        let received = try await withTimeout(60) { try await consumer.take(1000) }
        #expect(received.map { String(decoding: $0.body, as: UTF8.self) } == (0..<1000).map(String.init))
        consumer.stop()
        // On a closed connection every message is answered at once.
        await connection.close()
        let late = await connection.startPublishing(batch: Array(batches[0].prefix(3))).confirmations()
        #expect(late.count == 3)
        #expect(late.allSatisfy { $0?.code == .closed }, "\(late)")
    }

    @Test func oneMebibyteBodyRoundTrips() async throws {
        let connection = try await connect("large")
        let queue = uniqueName("large")
        try await classicQueue(queue, connection)
        let body = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try await connection.publish(body, routingKey: queue)
        let consumer = try await connection.consume(queue: queue)
        let delivery = try await withTimeout(60) { try await consumer.take(1) }
        #expect(delivery.first?.body == body)
        consumer.stop()
        await connection.close()
    }

    @Test func unroutableMandatoryPublishThrows() async throws {
        let connection = try await connect("mandatory")
        let exchange = uniqueName("ex")
        try await connection.declare([.exchange(ExchangeDeclaration(exchange, kind: .direct, durable: false, autoDelete: false))])
        let error = await #expect(throws: AMQPError.self) {
            try await connection.publish([1], exchange: exchange, routingKey: "nobody", mandatory: true)
        }
        #expect(error?.code == .unroutable)
        // Not mandatory: silently dropped by the broker, still confirmed.
        try await connection.publish([1], exchange: exchange, routingKey: "nobody", mandatory: false)
        // The channel is still usable afterwards.
        let queue = uniqueName("after-return")
        try await classicQueue(queue, connection)
        try await connection.publish([2], routingKey: queue, mandatory: true)
        await connection.close()
    }

    @Test func brokerNackThrowsAndLaterPublishesStillConfirm() async throws {
        // A full queue with overflow=reject-publish makes RabbitMQ answer basic.nack.
        let connection = try await connect("nack")
        let queue = uniqueName("full")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true,
                                                              maxLength: 1, arguments: ["x-overflow": "reject-publish"]))])
        try await connection.publish([1], routingKey: queue)
        let error = await #expect(throws: AMQPError.self) {
            try await connection.publish([2], routingKey: queue)
        }
        #expect(error?.code == .nacked)
        #expect(error?.isRetryable == true)
        try await connection.purgeQueue(queue)
        try await connection.publish([3], routingKey: queue)
        #expect(try await connection.queueInfo(queue).messageCount == 1)
        await connection.close()
    }

    /// A call is not given up when its task is cancelled (docs/amqp-layer.md,
    /// "Cancelled callers"): a publish made by a cancelled task is sent and
    /// returns the broker's confirm — neither a `CancellationError` for a
    /// message that went out nor a message dropped unseen — and an RPC
    /// returns its reply.
    @Test func aCancelledTasksCallsEndWithTheBrokersAnswer() async throws {
        let connection = try await connect("cancelled-caller")
        let queue = uniqueName("cancelled-caller")
        try await classicQueue(queue, connection)
        let publish = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            #expect(Task.isCancelled)
            try await connection.publish(Array("sent anyway".utf8), routingKey: queue,
                                         properties: AMQPProperties(messageID: "m-1"))
        }
        try await withTimeout(60, "the cancelled task's publish") { try await publish.value }
        #expect(try await connection.queueInfo(queue).messageCount == 1)

        let sent = try await connection.consume(queue: queue, prefetch: 4)
        let first = try #require(try await withTimeout(60) { try await sent.take(1).first })
        #expect(String(decoding: first.body, as: UTF8.self) == "sent anyway")
        sent.stop()

        let rpcQueue = uniqueName("cancelled-caller-rpc")
        try await classicQueue(rpcQueue, connection)
        let requests = try await connection.consume(queue: rpcQueue, prefetch: 4)
        let server = Task {
            for try await request in requests {
                if let replyTo = request.properties.replyTo {
                    try await connection.publish(Array("answer".utf8), routingKey: replyTo,
                                                 properties: AMQPProperties(correlationID: request.properties.correlationID))
                }
                try await request.ack()
            }
        }
        let call = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await connection.call(Array("question".utf8), routingKey: rpcQueue, timeout: .seconds(30))
        }
        let reply = try await withTimeout(60, "the cancelled task's call") { try await call.value }
        #expect(String(decoding: reply.body, as: UTF8.self) == "answer")
        requests.stop()
        _ = try await server.value
        await connection.close()
    }

    /// Properties that fill a content header frame to the byte go out; one
    /// byte more is refused before anything is sent, and the connection
    /// carries on (rabbitmq-c would send the method, fail on the header,
    /// and the broker would close the connection for the lone method).
    @Test func propertiesTooLargeForAFrameAreRefusedBeforeTheyCostTheConnection() async throws {
        let connection = try await connect("frame-full")
        let queue = uniqueName("frame-full")
        try await classicQueue(queue, connection)
        // One header: 4 (table) + 1 + 3 ("big") + 5 (type, length) + n bytes,
        // against 131,072 − 8 − 14 − 32 = 131,018.
        // Mandatory: the layer's own `x-publish-seq` goes on top.
        let fits = 131_018 - 13
        try await connection.publish([1], routingKey: queue, properties: AMQPProperties(headers: ["big": .string(String(repeating: "f", count: fits))]),
                                     mandatory: true)
        let error = await #expect(throws: AMQPError.self) {
            try await connection.publish([2], routingKey: queue,
                                         properties: AMQPProperties(headers: ["big": .string(String(repeating: "f", count: fits + 1))]),
                                         mandatory: true)
        }
        #expect(error?.code == .invalidArgument)
        // An RPC is checked with the `reply_to` and correlation id it gets.
        let rpc = await #expect(throws: AMQPError.self) {
            _ = try await connection.call([4], routingKey: queue,
                                          properties: AMQPProperties(headers: ["big": .string(String(repeating: "f", count: fits - 10))]),
                                          timeout: .seconds(30))
        }
        #expect(rpc?.code == .invalidArgument)
        try await connection.publish([3], routingKey: queue)
        let consumer = try await connection.consume(queue: queue, prefetch: 4)
        let received = try await withTimeout(60) { try await consumer.take(2) }
        #expect(received.map(\.body) == [[1], [3]])
        #expect(received.first?.properties.headers["big"]?.stringValue?.utf8.count == fits)
        #expect(received.allSatisfy { !$0.redelivered }, "the connection was never lost")
        consumer.stop()
        await connection.close()
    }

    @Test func publishToMissingExchangeFailsAndChannelRecovers() async throws {
        let connection = try await connect("missing-exchange")
        let error = await #expect(throws: AMQPError.self) {
            try await connection.publish([1], exchange: uniqueName("no-such-exchange"), routingKey: "x")
        }
        #expect(error?.code == .channelClosed)
        #expect(error?.replyCode == 404)
        let queue = uniqueName("after-404")
        try await classicQueue(queue, connection)
        try await connection.publish([2], routingKey: queue)
        #expect(try await connection.queueInfo(queue).messageCount == 1)
        await connection.close()
    }

    @Test func nackAndRejectDeadLetterWithXDeath() async throws {
        let connection = try await connect("dlx")
        let dlx = uniqueName("dlx"), queue = uniqueName("work"), dead = queue + ".dead"
        try await connection.declare([
            .exchange(ExchangeDeclaration(dlx, kind: .topic, durable: false, autoDelete: true)),
            .queue(QueueDeclaration(dead, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: dead, exchange: dlx, routingKey: "#")),
            .queue(QueueDeclaration(queue, type: .quorum, deadLetterExchange: dlx, deliveryLimit: 5)),
        ])
        try await connection.publish(Array("a".utf8), routingKey: queue, properties: AMQPProperties(messageID: "a"))
        try await connection.publish(Array("b".utf8), routingKey: queue, properties: AMQPProperties(messageID: "b"))
        let consumer = try await connection.consume(queue: queue, prefetch: 2)
        let two = try await withTimeout(60) { try await consumer.take(2, ack: false) }
        let a = try #require(two.first { $0.properties.messageID == "a" })
        let b = try #require(two.first { $0.properties.messageID == "b" })
        try await a.nack(requeue: false)
        try await b.reject(requeue: false)
        let deadConsumer = try await connection.consume(queue: dead)
        let deadLettered = try await withTimeout(60) { try await deadConsumer.take(2) }
        #expect(Set(deadLettered.compactMap(\.properties.messageID)) == ["a", "b"])
        for message in deadLettered {
            let death = try #require(message.properties.xDeath.first)
            #expect(death.queue == queue)
            #expect(death.reason == "rejected")
            #expect(death.count == 1)
            #expect(death.routingKeys == [queue])
        }
        consumer.stop()
        deadConsumer.stop()
        try await connection.deleteQueue(queue)
        await connection.close()
    }

    @Test func rpcRoundTripAndTimeout() async throws {
        let server = try await connect("rpc-server")
        let client = try await connect("rpc-client")
        let queue = uniqueName("rpc")
        try await classicQueue(queue, server)
        let requests = try await server.consume(queue: queue, prefetch: 16)
        let serverTask = Task {
            for try await request in requests {
                if String(decoding: request.body, as: UTF8.self) != "ignore me", let replyTo = request.properties.replyTo {
                    try await server.publish(Array("echo:".utf8) + request.body, routingKey: replyTo,
                                             properties: AMQPProperties(correlationID: request.properties.correlationID))
                }
                try await request.ack()
            }
        }
        // Many concurrent calls: every reply reaches its own caller.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                group.addTask {
                    let reply = try await client.call(Array("\(i)".utf8), routingKey: queue, timeout: .seconds(30))
                    #expect(String(decoding: reply.body, as: UTF8.self) == "echo:\(i)")
                }
            }
            try await group.waitForAll()
        }
        // A request nobody answers times out.
        let started = ContinuousClock.now
        let timeout = await #expect(throws: AMQPError.self) {
            _ = try await client.call(Array("ignore me".utf8), routingKey: queue, timeout: .milliseconds(300))
        }
        #expect(timeout?.code == .timeout)
        #expect(ContinuousClock.now - started < .seconds(5))
        // A request to a queue that does not exist fails fast as unroutable.
        let unroutable = await #expect(throws: AMQPError.self) {
            _ = try await client.call([1], routingKey: uniqueName("nobody-home"), timeout: .seconds(10))
        }
        #expect(unroutable?.code == .unroutable)
        requests.stop()
        _ = try await serverTask.value
        await client.close()
        await server.close()
    }

    @Test func heartbeatsKeepAnIdleConnectionAlive() async throws {
        // 1 s heartbeat; stay idle for more than 3 intervals. Without the
        // loop servicing heartbeats the broker would close the connection
        // after ~2 s (and we would see a reconnect).
        let connection = try await connect("heartbeat", heartbeat: 1)
        let queue = uniqueName("heartbeat")
        try await classicQueue(queue, connection)
        try await Task.sleep(for: .seconds(3.5))  // the idle period is the scenario under test
        #expect(connection.isConnected)
        #expect(connection.reconnectCount == 0)
        try await connection.publish([1], routingKey: queue)
        #expect(try await connection.queueInfo(queue).messageCount == 1)
        await connection.close()
    }

    @Test func amqpsConnectsThroughTLSAndVerifiesTheBroker() async throws {
        let (url, caFile) = try TestBroker.tls()
        #expect(url.tls)
        var configuration = AMQPConfiguration(url: url, connectionName: "tls")
        configuration.tlsCACertificatePath = caFile
        let connection = try await AMQPConnection.connect(configuration: configuration, logger: testLogger("tls"))
        let queue = uniqueName("tls")
        try await classicQueue(queue, connection)
        let consumer = try await connection.consume(queue: queue)
        try await connection.publish(Array("over TLS".utf8), routingKey: queue)
        let delivery = try await withTimeout(60) { try await consumer.take(1) }
        #expect(delivery.first.map { String(decoding: $0.body, as: UTF8.self) } == "over TLS")
        consumer.stop()
        await connection.close()

        // A broker certificate our CA bundle does not vouch for is refused.
        var untrusted = AMQPConfiguration(url: url, connectionName: "tls-untrusted")
        untrusted.tlsCACertificatePath = "/etc/ssl/certs/ca-certificates.crt"
        untrusted.connectTimeoutSeconds = 5
        let error = await #expect(throws: AMQPError.self) {
            _ = try await AMQPConnection.connect(configuration: untrusted, logger: testLogger("tls-untrusted"))
        }
        #expect(error?.code == .tlsFailed)
    }

    @Test func clearErrorsForBadURLRefusedConnectionAndWrongPassword() async throws {
        #expect(throws: AMQPError.self) { try AMQPURL("http://localhost") }
        #expect(throws: AMQPError.self) { try AMQPURL("amqp://host:99999/") }

        var refused = AMQPConfiguration(url: try AMQPURL("amqp://guest:guest@127.0.0.1:1/%2f"))
        refused.connectTimeoutSeconds = 2
        let refusedError = await #expect(throws: AMQPError.self) {
            _ = try await AMQPConnection.connect(configuration: refused, logger: testLogger("refused"))
        }
        #expect(refusedError?.code == .connectionFailed)
        #expect(refusedError?.description.contains("127.0.0.1:1") == true)

        var wrong = try TestBroker.configuration("wrong-password")
        wrong.url.password = "definitely-wrong-secret"
        let wrongError = await #expect(throws: AMQPError.self) {
            _ = try await AMQPConnection.connect(configuration: wrong, logger: testLogger("wrong"))
        }
        #expect(wrongError?.code == .accessRefused)
        #expect(wrongError?.description.contains("definitely-wrong-secret") == false)

        var vhost = try TestBroker.configuration("bad-vhost")
        vhost.url.vhost = "no-such-vhost"
        let vhostError = await #expect(throws: AMQPError.self) {
            _ = try await AMQPConnection.connect(configuration: vhost, logger: testLogger("vhost"))
        }
        #expect(vhostError?.code == .vhostNotAllowed)
    }
}

@Suite("AMQP argument limits against RabbitMQ")
struct AMQPLimitTests {
    @Test func oversizedShortStringsAreRefusedBeforeTheyCostTheConnection() async throws {
        let connection = try await AMQPConnection.connect(configuration: TestBroker.configuration("limits"), logger: testLogger("limits"))
        let queue = uniqueName("limits")
        try await connection.declare([.queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true))])
        let long = String(repeating: "x", count: 300)
        for properties in [AMQPProperties(correlationID: long), AMQPProperties(headers: [long: "v"]),
                           AMQPProperties(headers: ["nested": .table([long: true])])] {
            let error = await #expect(throws: AMQPError.self) {
                try await connection.publish([1], routingKey: queue, properties: properties)
            }
            #expect(error?.code == .invalidArgument)
            #expect(error?.isRetryable == false)
        }
        let nameError = await #expect(throws: AMQPError.self) {
            try await connection.declare([.queue(QueueDeclaration(long))])
        }
        #expect(nameError?.code == .invalidArgument)
        // The connection was never put at risk.
        try await connection.publish([2], routingKey: queue)
        #expect(try await connection.queueInfo(queue).messageCount == 1)
        #expect(connection.reconnectCount == 0)
        await connection.close()
    }
}
