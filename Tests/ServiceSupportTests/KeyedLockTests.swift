import ServiceSupport
import Synchronization
import Testing

@Suite("Keyed lock", .timeLimit(.minutes(1)))
struct KeyedLockTests {
    final class Counts: Sendable {
        let state = Mutex((inside: 0, most: 0, done: 0))
    }

    /// Tasks of one key never overlap, and all of them get their turn.
    @Test func oneKeyRunsOneAtATimeAndEveryoneGetsATurn() async {
        let lock = KeyedLock()
        let counts = Counts()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    await lock.lock("b1")
                    counts.state.withLock { $0.inside += 1; $0.most = max($0.most, $0.inside) }
                    await Task.yield()
                    counts.state.withLock { $0.inside -= 1; $0.done += 1 }
                    lock.unlock("b1")
                }
            }
        }
        #expect(counts.state.withLock { $0.most } == 1)
        #expect(counts.state.withLock { $0.done } == 200)
        #expect(!lock.isHeld("b1"), "released after the last holder")
    }

    /// A waiter on one key does not hold up another key, and is let in
    /// once the holder unlocks.
    @Test func keysAreIndependentAndAWaiterGetsTheKeyOnUnlock() async {
        let lock = KeyedLock()
        await lock.lock("a")
        let (entered, enteredContinuation) = AsyncStream.makeStream(of: String.self)
        let waiter = Task {
            await lock.lock("a")
            enteredContinuation.yield("a")
            lock.unlock("a")
        }
        // The waiter is queued before "a" is released, so the hand-over
        // is what lets it in.
        while lock.waiting("a") == 0 { await Task.yield() }
        // Another key is free while "a" is held and waited for.
        await lock.lock("b")
        lock.unlock("b")
        #expect(!lock.isHeld("b"))
        #expect(lock.isHeld("a") && lock.waiting("a") == 1)
        lock.unlock("a")
        var iterator = entered.makeAsyncIterator()
        #expect(await iterator.next() == "a")
        await waiter.value
        #expect(!lock.isHeld("a"))
    }
}
