import BookingContracts
import Synchronization

/// At most one `booking.replay` per requester at a time: a replay reads
/// and publishes the whole state, and a caller looping on it would
/// otherwise hold every consumer slot and starve commands.
final class ReplayGate: Sendable {
    private let running = Mutex<Set<Caller>>([])

    /// Marks a replay for `requester` as running; false when one already is.
    func begin(_ requester: Caller) -> Bool {
        running.withLock { $0.insert(requester).inserted }
    }

    /// Marks `requester`'s replay as finished.
    func end(_ requester: Caller) {
        _ = running.withLock { $0.remove(requester) }
    }
}

/// Paces a replay to at most `rate` messages per second, measured from its
/// start: after each confirmed page, how long to wait before the next.
/// A pure value with the clock passed in, so the arithmetic is tested
/// without waiting.
public struct ReplayPacer: Sendable {
    /// `REPLAY_MAX_RATE` when unset: a million bookings in about 3.5 minutes,
    /// a fraction of what the handler and broker carry for commands.
    public static let defaultRate = 5_000

    /// Messages per second at most.
    public let rate: Int
    private let start: ContinuousClock.Instant
    private var total = 0

    public init(rate: Int, start: ContinuousClock.Instant) {
        self.rate = max(1, rate)
        self.start = start
    }

    /// Records `count` more messages sent by `now`; the wait before the
    /// next page, or nil when the replay is not ahead of its pace.
    public mutating func sent(_ count: Int, now: ContinuousClock.Instant) -> Duration? {
        total += count
        let due = start + Duration.seconds(Double(total) / Double(rate))
        return due > now ? due - now : nil
    }
}
