import AMQPClient
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

/// Paces a replay: at most `rate` items (rooms, closures, bookings) per
/// second measured from its start when `REPLAY_MAX_RATE` sets one (0, the
/// default, sets none), and never more than ``maxBacklog`` items waiting in
/// the replay queue (``backlogMessages`` messages: fewer when each message
/// is a page of bookings).
///
/// Why the backlog and not a fixed rate: a replay feeds one projector, and
/// the projector applies it at its own speed. A fixed rate either caps the
/// rebuild below what the projector takes (5,000/s puts three million
/// bookings at ten minutes) or lets the queue grow without bound when
/// the projector is slower. Waiting for the queue to drain runs the
/// replay at the projector's speed with a bounded queue on the broker.
///
/// The rate arithmetic is a pure value with the clock passed in, tested
/// without waiting.
public struct ReplayPacer: Sendable {
    /// `REPLAY_MAX_RATE` when unset: no fixed rate; the backlog paces.
    public static let defaultRate = 0
    /// Replayed items the replay queue may hold ready before the replay
    /// waits for the projector: 20 of the handler's read pages, well above
    /// one in flight, some MB.
    public static let maxBacklog = 10_000
    /// How long a backlog above ``maxBacklog`` may stay without shrinking
    /// before the replay gives up (the projector is gone or stopped
    /// consuming; its rebuild has failed by then).
    public static let backlogPatience = Duration.seconds(120)

    /// Items per second at most; 0 = no fixed rate.
    public let rate: Int
    /// Ready messages in the replay queue above which the replay waits:
    /// ``maxBacklog`` items in messages of `itemsPerMessage` bookings
    /// (never fewer than two pages, so the consumer always has one to take
    /// while the next is published).
    public let backlogMessages: Int
    private let start: ContinuousClock.Instant
    private var total = 0

    public init(rate: Int, start: ContinuousClock.Instant, itemsPerMessage: Int = 1) {
        self.rate = max(0, rate)
        self.start = start
        self.backlogMessages = max(2, Self.maxBacklog / max(1, itemsPerMessage))
    }

    /// Records `count` more items sent by `now`; the wait before the
    /// next page, or nil when the replay is not ahead of its pace.
    public mutating func sent(_ count: Int, now: ContinuousClock.Instant) -> Duration? {
        total += count
        guard rate > 0 else { return nil }
        let due = start + Duration.seconds(Double(total) / Double(rate))
        return due > now ? due - now : nil
    }
}

extension CommandConsumer {
    /// After a confirmed page of `count` items to `queue`: waits as
    /// `REPLAY_MAX_RATE` asks, then while the queue holds more than
    /// ``ReplayPacer/backlogMessages`` ready messages. Throws a `ReplyError`
    /// when the backlog has not shrunk for ``ReplayPacer/backlogPatience``.
    func pace(_ pacer: inout ReplayPacer, sent count: Int, queue: String) async throws {
        if let wait = pacer.sent(count, now: ContinuousClock.now) { try await Task.sleep(for: wait) }
        var lowest = Int.max
        var since = ContinuousClock.now
        while let info = try? await connection.queueInfo(queue), info.messageCount > pacer.backlogMessages {
            if info.messageCount < lowest {
                lowest = info.messageCount
                since = .now
            } else if ContinuousClock.now - since > ReplayPacer.backlogPatience {
                throw ReplyError(code: .invalidField, text: "queue '\(queue.prefix(255))' holds \(info.messageCount) "
                                 + "replayed messages and nobody takes them; replay abandoned", field: "queue")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}
