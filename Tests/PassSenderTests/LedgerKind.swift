import BookingContracts
import Foundation
import Logging
import PostgresSupport
import Testing
import TestSupport
@testable import PassSender

/// The two engines the ledger runs on; every dispatcher and notice test
/// runs on both (the PostgreSQL one in a schema of its own on the test
/// run's shared server).
enum LedgerKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres
    var testDescription: String { rawValue }

    /// A fresh ledger: a file in `directory`, or a new schema.
    func open(directory: URL, claimLease: TimeInterval = PassLedger.defaultClaimLease) async throws -> PassLedger {
        PassLedger(database: try await database(directory: directory, url: try TestPostgres.url(schemaPrefix: "ledger")),
                   claimLease: claimLease)
    }

    /// The database in `directory` (SQLite) or at `url` (PostgreSQL): call
    /// again with the same arguments for "another instance on the same ledger".
    func database(directory: URL, url: String) async throws -> any LedgerDatabase {
        switch self {
        case .sqlite:
            try SQLiteLedgerDatabase(path: directory.appendingPathComponent("l.sqlite").path)
        case .postgres:
            try await PostgresLedgerDatabase.open(settings: PostgresSettings(url: url), logger: Logger(label: "ledger-test"),
                                                  waitSeconds: 0)
        }
    }
}

/// Several pass-sender instances on one ledger: a live instance's claim
/// makes the others wait; a dead one's is taken over once its lease ran out.
@Suite("Ledger shared by instances")
struct SharedLedgerTests {
    /// Two instances (ledgers with their own owner ids) on one ledger in `dir` or one schema.
    static func twoInstances(_ kind: LedgerKind, _ dir: TemporaryDirectory, claimLease: TimeInterval) async throws
        -> (PassLedger, PassLedger) {
        let url = try TestPostgres.url(schemaPrefix: "shared")
        return (PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: claimLease),
                PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: claimLease))
    }

    /// Two instances with 60 s leases; B's clock runs `ahead` seconds ahead,
    /// so a test moves it past A's lease instead of waiting for it.
    static func twoInstancesBAhead(_ kind: LedgerKind, _ dir: TemporaryDirectory) async throws
        -> (PassLedger, PassLedger, LockedBox<TimeInterval>) {
        let url = try TestPostgres.url(schemaPrefix: "shared")
        let a = PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: 60)
        let ahead = LockedBox<TimeInterval>(0)
        let b = PassLedger(database: try await kind.database(directory: dir.url, url: url), claimLease: 60,
                           now: { Date().addingTimeInterval(ahead.withLock { $0 }) })
        return (a, b, ahead)
    }

    /// A newer version keeps an older `removed` notice being sent, also
    /// one whose claimer died. A dies sending a `removed` notice; B admits newer versions, then
    /// the removal's event again (redelivered, now stale): B sends it.
    @Test(arguments: LedgerKind.allCases) func aRemovalWhoseSenderDiedIsSentByItsEventsRedelivery(_ kind: LedgerKind) async throws {
        let dir = try TemporaryDirectory("shared-ledger")
        defer { dir.remove() }
        let (a, b, ahead) = try await Self.twoInstancesBAhead(kind, dir)
        let v1 = DispatcherTests.booking(attendees: 2)
        _ = try await a.admit(event: .bookingConfirmed, booking: v1, previous: nil)
        try await a.record(bookingId: v1.id, version: 1, delivered: v1.attendees.map { PassLedger.normalised($0.email) },
                           deliveredAt: "2026-11-24T00:00:00Z", failures: [], outbox: [])
        var v2 = v1
        v2.version = 2
        v2.attendees.removeLast()
        // A claims the `removed` notice for the second attendee, then a title edit of its own comes.
        guard case .proceed(let jobs) = try await a.admit(event: .bookingUpdated, booking: v2, previous: BookingSnapshot(v1)),
              jobs.map(\.kind) == [.removed] else { Issue.record("no removed notice claimed"); return }
        var v3 = v2
        v3.version = 3
        v3.title = "Renamed"
        _ = try await a.admit(event: .bookingUpdated, booking: v3, previous: BookingSnapshot(v2))
        #expect(try await a.passes(bookingId: v1.id, kind: .removed).map(\.status) == [.attempting], "A is still sending it")

        // A dies; past its lease, B admits the cancellation.
        let until = try #require(try await a.passes(bookingId: v1.id, kind: .removed).first?.leaseUntil)
        ahead.withLock { $0 = until - Date().timeIntervalSince1970 + 1 }
        var v4 = v3
        v4.version = 4
        v4.status = .cancelled
        _ = try await b.admit(event: .bookingCancelled, booking: v4, previous: BookingSnapshot(v3))
        #expect(try await b.passes(bookingId: v1.id, kind: .removed).map(\.status) == [.attempting], "kept for A's event")
        let again = try await b.admit(event: .bookingUpdated, booking: v2, previous: BookingSnapshot(v1))
        #expect(again == .proceed([NoticeJob(kind: .removed, booking: v2, previous: BookingSnapshot(v1),
                                             work: [PassWork(attendeeIndex: 1, attempts: 0)])]))
        #expect(try await b.passes(bookingId: v1.id, kind: .removed).first?.claimedBy == b.owner)
    }

    @Test(arguments: LedgerKind.allCases) func aLiveClaimMakesOthersWaitADeadOneIsTakenOver(_ kind: LedgerKind) async throws {
        let dir = try TemporaryDirectory("shared-ledger")
        defer { dir.remove() }
        let (a, b, ahead) = try await Self.twoInstancesBAhead(kind, dir)
        #expect(a.owner != b.owner)
        let booking = DispatcherTests.booking(attendees: 2)

        // A claims both passes (it is about to call the gateway).
        guard case .proceed(let jobs) = try await a.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
            Issue.record("A admitted nothing"); return
        }
        #expect(jobs.flatMap(\.work).map(\.attendeeIndex) == [0, 1])
        // B, with the same event (a duplicate delivery), must not send them too.
        await #expect(throws: PassLedger.ClaimHeld.self) {
            _ = try await b.admit(event: .bookingConfirmed, booking: booking, previous: nil)
        }
        // A records pass 0 delivered: the answer renews its lease on pass 1.
        try await a.record(bookingId: booking.id, version: 1, delivered: ["p0@example.com"], deliveredAt: "2026-11-24T00:00:00Z",
                           failures: [], outbox: [])
        let renewed = try #require(try await a.passes(bookingId: booking.id).first { $0.attendeeIndex == 1 })
        #expect(renewed.claimedBy == a.owner && (renewed.leaseUntil ?? 0) > Date().timeIntervalSince1970 + 30)
        await #expect(throws: PassLedger.ClaimHeld.self) {
            _ = try await b.admit(event: .bookingConfirmed, booking: booking, previous: nil)
        }

        // A dies: once its lease has run out, B takes pass 1 over (the
        // crash window), never pass 0.
        let until = try #require(renewed.leaseUntil)
        ahead.withLock { $0 = until - Date().timeIntervalSince1970 + 1 }
        guard case .proceed(let taken) = try await b.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
            Issue.record("B took nothing over"); return
        }
        #expect(taken.flatMap(\.work).map(\.attendeeIndex) == [1])
        #expect(try await b.passes(bookingId: booking.id).first { $0.attendeeIndex == 1 }?.claimedBy == b.owner)

        // A was not dead but cut off (a partition): B delivers pass 1, then
        // A's hung gateway call for it comes back as a failure. A must not
        // put it back to `scheduled` (a third send) or write its retry.
        try await b.record(bookingId: booking.id, version: 1, delivered: ["p1@example.com"], deliveredAt: "2026-11-24T00:00:01Z",
                           failures: [], outbox: [])
        let retry = OutboxMessage(exchange: "", routingKey: "pass-sender.delay.100ms", messageID: "late-retry", type: "t", body: [])
        let late = FailureUpdate(email: "p1@example.com", attendeeIndex: 1, status: .scheduled, attempts: 1,
                                 firstFailureAt: "2026-11-24T00:00:02Z", lastFailureAt: "2026-11-24T00:00:02Z",
                                 lastErrorCode: nil, lastErrorText: "timed out")
        await #expect(throws: PassLedger.ClaimLost.self) {
            try await a.record(bookingId: booking.id, version: 1, delivered: [], deliveredAt: "", failures: [late], outbox: [retry])
        }
        let after = try #require(try await a.passes(bookingId: booking.id).first { $0.attendeeIndex == 1 })
        #expect(after.status == .delivered && after.attempts == 0)
        #expect(try await a.unpublished(bookingId: booking.id).isEmpty, "nothing of the refused result was written")
        // Its late answer that the pass went out is recorded (it is true),
        // without moving the first delivery's time.
        try await a.record(bookingId: booking.id, version: 1, delivered: ["p1@example.com"], deliveredAt: "2026-11-24T00:00:09Z",
                           failures: [], outbox: [])
        #expect(try await a.statusCounts() == [.delivered: 2])
        let deliveredAt = try await a.database.read { db in
            try db.rows("SELECT deliveredAt FROM notice WHERE bookingId = ? AND email = ?", booking.id, "p1@example.com")
                .first?.string("deliveredAt")
        }
        #expect(deliveredAt == "2026-11-24T00:00:01Z")
        await a.close()
        await b.close()
    }

    /// A newer version does not drop an older one's work while another
    /// instance sends it: it waits, and then sees what was delivered (a
    /// cancellation tells those who got a pass).
    @Test(arguments: LedgerKind.allCases) func aNewerVersionWaitsForAnotherInstancesClaimOnAnOlderOne(_ kind: LedgerKind) async throws {
        let dir = try TemporaryDirectory("shared-ledger")
        defer { dir.remove() }
        let (a, b) = try await Self.twoInstances(kind, dir, claimLease: 60)
        let v1 = DispatcherTests.booking(attendees: 2)
        guard case .proceed(let jobs) = try await a.admit(event: .bookingConfirmed, booking: v1, previous: nil) else {
            Issue.record("A admitted nothing"); return
        }
        #expect(jobs.flatMap(\.work).map(\.attendeeIndex) == [0, 1])
        var v2 = v1
        v2.version = 2
        v2.status = .cancelled
        // A is sending v1's passes: B's cancellation must not drop them.
        await #expect(throws: PassLedger.ClaimHeld.self) {
            _ = try await b.admit(event: .bookingCancelled, booking: v2, previous: nil)
        }
        #expect(try await b.passes(bookingId: v1.id).allSatisfy { $0.status == .attempting }, "nothing dropped under A")
        // A delivers them; now B's cancellation tells both.
        try await a.record(bookingId: v1.id, version: 1, delivered: ["p0@example.com", "p1@example.com"],
                           deliveredAt: "2026-11-24T00:00:00Z", failures: [], outbox: [])
        guard case .proceed(let cancelled) = try await b.admit(event: .bookingCancelled, booking: v2, previous: nil) else {
            Issue.record("B's cancellation admitted nothing"); return
        }
        #expect(cancelled.map(\.kind) == [.cancelled])
        #expect(cancelled.flatMap(\.work).map(\.attendeeIndex) == [0, 1])
        await a.close()
        await b.close()
    }

    /// The dispatcher waits for a live claimer instead of failing the
    /// delivery, and sends nothing the claimer delivered.
    @Test(arguments: LedgerKind.allCases) func theDispatcherWaitsForTheClaimer(_ kind: LedgerKind) async throws {
        let dir = try TemporaryDirectory("shared-ledger")
        defer { dir.remove() }
        let (a, b) = try await Self.twoInstances(kind, dir, claimLease: 30)
        let booking = DispatcherTests.booking(attendees: 2)
        guard case .proceed = try await a.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
            Issue.record("A admitted nothing"); return
        }
        let gateway = ScriptedGateway([])
        let d = PassDispatcher(ledger: b, gateway: gateway, settings: PassSenderSettings(), logger: Logger(label: "t"))
        let waiting = Task { try await d.handle(event: booking) }
        // B waits while A's claim holds (30 s); A delivers both.
        try await Task.sleep(for: .milliseconds(300))
        #expect(gateway.requests.isEmpty)
        try await a.record(bookingId: booking.id, version: 1, delivered: ["p0@example.com", "p1@example.com"],
                           deliveredAt: "2026-11-24T00:00:00Z", failures: [], outbox: [])
        let summary = try await waiting.value
        #expect(summary.gatewayCalls == 0 && gateway.requests.isEmpty, "nothing sent twice")
        await a.close()
        await b.close()
    }

    /// Hosts whose clocks disagree by more than a lease still agree on it:
    /// the ledger on PostgreSQL reads claims by the server's clock. B's
    /// host runs two minutes ahead (beyond the 60 s lease): by its own
    /// clock A's claim has long run out; by the server's it holds. The
    /// last step shows the premise: the same instance on its host's clock
    /// takes A's live claim over (a second send).
    @Test func hostsWhoseClocksDisagreeAgreeOnALeaseByTheServersClock() async throws {
        let dir = try TemporaryDirectory("shared-ledger")
        defer { dir.remove() }
        let url = try TestPostgres.url(schemaPrefix: "skew")
        let logger = Logger(label: "ledger-clock-test")
        func instance(hostAhead: TimeInterval, followServer: Bool) async throws -> (PassLedger, LedgerClock?) {
            let database = try await LedgerKind.postgres.database(directory: dir.url, url: url)
            let host: @Sendable () -> Date = { Date().addingTimeInterval(hostAhead) }
            guard followServer else { return (PassLedger(database: database, claimLease: 60, now: host), nil) }
            let clock = LedgerClock(database: database, base: host, logger: logger)
            try await clock.start()
            return (PassLedger(database: database, claimLease: 60, now: clock.now), clock)
        }
        let (a, aClock) = try await instance(hostAhead: 0, followServer: true)
        let (b, bClock) = try await instance(hostAhead: 120, followServer: true)
        // The server runs on this machine: A's offset is about zero, B's about −120 s.
        // (Each reading is within half its round trip, at most 0.5 s.)
        #expect(abs(try #require(aClock).offset) < 1)
        #expect(abs(try #require(bClock).offset + 120) < 1)
        #expect(abs(a.now().timeIntervalSince(b.now())) < 1, "both instances read the same time")

        let booking = DispatcherTests.booking(attendees: 2)
        guard case .proceed(let jobs) = try await a.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
            Issue.record("A admitted nothing"); return
        }
        #expect(jobs.flatMap(\.work).map(\.attendeeIndex) == [0, 1])
        await #expect(throws: PassLedger.ClaimHeld.self, "B must wait for A's live claim") {
            _ = try await b.admit(event: .bookingConfirmed, booking: booking, previous: nil)
        }
        #expect(try await b.passes(bookingId: booking.id).allSatisfy { $0.claimedBy == a.owner })

        let (stale, _) = try await instance(hostAhead: 120, followServer: false)
        guard case .proceed(let taken) = try await stale.admit(event: .bookingConfirmed, booking: booking, previous: nil) else {
            Issue.record("the premise failed: an instance on a clock 120 s ahead did not take the claim over"); return
        }
        #expect(taken.flatMap(\.work).map(\.attendeeIndex) == [0, 1])
        await a.close()
        await b.close()
        await stale.close()
    }

    /// A gateway's error text with U+0000 is recorded whole on both engines
    /// (PostgreSQL's text cannot hold it, SQLite read it back cut off):
    /// U+0000 becomes U+FFFD.
    @Test(arguments: LedgerKind.allCases) func aNulInAnErrorTextIsRecorded(_ kind: LedgerKind) async throws {
        let (d, _, ledger, dir) = try await DispatcherTests().make(on: kind, [.passFailed(index: 0, code: 4001, text: "bad\u{0}box")])
        defer { try? FileManager.default.removeItem(at: dir) }
        let booking = DispatcherTests.booking(attendees: 1)
        #expect(try await d.handle(event: booking).scheduled == [0])
        let text = try await ledger.passes(bookingId: booking.id).first?.lastErrorText
        #expect(text == "bad\u{FFFD}box")
    }

    @Test func aSchemaHoldingOtherTablesIsRefused() async throws {
        let url = try TestPostgres.url(schemaPrefix: "taken")
        let schema = String(url.split(separator: "=").last!)
        _ = try TestPostgres.control("psql", ["-c", "CREATE SCHEMA \(schema); CREATE TABLE \(schema).booking (id TEXT)"])
        await #expect {
            _ = try await PostgresLedgerDatabase.open(settings: PostgresSettings(url: url), logger: Logger(label: "t"), waitSeconds: 0)
        } throws: { error in
            "\(error)".contains("already holds tables that are not the pass sender's")
        }
    }
}

/// The outbox hand-over that spares the pass sender a read per message:
/// `record` returns the rows it wrote with their ids, an admission returns
/// its booking's unpublished rows (and only its booking's), and a queued
/// mark is seen by every write queued after it.
@Suite("Ledger outbox hand-over")
struct LedgerOutboxHandOverTests {
    @Test(arguments: LedgerKind.allCases) func recordReturnsItsRowsAndTheNextAdmissionFindsThemUntilMarked(_ kind: LedgerKind) async throws {
        let dir = try TemporaryDirectory("ledger-outbox")
        defer { dir.remove() }
        let ledger = try await kind.open(directory: dir.url)
        let booking = DispatcherTests.booking(attendees: 1)
        let other = DispatcherTests.booking(attendees: 1)
        func message(_ id: String) -> OutboxMessage {
            OutboxMessage(exchange: "booking.events", routingKey: "pass.delivered", messageID: id, type: "pass.delivered",
                          body: Array("{\"id\":\"\(id)\"}".utf8), headers: ["booking-id": .string(booking.id), "n": .int64(7)])
        }
        let written = try await ledger.record(bookingId: booking.id, version: 1, delivered: [], deliveredAt: "2026-11-24T00:00:00Z",
                                              failures: [], outbox: [message("m1"), message("m2")])
        #expect(written.map(\.message) == [message("m1"), message("m2")], "in order, as given")
        #expect(written[0].id < written[1].id)
        let unpublished = try await ledger.unpublished()
        #expect(unpublished == written, "what record returned is what the table holds, ids and all")
        _ = try await ledger.record(bookingId: other.id, version: 1, delivered: [], deliveredAt: "2026-11-24T00:00:00Z",
                                    failures: [], outbox: [message("o1")])

        let admitted = try await ledger.admitCollecting(event: .bookingConfirmed, booking: booking, previous: nil)
        #expect(admitted.leftovers == written, "the booking's leftovers, oldest first, not the other booking's")
        guard case .proceed(let jobs) = admitted.admission else { Issue.record("nothing admitted"); return }
        #expect(jobs.flatMap(\.work).map(\.attendeeIndex) == [0])

        // Marked by a queued write: the booking's next admission, queued
        // after it, finds nothing left.
        ledger.markPublishedSoon(written.map(\.id)) { error in Issue.record("mark failed: \(error)") }
        let again = try await ledger.admitCollecting(event: .bookingConfirmed, booking: booking, previous: nil)
        #expect(again.leftovers.isEmpty)
        #expect(try await ledger.unpublished().map(\.message.messageID) == ["o1"])
        await ledger.close()
    }
}
