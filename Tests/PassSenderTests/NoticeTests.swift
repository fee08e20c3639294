import BookingContracts
import BrokerObjects
import Foundation
import Logging
import TestSupport
import Testing
@testable import PassSender

/// Who hears what (contract v1.1, "Notifications to attendees"): the
/// dispatcher and the ledger with a scripted gateway, no broker.
@Suite("Notices: kinds, recipients, staleness")
struct NoticeTests {
    static func person(_ n: Int) -> Attendee {
        Attendee(name: "P\(n)", email: "p\(n)@example.com", phone: "+4917012345\(n)")
    }

    static func booking(_ people: [Int], version: Int = 1, status: BookingStatus = .confirmed, start: String = "09:00") -> Booking {
        var b = DispatcherTests.booking(version: version, attendees: 0)
        b.id = "bk-notice"
        b.attendees = people.map(person)
        b.status = status
        b.start = start
        return b
    }

    /// The next version of `b` with `change` applied, and `b` as its `previous`.
    static func next(_ b: Booking, _ change: (inout Booking) -> Void) -> (Booking, BookingSnapshot) {
        var n = b
        n.version += 1
        change(&n)
        return (n, BookingSnapshot(b))
    }

    @Test(arguments: LedgerKind.allCases) func everyKindReachesExactlyTheContractsRecipients(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1, 2])
        #expect(try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil).delivered == [0, 1, 2])

        // Rescheduled: the old pass holders are told, and everyone gets the new pass.
        let (v2, p2) = Self.next(v1) { $0.start = "11:00" }
        let s2 = try await d.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        #expect(s2.notices[.rescheduled] == [0, 1, 2] && s2.delivered == [0, 1, 2])

        // Update: P1 removed, P3 added, the rest re-ordered: P1 hears
        // "removed", P3 gets a pass, P0 and P2 nothing (same person, same times).
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(2), Self.person(3), Self.person(0)] }
        let s3 = try await d.handle(event: .bookingUpdated, booking: v3, previous: p3)
        #expect(s3.notices[.removed] == [1], "index into previous.attendees")
        #expect(s3.delivered == [1], "P3 at index 1 of v3")

        // Cancelled: everyone still attending who was sent a pass.
        let (v4, p4) = Self.next(v3) { $0.status = .cancelled }
        let s4 = try await d.handle(event: .bookingCancelled, booking: v4, previous: p4)
        #expect(s4.notices[.cancelled] == [0, 1, 2])

        #expect(g.notices.map(\.kind) == [.rescheduled, .removed, .cancelled])
        #expect(g.notices.map(\.emails) == [["p0@example.com", "p1@example.com", "p2@example.com"], ["p1@example.com"],
                                            ["p2@example.com", "p3@example.com", "p0@example.com"]])
        #expect(g.requests == [[0, 1, 2], [0, 1, 2], [1]])
        // The ledger names people by e-mail, one row per version and kind.
        let rows = try await ledger.notices(bookingId: v1.id)
        #expect(rows.filter { $0.kind == .pass }.map(\.email).sorted()
                == ["p0@example.com", "p0@example.com", "p1@example.com", "p1@example.com", "p2@example.com", "p2@example.com", "p3@example.com"])
        #expect(rows.allSatisfy { $0.status == .delivered })

        // Every event again (redelivery, restart): nothing more is sent.
        _ = try await d.handle(event: .bookingCancelled, booking: v4, previous: p4)
        for (type, b, p) in [(EventType.bookingConfirmed, v1, nil), (.bookingRescheduled, v2, p2), (.bookingUpdated, v3, p3)] {
            #expect(try await d.handle(event: type, booking: b, previous: p).gatewayCalls == 0)
        }
        #expect(g.notices.count == 3 && g.requests.count == 3)
    }

    /// Removed (told that the pass is void), then added again: a new pass.
    @Test(arguments: LedgerKind.allCases) func someoneRemovedAndAddedAgainGetsANewPass(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await DispatcherTests().make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { $0.attendees = [Self.person(0)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v2, previous: p2).notices[.removed] == [1])
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(0), Self.person(1)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v3, previous: p3).delivered == [1])
        #expect(g.requests == [[0, 1], [1]])
    }

    @Test(arguments: LedgerKind.allCases) func reorderingAndCaseDoNotSendTwice(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await DispatcherTests().make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1, 2])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) {
            $0.attendees = [Self.person(2), Self.person(0), Self.person(1)]
            $0.attendees[1].email = "P0@Example.COM"
            $0.title = "New title"
        }
        let s = try await d.handle(event: .bookingUpdated, booking: v2, previous: p2)
        #expect(s.gatewayCalls == 0 && g.notices.isEmpty && g.requests == [[0, 1, 2]])
    }

    /// The retry of a `rescheduled` notice that comes back after a later
    /// cancellation is dropped: the cancellation is what holds now.
    @Test(arguments: LedgerKind.allCases) func aNoticeOvertakenByANewerVersionIsDropped(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(on: kind, [.success, .transient(code: nil, text: "down"), .success, .success])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { $0.start = "11:00" }
        let s2 = try await d.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        #expect(s2.scheduled == [0] && s2.delivered == [0], "the notice failed, the new pass went out")
        let retryRow = try #require(try await ledger.unpublished().first { $0.message.type == PassQueues.retryMessageType })
        let retry = try ContractJSON.decode(PassRetryMessage.self, from: retryRow.message.body)
        #expect(retry.noticeKind == .rescheduled && retry.previous == p2)
        #expect(retryRow.message.headers["notice-kind"] == .string("rescheduled"))

        let (v3, p3) = Self.next(v2) { $0.status = .cancelled }
        #expect(try await d.handle(event: .bookingCancelled, booking: v3, previous: p3).notices[.cancelled] == [0])
        #expect(try await d.handle(retry: retry).dropped == .cancelled)
        #expect(g.notices.map(\.kind) == [.rescheduled, .cancelled])
        #expect(try await ledger.passes(bookingId: v1.id, kind: .rescheduled).map(\.status) == [.dropped])
    }

    /// A removal stands whatever follows it: the `removed` notice still
    /// being retried when the booking is cancelled (whose notice names
    /// only the attendees left) still reaches the removed person; one who
    /// was added back meanwhile is not told they were removed.
    @Test(arguments: LedgerKind.allCases) func aRemovalStillOwedOutlivesANewerVersion(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(
            on: kind, [.success, .transient(code: nil, text: "down"), .success, .success])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1, 2])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { $0.attendees = [Self.person(0)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v2, previous: p2).scheduled == [1, 2])
        let retryRow = try #require(try await ledger.unpublished().first { $0.message.type == PassQueues.retryMessageType })
        let retry = try ContractJSON.decode(PassRetryMessage.self, from: retryRow.message.body)
        #expect(retry.noticeKind == .removed)

        // P2 is back at v3; then the booking is cancelled.
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(0), Self.person(2)] }
        _ = try await d.handle(event: .bookingUpdated, booking: v3, previous: p3)
        let (v4, p4) = Self.next(v3) { $0.status = .cancelled }
        #expect(try await d.handle(event: .bookingCancelled, booking: v4, previous: p4).notices[.cancelled] == [0, 1])

        let s = try await d.handle(retry: retry)
        #expect(s.notices[.removed] == [1], "P1 (index 1 of v2's previous attendees) is told; P2 is back and is not")
        #expect(g.notices.map(\.kind) == [.removed, .cancelled, .removed])
        #expect(g.notices.last?.emails == ["p1@example.com"])
        let removals = try await ledger.passes(bookingId: v1.id, kind: .removed)
        #expect(removals.first { $0.email == "p1@example.com" }?.status == .delivered)
        #expect(removals.first { $0.email == "p2@example.com" }?.status == .dropped)

        // The same retry again: nothing more.
        #expect(try await d.handle(retry: retry).gatewayCalls == 0)
    }

    /// Two updates taken out of order (two instances, or a redelivery):
    /// the later one, admitted first, decides the passes, but only the
    /// earlier one names whom it removed. Arriving late it still tells
    /// them, even after the cancellation (whose notice names only those
    /// left), but not someone who is back at the newest version.
    @Test(arguments: LedgerKind.allCases) func aLateUpdateStillTellsThoseItRemoved(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1, 2, 3])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        // v2 removes P1, P2 and P3; v3 adds P2 back; v4 (a title edit) keeps that.
        let (v2, p2) = Self.next(v1) { $0.attendees = [Self.person(0)] }
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(0), Self.person(2)] }
        let (v4, p4) = Self.next(v3) { $0.title = "Renamed" }
        #expect(try await d.handle(event: .bookingUpdated, booking: v4, previous: p4).gatewayCalls == 0,
                "v4's previous is v3: nobody removed, P2's v1 pass still valid")
        #expect(try await d.handle(event: .bookingUpdated, booking: v3, previous: p3).dropped == .stale)
        let late = try await d.handle(event: .bookingUpdated, booking: v2, previous: p2)
        #expect(late.notices[.removed] == [1, 3], "P1 and P3 (indexes into v2's previous attendees); P2 is back")
        #expect(g.notices.map(\.emails) == [["p1@example.com", "p3@example.com"]])
        #expect(try await ledger.passes(bookingId: v1.id, kind: .removed).map(\.status) == [.delivered, .delivered])

        // The same event again: nothing more.
        #expect(try await d.handle(event: .bookingUpdated, booking: v2, previous: p2).dropped == .stale)

        // After the cancellation, a late removal still reaches the one it
        // removed; a late title edit, which removed nobody, stays dropped.
        var w1 = Self.booking([4, 5])
        w1.id = "bk-late-cancel"
        let (w2, q2) = Self.next(w1) { $0.attendees = [Self.person(4)] }
        let (w3, q3) = Self.next(w2) { $0.status = .cancelled }
        _ = try await d.handle(event: .bookingConfirmed, booking: w1, previous: nil)
        #expect(try await d.handle(event: .bookingCancelled, booking: w3, previous: q3).notices[.cancelled] == [0])
        #expect(try await d.handle(event: .bookingUpdated, booking: w2, previous: q2).notices[.removed] == [1])
        #expect(g.notices.last?.emails == ["p5@example.com"])
    }

    /// A reschedule overtaken by a later update or approval (two
    /// instances, or a requeue): the event finds its times are not those
    /// the passes went out for, tells the holders where from and sends
    /// passes for the new times; the reschedule, arriving late, is stale.
    @Test(arguments: LedgerKind.allCases) func anUpdateThatOvertookARescheduleSendsTheNewTimes(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) {
            ($0.start, $0.end, $0.startsAt, $0.endsAt) = ("11:00", "12:30", "2026-11-23T10:00:00Z", "2026-11-23T11:30:00Z")
        }
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(0), Self.person(1), Self.person(2)] }
        let s3 = try await d.handle(event: .bookingUpdated, booking: v3, previous: p3)
        #expect(s3.notices[.rescheduled] == [0, 1], "v1's holders hear it moved")
        #expect(s3.delivered.sorted() == [0, 1, 2], "passes for the new times to all three")
        let v1Start = Int64(ContractFormat.parseTimestamp(v1.startsAt)!.timeIntervalSince1970)
        #expect(g.noticeFromStarts == [v1Start], "moved from v1's times, not v2's (the update's previous)")
        #expect(g.requests.last?.sorted() == [0, 1, 2])
        #expect(try await d.handle(event: .bookingRescheduled, booking: v2, previous: p2).dropped == .stale)
        #expect(try await d.handle(event: .bookingUpdated, booking: v3, previous: p3).gatewayCalls == 0, "the same update again")
        let (v4, p4) = Self.next(v3) { $0.title = "Renamed" }
        #expect(try await d.handle(event: .bookingUpdated, booking: v4, previous: p4).gatewayCalls == 0,
                "the passes are for v3's times now")

        // Admitted and not sent (the instance died): the update coming
        // again makes the same notices, from the times it stored.
        var w1 = Self.booking([3])
        w1.id = "bk-moved-again"
        _ = try await d.handle(event: .bookingConfirmed, booking: w1, previous: nil)
        let (w2, _) = Self.next(w1) { ($0.start, $0.startsAt) = ("11:00", "2026-11-23T10:00:00Z") }
        let (w3, q3) = Self.next(w2) { $0.title = "Renamed" }
        guard case .proceed(let jobs) = try await ledger.admit(event: .bookingUpdated, booking: w3, previous: q3) else {
            Issue.record("the update was not admitted")
            return
        }
        #expect(jobs.map(\.kind) == [.rescheduled, .pass])
        let again = try await d.handle(event: .bookingUpdated, booking: w3, previous: q3)
        #expect(again.notices[.rescheduled] == [0] && again.delivered == [0])
        #expect(g.noticeFromStarts.last == Int64(ContractFormat.parseTimestamp(w1.startsAt)!.timeIntervalSince1970))

        // In an approval room the approval can overtake the pending
        // reschedule it approves: it stands in for it the same way.
        var a1 = Self.booking([5, 6])
        a1.id = "bk-approved-moved"
        _ = try await d.handle(event: .bookingConfirmed, booking: a1, previous: nil)
        let (a2, r2) = Self.next(a1) { ($0.start, $0.startsAt, $0.status) = ("11:00", "2026-11-23T10:00:00Z", .pending) }
        let (a3, r3) = Self.next(a2) { $0.status = .confirmed }
        let approved = try await d.handle(event: .bookingConfirmed, booking: a3, previous: r3)
        #expect(approved.notices[.rescheduled] == [0, 1] && approved.delivered.sorted() == [0, 1])
        #expect(g.noticeFromStarts.last == Int64(ContractFormat.parseTimestamp(a1.startsAt)!.timeIntervalSince1970))
        #expect(try await d.handle(event: .bookingRescheduled, booking: a2, previous: r2).dropped == .stale)
        #expect(try await d.handle(event: .bookingConfirmed, booking: a3, previous: r3).gatewayCalls == 0)

        // Without its `previous` (a newer contract's event read by the
        // fallback) an update cannot say whom it removed: no stand-in.
        var n1 = Self.booking([7])
        n1.id = "bk-no-previous"
        _ = try await d.handle(event: .bookingConfirmed, booking: n1, previous: nil)
        let (n2, _) = Self.next(n1) { ($0.start, $0.startsAt) = ("11:00", "2026-11-23T10:00:00Z") }
        let (n3, _) = Self.next(n2) { $0.title = "Renamed" }
        #expect(try await d.handle(event: .bookingUpdated, booking: n3, previous: nil).notices[.rescheduled] == nil)
    }

    /// A `rescheduled` notice whose retry is waiting when an update comes
    /// that keeps the times: the retry still tells those still attending
    /// that their old pass is void (nothing else will); after another move
    /// it is stale, since that move's notice told them.
    @Test(arguments: LedgerKind.allCases) func aMoveNoticeStillOwedOutlivesAnUpdate(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(on: kind, [.success, .transient(code: nil, text: "timeout")])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { ($0.start, $0.startsAt) = ("11:00", "2026-11-23T10:00:00Z") }
        _ = try await d.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        let retryRow = try #require(try await ledger.unpublished().first { $0.message.type == PassQueues.retryMessageType })
        let retry = try ContractJSON.decode(PassRetryMessage.self, from: retryRow.message.body)
        #expect(retry.noticeKind == .rescheduled && retry.passes.map(\.attendeeIndex) == [0, 1])
        // v3 renames it and removes P1, who is told that instead.
        let (v3, p3) = Self.next(v2) { $0.title = "Renamed"; $0.attendees = [Self.person(0)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v3, previous: p3).notices[.removed] == [1])
        let late = try await d.handle(retry: retry)
        #expect(late.notices[.rescheduled] == [0], "P0 still holds v1's pass and was never told")
        #expect(g.notices.last?.kind == .rescheduled && g.notices.last?.emails == ["p0@example.com"])
        #expect(try await d.handle(retry: retry).gatewayCalls == 0, "once")

        let (e, _, ledger2, dir2) = try await DispatcherTests().make(on: kind, [.success, .transient(code: nil, text: "timeout")])
        defer { try? FileManager.default.removeItem(at: dir2) }
        _ = try await e.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        _ = try await e.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        let owed = try #require(try await ledger2.unpublished().first { $0.message.type == PassQueues.retryMessageType })
        let (w3, q3) = Self.next(v2) { ($0.start, $0.startsAt) = ("13:00", "2026-11-23T12:00:00Z") }
        #expect(try await e.handle(event: .bookingRescheduled, booking: w3, previous: q3).notices[.rescheduled] == [0, 1])
        #expect(try await e.handle(retry: try ContractJSON.decode(PassRetryMessage.self, from: owed.message.body)).dropped == .stale,
                "moved again: that move's notice told them")

        // Given up on (`passes.failed`), then a title edit: an operator's
        // retry still tells them.
        let (f, h, ledger3, dir3) = try await DispatcherTests().make(
            on: kind, [.success, .passFailed(index: 0, code: 4001, text: "mailbox full")], maxAttempts: 1)
        defer { try? FileManager.default.removeItem(at: dir3) }
        _ = try await f.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        _ = try await f.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        let failedRow = try #require(try await ledger3.unpublished().first { $0.message.routingKey == Topology.passesFailedQueue })
        let failed = try ContractJSON.decode(FailedPass.self, from: failedRow.message.body)
        #expect(failed.kind == .rescheduled && failed.attendeeIndex == 0)
        let (r3, s3) = Self.next(v2) { $0.title = "Renamed" }
        _ = try await f.handle(event: .bookingUpdated, booking: r3, previous: s3)
        #expect(try await f.handle(retry: .operatorRetry(of: failed, token: "t1")).notices[.rescheduled] == [0])
        #expect(h.notices.last?.kind == .rescheduled && h.notices.last?.emails == ["p0@example.com"])
    }

    /// The same, where the newer version is the approval of a pending
    /// reschedule (same times); and a notice given up on is stale once the
    /// booking moved away and back, since both moves told them.
    @Test(arguments: LedgerKind.allCases) func aMoveNoticeStillOwedOutlivesTheApprovalNotAnotherMove(_ kind: LedgerKind) async throws {
        let (a, g, ledger, dir) = try await DispatcherTests().make(on: kind, [.success, .transient(code: nil, text: "timeout")])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1])
        _ = try await a.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { ($0.start, $0.startsAt, $0.status) = ("11:00", "2026-11-23T10:00:00Z", .pending) }
        _ = try await a.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        let waiting = try #require(try await ledger.unpublished().first { $0.message.type == PassQueues.retryMessageType })
        let (v3, p3) = Self.next(v2) { $0.status = .confirmed }
        let approved = try await a.handle(event: .bookingConfirmed, booking: v3, previous: p3)
        #expect(approved.notices[.rescheduled] == nil && approved.delivered.sorted() == [0, 1], "the approval sends passes")
        let late = try await a.handle(retry: try ContractJSON.decode(PassRetryMessage.self, from: waiting.message.body))
        #expect(late.notices[.rescheduled] == [0, 1], "the retry still tells them the old pass is void")
        #expect(g.notices.last?.kind == .rescheduled)

        let (b, h, ledger2, dir2) = try await DispatcherTests().make(
            on: kind, [.success, .passFailed(index: 0, code: 4001, text: "mailbox full")], maxAttempts: 1)
        defer { try? FileManager.default.removeItem(at: dir2) }
        let (w2, q2) = Self.next(v1) { ($0.start, $0.startsAt) = ("11:00", "2026-11-23T10:00:00Z") }
        _ = try await b.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        _ = try await b.handle(event: .bookingRescheduled, booking: w2, previous: q2)
        let failedRow = try #require(try await ledger2.unpublished().first { $0.message.routingKey == Topology.passesFailedQueue })
        let failed = try ContractJSON.decode(FailedPass.self, from: failedRow.message.body)
        let (w3, q3) = Self.next(w2) { ($0.start, $0.startsAt) = ("13:00", "2026-11-23T12:00:00Z") }
        _ = try await b.handle(event: .bookingRescheduled, booking: w3, previous: q3)
        let (w4, q4) = Self.next(w3) { ($0.start, $0.startsAt) = (w2.start, w2.startsAt) }
        #expect(try await b.handle(event: .bookingRescheduled, booking: w4, previous: q4).notices[.rescheduled] == [0, 1])
        let calls = h.notices.count
        #expect(try await b.handle(retry: .operatorRetry(of: failed, token: "t1")).dropped == .stale, "moved away and back")
        #expect(h.notices.count == calls)
    }

    /// A reschedule in an approval room: the old pass holders hear that it
    /// moved, but the new pass waits for the approval; a rejection then
    /// tells those who were sent a pass.
    @Test(arguments: LedgerKind.allCases) func pendingRescheduleTellsButSendsNoPassAndRejectionCancels(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await DispatcherTests().make(on: kind, [])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { $0.start = "11:00"; $0.status = .pending }
        let s2 = try await d.handle(event: .bookingRescheduled, booking: v2, previous: p2)
        #expect(s2.notices[.rescheduled] == [0, 1] && s2.delivered.isEmpty)
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(0), Self.person(1), Self.person(2)] }
        let s3 = try await d.handle(event: .bookingUpdated, booking: v3, previous: p3)
        #expect(s3.dropped == .notConfirmed && s3.gatewayCalls == 0, "no pass for a pending booking, even to someone added")
        let (v4, p4) = Self.next(v3) { $0.status = .rejected }
        let s4 = try await d.handle(event: .bookingRejected, booking: v4, previous: p4)
        #expect(s4.notices[.cancelled] == [0, 1], "P2 was never sent a pass")
        #expect(g.requests == [[0, 1]])
    }

    @Test(arguments: LedgerKind.allCases) func cancelledGoesOnlyToThoseSentAPass(_ kind: LedgerKind) async throws {
        let (d, g, _, dir) = try await DispatcherTests().make(on: kind, [.rejected(code: 3000, text: "bad phone", index: 1)])
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1, 2])
        #expect(try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil).failed == [1])
        let (v2, p2) = Self.next(v1) { $0.status = .cancelled }
        _ = try await d.handle(event: .bookingCancelled, booking: v2, previous: p2)
        #expect(g.notices.map(\.emails) == [["p0@example.com", "p2@example.com"]])
        // A cancellation of a booking nobody got a pass for tells nobody.
        var other = Self.booking([0], status: .cancelled)
        other.id = "bk-other"
        #expect(try await d.handle(event: .bookingCancelled, booking: other, previous: nil).gatewayCalls == 0)
    }

    /// A notice given up on lands in `passes.failed` with its kind (key
    /// included); an operator retry of it sends it once.
    @Test(arguments: LedgerKind.allCases) func failedNoticesCarryTheirKindAndOperatorsCanRetryThem(_ kind: LedgerKind) async throws {
        let (d, g, ledger, dir) = try await DispatcherTests().make(on: kind, [.success, .passFailed(index: 0, code: 4001, text: "mailbox full")],
                                                             maxAttempts: 1)
        defer { try? FileManager.default.removeItem(at: dir) }
        let v1 = Self.booking([0, 1])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { $0.attendees = [Self.person(1)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v2, previous: p2).failed == [0])
        let rows = try await ledger.unpublished()
        let failedRow = try #require(rows.first { $0.message.routingKey == Topology.passesFailedQueue })
        let failed = try ContractJSON.decode(FailedPass.self, from: failedRow.message.body)
        #expect(failed.kind == .removed && failed.email == "p0@example.com" && failed.version == 2)
        #expect(failedRow.message.messageID == "bk-notice:2:removed:0" && failed.passKey == failedRow.message.messageID)
        #expect(failedRow.message.headers["notice-kind"] == .string("removed"))
        #expect(!rows.contains { $0.message.routingKey == EventType.passFailed.rawValue }, "pass.failed is about passes")
        let retry = PassRetryMessage.operatorRetry(of: failed, token: "t1")
        #expect(retry.noticeKind == .removed)
        #expect(try await d.handle(retry: retry).notices[.removed] == [0], "previous from the ledger's snapshot")
        #expect(try await d.handle(retry: retry).gatewayCalls == 0)
        #expect(g.notices.map(\.kind) == [.removed, .removed])
        // The schema accepts it.
        let samples = try TemporaryDirectory("samples")
        defer { samples.remove() }
        try Data(failedRow.message.body).write(to: samples.appending("passes.failed--notice.json"))
        let request = NotifyRequestBuilder.request(for: NoticeJob(kind: .removed, booking: v2, previous: p2, work: []), indexes: [0])
        #expect(request.recipients.map(\.email) == ["p0@example.com"] && request.previous?.title == v1.title)
        try ContractJSON.encode(request).write(to: samples.appending("notify.request.json"))
        let (status, output) = try runValidator(["--samples", samples.path])
        #expect(status == 0, "\(output)")
    }

    /// P0 and P1 hold passes; v2 removes P0, whose `removed` notice is given
    /// up at once (`passes.failed`); returns v2 and the operator's retry of it.
    static func removalGivenUp(on kind: LedgerKind) async throws
        -> (PassDispatcher, ScriptedGateway, Booking, PassRetryMessage, URL) {
        let (d, g, ledger, dir) = try await DispatcherTests().make(
            on: kind, [.success, .passFailed(index: 0, code: 4001, text: "mailbox full")], maxAttempts: 1)
        let v1 = Self.booking([0, 1])
        _ = try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil)
        let (v2, p2) = Self.next(v1) { $0.attendees = [Self.person(1)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v2, previous: p2).failed == [0])
        let failedRow = try #require(try await ledger.unpublished().first { $0.message.routingKey == Topology.passesFailedQueue })
        let retry = PassRetryMessage.operatorRetry(of: try ContractJSON.decode(FailedPass.self, from: failedRow.message.body), token: "t1")
        return (d, g, v2, retry, dir)
    }

    /// An operator's retry of a removal given up on, after newer versions:
    /// sent when the person is still out (no later notice names them); not
    /// when they were added back, nor when removed again since (that
    /// removal's own notice told them).
    @Test(arguments: LedgerKind.allCases) func anOperatorRetryOfAnOldRemovalTellsOnlyThoseStillOwedIt(_ kind: LedgerKind) async throws {
        let (d, g, v2, retry, dir) = try await Self.removalGivenUp(on: kind)
        defer { try? FileManager.default.removeItem(at: dir) }

        // P0 back at v3 (the pass from v1 still holds), out again at v4, told so.
        let (v3, p3) = Self.next(v2) { $0.attendees = [Self.person(1), Self.person(0)] }
        _ = try await d.handle(event: .bookingUpdated, booking: v3, previous: p3)
        let (v4, p4) = Self.next(v3) { $0.attendees = [Self.person(1)] }
        #expect(try await d.handle(event: .bookingUpdated, booking: v4, previous: p4).notices[.removed] == [1])
        let calls = g.notices.count
        #expect(try await d.handle(retry: retry).gatewayCalls == 0, "v4's notice told P0 already")
        #expect(g.notices.count == calls)
    }

    @Test(arguments: LedgerKind.allCases) func anOperatorRetryOfARemovalAfterATitleEditStillTellsThePerson(_ kind: LedgerKind) async throws {
        let (d, g, v2, retry, dir) = try await Self.removalGivenUp(on: kind)
        defer { try? FileManager.default.removeItem(at: dir) }
        let (v3, p3) = Self.next(v2) { $0.title = "Renamed" }
        _ = try await d.handle(event: .bookingUpdated, booking: v3, previous: p3)
        #expect(try await d.handle(retry: retry).notices[.removed] == [0], "no later notice names P0: the old one still goes")
        #expect(g.notices.last.map { ($0.kind, $0.emails) } ?? (.pass, []) == (.removed, ["p0@example.com"]))
    }

    /// A ledger written by the previous version (rows by attendee index)
    /// is migrated: its passes are found by e-mail, so a redelivered event
    /// sends nothing and a later update adds only the new person.
    @Test func aV1LedgerIsMigrated() async throws {
        let dir = try TemporaryDirectory("ledger-v1")
        defer { dir.remove() }
        let path = dir.appending("pass-sender.sqlite").path
        let v1 = Self.booking([0, 1])
        let snapshot = String(decoding: try ContractJSON.encode(v1), as: UTF8.self)
        // Written by Python's sqlite3: the v1 schema as GRDB migrated it.
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.executescript('''
            CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
            INSERT INTO grdb_migrations VALUES ('v1');
            CREATE TABLE booking (id TEXT PRIMARY KEY, latestVersion INTEGER NOT NULL, cancelled BOOLEAN NOT NULL DEFAULT 0, updatedAt DOUBLE NOT NULL);
            CREATE TABLE snapshot (bookingId TEXT NOT NULL, version INTEGER NOT NULL, json BLOB NOT NULL, PRIMARY KEY (bookingId, version));
            CREATE TABLE pass (bookingId TEXT NOT NULL, version INTEGER NOT NULL, attendeeIndex INTEGER NOT NULL, status TEXT NOT NULL,
              attempts INTEGER NOT NULL, firstFailureAt TEXT, lastFailureAt TEXT, lastErrorCode INTEGER, lastErrorText TEXT,
              retryToken TEXT, deliveredAt TEXT, updatedAt DOUBLE NOT NULL, PRIMARY KEY (bookingId, version, attendeeIndex));
            CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, bookingId TEXT NOT NULL, exchange TEXT NOT NULL,
              routingKey TEXT NOT NULL, messageId TEXT NOT NULL, type TEXT NOT NULL, body BLOB NOT NULL, headers BLOB NOT NULL,
              createdAt DOUBLE NOT NULL, publishedAt DOUBLE);
            CREATE INDEX outbox_pending ON outbox(bookingId, publishedAt);
            ''')
            db.execute("INSERT INTO booking VALUES (?, 1, 0, 0)", (sys.argv[2],))
            db.execute("INSERT INTO snapshot VALUES (?, 1, ?)", (sys.argv[2], sys.argv[3].encode()))
            db.execute("INSERT INTO pass VALUES (?, 1, 0, 'delivered', 0, NULL, NULL, NULL, NULL, NULL, 'x', 0)", (sys.argv[2],))
            db.execute("INSERT INTO pass VALUES (?, 1, 1, 'failed', 5, 'a', 'b', 4001, 'full', NULL, NULL, 0)", (sys.argv[2],))
            db.commit()
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, path, v1.id, snapshot]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)

        let ledger = try PassLedger(path: path)
        let rows = try await ledger.passes(bookingId: v1.id)
        #expect(rows.map(\.email) == ["p0@example.com", "p1@example.com"])
        #expect(rows.map(\.status) == [.delivered, .failed] && rows[1].attempts == 5 && rows[1].lastErrorCode == 4001)
        let gateway = ScriptedGateway([])
        let d = PassDispatcher(ledger: ledger, gateway: gateway, settings: PassSenderSettings(), logger: Logger(label: "t"))
        #expect(try await d.handle(event: .bookingConfirmed, booking: v1, previous: nil).gatewayCalls == 0)
        let (v2, p2) = Self.next(v1) { $0.attendees = [Self.person(2), Self.person(0)] }
        let s = try await d.handle(event: .bookingUpdated, booking: v2, previous: p2)
        #expect(s.delivered == [0] && s.notices[.removed] == nil, "P2 added; P1 never got a pass, so hears nothing")
    }
}
