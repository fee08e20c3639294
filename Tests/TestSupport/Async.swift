import AMQPClient
import Foundation
import Logging
import Synchronization

/// Thrown by ``withTimeout(_:_:)`` when the body did not finish in time.
public struct TimedOut: Error, CustomStringConvertible {
    public let description: String
}

/// Runs `body`, failing with ``TimedOut`` if it takes longer than `seconds`.
/// A guard against hangs, not a synchronisation device: the body awaits
/// the event itself.
///
/// On timeout the body is cancelled but not awaited, so a body stuck on
/// something cancellation cannot reach (a continuation nobody resumes)
/// fails the test instead of hanging the run.
public func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String = "operation", _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let race = TimeoutRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.start(continuation,
                       work: Task {
                           let result: Result<T, any Error>
                           do { result = .success(try await body()) } catch { result = .failure(error) }
                           race.finish(result)
                       },
                       timer: Task {
                           try await Task.sleep(for: .seconds(seconds))
                           race.finish(.failure(TimedOut(description: "\(what) did not finish within \(seconds) s")))
                       })
        }
    } onCancel: {
        race.cancel()
    }
}

/// The state of one ``withTimeout(_:_:_:)``: whichever of the body and the
/// timer finishes first answers the caller and cancels the other.
private final class TimeoutRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var outcome: Result<T, any Error>?
        var tasks: [Task<Void, any Error>] = []
        var cancelled = false
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, work: Task<Void, any Error>, timer: Task<Void, any Error>) {
        let (early, cancelled) = state.withLock { s -> (Result<T, any Error>?, Bool) in
            s.tasks = [work, timer]
            if let outcome = s.outcome { return (outcome, s.cancelled) }
            s.continuation = continuation
            return (nil, s.cancelled)
        }
        if cancelled || early != nil { work.cancel(); timer.cancel() }
        if let early { continuation.resume(with: early) }
    }

    func finish(_ outcome: Result<T, any Error>) {
        let (continuation, tasks) = state.withLock { s -> (CheckedContinuation<T, any Error>?, [Task<Void, any Error>]) in
            guard s.outcome == nil else { return (nil, []) }
            s.outcome = outcome
            defer { s.continuation = nil }
            return (s.continuation, s.tasks)
        }
        for task in tasks { task.cancel() }
        continuation?.resume(with: outcome)
    }

    func cancel() {
        let tasks = state.withLock { s -> [Task<Void, any Error>] in
            s.cancelled = true
            return s.tasks
        }
        for task in tasks { task.cancel() }
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
