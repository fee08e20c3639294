import BookingContracts
import Foundation
import ServiceSettings
import Synchronization

/// `CALLER_RATE`: how many deliveries a second one caller may send to one
/// service instance, and how many it may send at once after a quiet spell
/// (contract v1.2, "Callers are rate-limited").
public struct CallerRate: Sendable, Equatable, CustomStringConvertible {
    /// Tokens added per second.
    public var perSecond: Double
    /// The bucket's size.
    public var burst: Int

    /// The contract's default: 100 a second, a burst of 500.
    public static let standard = CallerRate(perSecond: 100, burst: 500)

    public init(perSecond: Double, burst: Int) {
        self.perSecond = perSecond
        self.burst = burst
    }

    public var description: String {
        let r = perSecond == perSecond.rounded() ? String(Int(perSecond)) : String(perSecond)
        return "\(r)/s, burst \(burst)"
    }

    /// Parses `CALLER_RATE`: `RATE` or `RATE,BURST` (a rate alone gets a
    /// burst of five seconds' worth), or `off` (no limit). Unset is
    /// ``standard``; nil means no limit.
    public static func parse(_ text: String?) throws -> CallerRate? {
        guard let text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return .standard }
        if ["off", "none", "unlimited"].contains(text.lowercased()) { return nil }
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard (1...2).contains(parts.count), let rate = Double(parts[0]), rate.isFinite, rate >= 0.01, rate <= 1_000_000 else {
            throw SettingsError("CALLER_RATE: '\(text.prefix(60))' is not RATE or RATE,BURST (e.g. 100,500: 100 a second, a burst of 500) or off")
        }
        let burst: Int
        if parts.count == 2 {
            guard let b = Int(parts[1]), (1...10_000_000).contains(b) else {
                throw SettingsError("CALLER_RATE: burst '\(parts[1].prefix(20))' is not a whole number in 1...10000000")
            }
            burst = b
        } else {
            burst = max(1, Int((rate * 5).rounded(.up)))
        }
        return CallerRate(perSecond: rate, burst: burst)
    }
}

/// A token bucket per caller (`user_id`; one shared bucket for anonymous
/// callers), per service instance: ``take(_:)`` admits a delivery or says
/// how long until the caller's next one would be admitted.
///
/// Per instance on purpose: the buckets live in memory, so two handler
/// processes admit up to twice the rate between them. A bound shared by
/// every instance would need a round trip to a shared store on every
/// delivery; the point here is that no single caller can monopolise an
/// instance, its database writer or its dead-letter queues.
///
/// Thread-safe: one `Mutex` guards the table; a take is a dictionary
/// look-up and a few floating-point operations.
public final class CallerRateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    /// The rate; nil admits everything.
    public let rate: CallerRate?
    /// Callers never limited: admins and the set's own services.
    public let exempt: Set<String>
    private let now: @Sendable () -> Double
    private let buckets = Mutex<[String: Bucket]>([:])
    /// Most buckets kept; past it, buckets that have refilled are dropped
    /// (a full bucket is what a new one would be), and if none has, the
    /// one used longest ago.
    static let maxBuckets = 10_000

    /// - Parameters:
    ///   - now: seconds on a monotonic clock (tests pass their own).
    public init(rate: CallerRate?, exempt: Set<String>,
                now: @escaping @Sendable () -> Double = CallerRateLimiter.monotonicSeconds) {
        self.rate = rate
        self.exempt = exempt
        self.now = now
    }

    /// Seconds since an arbitrary start, from the continuous clock.
    @Sendable public static func monotonicSeconds() -> Double {
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
    private static let start = ContinuousClock.now

    /// Takes one token for `caller`: nil when admitted, else the
    /// milliseconds until a token is there (at least 1).
    public func take(_ caller: Caller) -> Int? {
        guard let rate else { return nil }
        if let name = caller.name, exempt.contains(name) { return nil }
        let key = caller.name ?? ""
        let t = now()
        return buckets.withLock { table -> Int? in
            var bucket = table[key] ?? Bucket(tokens: Double(rate.burst), updated: t)
            bucket.tokens = min(Double(rate.burst), bucket.tokens + max(0, t - bucket.updated) * rate.perSecond)
            bucket.updated = t
            let admitted = bucket.tokens >= 1
            if admitted { bucket.tokens -= 1 }
            if table[key] == nil, table.count >= Self.maxBuckets { Self.dropFull(&table, rate: rate, now: t) }
            table[key] = bucket
            guard !admitted else { return nil }
            return max(1, Int(((1 - bucket.tokens) / rate.perSecond * 1000).rounded(.up)))
        }
    }

    private static func dropFull(_ table: inout [String: Bucket], rate: CallerRate, now: Double) {
        table = table.filter { _, b in b.tokens + max(0, now - b.updated) * rate.perSecond < Double(rate.burst) }
        if table.count >= maxBuckets, let oldest = table.min(by: { $0.value.updated < $1.value.updated })?.key {
            table[oldest] = nil
        }
    }

    /// Buckets held (tests).
    var bucketCount: Int { buckets.withLock { $0.count } }
}
