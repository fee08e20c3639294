import AMQPClient
import BookingContracts
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
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
/// The pass ledger's transactions are spans under the consume span they
/// ran for; a `booking.get` and an HTTP query of the projector, each sent
/// with a `traceparent`, continue the caller's trace (read span, server span).
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
                && has("pass-sender", "store admit event") && has("pass-sender", "store admit retry")
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
        #expect(store.attributes["db.system.name"] == "sqlite" && store.attributes["db.operation.name"] == "transaction",
                "\(store.attributes)")
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
        // The ledger's transactions ← the consume span they ran for: the
        // event's admission and the first call's result; the retry's
        // admission and the second call's result.
        let admission = try #require(spans("pass-sender", "store admit event", parent: passConsume.spanID).first, "\(dump)")
        #expect(admission.kind == 1 && admission.attributes["db.system.name"] == "sqlite"
                && admission.attributes["db.operation.name"] == "transaction" && admission.attributes["booking.id"] == booked.id,
                "\(admission.attributes)")
        #expect(!spans("pass-sender", "store record", parent: passConsume.spanID).isEmpty, "\(dump)")
        #expect(!spans("pass-sender", "store admit retry", parent: retryConsume.spanID).isEmpty, "\(dump)")
        #expect(!spans("pass-sender", "store record", parent: retryConsume.spanID).isEmpty, "\(dump)")
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

        // A booking.get sent with a traceparent: the handler's read span ←
        // its consume span ← the caller.
        let queryTrace = Self.randomHex(16), querySpan = Self.randomHex(8)
        var query = AMQPProperties.persistentJSON(type: "booking.get", messageID: UUID().uuidString)
        query.headers["traceparent"] = .string("00-\(queryTrace)-\(querySpan)-01")
        let got = try await client.call(Array(#"{"bookingId": "\#(booked.id)"}"#.utf8), exchange: Topology.bookingQueriesExchange,
                                        routingKey: "booking.get", properties: query, timeout: .seconds(30))
        #expect(String(decoding: got.body, as: UTF8.self).contains(booked.id))
        try await receiver.spans.wait("the query's trace", timeout: 30) { spans in
            let trace = spans.filter { $0.traceID == queryTrace }
            return trace.contains { $0.name == "store read booking.get" } && trace.contains { $0.parentSpanID == querySpan }
        }
        let queryDump = receiver.spans.current.filter { $0.traceID == queryTrace }.map(\.description).joined(separator: "\n")
        let queryConsume = try #require(receiver.spans.current.first {
            $0.traceID == queryTrace && $0.name == "process \(Topology.bookingQueriesQueue)" && $0.parentSpanID == querySpan
        }, "\(queryDump)")
        let read = try #require(receiver.spans.current.first { $0.traceID == queryTrace && $0.name == "store read booking.get" },
                                "\(queryDump)")
        #expect(read.service == "booking-handler" && read.parentSpanID == queryConsume.spanID, "\(queryDump)")
        #expect(read.attributes["db.system.name"] == "sqlite" && read.attributes["db.operation.name"] == "read"
                && read.attributes["booking.query.type"] == "booking.get", "\(read.attributes)")

        // An HTTP query of the projector with a traceparent: a server span
        // `/rooms` ← the caller. The page's poll (`/api/revision`), asked
        // first with a traceparent of its own, makes none.
        let httpTrace = Self.randomHex(16), httpSpan = Self.randomHex(8), pollTrace = Self.randomHex(16)
        let poll = try await Self.get(projector.base + "/api/revision", traceParent: "00-\(pollTrace)-\(Self.randomHex(8))-01")
        #expect(poll == 200)
        let rooms = try await Self.get(projector.base + "/rooms?date=\(date)", traceParent: "00-\(httpTrace)-\(httpSpan)-01")
        #expect(rooms == 200)
        try await receiver.spans.wait("the HTTP query's span", timeout: 30) { spans in
            spans.contains { $0.traceID == httpTrace }
        }
        let server = try #require(receiver.spans.current.first { $0.traceID == httpTrace })
        #expect(server.service == "availability-projector" && server.name == "/rooms" && server.kind == 2
                && server.parentSpanID == httpSpan, "\(server)")
        #expect(server.attributes["http.request.method"] == "GET" && server.attributes["http.response.status_code"] == "200",
                "\(server.attributes)")
        #expect(!receiver.spans.current.contains { $0.traceID == pollTrace }, "the poll was traced")

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

    /// GET `url` with a `traceparent` header; the status.
    static func get(_ url: String, traceParent: String) async throws -> Int {
        var request = URLRequest(url: URL(string: url)!)
        request.setValue(traceParent, forHTTPHeaderField: "traceparent")
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
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
