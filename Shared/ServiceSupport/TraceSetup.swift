import Logging
import ServiceLifecycle
import Tracing

/// Makes a process's exporting tracer: bootstraps `InstrumentationSystem`
/// and returns the service that exports (run in the service's group,
/// first, so it stops last and flushes what the others ended). The
/// executables pass swift-otel's (`TraceExport`); the libraries only know
/// this signature, so only the executables link the exporter.
public typealias TraceExporterBootstrap = @Sendable (_ service: String, _ environment: [String: String]) throws -> any Service

/// Which tracer a service process runs with, from the standard
/// OpenTelemetry variables:
///
/// - `OTEL_SDK_DISABLED=true`: none (swift-distributed-tracing's no-op;
///   no trace headers are read or written);
/// - `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
///   set: the exporter the executable passed, over OTLP/HTTP, with the
///   other `OTEL_*` variables (service name, sampler, headers, timeouts);
/// - otherwise: ``W3CPropagationTracer`` — trace ids travel, nothing is
///   recorded.
public enum TraceSetup {
    /// What ``choose(environment:hasExporter:)`` decided.
    public enum Mode: String, Sendable, Equatable {
        case disabled
        case propagateOnly = "propagate-only"
        case export
    }

    /// The mode for `environment` (pure; see the type's documentation).
    public static func choose(environment: [String: String], hasExporter: Bool) -> Mode {
        if ["true", "1", "yes"].contains(environment["OTEL_SDK_DISABLED"]?.lowercased() ?? "") { return .disabled }
        let endpoint = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] ?? environment["OTEL_EXPORTER_OTLP_ENDPOINT"]
        if hasExporter, let endpoint, !endpoint.isEmpty { return .export }
        return .propagateOnly
    }

    /// Bootstraps the process's tracer (once per process) and returns the
    /// exporter's service, if any. A failing exporter bootstrap (a bad
    /// `OTEL_*` value) throws: a configuration error.
    static func bootstrap(service: String, environment: [String: String],
                          exporter: TraceExporterBootstrap?) throws -> (mode: Mode, service: (any Service)?) {
        let mode = choose(environment: environment, hasExporter: exporter != nil)
        switch mode {
        case .disabled:
            return (mode, nil)
        case .propagateOnly:
            InstrumentationSystem.bootstrap(W3CPropagationTracer())
            return (mode, nil)
        case .export:
            return (mode, try exporter!(service, environment))
        }
    }

    /// Adds `trace_id` and `span_id` of the current span to every log line
    /// written inside it (a consumed message, a store transaction, a
    /// gateway call), whichever tracer runs.
    public static let logMetadataProvider = Logger.MetadataProvider {
        guard let context = ServiceContext.current, let span = spanContext(of: context) else { return [:] }
        return ["trace_id": .string(span.traceIDHex), "span_id": .string(span.spanIDHex)]
    }

    /// The W3C ids of `context`'s span: read directly from
    /// ``W3CPropagationTracer``'s key, or from what the process's tracer
    /// writes as `traceparent` (any other tracer, swift-otel's included).
    public static func spanContext(of context: ServiceContext, tracer: any Tracer = InstrumentationSystem.tracer)
        -> W3CSpanContext?
    {
        if let span = context[W3CSpanContextKey.self] { return span }
        var headers: [String: String] = [:]
        tracer.inject(context, into: &headers, using: DictionaryInjector())
        return headers["traceparent"].flatMap { W3CSpanContext(traceParent: $0, traceState: headers["tracestate"]) }
    }
}

/// Writes trace headers into a dictionary.
public struct DictionaryInjector: Injector {
    public init() {}
    public func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key] = value
    }
}

/// Reads trace headers from a dictionary.
public struct DictionaryExtractor: Extractor {
    public init() {}
    public func extract(key: String, from carrier: [String: String]) -> String? {
        carrier[key]
    }
}
