import Metrics
import ServiceSupport

/// Every metric the availability projector exports, in one table (docs:
/// docs/operations.md, "Metrics and health"). Static, so each is made on first use — after the
/// service bootstrapped its metrics backend.
enum ProjectorMetrics {
    /// Booking events by outcome (applied, stale, ignored, dead-lettered,
    /// untrusted-sender).
    static let events = CounterFamily("projector_events_total", labels: "outcome")
    /// Time from delivery to ack of a booking event.
    static let eventApply = Timer(label: "projector_event_apply_seconds")
    /// Free-slot queries by transport (amqp, http) and outcome.
    static let queries = CounterFamily("projector_queries_total", labels: "via", "outcome")
    /// Time to answer a query over AMQP.
    static let amqpQueryDuration = Timer(label: "projector_query_seconds", dimensions: [("via", "amqp")])
    /// Time to answer a query over HTTP.
    static let httpQueryDuration = Timer(label: "projector_query_seconds", dimensions: [("via", "http")])
    /// `availability.changed` messages confirmed on `booking.events`.
    static let availabilityChanged = Counter(label: "projector_availability_changed_total")
}
