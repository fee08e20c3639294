import Synchronization

/// Tasks started one after another whose results are awaited later, oldest
/// first, with a bound on how many run at once: a publisher that sends its
/// next confirmed batch while earlier ones still await the broker's
/// confirms (the booking handler's outbox relay).
///
/// One task adds and waits (the publisher's loop); the lock is there so the
/// class is `Sendable`, not for several waiters: `waitForRoom` and `drain`
/// called from two tasks at once could both remove the same task.
public final class InFlightTasks<Success: Sendable>: Sendable {
    private let tasks = Mutex<[Task<Success, Never>]>([])

    public init() {}

    /// Adds a task started after every one added before.
    public func add(_ task: Task<Success, Never>) {
        tasks.withLock { $0.append(task) }
    }

    /// Waits until fewer than `limit` tasks are in flight, finishing the
    /// oldest first.
    public func waitForRoom(_ limit: Int) async {
        while let oldest = tasks.withLock({ $0.count >= limit ? $0.first : nil }) {
            _ = await oldest.value
            _ = tasks.withLock { $0.removeFirst() }
        }
    }

    /// Waits until every task in flight has finished.
    public func drain() async {
        await waitForRoom(1)
    }
}
