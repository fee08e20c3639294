import AMQPClient
import Logging
import ServiceSupport
import Testing
import Tracing

/// W3C trace context in AMQP headers: the parser, the propagation-only
/// tracer, the publish span's parent and what it writes, the choice of
/// tracer and the log metadata. Each test passes its tracer explicitly:
/// the process's `InstrumentationSystem` stays the no-op one, which every
/// other test of this process relies on.
@Suite("Trace propagation")
struct TracePropagationTests {
    static let traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    let tracer = W3CPropagationTracer()

    @Test func parsesAndWritesVersionZero() throws {
        let context = try #require(W3CSpanContext(traceParent: Self.traceParent, traceState: "vendor=1"))
        #expect(context.traceIDHex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(context.spanIDHex == "00f067aa0ba902b7")
        #expect(context.flags == 1)
        #expect(context.traceState == "vendor=1")
        #expect(context.traceParent == Self.traceParent)
        // Leading zeros survive the round trip.
        let small = W3CSpanContext(traceID: (0, 1), spanID: 2, flags: 0)
        #expect(small.traceParent == "00-00000000000000000000000000000001-0000000000000002-00")
        #expect(W3CSpanContext(traceParent: small.traceParent) == small)
    }

    @Test(arguments: [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // version 00 with more
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  // short
        "",
    ])
    func refusesMalformedHeaders(_ header: String) {
        #expect(W3CSpanContext(traceParent: header) == nil)
    }

    @Test func laterVersionsMayAppendFields() {
        #expect(W3CSpanContext(traceParent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more") != nil)
    }

    /// A consumed message's span continues the sender's trace with an id
    /// of its own; without a `traceparent` a new trace starts.
    @Test func spansContinueTheTraceTheMessageCarries() throws {
        let headers: AMQPTable = ["traceparent": .string(Self.traceParent), "tracestate": .string("vendor=1")]
        let parent = MessageTracing.extract(from: headers, tracer: tracer)
        let span = tracer.startSpan("process q", context: parent, ofKind: .consumer)
        let child = try #require(span.context[W3CSpanContextKey.self])
        #expect(child.traceIDHex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(child.spanIDHex != "00f067aa0ba902b7")
        #expect(child.traceState == "vendor=1")

        let root = tracer.startSpan("process q", context: MessageTracing.extract(from: [:], tracer: tracer), ofKind: .consumer)
        let fresh = try #require(root.context[W3CSpanContextKey.self])
        #expect(fresh.traceIDHex != child.traceIDHex)
        #expect(fresh.flags == 1, "a trace the set starts is sampled")
    }

    /// Span ids do not repeat (they come from a counter mixed, not from a
    /// system call each), and children keep their parent's trace id.
    @Test func idsAreDistinct() throws {
        let root = tracer.startSpan("root", context: .topLevel, ofKind: .internal)
        let trace = try #require(root.context[W3CSpanContextKey.self]).traceIDHex
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let child = try #require(tracer.startSpan("child", context: root.context, ofKind: .internal).context[W3CSpanContextKey.self])
            #expect(child.traceIDHex == trace)
            seen.insert(child.spanIDHex)
        }
        #expect(seen.count == 10_000)
        let roots = Set((0..<1_000).compactMap { _ in
            tracer.startSpan("root", context: .topLevel, ofKind: .internal).context[W3CSpanContextKey.self]?.traceIDHex
        })
        #expect(roots.count == 1_000)
    }

    /// A byte-array header that is UTF-8 is read like a string (some
    /// clients send `traceparent` that way).
    @Test func readsByteArrayHeaders() throws {
        let headers: AMQPTable = ["traceparent": .bytes(Array(Self.traceParent.utf8))]
        let context = MessageTracing.extract(from: headers, tracer: tracer)
        #expect(context[W3CSpanContextKey.self]?.traceParent == Self.traceParent)
    }

    /// Without a current span, a publish continues the trace its message
    /// carries (an outbox row's stored context, a dead letter sent back)
    /// and replaces the header with its own span's.
    @Test func publishContinuesTheMessagesOwnTrace() throws {
        var message = OutgoingMessage(body: [], exchange: "booking.events", routingKey: "booking.created",
                                      properties: .persistentJSON(headers: ["traceparent": .string(Self.traceParent),
                                                                            "tracestate": .string("vendor=1")]))
        let span = MessageTracing.startPublishSpan(&message, tracer: tracer)
        let written = try #require(message.properties.headers["traceparent"]?.stringValue.flatMap { W3CSpanContext(traceParent: $0) })
        #expect(written.traceIDHex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(written.spanIDHex != "00f067aa0ba902b7")
        #expect(written.spanIDHex == span.context[W3CSpanContextKey.self]?.spanIDHex, "the header names the publish span")
        #expect(message.properties.headers["tracestate"]?.stringValue == "vendor=1")
    }

    /// Inside a span (handling a delivery) a publish is that span's child,
    /// whatever the message carried before.
    @Test func publishInsideASpanIsItsChild() throws {
        let current = tracer.startSpan("process q", context: .topLevel, ofKind: .consumer)
        let spanContext = try #require(current.context[W3CSpanContextKey.self])
        var message = OutgoingMessage(body: [], routingKey: "reply",
                                      properties: .persistentJSON(headers: ["traceparent": .string(Self.traceParent)]))
        ServiceContext.withValue(current.context) {
            _ = MessageTracing.startPublishSpan(&message, tracer: tracer)
        }
        let written = try #require(message.properties.headers["traceparent"]?.stringValue.flatMap { W3CSpanContext(traceParent: $0) })
        #expect(written.traceIDHex == spanContext.traceIDHex)
        #expect(written.spanIDHex != spanContext.spanIDHex)
    }

    /// A copy for outside readers gets the trace id but never the caller's
    /// `tracestate`, neither the one its headers had nor the one of the
    /// current trace.
    @Test func dropPolicyLeavesTraceStateOut() throws {
        let caller = try #require(W3CSpanContext(traceParent: Self.traceParent, traceState: "caller=secret"))
        var context = ServiceContext.topLevel
        context[W3CSpanContextKey.self] = caller
        var message = OutgoingMessage(body: [], exchange: "booking.public", routingKey: "booking.created",
                                      properties: .persistentJSON(headers: ["tracestate": .string("caller=secret")]),
                                      traceState: .drop)
        ServiceContext.withValue(context) {
            _ = MessageTracing.startPublishSpan(&message, tracer: tracer)
        }
        #expect(message.properties.headers["tracestate"] == nil)
        let written = try #require(message.properties.headers["traceparent"]?.stringValue.flatMap { W3CSpanContext(traceParent: $0) })
        #expect(written.traceIDHex == caller.traceIDHex)

        // The same message with the default policy keeps it (the check can fail).
        var kept = message
        kept.traceState = .propagate
        ServiceContext.withValue(context) {
            _ = MessageTracing.startPublishSpan(&kept, tracer: tracer)
        }
        #expect(kept.properties.headers["tracestate"]?.stringValue == "caller=secret")
    }

    /// The no-op tracer (tracing disabled) writes nothing.
    @Test func noOpTracerLeavesHeadersAlone() {
        var message = OutgoingMessage(body: [], routingKey: "q", properties: .persistentJSON(headers: ["a": "b"]))
        _ = MessageTracing.startPublishSpan(&message, tracer: NoOpTracer())
        #expect(message.properties.headers == ["a": "b"])
    }

    @Test func chooseModeFromTheEnvironment() {
        #expect(TraceSetup.choose(environment: [:], hasExporter: true) == .propagateOnly)
        #expect(TraceSetup.choose(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"], hasExporter: true) == .export)
        #expect(TraceSetup.choose(environment: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"],
                                  hasExporter: true) == .export)
        #expect(TraceSetup.choose(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": ""], hasExporter: true) == .propagateOnly)
        #expect(TraceSetup.choose(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"], hasExporter: false)
                == .propagateOnly, "a process without the exporter linked cannot export")
        #expect(TraceSetup.choose(environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"],
                                  hasExporter: true) == .disabled)
    }

    /// Log lines written inside a span carry its ids; outside one, none.
    @Test func logMetadataNamesTheCurrentSpan() throws {
        #expect(TraceSetup.logMetadataProvider.get().isEmpty)
        let span = tracer.startSpan("process q", context: .topLevel, ofKind: .consumer)
        let ids = try #require(span.context[W3CSpanContextKey.self])
        let metadata = ServiceContext.withValue(span.context) { TraceSetup.logMetadataProvider.get() }
        #expect(metadata["trace_id"] == .string(ids.traceIDHex))
        #expect(metadata["span_id"] == .string(ids.spanIDHex))
    }

    /// A context's ids are read from it; a context without a span has none.
    @Test func spanContextIsReadFromTheContext() throws {
        var context = ServiceContext.topLevel
        tracer.extract(["traceparent": Self.traceParent], into: &context, using: DictionaryExtractor())
        let read = try #require(TraceSetup.spanContext(of: context, tracer: tracer))
        #expect(read.traceParent == Self.traceParent)
        #expect(TraceSetup.spanContext(of: .topLevel, tracer: NoOpTracer()) == nil)
    }
}
