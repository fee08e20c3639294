import BookingContracts
import BrokerObjects
import Foundation
import Logging
import MetricsTestKit
import Testing
import TestSupport
@testable import PassSender

/// Every metric in ``PassSenderMetrics`` that a test without a broker can
/// drive is emitted, under the names and dimensions the dashboards use
/// (docs/pass-sender.md, "Metrics, health"): each test counts in a table of its own on a
/// `TestMetrics` factory. Not here: `pass_messages_total{type,outcome}`,
/// counted by the consumer (the integration tests run it against a broker).
@Suite("Pass sender metrics")
struct PassSenderMetricsTests {
    /// A dispatcher on `ledger` counting in `metrics`: three attempts.
    static func dispatcher(_ ledger: PassLedger, _ gateway: any PassGateway, _ metrics: TestMetrics) throws -> PassDispatcher {
        PassDispatcher(ledger: ledger, gateway: gateway,
                       settings: PassSenderSettings(maxAttempts: 3, retryDelays: try RetryDelay.parseList("1s,5s")),
                       logger: Logger(label: "t"), metrics: PassSenderMetrics(factory: metrics))
    }

    /// A ledger on the SQLite file in `dir`: call again for "another
    /// instance on the same ledger"; `ahead` moves its clock.
    static func ledger(in dir: TemporaryDirectory, claimLease: TimeInterval = 30, ahead: TimeInterval = 0) async throws
        -> PassLedger {
        PassLedger(database: try await LedgerKind.sqlite.database(directory: dir.url, url: ""), claimLease: claimLease,
                   now: { Date().addingTimeInterval(ahead) })
    }

    /// Deliveries, a retry, a pass given up, a stale message and notices
    /// written to the spool: each counted under its own dimensions, the
    /// gateway calls timed.
    @Test func theDispatcherCountsEachOutcome() async throws {
        let metrics = TestMetrics()
        let dir = try TemporaryDirectory("metrics-ledger")
        defer { dir.remove() }
        let ledger = try await Self.ledger(in: dir)
        let passes = ScriptedGateway([.passFailed(index: 1, code: 4001, text: "busy"), .success,
                                      .rejected(code: 3000, text: "bad phone", index: nil)])
        let spool = try SpoolPassGateway(directory: dir.appending("spool"))
        // No /notify gateway: notices go to the spool.
        let gateway = NoticeRoutingGateway(passes: passes, http: nil, spool: spool, metrics: PassSenderMetrics(factory: metrics))
        let d = try Self.dispatcher(ledger, gateway, metrics)

        // P0 delivered and P1 failed in the first call, P2 delivered in a second.
        let confirmed = DispatcherTests.booking(version: 3, attendees: 3)
        #expect(try await d.handle(event: confirmed).scheduled == [1])
        // A booking whose one pass the gateway refuses: given up at once.
        #expect(try await d.handle(event: DispatcherTests.booking(attendees: 1)).failed == [0])
        // An older version of the first booking: dropped.
        var older = confirmed
        older.version = 2
        #expect(try await d.handle(event: older).dropped == .stale)
        // Cancelled: P0 and P2, who had their pass, are told (through the spool).
        var cancelled = confirmed
        cancelled.version = 4
        cancelled.status = .cancelled
        let cancel = try await d.handle(event: .bookingCancelled, booking: cancelled, previous: BookingSnapshot(confirmed))
        #expect(cancel.notices[.cancelled] == [0, 2])

        func count(_ label: String, _ dimensions: [(String, String)]) throws -> Int64 {
            try metrics.expectCounter(label, dimensions).totalValue
        }
        #expect(try count("pass_gateway_requests_total", [("outcome", "pass_failed"), ("kind", "pass")]) == 1)
        #expect(try count("pass_gateway_requests_total", [("outcome", "success"), ("kind", "pass")]) == 1)
        #expect(try count("pass_gateway_requests_total", [("outcome", "rejected"), ("kind", "pass")]) == 1)
        #expect(try count("pass_gateway_requests_total", [("outcome", "success"), ("kind", "cancelled")]) == 1)
        #expect(try metrics.expectTimer("pass_gateway_duration_seconds").values.count == 4)
        #expect(try count("passes_delivered_total", [("channel", "gateway")]) == 2)
        #expect(try count("passes_retried_total", [("error_code", "4001"), ("kind", "pass")]) == 1)
        #expect(try count("passes_failed_total", [("error_code", "3000"), ("kind", "pass")]) == 1)
        #expect(try count("pass_messages_dropped_total", [("reason", "stale")]) == 1)
        #expect(try count("notices_delivered_total", [("kind", "cancelled")]) == 2)
        #expect(try count("notices_spooled_total", [("reason", "unset")]) == 2)
        await ledger.close()
    }

    /// An admission that waits for another instance's claim is counted once,
    /// however long it waits.
    @Test func waitingForAClaimIsCounted() async throws {
        let metrics = TestMetrics()
        let dir = try TemporaryDirectory("metrics-claims")
        defer { dir.remove() }
        let a = try await Self.ledger(in: dir), b = try await Self.ledger(in: dir)
        let booking = DispatcherTests.booking(attendees: 1)
        guard case .proceed = try await a.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
            Issue.record("A admitted nothing"); return
        }
        let d = try Self.dispatcher(b, ScriptedGateway([]), metrics)
        let waiting = Task { try await d.handle(event: booking) }
        try await Task.sleep(for: .milliseconds(300))
        try await a.record(bookingId: booking.id, version: 1, delivered: ["p0@example.com"],
                           deliveredAt: "2026-11-24T00:00:00Z", failures: [], outbox: [])
        #expect(try await waiting.value.gatewayCalls == 0)
        #expect(try metrics.expectCounter("pass_claims_waited_total").totalValue == 1)
        await a.close()
        await b.close()
    }

    /// A call whose recipients another instance took over meanwhile is
    /// counted as a lost claim, and its failures, which the ledger refused,
    /// not as retries (they are counted only once the ledger took them).
    @Test func aLostClaimIsCountedAndItsRefusedRetriesAreNot() async throws {
        let metrics = TestMetrics()
        let dir = try TemporaryDirectory("metrics-claims")
        defer { dir.remove() }
        let a = try await Self.ledger(in: dir, claimLease: 60)
        // B's clock is past A's lease: it takes over while A's call hangs.
        let b = try await Self.ledger(in: dir, claimLease: 60, ahead: 120)
        let booking = DispatcherTests.booking(attendees: 2)
        let gateway = HangingGateway {
            guard case .proceed = try? await b.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
                Issue.record("B took nothing over"); return
            }
        }
        let d = try Self.dispatcher(a, gateway, metrics)
        let summary = try await d.handle(event: booking)
        #expect(summary.scheduled.isEmpty && summary.failed.isEmpty)
        #expect(try metrics.expectCounter("pass_claims_lost_total").totalValue == 1)
        #expect(metrics.counters(label: "passes_retried_total").allSatisfy { $0.totalValue == 0 })
        await a.close()
        await b.close()
    }

    /// Each ledger transaction is counted, with the number of writes it took.
    @Test func theGroupCommitCountsTransactionsAndWrites() async throws {
        let metrics = TestMetrics()
        let store = GroupCommitTests.FakeStore()
        let group = GroupCommit(metrics: PassSenderMetrics(factory: metrics)) { _, body in
            try body(GroupCommitTests.FakeSQL(store: store))
        }
        #expect(try await group.write(lockKey: nil) { _ in 7 } == 7)
        #expect(try metrics.expectCounter("pass_ledger_transactions_total").totalValue == 1)
        #expect(try metrics.expectRecorder("pass_ledger_batch_writes").lastValue == 1)
    }

    /// A batch in which a write throws runs again with savepoints: counted
    /// as a rerun, and as two transactions.
    @Test func theGroupCommitCountsABatchRunAgain() async throws {
        let metrics = TestMetrics()
        let f = GroupCommitTests.Fixture(metrics: PassSenderMetrics(factory: metrics))
        let (first, rest) = await GroupCommitTests.queueBehindFirst(f, ["b", "c"], failing: ["c"])
        f.releaseFirst()
        _ = try await first.value
        _ = try await rest[0].value
        await #expect(throws: GroupCommitTests.WriteFailed(name: "c")) { try await rest[1].value }
        #expect(try metrics.expectCounter("pass_ledger_batch_reruns_total").totalValue == 1)
        // "a" alone; "b" and "c" without savepoints, then with them.
        #expect(try metrics.expectCounter("pass_ledger_transactions_total").totalValue == 3)
        #expect(try metrics.expectRecorder("pass_ledger_batch_writes").lastValue == 2)
    }
}

/// A gateway whose call runs `meanwhile` (another instance acting while
/// the call hangs) and then times out.
private struct HangingGateway: PassGateway {
    let meanwhile: @Sendable () async -> Void
    var channel: PassChannel { .gateway }
    func send(_ request: SendPassRequest, batch: PassBatch) async -> GatewayOutcome {
        await meanwhile()
        return .transient(code: nil, text: "timed out")
    }
    func notify(_ request: NotifyRequest, batch: PassBatch) async -> GatewayOutcome { .success }
}
