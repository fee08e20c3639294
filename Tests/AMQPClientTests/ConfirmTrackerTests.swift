import Testing
@testable import AMQPClient

/// The tracker is generic over the waiter; tests use the publish's own
/// number (as a String) so the settled order is visible in failures.
typealias Tracker = ConfirmTracker<String>

private func waiters(_ entries: [Tracker.Entry]) -> [String] {
    entries.map(\.waiter)
}

/// A tracker with `count` publishes registered, waiters "1" ... "count".
private func tracker(registering count: Int) -> Tracker {
    var t = Tracker()
    for i in 1...count {
        let seq: UInt64 = t.register(String(i))
        precondition(seq == UInt64(i))
    }
    return t
}

@Suite("ConfirmTracker")
struct ConfirmTrackerTests {
    @Test func startsEmptyAndNumbersFromOne() {
        var t = Tracker()
        #expect(t.nextSequence == 1)
        #expect(t.isEmpty)
        #expect(t.pendingCount == 0)
        let first: UInt64 = t.register("a")
        let second: UInt64 = t.register("b")
        let third: UInt64 = t.register("c")
        #expect([first, second, third] == [1, 2, 3])
        #expect(t.nextSequence == 4)
        #expect(t.pendingCount == 3)
        #expect(!t.isEmpty)
    }

    @Test func singleAcksInOrder() {
        var t = tracker(registering: 3)
        #expect(waiters(t.settle(deliveryTag: 1, multiple: false)) == ["1"])
        #expect(t.pendingCount == 2)
        #expect(waiters(t.settle(deliveryTag: 2, multiple: false)) == ["2"])
        #expect(waiters(t.settle(deliveryTag: 3, multiple: false)) == ["3"])
        #expect(t.isEmpty)
        #expect(t.nextSequence == 4)
    }

    @Test func singleAcksOutOfOrder() {
        var t = tracker(registering: 4)
        #expect(waiters(t.settle(deliveryTag: 3, multiple: false)) == ["3"])
        #expect(waiters(t.settle(deliveryTag: 1, multiple: false)) == ["1"])
        #expect(t.pendingCount == 2)
        #expect(waiters(t.settle(deliveryTag: 4, multiple: false)) == ["4"])
        #expect(waiters(t.settle(deliveryTag: 2, multiple: false)) == ["2"])
        #expect(t.isEmpty)
    }

    @Test func multipleSettlesEverythingUpToTheTagInOrder() {
        var t = tracker(registering: 5)
        #expect(waiters(t.settle(deliveryTag: 3, multiple: true)) == ["1", "2", "3"])
        #expect(t.pendingCount == 2)
        // Not again.
        #expect(t.settle(deliveryTag: 3, multiple: true).isEmpty)
        #expect(t.settle(deliveryTag: 2, multiple: true).isEmpty)
        #expect(t.settle(deliveryTag: 1, multiple: false).isEmpty)
        #expect(waiters(t.settle(deliveryTag: 5, multiple: true)) == ["4", "5"])
        #expect(t.isEmpty)
    }

    @Test func multipleAfterOutOfOrderSingleAcks() {
        var t = tracker(registering: 8)
        #expect(waiters(t.settle(deliveryTag: 3, multiple: false)) == ["3"])
        #expect(waiters(t.settle(deliveryTag: 6, multiple: false)) == ["6"])
        #expect(waiters(t.settle(deliveryTag: 5, multiple: true)) == ["1", "2", "4", "5"])
        #expect(t.pendingCount == 2)  // 7 and 8
        #expect(waiters(t.settle(deliveryTag: 7, multiple: true)) == ["7"])
        #expect(waiters(t.settle(deliveryTag: 8, multiple: false)) == ["8"])
        #expect(t.isEmpty)
    }

    @Test func singleAckAtTheFrontThenMultiple() {
        // 1 and 2 acked singly (the cursor moves past them), then a multiple
        // ack up to 4 must still settle exactly 3 and 4.
        var t = tracker(registering: 5)
        #expect(waiters(t.settle(deliveryTag: 2, multiple: false)) == ["2"])
        #expect(waiters(t.settle(deliveryTag: 1, multiple: false)) == ["1"])
        #expect(waiters(t.settle(deliveryTag: 4, multiple: true)) == ["3", "4"])
        #expect(waiters(t.settle(deliveryTag: 5, multiple: true)) == ["5"])
        #expect(t.isEmpty)
    }

    @Test func multipleWhenEverythingBelowWasAlreadySettled() {
        var t = tracker(registering: 4)
        for tag: UInt64 in [4, 2, 3] {
            #expect(t.settle(deliveryTag: tag, multiple: false).count == 1)
        }
        // Only 1 is left; a multiple ack up to 4 settles just it.
        #expect(waiters(t.settle(deliveryTag: 4, multiple: true)) == ["1"])
        #expect(t.isEmpty)
    }

    @Test func unknownOrAlreadySettledTagsReturnNothing() {
        var t = tracker(registering: 2)
        #expect(t.settle(deliveryTag: 0, multiple: false).isEmpty)
        #expect(t.settle(deliveryTag: 0, multiple: true).isEmpty)
        #expect(t.settle(deliveryTag: 99, multiple: false).isEmpty)
        #expect(t.pendingCount == 2)
        #expect(waiters(t.settle(deliveryTag: 1, multiple: false)) == ["1"])
        #expect(t.settle(deliveryTag: 1, multiple: false).isEmpty)
        #expect(t.settle(deliveryTag: 1, multiple: true).isEmpty)
        #expect(t.pendingCount == 1)
        #expect(waiters(t.settle(deliveryTag: 2, multiple: false)) == ["2"])
        #expect(t.settle(deliveryTag: 2, multiple: false).isEmpty)
        #expect(t.settle(deliveryTag: 2, multiple: true).isEmpty)
        #expect(t.isEmpty)
    }

    /// The tracker does not know ack from nack: it hands back the settled
    /// entries and the caller decides what they mean.
    @Test func nackSettlesTheSameEntriesAsAck() {
        var acked = tracker(registering: 6)
        var nacked = tracker(registering: 6)
        let steps: [(UInt64, Bool)] = [(2, false), (4, true), (6, false), (5, true)]
        for (tag, multiple) in steps {
            let a: [String] = waiters(acked.settle(deliveryTag: tag, multiple: multiple))
            let n: [String] = waiters(nacked.settle(deliveryTag: tag, multiple: multiple))
            #expect(a == n)
            #expect(!a.isEmpty)
        }
        #expect(acked.isEmpty)
        #expect(nacked.isEmpty)
    }

    @Test func markReturnedIsCarriedOnTheSettledEntry() {
        var t = tracker(registering: 3)
        let returned = AMQPError(.unroutable, "no queue for exchange 'x' routing key 'k': NO_ROUTE", replyCode: 312)
        t.markReturned(2, returned)
        #expect(t.pendingCount == 3)
        let settled: [Tracker.Entry] = t.settle(deliveryTag: 3, multiple: true)
        #expect(waiters(settled) == ["1", "2", "3"])
        #expect(settled.map(\.returned) == [nil, returned, nil])
    }

    @Test func markReturnedOnSingleAck() {
        var t = tracker(registering: 1)
        let returned = AMQPError(.unroutable, "NO_ROUTE", replyCode: 312)
        t.markReturned(1, returned)
        let settled: [Tracker.Entry] = t.settle(deliveryTag: 1, multiple: false)
        #expect(settled.count == 1)
        #expect(settled.first?.returned == returned)
    }

    @Test func markReturnedForUnknownOrSettledSequenceIsIgnored() {
        var t = tracker(registering: 2)
        #expect(t.settle(deliveryTag: 1, multiple: false).count == 1)
        t.markReturned(1, AMQPError(.unroutable, "late"))
        t.markReturned(42, AMQPError(.unroutable, "unknown"))
        #expect(t.pendingCount == 1)
        let settled: [Tracker.Entry] = t.settle(deliveryTag: 42, multiple: true)
        #expect(waiters(settled) == ["2"])
        #expect(settled.first?.returned == nil)
        // The returned mark did not resurrect sequence 1 or create 42.
        #expect(t.isEmpty)
    }

    @Test func resetReturnsAllPendingInSequenceOrderAndRestartsNumbering() {
        var t = tracker(registering: 7)
        #expect(t.settle(deliveryTag: 2, multiple: false).count == 1)
        #expect(t.settle(deliveryTag: 5, multiple: false).count == 1)
        let returned = AMQPError(.unroutable, "NO_ROUTE", replyCode: 312)
        t.markReturned(6, returned)
        let all: [Tracker.Entry] = t.reset()
        #expect(waiters(all) == ["1", "3", "4", "6", "7"])
        #expect(all.map(\.returned) == [nil, nil, nil, returned, nil])
        #expect(t.isEmpty)
        #expect(t.pendingCount == 0)
        #expect(t.nextSequence == 1)
        #expect(t.reset().isEmpty)

        // A new channel: numbering from 1 again, and the cursor too.
        #expect(t.register("new-1") == 1)
        #expect(t.register("new-2") == 2)
        #expect(t.register("new-3") == 3)
        #expect(waiters(t.settle(deliveryTag: 2, multiple: true)) == ["new-1", "new-2"])
        #expect(waiters(t.settle(deliveryTag: 3, multiple: false)) == ["new-3"])
        #expect(t.isEmpty)
    }

    @Test func resetAfterMultipleAckRestartsTheCursor() {
        var t = tracker(registering: 10)
        #expect(t.settle(deliveryTag: 10, multiple: true).count == 10)
        #expect(t.reset().isEmpty)
        #expect(t.register("a") == 1)
        #expect(t.register("b") == 2)
        // Were the cursor left at 11, this multiple ack would settle nothing.
        #expect(waiters(t.settle(deliveryTag: 2, multiple: true)) == ["a", "b"])
    }

    @Test func registerAfterSettlingKeepsCounting() {
        var t = tracker(registering: 3)
        #expect(t.settle(deliveryTag: 3, multiple: true).count == 3)
        #expect(t.register("4") == 4)
        #expect(t.register("5") == 5)
        #expect(waiters(t.settle(deliveryTag: 5, multiple: true)) == ["4", "5"])
        #expect(t.isEmpty)
    }

    /// 100k publishes, a multiple ack every 64, with single acks sprinkled
    /// in out of order: every publish settles exactly once, in order within
    /// each multiple ack, and nothing is left.
    @Test func largeRunStaysCorrect() {
        var t = ConfirmTracker<Int>()
        let total: Int = 100_000
        var settledCount: [UInt8] = Array(repeating: 0, count: total + 1)
        var settledTotal: Int = 0
        var multipleAcks: Int = 0
        var allInOrder: Bool = true

        func record(_ entries: [ConfirmTracker<Int>.Entry]) {
            for e in entries {
                settledCount[e.waiter] &+= 1
                settledTotal += 1
            }
        }

        for i in 1...total {
            let seq: UInt64 = t.register(i)
            if seq != UInt64(i) { allInOrder = false }
            if i % 64 == 0 {
                // Single-ack one publish in the middle of the window first (out of
                // order), then multiple-ack this window.
                let single: [ConfirmTracker<Int>.Entry] = t.settle(deliveryTag: UInt64(i - 10), multiple: false)
                record(single)
                let batch: [ConfirmTracker<Int>.Entry] = t.settle(deliveryTag: UInt64(i), multiple: true)
                let values: [Int] = batch.map(\.waiter)
                if values != values.sorted() { allInOrder = false }
                record(batch)
                multipleAcks += 1
            }
        }
        #expect(allInOrder)
        #expect(multipleAcks == total / 64)
        // 100_000 = 1562 * 64 + 32: the last 32 are still pending.
        #expect(t.pendingCount == total - (total / 64) * 64)
        #expect(t.pendingCount == 32)
        record(t.settle(deliveryTag: UInt64(total), multiple: true))
        #expect(t.isEmpty)
        #expect(settledTotal == total)
        #expect(settledCount.dropFirst().allSatisfy { $0 == 1 })
        #expect(t.nextSequence == UInt64(total + 1))
    }
}
