import Metrics
import ServiceSupport

/// Every metric the pass sender exports, in one table (docs:
/// docs/pass-sender.md, "Metrics, health"), like `HandlerMetrics` and `ProjectorMetrics`. The service
/// counts in ``shared``, made on first use — after the service bootstrapped
/// its metrics backend. Unlike those two it is a value rather than an enum
/// of statics, so that a test can make one on a `TestMetrics` factory and
/// hand it to the dispatcher and the group commit (statics bind to the
/// process-wide backend, which a test process can bootstrap only once).
struct PassSenderMetrics: Sendable {
    /// The table the service counts in.
    static let shared = PassSenderMetrics()

    /// Messages by type (event type, `retry`) and outcome (ok, requeued,
    /// dead-lettered; `no-pass` for `booking.submitted`, acknowledged
    /// without ledger work).
    let messages: CounterFamily
    /// Messages the ledger dropped, by reason (cancelled, stale,
    /// notConfirmed).
    let dropped: CounterFamily
    /// Admissions that waited for another instance's claim.
    let claimsWaited: Counter
    /// Gateway calls whose recipients another instance took over meanwhile.
    let claimsLost: Counter
    /// Claims renewed before a gateway call because the message waited for
    /// a gateway slot (`PASS_GATEWAY_CONCURRENCY`) nearly as long as their
    /// lease: more than a rare one means the gateway is the bottleneck.
    let claimsRenewed: Counter
    /// Time of one gateway call.
    let gatewayDuration: Timer
    /// Gateway calls by outcome (success, pass_failed, rejected, transient)
    /// and kind (pass or a notice kind).
    let gatewayRequests: CounterFamily
    /// Passes and notices given up (sent to `passes.failed`), by error code
    /// (`none` without one) and kind; counted once the ledger took the result.
    let passesFailed: CounterFamily
    /// Passes and notices scheduled for another attempt, by error code and
    /// kind; counted once the ledger took the result.
    let passesRetried: CounterFamily
    /// Passes delivered, by channel (gateway, spool).
    let passesDelivered: CounterFamily
    /// Notices delivered, by kind.
    let noticesDelivered: CounterFamily
    /// Notices written to the spool instead of `/notify`, by reason (unset,
    /// unsupported).
    let noticesSpooled: CounterFamily
    /// Writes per ledger transaction (group commit).
    let ledgerBatchWrites: Recorder
    /// Ledger transactions (group commit).
    let ledgerTransactions: Counter
    /// Batches run a second time, each write in a savepoint, because one of
    /// their writes threw (group commit).
    let ledgerReruns: Counter
    /// The ledger database server's clock minus this host's, as last
    /// measured (``LedgerClock``; PostgreSQL ledger only).
    let ledgerClockOffset: Gauge
    /// Bookings whose left-behind outbox rows a sweep published
    /// (``OutboxSweep``): above zero, something failed between a commit and
    /// its publish (a broker or database outage, a partition).
    let outboxSwept: Counter

    /// The table on `factory` (tests; default: the bootstrapped backend).
    init(factory: (any MetricsFactory)? = nil) {
        messages = CounterFamily("pass_messages_total", labels: "type", "outcome", factory: factory)
        dropped = CounterFamily("pass_messages_dropped_total", labels: "reason", factory: factory)
        gatewayRequests = CounterFamily("pass_gateway_requests_total", labels: "outcome", "kind", factory: factory)
        passesFailed = CounterFamily("passes_failed_total", labels: "error_code", "kind", factory: factory)
        passesRetried = CounterFamily("passes_retried_total", labels: "error_code", "kind", factory: factory)
        passesDelivered = CounterFamily("passes_delivered_total", labels: "channel", factory: factory)
        noticesDelivered = CounterFamily("notices_delivered_total", labels: "kind", factory: factory)
        noticesSpooled = CounterFamily("notices_spooled_total", labels: "reason", factory: factory)
        // What `Counter(label:)` and the like bind to when given no factory.
        let plain = factory ?? MetricsSystem.factory
        claimsWaited = Counter(label: "pass_claims_waited_total", factory: plain)
        claimsLost = Counter(label: "pass_claims_lost_total", factory: plain)
        claimsRenewed = Counter(label: "pass_claims_renewed_total", factory: plain)
        gatewayDuration = Timer(label: "pass_gateway_duration_seconds", factory: plain)
        ledgerBatchWrites = Recorder(label: "pass_ledger_batch_writes", aggregate: true, factory: plain)
        ledgerTransactions = Counter(label: "pass_ledger_transactions_total", factory: plain)
        ledgerReruns = Counter(label: "pass_ledger_batch_reruns_total", factory: plain)
        outboxSwept = Counter(label: "pass_outbox_swept_total", factory: plain)
        ledgerClockOffset = Gauge(label: "pass_ledger_clock_offset_seconds", factory: plain)
    }
}
