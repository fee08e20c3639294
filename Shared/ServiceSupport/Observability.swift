import Metrics
import Prometheus

/// Metrics for the whole process: swift-metrics bootstrapped with a
/// Prometheus registry, exposed by ``OpsServer`` on `/metrics`.
public enum Observability {
    /// The registry every metric of this process lands in.
    public static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()

    /// Bootstraps metrics; call before creating any metric (idempotent).
    public static func bootstrap() {
        _ = registry
    }
}
