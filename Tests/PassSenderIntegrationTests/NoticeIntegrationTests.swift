import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import Testing
import TestSupport

/// Notices through the real broker, a real SQLite ledger and a real HTTP
/// gateway (contract v1.1, "Notifications to attendees").
@Suite("Pass sender notices", .serialized)
struct NoticeIntegrationTests {
    static func next(_ b: Booking, _ change: (inout Booking) -> Void) -> (Booking, BookingSnapshot) {
        var n = b
        n.version += 1
        change(&n)
        return (n, BookingSnapshot(b))
    }

    /// `b` moved to `start`–`end` on the same day (local times and instants).
    static func move(_ b: inout Booking, _ start: String, _ end: String) {
        b.start = start
        b.end = end
        b.startsAt = ContractFormat.timestamp(ContractFormat.instant(date: b.date, time: start, timeZone: b.timeZone)!)
        b.endsAt = ContractFormat.timestamp(ContractFormat.instant(date: b.date, time: end, timeZone: b.timeZone)!)
    }

    /// Reschedule, update and cancel of one booking: each recipient hears
    /// each notice once through `/notify`, although one of them fails
    /// twice first (retried alone through the delay queues), and the new
    /// and added passes go through `/sendpass`.
    @Test func everyChangeReachesItsRecipientsOnceWithPerRecipientRetry() async throws {
        let gateway = try await FaultGateway.start(notices: true) { key, failures in
            key.kind == .rescheduled && key.email == "p1@example.com" && failures < 2
        }
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 5, name: "notices", notify: true)
        let v1 = makeBooking(attendees: 3)
        try await h.publish(.bookingConfirmed, v1)
        try await h.waitDelivered(v1, indexes: [0, 1, 2])

        let (v2, p2) = Self.next(v1) { Self.move(&$0, "11:00", "12:00") }
        try await h.publish(.bookingRescheduled, v2, previous: p2)
        try await h.waitNotices(v2, .rescheduled, count: 3)
        try await h.waitDelivered(v2, indexes: [0, 1, 2])

        let (v3, p3) = Self.next(v2) {
            $0.attendees = [$0.attendees[2], Attendee(name: "New Person", email: "new@example.com", phone: "+491709999999"),
                            $0.attendees[0]]
        }
        try await h.publish(.bookingUpdated, v3, previous: p3)
        try await h.waitNotices(v3, .removed, count: 1)
        try await h.waitDelivered(v3, indexes: [1])

        let (v4, p4) = Self.next(v3) { $0.status = .cancelled }
        try await h.publish(.bookingCancelled, v4, previous: p4)
        try await h.waitNotices(v4, .cancelled, count: 3)

        let s = h.gateway.state.current
        let sent = Dictionary(grouping: s.noticesSent, by: { $0 }).mapValues(\.count)
        let id = v1.id
        #expect(sent == [
            NoticeKey(bookingId: id, version: 2, kind: .rescheduled, email: "p0@example.com"): 1,
            NoticeKey(bookingId: id, version: 2, kind: .rescheduled, email: "p1@example.com"): 1,
            NoticeKey(bookingId: id, version: 2, kind: .rescheduled, email: "p2@example.com"): 1,
            NoticeKey(bookingId: id, version: 3, kind: .removed, email: "p1@example.com"): 1,
            NoticeKey(bookingId: id, version: 4, kind: .cancelled, email: "p2@example.com"): 1,
            NoticeKey(bookingId: id, version: 4, kind: .cancelled, email: "new@example.com"): 1,
            NoticeKey(bookingId: id, version: 4, kind: .cancelled, email: "p0@example.com"): 1,
        ])
        #expect(s.noticeFailures.values.reduce(0, +) == 2)
        // The retries carried only the failing recipient.
        let rescheduledCalls = s.noticeRequests.filter { $0.kind == .rescheduled }.map { $0.recipients.map(\.email) }
        #expect(rescheduledCalls.first == ["p0@example.com", "p1@example.com", "p2@example.com"], "\(rescheduledCalls)")
        #expect(rescheduledCalls.dropFirst().allSatisfy { !$0.contains("p0@example.com") }, "\(rescheduledCalls)")
        #expect(rescheduledCalls.filter { $0 == ["p1@example.com"] }.count == 2, "two back-off retries of p1 alone")
        let first = try #require(s.noticeRequests.first { $0.kind == .rescheduled })
        let old = SendPassRequestBuilder.request(for: v1, attendeeIndexes: []).booking
        #expect(first.previous == old && first.booking.timeStart == old.timeStart + 7200, "previous = the old time")
        #expect(s.noticeRequests.first { $0.kind == .cancelled }?.previous == nil)
        // Passes: v1 to all, v2 to all, v3 only to the added person.
        let passes = Dictionary(grouping: s.sent, by: { $0 }).mapValues(\.count)
        #expect(passes.count == 7 && passes.values.allSatisfy { $0 == 1 })
        #expect(passes[PassKey(bookingId: id, version: 3, index: 1)] == 1)
        await h.stop()
    }

    /// A gateway without `/notify` (HTTP 404): passes still go through
    /// `/sendpass`, notices are written to the spool and read back by
    /// Python's email and icalendar.
    @Test func aGatewayWithoutNoticesFallsBackToTheSpool() async throws {
        let gateway = try await FaultGateway.start(notices: false)
        let h = try await PassHarness.start(gateway: gateway, name: "notice-spool", notify: true)
        let v1 = makeBooking(attendees: 2)
        try await h.publish(.bookingConfirmed, v1)
        try await h.waitDelivered(v1, indexes: [0, 1])
        let (v2, p2) = Self.next(v1) { $0.status = .cancelled }
        try await h.publish(.bookingCancelled, v2, previous: p2)
        try await h.waitNotices(v2, .cancelled, count: 2)
        let outbox = URL(fileURLWithPath: h.dataDirectory).appendingPathComponent("outbox")
        let files = try FileManager.default.contentsOfDirectory(atPath: outbox.path).filter { $0.hasSuffix(".eml") }.sorted()
        #expect(files == ["\(v1.id)-v2-cancelled-0.eml", "\(v1.id)-v2-cancelled-1.eml"])
        let summaries = try PassSummaries.read(files.map { outbox.appendingPathComponent($0).path })
        #expect(summaries.map(\.method) == ["CANCEL", "CANCEL"] && summaries.map(\.sequence) == [2, 2])
        #expect(summaries.map(\.uid) == [v1.id, v1.id] && summaries.map(\.to_addr) == ["p0@example.com", "p1@example.com"])
        #expect(h.gateway.state.current.sent.count == 2, "the passes went through /sendpass")
        #expect(h.gateway.state.current.noticeRequests.isEmpty)
        await h.stop()
    }

    /// A notice that keeps failing goes to `passes.failed` with its kind;
    /// once the gateway recovers an operator retry sends it exactly once.
    @Test func aFailedNoticeCanBeRetriedByAnOperator() async throws {
        let recovered = LockedBox(false)
        let gateway = try await FaultGateway.start(notices: true) { key, _ in
            key.kind == .removed && !recovered.withLock { $0 }
        }
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 2, name: "notice-failed", notify: true)
        let v1 = makeBooking(attendees: 2)
        try await h.publish(.bookingConfirmed, v1)
        try await h.waitDelivered(v1, indexes: [0, 1])
        let (v2, p2) = Self.next(v1) { $0.attendees = [$0.attendees[1]] }
        try await h.publish(.bookingUpdated, v2, previous: p2)
        try await h.settled.wait("the removed notice given up") { all in
            all.contains { $0.bookingId == v1.id && $0.summary?.failed == [0] }
        }
        let entries = try await h.failedQueue().list()
        let entry = try #require(entries.first)
        #expect(entries.count == 1 && entry.pass?.kind == .removed && entry.key == "\(v1.id):2:removed:0")
        #expect(entry.messageID == entry.key && entry.headers["notice-kind"]?.stringValue == "removed")
        recovered.withLock { $0 = true }
        let moved = try await h.failedQueue().retry { $0.pass?.kind == .removed }
        #expect(moved.entries.count == 1 && moved.isComplete)
        try await h.waitNotices(v2, .removed, count: 1)
        #expect(h.gateway.state.current.noticesSent == [NoticeKey(bookingId: v1.id, version: 2, kind: .removed, email: "p0@example.com")])
        #expect(try await h.failedQueue().list().isEmpty)
        await h.stop()
    }

    /// A `rescheduled` notice still waiting in a delay queue when the
    /// booking is cancelled is dropped when it comes back: only the
    /// cancellation is sent.
    @Test func aNoticeOvertakenByACancellationIsNeverSent() async throws {
        let gateway = try await FaultGateway.start(notices: true) { key, _ in key.kind == .rescheduled }
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 5, delays: "1s", name: "notice-stale", notify: true)
        let v1 = makeBooking(attendees: 1)
        try await h.publish(.bookingConfirmed, v1)
        try await h.waitDelivered(v1, indexes: [0])
        let (v2, p2) = Self.next(v1) { Self.move(&$0, "11:00", "12:00") }
        try await h.publish(.bookingRescheduled, v2, previous: p2)
        try await h.settled.wait("the rescheduled notice scheduled for a retry") { all in
            all.contains { $0.bookingId == v1.id && $0.summary?.scheduled == [0] }
        }
        let (v3, p3) = Self.next(v2) { $0.status = .cancelled }
        try await h.publish(.bookingCancelled, v3, previous: p3)
        try await h.waitNotices(v3, .cancelled, count: 1)
        try await h.waitDropped(v2, queue: PassQueues.retry, reason: .cancelled)
        let s = h.gateway.state.current
        #expect(s.noticesSent == [NoticeKey(bookingId: v1.id, version: 3, kind: .cancelled, email: "p0@example.com")])
        #expect(s.noticeRequests.filter { $0.kind == .rescheduled }.count == 1, "tried once, never again")
        await h.stop()
    }
}

/// The spooled e-mails as Python reads them (scripts/ical_summary.py).
enum PassSummaries {
    struct Summary: Decodable {
        var file: String
        var method: String?
        var uid: String?
        var sequence: Int?
        var to_addr: String?
    }

    static func read(_ paths: [String]) throws -> [Summary] {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/ical_summary.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path] + paths
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return try JSONDecoder().decode([Summary].self, from: data)
    }
}
