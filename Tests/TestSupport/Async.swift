import AMQPClient
import Foundation
import Logging

/// Thrown by ``withTimeout(_:_:)`` when the body did not finish in time.
public struct TimedOut: Error, CustomStringConvertible {
    public let description: String
}

/// Runs `body`, failing with ``TimedOut`` if it takes longer than `seconds`.
/// A guard against hangs, not a synchronisation device: the body awaits
/// the event itself.
public func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String = "operation", _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            throw TimedOut(description: "\(what) did not finish within \(seconds) s")
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// A logger for tests: warnings and up on stderr unless `LOG_LEVEL` says otherwise.
public func testLogger(_ label: String) -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
    return logger
}

/// A unique name for a test's own queue or exchange.
public func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
}

extension AMQPConsumer {
    /// Collects the next `count` deliveries, acking each.
    public func take(_ count: Int, ack: Bool = true) async throws -> [AMQPDelivery] {
        var out: [AMQPDelivery] = []
        guard count > 0 else { return out }
        for try await delivery in self {
            if ack { try await delivery.ack() }
            out.append(delivery)
            if out.count == count { break }
        }
        return out
    }
}

/// The local calendar date `days` from now in `timeZone`, as `YYYY-MM-DD`,
/// so tests and benchmarks book dates that never go stale.
public func localDate(daysFromNow days: Int, timeZone: String = "Europe/Berlin") -> String {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: timeZone)!
    let date = calendar.date(byAdding: .day, value: days, to: Date())!
    let c = calendar.dateComponents([.year, .month, .day], from: date)
    return String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!)
}
