import Metrics
import Synchronization

/// A counter with fixed label names whose label values vary per message
/// (`booking_commands_total{type,outcome}`), declared once in a service's
/// metrics table instead of a `Counter(label:dimensions:)` at every site
/// that counts.
///
/// The counter for each combination of values is made on its first use
/// and kept, so a message costs one dictionary lookup under a lock rather
/// than a trip through the metrics factory. First use comes after
/// `Observability.bootstrap()` (services count only once running), so the
/// counters bind to the real backend. Label values must come from a
/// bounded set (command types, outcomes), never from client text.
public final class CounterFamily: Sendable {
    /// The metric's name.
    public let label: String
    private let names: [String]
    private let factory: (any MetricsFactory)?
    private let counters = Mutex<[[String]: Counter]>([:])

    /// A family named `label` with these label names, in this order;
    /// `factory` for tests (default: the bootstrapped backend).
    public init(_ label: String, labels names: String..., factory: (any MetricsFactory)? = nil) {
        self.label = label
        self.names = names
        self.factory = factory
    }

    /// Adds `amount` to the counter of these label values (one per name, in
    /// the order the names were declared).
    public func increment(_ values: String..., by amount: Int = 1) {
        precondition(values.count == names.count, "\(label): \(names.count) label values expected")
        counter(values).increment(by: amount)
    }

    private func counter(_ values: [String]) -> Counter {
        counters.withLock { counters in
            if let counter = counters[values] { return counter }
            let dimensions = Array(zip(names, values))
            let counter = factory.map { Counter(label: label, dimensions: dimensions, factory: $0) }
                ?? Counter(label: label, dimensions: dimensions)
            counters[values] = counter
            return counter
        }
    }
}
