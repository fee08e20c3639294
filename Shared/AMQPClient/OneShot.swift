import Synchronization

/// A value set once and awaited by any number of tasks, before or after it
/// is set: the answer to something the I/O thread (or another service
/// loop) finishes later — a batch's confirms, a group of published changes.
/// Later `fulfil` calls are ignored.
public final class OneShot<Value: Sendable>: Sendable {
    private enum State {
        case waiting([CheckedContinuation<Value, Never>])
        case done(Value)
    }
    private let state = Mutex(State.waiting([]))

    public init() {}

    /// Waits for the value (at once if it is set).
    public func value() async -> Value {
        await withCheckedContinuation { continuation in
            // The check and the enqueue under one lock: no lost wake-up.
            let ready: Value? = state.withLock { state in
                switch state {
                case .done(let value): return value
                case .waiting(var waiters):
                    waiters.append(continuation)
                    state = .waiting(waiters)
                    return nil
                }
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Whether the value is set (without waiting).
    public var isSettled: Bool {
        state.withLock { if case .done = $0 { true } else { false } }
    }

    /// Sets the value and wakes every waiter; ignored after the first call.
    public func fulfil(_ value: Value) {
        let waiters: [CheckedContinuation<Value, Never>] = state.withLock { state in
            guard case .waiting(let waiters) = state else { return [] }
            state = .done(value)
            return waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }
}
