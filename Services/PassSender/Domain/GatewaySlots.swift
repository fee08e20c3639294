import Synchronization

/// How many gateway calls a process has in flight at once, across both
/// consumers (`PASS_GATEWAY_CONCURRENCY`): a counting semaphore, first
/// come first served.
///
/// Why a bound of its own, apart from `PASS_CONCURRENCY`: the passes of a
/// call in flight when the process dies may go out twice, and the gateway
/// should see no more calls at once than before. Bounding the calls alone
/// keeps both where they were, while the rest of a message's work — its
/// admission and the commit of each answer (group commit: the more of them
/// wait at once, the fewer transactions), publishing its follow-ups with
/// confirms, the ack — overlaps for as many messages as `PASS_CONCURRENCY`
/// allows. The HTTP client gets as many connections per host as there are
/// slots, so a call never waits for a connection inside its own timeout.
///
/// A message waits for its slot holding claims (the admission took them):
/// ``PassDispatcher`` renews them first when the wait was long enough to
/// put their lease at risk.
///
/// A waiter whose task is cancelled (the graceful stop's time limit ran
/// out) leaves the queue with `CancellationError`: its message is requeued
/// having sent nothing, instead of waiting for a slot that a hanging
/// gateway may hold until the process is killed.
final class GatewaySlots: Sendable {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var free: Int
        var waiters: [Waiter] = []
        /// Appended at the back, taken from `head`: FIFO without shifting.
        var head = 0
        var nextID: UInt64 = 0
    }

    private let state: Mutex<State>

    init(limit: Int) {
        precondition(limit >= 1)
        state = Mutex(State(free: limit))
    }

    /// Calls waiting for a slot now (tests).
    var waiting: Int { state.withLock { $0.waiters.count - $0.head } }

    /// Runs `body` holding a slot; the slot is free again when it returns
    /// or throws. Throws `CancellationError`, without running `body`, when
    /// the task is cancelled before it got a slot.
    func holding<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async throws {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Now { case granted, cancelled, queued }
                let now = state.withLock { s -> Now in
                    if s.free > 0 {
                        s.free -= 1
                        return .granted
                    }
                    // Checked under the lock: a cancellation either came
                    // before (seen here) or finds the waiter queued.
                    if Task.isCancelled { return .cancelled }
                    s.waiters.append(Waiter(id: id, continuation: continuation))
                    return .queued
                }
                switch now {
                case .granted: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .queued: break
                }
            }
        } onCancel: {
            let removed = state.withLock { s -> CheckedContinuation<Void, any Error>? in
                guard let i = s.waiters[s.head...].firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: i).continuation  // never handed a slot: nothing to give back
            }
            removed?.resume(throwing: CancellationError())
        }
    }

    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, any Error>? in
            guard s.head < s.waiters.count else {
                s.free += 1
                return nil
            }
            let next = s.waiters[s.head].continuation
            s.head += 1
            // Drop the taken front now and then: under steady load the
            // queue may never run empty.
            if s.head == s.waiters.count || s.head >= 64 {
                s.waiters.removeFirst(s.head)
                s.head = 0
            }
            return next  // the slot passes to it: `free` stays as it is
        }
        next?.resume()
    }
}
