import ServiceSupport
import Tracing

/// The W3C trace context an outbox row keeps: its publish, whenever the
/// relay makes it, continues the trace of the command that queued it.
struct StoredTrace: Sendable, Equatable {
    let traceParent: String
    let traceState: String?

    /// What the process's tracer writes for `context` (nil: no trace — the
    /// no-op tracer, or no span).
    init?(_ context: ServiceContext) {
        var headers: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &headers, using: DictionaryInjector())
        guard let parent = headers["traceparent"] else { return nil }
        self.init(traceParent: parent, traceState: headers["tracestate"])
    }

    init(traceParent: String, traceState: String?) {
        self.traceParent = traceParent
        self.traceState = traceState
    }

    /// The attributes of a store span (``StoreSpans``).
    static func storeAttributes(commandType: String?, system: String) -> SpanAttributes {
        var attributes = StoreSpans.attributes(system: system, operation: "transaction")
        if let commandType { attributes["booking.command.type"] = commandType }
        return attributes
    }
}
