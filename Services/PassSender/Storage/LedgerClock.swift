import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The clock a ledger shared by several hosts reads claims and leases by:
/// this host's clock moved by its measured offset from the database
/// server's (`clock_timestamp()` on PostgreSQL), measured at start and
/// every ``interval``.
///
/// Why: a lease is an instant written by one instance and compared by
/// another. With each host's own clock, a host whose clock ran ahead by
/// more than the lease's margin would take over rows a live instance is
/// still sending (a second send), and one running behind would wait too
/// long for a dead instance's rows. Measured against the one server, every
/// instance reads the same time to within half a round trip plus the drift
/// between two measurements.
///
/// Ownership: the offset is written by ``sync()`` (at start and every
/// ``interval`` by ``run()``) and read by any thread through ``now()``,
/// under a mutex.
public final class LedgerClock: Sendable, Service {
    /// How often the offset is measured again.
    public static let interval: Duration = .seconds(10)
    /// A measurement whose round trip took longer than this is not used:
    /// its error (half the round trip) could reach the lease's margins.
    public static let longestRoundTrip: TimeInterval = 1
    /// An offset above this is logged as a warning (once per change of a
    /// second or more): the host's clock is wrong, and everything else on
    /// it that trusts the clock (log times, the gateway's TLS) is too.
    public static let warnAbove: TimeInterval = 1

    /// Reads the server's clock between two readings of the local one
    /// (nil for a ledger on this host: no offset).
    let read: @Sendable (@escaping @Sendable () -> Date) async throws -> ServerClockReading?
    let base: @Sendable () -> Date
    let logger: Logger
    private let state = Mutex(State())
    private let metrics: PassSenderMetrics

    private struct State {
        var offset: TimeInterval = 0
        var warnedAt: TimeInterval?
    }

    /// A clock following `database`'s server, on top of `base` (by
    /// default ``steadyClock()``; tests give a host clock that is wrong).
    public convenience init(database: any LedgerDatabase, base: @escaping @Sendable () -> Date = LedgerClock.steadyClock(),
                            logger: Logger) {
        self.init(read: { try await database.readServerClock($0) }, base: base, logger: logger, metrics: .shared)
    }

    init(read: @escaping @Sendable (@escaping @Sendable () -> Date) async throws -> ServerClockReading?, base: @escaping @Sendable () -> Date, logger: Logger,
         metrics: PassSenderMetrics = .shared) {
        self.read = read
        self.base = base
        self.logger = logger
        self.metrics = metrics
    }

    /// This host's wall clock when called, advanced from then on by the
    /// monotonic clock: a step of the wall clock (NTP, an operator) does
    /// not move it, so between two measurements the ledger's time only
    /// drifts with the host's oscillator; before the first one, it is this
    /// host's time.
    public static func steadyClock() -> @Sendable () -> Date {
        let wall = Date().timeIntervalSince1970
        let start = DispatchTime.now().uptimeNanoseconds
        return { Date(timeIntervalSince1970: wall + Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9) }
    }

    /// This host's time plus the last measured offset.
    @Sendable public func now() -> Date {
        base().addingTimeInterval(state.withLock { $0.offset })
    }

    /// The offset in use: the server's clock minus this host's.
    public var offset: TimeInterval { state.withLock { $0.offset } }

    /// Measures the offset once. Returns false when the measurement was not
    /// used (its round trip was too long; the previous offset stays).
    /// Throws what the database threw.
    @discardableResult
    public func sync() async throws -> Bool {
        guard let reading = try await read(base) else { return true }
        let roundTrip = reading.received.timeIntervalSince(reading.sent)
        guard roundTrip <= Self.longestRoundTrip else {
            logger.debug("ledger clock: measurement not used", metadata: ["round.trip.s": "\(roundTrip)"])
            return false
        }
        // The server read its clock somewhere in the round trip: assume the middle.
        let offset = reading.server.timeIntervalSince(reading.sent) - roundTrip / 2
        let warn: Bool = state.withLock { state in
            state.offset = offset
            guard abs(offset) > Self.warnAbove else {
                state.warnedAt = nil
                return false
            }
            if let warned = state.warnedAt, abs(warned - offset) < 1 { return false }
            state.warnedAt = offset
            return true
        }
        metrics.ledgerClockOffset.record(offset)
        if warn {
            logger.warning("this host's clock is off the ledger database server's; claims and leases follow the server's clock",
                           metadata: ["offset.s": .string(String(format: "%.3f", offset))])
        }
        return true
    }

    /// The first measurement, before the ledger is used: up to five tries
    /// for a round trip short enough; after that the host's clock is used
    /// until a later measurement succeeds (logged). Throws what the
    /// database threw.
    public func start() async throws {
        for _ in 0..<5 where try await sync() { return }
        logger.warning("ledger clock: no measurement of the database server's clock had a round trip under \(Self.longestRoundTrip) s; using this host's clock until one does")
    }

    /// Measures the offset every ``interval`` until shutdown. A failed
    /// measurement keeps the last offset (a host's clock drifts little in
    /// seconds, a database outage is reported by the ledger's own writes).
    public func run() async throws {
        await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                do {
                    try await Task.sleep(for: Self.interval)
                } catch {
                    return
                }
                do {
                    try await sync()
                } catch {
                    logger.debug("ledger clock: measurement failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
