import Metrics
import ServiceSupport

/// Every metric the booking handler exports, in one table (docs:
/// docs/booking-handler.md, "Metrics"). Static, so each is made on first use — after the service
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
    /// Events committed and not yet published, as the relay's last round
    /// found them (at most its batch size: a full round means "at least").
    static let outboxBacklog = Gauge(label: "booking_outbox_backlog")
    /// Lifecycle transitions the timers applied.
    static let timerTransitions = Counter(label: "booking_timer_transitions_total")
    // The hold and waitlist metrics (v1.2) are ``WaitlistMetrics``:
    // counted after commit, and injectable for tests.
}

/// Where a command's time goes inside the handler, one timer per stage
/// (`booking_command_stage_seconds{stage}`): what `benchmarks pipeline`
/// reads for docs/performance.md's breakdown of a lone command, and what
/// an operator reads when commands get slow. The stages nest: `store` is
/// part of `process`, and `store_queued` and `store_transaction` are parts
/// of `store` (what is left of it is the hop back to the command's task).
enum CommandStage: String, CaseIterable, Sendable {
    /// The I/O thread decoded the delivery → the command's task runs.
    case dispatch
    /// Validation, the store, and encoding of the reply.
    case process
    /// Submitted to group commit → the command's task resumed with its outcome.
    case store
    /// Submitted to group commit → its group started on the writer.
    case storeQueued = "store_queued"
    /// Its group started → COMMIT returned (the whole group's work).
    case storeTransaction = "store_transaction"
    /// The reply handed to the connection → confirmed by the broker
    /// (commands answered from their processing; not poison, refusals or
    /// replays, whose timing says nothing about the hot path).
    case reply
    /// The ack handed to the connection → written (as `reply`).
    case ack

    private static let timers: [CommandStage: Timer] = Dictionary(uniqueKeysWithValues: allCases.map {
        ($0, Timer(label: "booking_command_stage_seconds", dimensions: [("stage", $0.rawValue)]))
    })

    /// Records the time from `start` to now for this stage.
    func record(since start: ContinuousClock.Instant, now: ContinuousClock.Instant = .now) {
        let elapsed = (now - start).components
        Self.timers[self]?.recordNanoseconds(elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000)
    }
}
