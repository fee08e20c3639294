import BookingContracts
import Foundation
import Logging
import MetricsTestKit
import Synchronization
import Testing
import TestSupport
@testable import PassSender

/// `PASS_GATEWAY_CONCURRENCY`: the gateway calls in flight are bounded
/// apart from the messages in progress, and a message that waited for its
/// slot long enough to put its claims' lease at risk renews them first.
@Suite("Gateway slots", .timeLimit(.minutes(1)))
struct GatewaySlotsTests {
    /// At most `limit` bodies run at once; all of them run in the end.
    @Test func theBoundHolds() async throws {
        let slots = GatewaySlots(limit: 2)
        let gate = Observed(false)
        let log = Observed(State())
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<6 {
                group.addTask {
                    try await slots.holding {
                        log.update { s in
                            s.running += 1
                            s.most = max(s.most, s.running)
                            s.done += 1
                        }
                        try await gate.wait("released") { $0 }
                        log.update { $0.running -= 1 }
                    }
                }
            }
            try await log.wait("two in") { $0.done == 2 }
            try await until { slots.waiting == 4 }
            #expect(log.current.done == 2, "the other four wait")
            gate.update { $0 = true }
            try await group.waitForAll()
        }
        #expect(log.current.most == 2 && log.current.done == 6)
        #expect(slots.waiting == 0)
    }

    /// One slot: the waiters get it in the order they came.
    @Test func waitersGoInOrder() async throws {
        let slots = GatewaySlots(limit: 1)
        let gate = Observed(false)
        let order = Observed([Int]())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await slots.holding {
                    order.update { $0.append(0) }
                    try await gate.wait("released") { $0 }
                }
            }
            try await order.wait("the first in") { $0 == [0] }
            for i in 1..<6 {
                group.addTask { try await slots.holding { order.update { $0.append(i) } } }
                try await until { slots.waiting == i }  // queued before the next one starts
            }
            gate.update { $0 = true }
            try await group.waitForAll()
        }
        #expect(order.current == [0, 1, 2, 3, 4, 5])
    }

    /// A cancelled waiter leaves the queue with `CancellationError` and
    /// takes no slot with it; a task cancelled before it asks gets none.
    @Test func aCancelledWaiterLeavesTheQueue() async throws {
        let slots = GatewaySlots(limit: 1)
        let gate = Observed(false)
        let inside = Observed(false)
        let holder = Task {
            try await slots.holding {
                inside.update { $0 = true }
                try await gate.wait("released") { $0 }
            }
        }
        try await inside.wait("the slot taken") { $0 }
        let ran = Observed(false)
        let waiter = Task { try await slots.holding { ran.update { $0 = true } } }
        try await until { slots.waiting == 1 }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(slots.waiting == 0 && !ran.current)
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await slots.holding { true }
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        gate.update { $0 = true }
        try await holder.value
        #expect(try await slots.holding { true }, "the slot came back")
    }

    /// A body that throws gives its slot back.
    @Test func aThrowingBodyFreesItsSlot() async throws {
        struct Boom: Error {}
        let slots = GatewaySlots(limit: 1)
        await #expect(throws: Boom.self) { try await slots.holding { throw Boom() } }
        let ran = try await slots.holding { true }
        #expect(ran)
    }

    struct State: Sendable {
        var running = 0
        var most = 0
        var done = 0
    }

    /// Polls `condition` (a semaphore's queue has no event to await).
    func until(_ condition: @escaping @Sendable () -> Bool) async throws {
        try await withTimeout(30, "condition") {
            while !condition() { try await Task.sleep(for: .milliseconds(2)) }
        }
    }
}

/// The claims of a message that waited for a gateway slot.
@Suite("Claims renewed after a wait for the gateway", .timeLimit(.minutes(1)))
struct ClaimRenewalTests {
    /// `renewClaims` extends this instance's lease and names the rows
    /// another instance took over meanwhile.
    @Test(arguments: LedgerKind.allCases) func renewalExtendsOursAndNamesTheLost(_ kind: LedgerKind) async throws {
        let dir = try TemporaryDirectory("renew-ledger")
        defer { dir.remove() }
        let url = try TestPostgres.url(schemaPrefix: "renew")
        let aAhead = LockedBox<TimeInterval>(0), bAhead = LockedBox<TimeInterval>(0)
        let a = PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: 60,
                           now: { Date().addingTimeInterval(aAhead.withLock { $0 }) })
        let b = PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: 60,
                           now: { Date().addingTimeInterval(bAhead.withLock { $0 }) })
        let kept = DispatcherTests.booking(attendees: 2), lost = DispatcherTests.booking(attendees: 2)
        for booking in [kept, lost] {
            guard case .proceed = try await a.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
                Issue.record("A admitted nothing"); return
            }
        }
        // 50 s on, A renews the first booking's claims: they hold 60 s from now.
        aAhead.withLock { $0 = 50 }
        let none = try await a.renewClaims(bookingId: kept.id, version: 1, kind: .pass, emails: ["p0@example.com", "p1@example.com"])
        #expect(none.isEmpty)
        // 70 s on (past the first lease, not the renewed one) B must wait
        // for the first booking, and takes the second over.
        bAhead.withLock { $0 = 70 }
        await #expect(throws: PassLedger.ClaimHeld.self) {
            _ = try await b.admit(event: .bookingConfirmed, booking: kept, previous: nil)
        }
        guard case .proceed = try await b.admit(event: .bookingConfirmed, booking: lost, previous: nil) else {
            Issue.record("B took nothing over"); return
        }
        let gone = try await a.renewClaims(bookingId: lost.id, version: 1, kind: .pass, emails: ["p0@example.com", "p1@example.com"])
        #expect(gone == ["p0@example.com", "p1@example.com"])
        let rows = try await a.passes(bookingId: lost.id)
        #expect(rows.allSatisfy { $0.claimedBy == b.owner }, "the renewal took nothing back")
        await a.close()
        await b.close()
    }

    /// One gateway slot, two messages: the second waits while the first's
    /// call hangs. Its claims' lease runs out meanwhile (the clock is moved
    /// on) and another instance takes them over: when its turn comes it
    /// renews, finds them gone and sends nothing. Without the renewal both
    /// instances would send that pass.
    @Test(arguments: LedgerKind.allCases) func aMessageThatWaitedPastItsLeaseSendsNothingTakenOver(_ kind: LedgerKind) async throws {
        let two = try await TwoInstances(kind, "renew-dispatch")
        let (a, b) = (two.a, two.b)
        let gateway = HeldGateway()
        let d = two.dispatcher(gateway, gatewayConcurrency: 1)
        #expect(d.renewAfter == 20, "lease 30 s − timeout 5 s − 5 s for the commit")
        let first = DispatcherTests.booking(attendees: 1), second = DispatcherTests.booking(attendees: 1)
        let sendingFirst = Task { try await d.handle(event: first) }
        try await gateway.calls.wait("the first call in flight") { $0.count == 1 }
        let sendingSecond = Task { try await d.handle(event: second) }
        // The second message is admitted (it claims) and waits for the slot.
        try await withTimeout(30, "the second waits for the slot") {
            while d.waitingForGateway < 1 { try await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(try await a.passes(bookingId: second.id).first?.status == .attempting)
        // Its lease runs out; another instance takes the pass over.
        two.ahead.withLock { $0 = 40 }
        guard case .proceed = try await b.admit(event: .bookingConfirmed, booking: second, previous: nil) else {
            Issue.record("B took nothing over"); return
        }
        gateway.release()
        let summaries = (try await sendingFirst.value, try await sendingSecond.value)
        #expect(summaries.0.delivered == [0])
        #expect(summaries.1.gatewayCalls == 0 && summaries.1.delivered.isEmpty, "nothing sent that B now claims")
        #expect(gateway.calls.current == [first.id], "the gateway saw the first booking only")
        #expect(try two.metrics.expectCounter("pass_claims_renewed_total").totalValue == 1)
        #expect(try two.metrics.expectCounter("pass_claims_lost_total").totalValue == 1)
        await two.close()
    }

    /// A call answered after the lease lapsed (the clock jumps 40 s during
    /// it, lease 30 s), while another instance took the booking's rows
    /// over: the answer's failure is fenced (`ClaimLost`), its delivery
    /// kept, and the pass after it — which the answer says to send at once
    /// — is not sent by this instance, because the next call renews first
    /// and finds it taken. (Before, a commit that wrote a delivery counted
    /// as a renewal, and that pass went out from both instances.)
    @Test(arguments: LedgerKind.allCases) func aCommitPastTheLeaseMakesTheNextCallCheckFirst(_ kind: LedgerKind) async throws {
        let two = try await TwoInstances(kind, "renew-lapse")
        let booking = DispatcherTests.booking(attendees: 3)
        let tookOver = LockedBox(false)
        let gateway = ActingGateway { [two] indexes in
            if indexes == [0, 1, 2] {
                // The call hangs past the lease; B takes the rows over.
                two.ahead.withLock { $0 = 40 }
                if case .proceed = try? await two.b.admit(event: .bookingConfirmed, booking: booking, previous: nil) {
                    tookOver.withLock { $0 = true }
                }
                return .passFailed(index: 1, code: 4001, text: "mailbox busy")
            }
            return .success
        }
        let summary = try await two.dispatcher(gateway).handle(event: booking)
        #expect(tookOver.withLock { $0 }, "B took the rows over during the call")
        #expect(summary.delivered == [0])
        #expect(gateway.calls.withLock { $0 } == [[0, 1, 2]], "pass 2 is B's now: not sent again from here")
        #expect(try two.metrics.expectCounter("pass_claims_renewed_total").totalValue == 1)
        await two.close()
    }

    /// The same lapse without a takeover: the answer is recorded (the rows
    /// are still ours), and the next call renews before it goes out.
    @Test func aCommitPastTheLeaseWithoutATakeOverRenewsBeforeTheNextCall() async throws {
        let two = try await TwoInstances(.sqlite, "renew-lapse-kept")
        let gateway = ActingGateway { [two] indexes in
            if indexes == [0, 1, 2] {
                two.ahead.withLock { $0 = 40 }
                return .passFailed(index: 1, code: 4001, text: "mailbox busy")
            }
            return .success
        }
        let summary = try await two.dispatcher(gateway).handle(event: DispatcherTests.booking(attendees: 3))
        #expect(summary.delivered == [0, 2] && summary.scheduled == [1])
        #expect(gateway.calls.withLock { $0 } == [[0, 1, 2], [2]])
        #expect(try two.metrics.expectCounter("pass_claims_renewed_total").totalValue == 1)
        await two.close()
    }

    /// A message that waited less than `renewAfter` goes straight on: no
    /// renewal, one call.
    @Test func aShortWaitRenewsNothing() async throws {
        let dir = try TemporaryDirectory("renew-short")
        defer { dir.remove() }
        let ledger = try await LedgerKind.sqlite.open(directory: dir.url, claimLease: 30)
        let gateway = HeldGateway()
        gateway.release()
        let metrics = TestMetrics()
        let d = PassDispatcher(ledger: ledger, gateway: gateway, settings: PassSenderSettings(gatewayTimeout: .seconds(5)),
                               logger: Logger(label: "t"), metrics: PassSenderMetrics(factory: metrics))
        let summary = try await d.handle(event: DispatcherTests.booking(attendees: 2))
        #expect(summary.delivered == [0, 1] && summary.gatewayCalls == 1)
        #expect((try? metrics.expectCounter("pass_claims_renewed_total").totalValue) ?? 0 == 0)
        await ledger.close()
    }
}

/// A gateway whose calls wait until ``release()``; records each call's
/// booking id.
final class HeldGateway: PassGateway, Sendable {
    let channel = PassChannel.gateway
    let calls = Observed([String]())
    private let open = Observed(false)

    func release() { open.update { $0 = true } }

    func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        calls.update { $0.append(batch.bookingId) }
        try? await open.wait("released", timeout: 60) { $0 }
        return .success
    }

    func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome {
        calls.update { $0.append(batch.bookingId) }
        try? await open.wait("released", timeout: 60) { $0 }
        return .success
    }
}

/// Two pass-sender instances on one ledger (`kind`), lease 30 s, sharing
/// a clock the test moves on (``ahead``) instead of waiting for leases.
struct TwoInstances: Sendable {
    let dir: TemporaryDirectory
    let ahead = LockedBox<TimeInterval>(0)
    let clock: @Sendable () -> Date
    let a: PassLedger
    let b: PassLedger
    let metrics = TestMetrics()

    init(_ kind: LedgerKind, _ name: String) async throws {
        dir = try TemporaryDirectory(name)
        let url = try TestPostgres.url(schemaPrefix: "renew")
        let ahead = self.ahead
        clock = { Date().addingTimeInterval(ahead.withLock { $0 }) }
        a = PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: 30, now: clock)
        b = PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: 30, now: clock)
    }

    /// A dispatcher of instance A (gateway timeout 5 s) counting in ``metrics``.
    func dispatcher(_ gateway: any PassGateway,
                    gatewayConcurrency: Int = PassSenderSettings.defaultGatewayConcurrency) -> PassDispatcher {
        PassDispatcher(ledger: a, gateway: gateway,
                       settings: PassSenderSettings(gatewayTimeout: .seconds(5), gatewayConcurrency: gatewayConcurrency),
                       logger: Logger(label: "t"), now: clock, metrics: PassSenderMetrics(factory: metrics))
    }

    func close() async {
        await a.close()
        await b.close()
        dir.remove()
    }
}

/// A gateway that runs `act` for each call (with its attendee indexes)
/// and answers what it returns.
final class ActingGateway: PassGateway, Sendable {
    let channel = PassChannel.gateway
    let calls = LockedBox([[Int]]())
    private let act: @Sendable ([Int]) async -> GatewayOutcome

    init(_ act: @escaping @Sendable ([Int]) async -> GatewayOutcome) { self.act = act }

    func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        calls.withLock { $0.append(batch.attendeeIndexes) }
        return await act(batch.attendeeIndexes)
    }

    func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome {
        calls.withLock { $0.append(batch.attendeeIndexes) }
        return await act(batch.attendeeIndexes)
    }
}
