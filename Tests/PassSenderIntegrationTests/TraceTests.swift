import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// One booking, one trace (contract v1.2, "Traces across the set"): the
/// three service executables export their spans over OTLP/HTTP to a
/// stand-in collector started here (``OTLPReceiver``, which decodes the
/// protobuf requests), and a `booking.create` sent with a `traceparent`
/// shows up as one trace — the handler's consume, store and publish
/// spans, the pass sender's consume and gateway spans (across a retry of
/// a pass the gateway fails once, through the delay queue), the
/// projector's consume, store and publish spans — each linked to the
/// right parent. The reply, the events on both exchanges and the gateway
/// request carry the trace id; `booking.public` carries no `tracestate`;
/// the pass sender's JSON log line about the failed call names the trace.
@Suite("Traces across the set", .serialized)
struct TraceTests {
    static func randomHex(_ bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    @Test func oneBookingIsOneTraceThroughEveryService() async throws {
        let url = try TestBroker.isolatedURL("traces")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dir = try TemporaryDirectory("traces")
        defer { dir.remove() }
        let receiver = try await OTLPReceiver.start()
        // Each pass fails at its first call (code 4001) and is delivered by
        // the retry.
        let gateway = try await FaultGateway.start(passRule: { _, failures in failures == 0 })
        let amqp = url.urlStringWithCredentials
        let tracing = ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50", "LOG_FORMAT": "json"]
        let projector = try await DashboardTests.launch("availability-projector", tracing.merging(["AMQP_URL": amqp]) { $1 },
                                                        in: dir)
        defer { projector.stop() }
        let handler = try await DashboardTests.launch("booking-handler", tracing.merging([
            "AMQP_URL": amqp, "ROOMS_FILE": DashboardTests.root.appendingPathComponent("deploy/rooms.json").path,
        ]) { $1 }, in: dir)
        defer { handler.stop() }
        let passes = try await DashboardTests.launch("pass-sender", tracing.merging([
            "AMQP_URL": amqp, "PASS_GATEWAY_URL": gateway.url, "PASS_RETRY_DELAYS": "100ms", "LOG_LEVEL": "info",
        ]) { $1 }, in: dir)
        defer { passes.stop() }

        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "traces"),
                                                      logger: testLogger("traces"))
        // What outside readers of both exchanges receive.
        try await client.declare([
            .queue(QueueDeclaration("traces.public", type: .classic, durable: false)),
            .binding(QueueBinding(queue: "traces.public", exchange: Topology.publicExchange, routingKey: "booking.#")),
            .queue(QueueDeclaration("traces.events", type: .classic, durable: false)),
            .binding(QueueBinding(queue: "traces.events", exchange: Topology.eventsExchange, routingKey: "booking.#")),
        ])

        let traceID = Self.randomHex(16), callerSpan = Self.randomHex(8)
        var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
        properties.headers["traceparent"] = .string("00-\(traceID)-\(callerSpan)-01")
        properties.headers["tracestate"] = .string("caller=secret")
        let date = localDate(daysFromNow: 3)
        let body = #"{"room": "Berlin", "date": "\#(date)", "start": "09:00", "end": "10:00", "title": "Traced", "attendees": [{"name": "Ada", "email": "ada@example.com", "phone": "0170 1234567"}]}"#
        let reply = try await client.call(Array(body.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                          properties: properties, timeout: .seconds(30))
        let booked = try #require(try ContractJSON.decode(CommandReply.self, from: reply.body).bookingValue,
                                  "\(String(decoding: reply.body, as: UTF8.self))")
        let replyParent = try #require(reply.properties.headers["traceparent"]?.stringValue)
        #expect(replyParent.hasPrefix("00-\(traceID)-") && !replyParent.contains(callerSpan), "the reply: \(replyParent)")

        // Every span of the trace, once the last ones are in: a consume
        // span ends after the spans under it, so each service's is awaited
        // (the pass sender's retry too), with the projector's publish and
        // both gateway calls.
        try await receiver.spans.wait("the booking's trace", timeout: 90) { spans in
            let trace = spans.filter { $0.traceID == traceID }
            func has(_ service: String, _ name: String) -> Bool { trace.contains { $0.service == service && $0.name == name } }
            // No span whose parent has not come yet (but the caller's).
            let ids = Set(trace.map(\.spanID))
            return trace.allSatisfy { $0.parentSpanID == callerSpan || ids.contains($0.parentSpanID) }
                && has("booking-handler", "process booking-handler.commands")
                && has("pass-sender", "process pass-sender.events") && has("pass-sender", "process pass-sender.retry")
                && trace.count { $0.service == "pass-sender" && $0.name == "gateway /sendpass" } >= 2
                && trace.count { $0.service == "pass-sender" && $0.name == "POST" } >= 2
                && has("availability-projector", "process availability-projector.events")
                && trace.contains { $0.service == "availability-projector" && $0.kind == 4 }
        }
        #expect(receiver.undecodable.current.isEmpty, "\(receiver.undecodable.current)")
        let trace = receiver.spans.current.filter { $0.traceID == traceID }
        let dump = trace.map(\.description).joined(separator: "\n")
        func spans(_ service: String, _ name: String, parent: String? = nil) -> [ExportedSpan] {
            trace.filter { $0.service == service && $0.name == name && (parent == nil || $0.parentSpanID == parent) }
        }

        // The handler: consume ← the caller; store ← consume; the events'
        // publishes ← store (the outbox row's context); the reply ← consume.
        let consume = try #require(spans("booking-handler", "process booking-handler.commands", parent: callerSpan).first, "\(dump)")
        #expect(consume.kind == 5)
        #expect(consume.attributes["messaging.system"] == "rabbitmq")
        #expect(consume.attributes["messaging.destination.name"] == Topology.commandsExchange)
        #expect(consume.attributes["messaging.message.id"] == properties.messageID)
        let store = try #require(spans("booking-handler", "store booking.create", parent: consume.spanID).first, "\(dump)")
        let handlerPublishes = trace.filter { $0.service == "booking-handler" && $0.kind == 4 }
        let eventPublishes = handlerPublishes.filter { $0.parentSpanID == store.spanID }
        #expect(Set(eventPublishes.map(\.name)) == ["publish booking.events", "publish booking.public"], "\(dump)")
        #expect(handlerPublishes.contains { $0.parentSpanID == consume.spanID && $0.name == "publish (temporary)" }, "the reply")
        let eventSpanIDs = Set(eventPublishes.map(\.spanID))

        // The pass sender: consume ← an event's publish; the first gateway
        // call ← consume; its retry published ← consume, consumed from the
        // retry queue ← that publish; the second call ← the retry's consume;
        // each HTTP request ← its gateway span.
        let passConsume = try #require(spans("pass-sender", "process pass-sender.events").first, "\(dump)")
        #expect(eventSpanIDs.contains(passConsume.parentSpanID), "\(dump)")
        let gatewayCalls = spans("pass-sender", "gateway /sendpass")
        #expect(gatewayCalls.contains { $0.parentSpanID == passConsume.spanID }, "\(dump)")
        let retryConsume = try #require(trace.first { $0.service == "pass-sender" && $0.kind == 5 && $0.name != passConsume.name },
                                        "\(dump)")
        let retryPublish = try #require(trace.first { $0.spanID == retryConsume.parentSpanID }, "\(dump)")
        #expect(retryPublish.service == "pass-sender" && retryPublish.kind == 4 && retryPublish.parentSpanID == passConsume.spanID,
                "\(dump)")
        #expect(gatewayCalls.contains { $0.parentSpanID == retryConsume.spanID }, "\(dump)")
        let httpSpans = trace.filter { $0.service == "pass-sender" && $0.kind == 3 && $0.name == "POST" }
        #expect(Set(httpSpans.map(\.parentSpanID)) == Set(gatewayCalls.map(\.spanID)), "\(dump)")
        // The gateway saw the HTTP spans' ids in `traceparent`.
        let sent = gateway.state.current.traceParents
        #expect(sent.count == 2 && sent.allSatisfy { $0.hasPrefix("00-\(traceID)-") }, "\(sent)")
        let sentSpanIDs = sent.compactMap { header -> Substring? in
            let parts = header.split(separator: "-")
            return parts.count == 4 ? parts[2] : nil
        }
        #expect(Set(sentSpanIDs) == Set(httpSpans.map { Substring($0.spanID) }), "\(sent)")

        // The projector: each consume ← an event's publish; the change
        // (one of the two events changes the day, the other is stale):
        // availability.changed ← store ← consume.
        let projectorConsumes = spans("availability-projector", "process availability-projector.events")
        #expect(!projectorConsumes.isEmpty && projectorConsumes.allSatisfy { eventSpanIDs.contains($0.parentSpanID) }, "\(dump)")
        let change = try #require(trace.first { $0.service == "availability-projector" && $0.kind == 4 }, "\(dump)")
        let apply = try #require(trace.first { $0.spanID == change.parentSpanID }, "\(dump)")
        #expect(apply.name == "store apply", "\(dump)")
        #expect(projectorConsumes.contains { $0.spanID == apply.parentSpanID }, "\(dump)")

        // Outside readers: the trace id on both exchanges, the caller's
        // tracestate only on booking.events.
        let eventCopy = try #require(try await Self.first(client, "traces.events", booking: booked.id))
        let publicCopy = try #require(try await Self.first(client, "traces.public", booking: booked.id))
        #expect(eventCopy.properties.headers["traceparent"]?.stringValue?.hasPrefix("00-\(traceID)-") == true)
        #expect(eventCopy.properties.headers["tracestate"]?.stringValue == "caller=secret")
        #expect(publicCopy.properties.headers["traceparent"]?.stringValue?.hasPrefix("00-\(traceID)-") == true)
        #expect(publicCopy.properties.headers["tracestate"] == nil)

        // The pass sender's log line about the failed call names the trace
        // and the span it was written in.
        let logLines = try String(contentsOf: dir.appending("pass-sender.log"), encoding: .utf8).split(separator: "\n")
        let failedCall = try #require(logLines.first { $0.contains("gateway call partly failed") }, "\(logLines)")
        let line = try #require(try JSONSerialization.jsonObject(with: Data(failedCall.utf8)) as? [String: Any])
        #expect(line["trace_id"] as? String == traceID)
        #expect([passConsume.spanID, retryConsume.spanID].contains(line["span_id"] as? String ?? ""), "\(failedCall)")

        // Without a traceparent the handler starts the trace: its consume
        // span is the root, and the reply carries its trace id.
        let untraced = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
        let second = try await client.call(Array(body.replacingOccurrences(of: "09:00", with: "11:00")
                                                     .replacingOccurrences(of: "10:00", with: "12:00").utf8),
                                           exchange: Topology.commandsExchange, routingKey: "booking.create",
                                           properties: untraced, timeout: .seconds(30))
        let started = try #require(second.properties.headers["traceparent"]?.stringValue?.split(separator: "-").dropFirst().first)
        #expect(started != Substring(traceID))
        try await receiver.spans.wait("the handler's own trace", timeout: 30) { spans in
            spans.contains { $0.traceID == started && $0.name == "process booking-handler.commands" && $0.parentSpanID.isEmpty }
        }
        await client.close()
        await gateway.stop()
        await receiver.stop()
    }

    /// The first message of `queue` about `booking` (the copies of its events).
    static func first(_ client: AMQPConnection, _ queue: String, booking: String) async throws -> AMQPDelivery? {
        let consumer = try await client.consume(queue: queue, prefetch: 16)
        defer { consumer.stop() }
        return try await withTimeout(30, "a copy on \(queue)") {
            for try await delivery in consumer {
                try await delivery.ack()
                if String(decoding: delivery.body, as: UTF8.self).contains(booking) { return delivery }
            }
            return nil
        }
    }
}
