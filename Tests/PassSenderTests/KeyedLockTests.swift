import TestSupport
import Testing
@testable import PassSender

/// The per-booking lock keeps the order in which places were taken, not
/// the order in which their owners come to wait (a consumer's concurrent
/// tasks run in no set order).
@Suite("Per-booking lock: delivery order")
struct KeyedLockTests {
    /// Waits until `key` has `count` owners waiting, or `done` says the
    /// awaited task got through without waiting (a lock that ignores places).
    static func until(_ lock: KeyedLock, _ key: String, waiting count: Int, or done: @escaping () -> Bool) async {
        while await lock.waiting(key) < count, !done() { await Task.yield() }
    }

    @Test func aLaterPlaceWhoseOwnerComesFirstWaitsForTheEarlierOne() async {
        let lock = KeyedLock()
        let first = await lock.reserve("bk")
        let second = await lock.reserve("bk")
        let order = LockedBox<[Int]>([])
        let later = Task {
            await lock.lock(second)
            order.withLock { $0.append(2) }
            await lock.unlock("bk")
        }
        await Self.until(lock, "bk", waiting: 1) { !order.withLock { $0.isEmpty } }
        await lock.lock(first)
        order.withLock { $0.append(1) }
        await lock.unlock("bk")
        await later.value
        #expect(order.withLock { $0 } == [1, 2])
    }

    /// A plain `lock` (the retry consumer, the outbox sweep) queues behind
    /// the places already taken, and other keys are not held up.
    @Test func aPlainLockQueuesBehindReservedPlacesOfItsKeyOnly() async {
        let lock = KeyedLock()
        let first = await lock.reserve("bk")
        let order = LockedBox<[String]>([])
        let plain = Task {
            await lock.lock("bk")
            order.withLock { $0.append("plain") }
            await lock.unlock("bk")
        }
        await Self.until(lock, "bk", waiting: 1) { !order.withLock { $0.isEmpty } }
        await lock.lock("other")
        order.withLock { $0.append("other") }
        await lock.unlock("other")
        await lock.lock(first)
        order.withLock { $0.append("first") }
        await lock.unlock("bk")
        await plain.value
        #expect(order.withLock { $0 } == ["other", "first", "plain"])
        // Released: the next comer takes it at once.
        let again = await lock.reserve("bk")
        await lock.lock(again)
        #expect(await lock.waiting("bk") == 0)
        await lock.unlock("bk")
    }
}
