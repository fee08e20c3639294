import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport
import Testing
import Tracing
@testable import BookingHandler

/// An event keeps its command's trace from the store to the relay's
/// publish: the outbox row holds the W3C context of the transaction that
/// queued it (also when the relay reads it back from the table), the
/// `booking.events` copy carries it with the caller's `tracestate`, the
/// `booking.public` copy without.
@Suite("Outbox trace context")
struct OutboxTraceTests {
    static let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test(arguments: StoreKind.allCases)
    func aRowKeepsTheTraceOfItsTransaction(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        let trace = StoredTrace(traceParent: Self.traceParent, traceState: "caller=1")
        try await store.transaction { tx in
            // What CommitEngine sets from the store span (the process's
            // tracer here is the no-op one, which has none).
            (tx as! any QueuingTransaction).events.trace = trace
            try tx.enqueue(routingKey: "booking.created", messageID: "traced", body: Data("{}".utf8), orderKey: nil)
        }
        try await store.transaction { tx in
            try tx.enqueue(routingKey: "booking.created", messageID: "untraced", body: Data("{}".utf8), orderKey: nil)
        }
        // In memory, as the relay takes them after the commit.
        let committed = store.takeCommitted(limit: 10)
        #expect(committed.map(\.messageID) == ["traced", "untraced"])
        #expect(committed[0].traceParent == Self.traceParent && committed[0].traceState == "caller=1")
        #expect(committed[1].traceParent == nil && committed[1].traceState == nil)
        // From the table, as after a failed publish or a restart.
        try await store.suspendHandOver(releasing: committed.map(\.id))
        let read = try await store.claimOutbox(limit: 10, lease: 5)
        #expect(read.map(\.messageID) == ["traced", "untraced"])
        #expect(read.first?.traceParent == Self.traceParent && read.first?.traceState == "caller=1")
        #expect(read.last?.traceParent == nil)
    }

    /// The relay's messages: the stored context is the parent of the
    /// publish; the public copy never carries the caller's `tracestate`.
    @Test func relayMessagesCarryTheStoredTrace() throws {
        let event = OutboxEvent(id: 1, routingKey: "booking.created", messageID: "m", body: [],
                                traceParent: Self.traceParent, traceState: "caller=1")
        let properties = AMQPProperties.persistentJSON(type: "booking.created", messageID: "m")
        let inside = OutboxRelay.message([], to: Topology.eventsExchange, event, properties)
        #expect(inside.properties.headers["traceparent"]?.stringValue == Self.traceParent)
        #expect(inside.properties.headers["tracestate"]?.stringValue == "caller=1")
        #expect(inside.traceState == .propagate)
        let outside = OutboxRelay.message([], to: Topology.publicExchange, event, properties)
        #expect(outside.properties.headers["traceparent"]?.stringValue == Self.traceParent)
        #expect(outside.properties.headers["tracestate"] == nil)
        #expect(outside.traceState == .drop)

        // Published (a W3C tracer, no current span): the same trace, a span
        // of its own, and still no tracestate on the public copy.
        let tracer = W3CPropagationTracer()
        var published = [inside, outside]
        for i in published.indices { _ = MessageTracing.startPublishSpan(&published[i], tracer: tracer) }
        for message in published {
            let header = try #require(message.properties.headers["traceparent"]?.stringValue)
            let context = try #require(W3CSpanContext(traceParent: header))
            #expect(context.traceIDHex == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect(context.spanIDHex != "00f067aa0ba902b7")
        }
        #expect(published[0].properties.headers["tracestate"]?.stringValue == "caller=1")
        #expect(published[1].properties.headers["tracestate"] == nil)

        // An event without a stored trace carries none into the publish.
        let bare = OutboxRelay.message([], to: Topology.eventsExchange,
                                       OutboxEvent(id: 2, routingKey: "booking.created", messageID: "n", body: []), properties)
        #expect(bare.properties.headers["traceparent"] == nil)
    }
}
