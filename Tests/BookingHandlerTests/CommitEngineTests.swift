import BookingContracts
import Dispatch
import Foundation
import Testing
@testable import BookingHandler

/// ``CommitEngine`` on both stores, with the groups it forms made certain
/// instead of left to timing: the writer is held by a plain transaction
/// while commands queue behind it, so they run as one group.
@Suite("Commit engine")
struct CommitEngineTests {
    struct Boom: Error {}

    /// The engine's events, as a stream the test awaits.
    static func observe(_ store: any BookingStore) throws -> AsyncStream<CommitEvent> {
        let (events, continuation) = AsyncStream<CommitEvent>.makeStream()
        let observable = try #require(store as? any CommitObservable)
        observable.observeCommits { continuation.yield($0) }
        return events
    }

    /// A command under key `key` that queues the event `key` and then
    /// throws ``Boom`` when `fails`.
    static func command(_ store: any BookingStore, key: String, fails: Bool) async throws -> StoreOutcome {
        try await store.execute(key: InboxKey(scope: "tester", key: key, fingerprint: 7), commandType: "test") { tx in
            try tx.enqueue(routingKey: "test", messageID: key, body: Data("{}".utf8), orderKey: "booking:" + key)
            if fails { throw Boom() }
            return .failure(.invalidField, "stored reply of \(key)")
        }
    }

    @Test(arguments: StoreKind.allCases)
    func aFailingCommandInAGroupRollsBackOnlyItself(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        var events = try Self.observe(store).makeAsyncIterator()

        // Hold the writer until three commands wait behind it.
        let gate = DispatchSemaphore(value: 0)
        let (held, holding) = AsyncStream<Void>.makeStream()
        let holder = Task { try await store.transaction { _ in holding.yield(); gate.wait() } }
        var heldIterator = held.makeAsyncIterator()
        await heldIterator.next()

        let kept1 = Task { try await Self.command(store, key: "kept-1", fails: false) }
        let failing = Task { try await Self.command(store, key: "failing", fails: true) }
        let kept2 = Task { try await Self.command(store, key: "kept-2", fails: false) }
        while let event = await events.next(), event != .queued(pending: 3) {}
        gate.signal()
        try await holder.value

        #expect(try await kept1.value.duplicate == false)
        #expect(try await kept2.value.duplicate == false)
        await #expect(throws: Boom.self) { try await failing.value }
        // The three `queued` notes may arrive in any order (each is sent
        // after its own submit); the first other event is the group's.
        var next = await events.next()
        while case .queued = next { next = await events.next() }
        #expect(next == .committed(commands: 3, failed: 1), "one group of three, one command rolled back")

        let counts = try await store.counts()
        #expect(counts.inbox == 2, "the failed command left no inbox entry")
        #expect(counts.outboxPending == 2, "…and not the event it queued before it threw")
        #expect(Set(store.takeCommitted(limit: 10).map(\.messageID)) == ["kept-1", "kept-2"],
                "the relay is handed the kept commands' events only")
        // Its key is free: run again, it executes instead of answering from the inbox.
        #expect(try await Self.command(store, key: "failing", fails: false).duplicate == false)
        #expect(try await Self.command(store, key: "kept-1", fails: false).duplicate == true, "the kept ones stayed")
        await store.close()
    }

    /// A process stopped after its commit and before the hand-over to its
    /// relay (here: frozen there by the test) has its event in the table,
    /// claimed by it only for the insert lease; another process's table
    /// sweep publishes it once that lease has run out (0 here).
    @Test(arguments: StoreKind.allCases)
    func anEventCommittedButNotHandedOverIsFoundByTheTableSweep(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let stopped = try await fixture.open(insertLease: 0)
        let gate = DispatchSemaphore(value: 0)
        let (committed, reached) = AsyncStream<Void>.makeStream()
        try #require(stopped as? any CommitObservable).observeCommits { event in
            guard case .committed = event else { return }
            reached.yield()
            gate.wait()  // between the commit and the hand-over
        }
        let command = Task { try await Self.command(stopped, key: "survivor", fails: false) }
        var iterator = committed.makeAsyncIterator()
        await iterator.next()

        let other = try await fixture.open()
        #expect(try await other.counts().outboxPending == 1, "committed")
        #expect(stopped.takeCommitted(limit: 10).isEmpty, "not handed over")
        let swept = try await other.claimOutbox(limit: 10, lease: 60)
        #expect(swept.map(\.messageID) == ["survivor"])
        try await other.markPublished(swept.map(\.id))
        #expect(try await other.counts().outboxPending == 0)

        gate.signal()
        #expect(try await command.value.duplicate == false)
        await other.close()
        await stopped.close()
    }
}
