import Synchronization

/// Serialises work per key (a booking id) inside one process: whoever
/// holds a key runs alone with it, the others wait in arrival order.
///
/// Rules: every ``lock(_:)`` is matched by exactly one ``unlock(_:)`` of
/// the same key, on every path (the lock is not reentrant: locking a key
/// one already holds waits forever). Waiting suspends the task; it does
/// not block a thread. The uncontended path takes the mutex once and
/// does not suspend.
public final class KeyedLock: Sendable {
    private struct State {
        var held: Set<String> = []
        var waiters: [String: [CheckedContinuation<Void, Never>]] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    /// Returns once this caller holds `key`.
    public func lock(_ key: String) async {
        if state.withLock({ $0.held.insert(key).inserted }) { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            // The holder may have unlocked between the two critical
            // sections: then take the key now instead of waiting.
            let mine = state.withLock { s -> Bool in
                if s.held.insert(key).inserted { return true }
                s.waiters[key, default: []].append(continuation)
                return false
            }
            if mine { continuation.resume() }
        }
    }

    /// Releases `key`: the longest waiter, if any, holds it now.
    public func unlock(_ key: String) {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if var queue = s.waiters[key], !queue.isEmpty {
                let next = queue.removeFirst()
                s.waiters[key] = queue.isEmpty ? nil : queue
                return next  // ownership passes to the waiter
            }
            s.held.remove(key)
            return nil
        }
        next?.resume()
    }

    /// Whether someone holds `key` (tests).
    public func isHeld(_ key: String) -> Bool { state.withLock { $0.held.contains(key) } }

    /// How many wait for `key` (tests).
    public func waiting(_ key: String) -> Int { state.withLock { $0.waiters[key]?.count ?? 0 } }
}
