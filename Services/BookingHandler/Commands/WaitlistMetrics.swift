import Metrics

/// The hold and waitlist metrics (contract v1.2, "Holds and waitlists";
/// names in docs/booking-handler.md, "Metrics").
///
/// Every count is recorded through ``StoreTransaction/afterCommit(_:)``,
/// so once per committed change: a command rolled back to its savepoint,
/// a group whose commit failed (its commands come again by redelivery), a
/// timer step that rolled back and is retried, or a duplicate answered
/// from the inbox count nothing. A replayed event is never counted: replay
/// runs no command.
struct WaitlistMetrics: Sendable {
    /// Holds created.
    let holdsCreated: Counter
    /// Holds confirmed by their requester or an admin.
    let holdsConfirmed: Counter
    /// Holds cancelled by their timer, unconfirmed.
    let holdsExpired: Counter
    /// Waitlisted bookings promoted.
    let promotions: Counter
    /// How long promoted bookings waited, from queueing to promotion.
    let promotionWait: Timer
    private let factory: any MetricsFactory

    /// The process's metrics, made on first use — after the service
    /// bootstrapped its metrics backend.
    static let shared = WaitlistMetrics(factory: MetricsSystem.factory)

    /// Metrics counted by `factory` (tests pass their own).
    init(factory: any MetricsFactory) {
        self.factory = factory
        holdsCreated = Counter(label: "booking_holds_created_total", factory: factory)
        holdsConfirmed = Counter(label: "booking_holds_confirmed_total", factory: factory)
        holdsExpired = Counter(label: "booking_holds_expired_total", factory: factory)
        promotions = Counter(label: "booking_waitlist_promotions_total", factory: factory)
        promotionWait = Timer(label: "booking_waitlist_wait_seconds", factory: factory)
    }

    /// Waitlisted bookings of `room`, as this process last counted them
    /// (after each committed change to that waitlist it made).
    func waitlistLength(room: String) -> Gauge {
        Gauge(label: "booking_waitlist_length", dimensions: [("room", room)], factory: factory)
    }
}
