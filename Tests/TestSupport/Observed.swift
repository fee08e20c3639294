import Foundation

/// A value that tests wait on: every change wakes the waiters whose
/// condition now holds (no polling, no sleeps).
public final class Observed<Value: Sendable>: @unchecked Sendable {  // all state behind `lock`
    private let lock = NSLock()
    private var value: Value
    private var waiters: [(id: UUID, test: (Value) -> Bool, continuation: CheckedContinuation<Void, any Error>)] = []

    public init(_ value: Value) { self.value = value }

    public var current: Value {
        lock.lock(); defer { lock.unlock() }
        return value
    }

    public func update(_ change: (inout Value) -> Void) {
        lock.lock()
        change(&value)
        let ready = waiters.filter { $0.test(value) }
        waiters.removeAll { w in ready.contains { $0.id == w.id } }
        lock.unlock()
        for w in ready { w.continuation.resume() }
    }

    /// Waits until `condition` holds (guarded by `withTimeout`).
    public func wait(_ what: String, timeout: Double = 60, until condition: @escaping @Sendable (Value) -> Bool) async throws {
        try await withTimeout(timeout, what) { [self] in
            let id = UUID()
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                    lock.lock()
                    if condition(value) {
                        lock.unlock()
                        c.resume()
                        return
                    }
                    waiters.append((id, condition, c))
                    lock.unlock()
                }
            } onCancel: { [self] in
                lock.lock()
                let cancelled = waiters.filter { $0.id == id }
                waiters.removeAll { $0.id == id }
                lock.unlock()
                for w in cancelled { w.continuation.resume(throwing: CancellationError()) }
            }
        }
    }
}
