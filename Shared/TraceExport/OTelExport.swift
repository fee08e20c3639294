import Logging
import OTel
import ServiceLifecycle
import ServiceSupport
import Tracing

/// swift-otel as the set's span exporter: OTLP over HTTP (protobuf) to
/// `OTEL_EXPORTER_OTLP_ENDPOINT`, batched in the background. Only traces:
/// logs stay JSON on standard error and metrics stay Prometheus
/// (`/metrics`), whatever `OTEL_LOGS_EXPORTER` or `OTEL_METRICS_EXPORTER`
/// say.
///
/// The executables pass ``bootstrap`` to `ServiceRunner.main`, which calls
/// it only when an endpoint is set (`TraceSetup`).
public enum OTelExport {
    /// Bootstraps `InstrumentationSystem` with swift-otel's tracer (W3C
    /// trace-context propagator, the sampler of `OTEL_TRACES_SAMPLER`,
    /// default parent-based always-on) and returns its exporting service.
    /// `OTEL_SERVICE_NAME` overrides `service` as the resource's name.
    public static let bootstrap: TraceExporterBootstrap = { service, environment in
        var configuration = OTel.Configuration.default
        configuration.serviceName = service
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        configuration.propagators = [.traceContext]
        // Its own problems (an unreachable collector) in the service's log.
        configuration.diagnosticLogger = .custom(Logger(label: "otel"))
        configuration.diagnosticLogLevel = .warning
        return try OTel.bootstrap(configuration: configuration, environment: environment)
    }
}
