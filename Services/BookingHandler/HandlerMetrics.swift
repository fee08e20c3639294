import Metrics
import ServiceSupport

/// Every metric the booking handler exports, in one table (docs: README,
/// "Metrics"). Static, so each is made on first use — after the service
/// bootstrapped its metrics backend.
enum HandlerMetrics {
    /// Commands by resolved type and outcome (ok, rejected, refused,
    /// duplicate, dead-lettered, reply-to-refused, requeued).
    static let commands = CounterFamily("booking_commands_total", labels: "type", "outcome")
    /// Time from delivery to ack of a command.
    static let commandDuration = Timer(label: "booking_command_duration_seconds")
    /// Queries (`booking.get`, `booking.list`) by outcome.
    static let queries = CounterFamily("booking_queries_total", labels: "outcome")
    /// Time to answer a query.
    static let queryDuration = Timer(label: "booking_query_seconds")
    /// Events confirmed by the broker and marked published.
    static let eventsPublished = Counter(label: "booking_events_published_total")
    /// Events committed and not yet published, as of the relay's last round.
    static let outboxBacklog = Gauge(label: "booking_outbox_backlog")
    /// Lifecycle transitions the timers applied.
    static let timerTransitions = Counter(label: "booking_timer_transitions_total")
}
