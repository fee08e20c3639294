import BookingContracts
import Foundation
import Synchronization
import TestSupport
import Testing
@testable import PassSender

/// The spool reports passes delivered only once their files are durable:
/// after the directory holding the renames was fsynced.
@Suite("Spool gateway: durable before delivered")
struct SpoolDurabilityTests {
    static let booking = Booking(id: "bk-sync", room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:00",
                                 timeZone: "Europe/Berlin", startsAt: "2026-11-23T08:00:00Z", endsAt: "2026-11-23T09:00:00Z",
                                 title: "Review", status: .confirmed,
                                 attendees: [Attendee(name: "Ada", email: "ada@example.com", phone: "+491701234567")],
                                 version: 1)

    /// A failed directory fsync answers transient (every pass of the call is
    /// retried), and the retry writes the same files again instead of a
    /// second copy.
    @Test func aFailedDirectorySyncIsTransientAndTheRetryReplacesTheFiles() async throws {
        let dir = try TemporaryDirectory("spool-sync")
        defer { dir.remove() }
        let failing = Mutex(true)
        let synced = Mutex<[String]>([])
        let gateway = try SpoolPassGateway(directory: dir.url, sync: { path in
            synced.withLock { $0.append(path) }
            return failing.withLock { $0 } ? "fsync \(path): errno 5" : nil
        })
        let request = SendPassRequestBuilder.request(for: Self.booking, attendeeIndexes: [0])
        let batch = PassBatch(bookingId: Self.booking.id, version: 1, attendeeIndexes: [0], booking: Self.booking)

        let first = await gateway.send(request, batch: batch)
        guard case .transient(nil, let text) = first else {
            Issue.record("expected a transient answer, got \(first)")
            return
        }
        #expect(text.contains("errno 5"), "the answer names what failed: \(text)")
        #expect(synced.withLock { $0 } == [dir.path])

        failing.withLock { $0 = false }
        #expect(await gateway.send(request, batch: batch) == .success)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["bk-sync-v1-0.eml", "bk-sync-v1-0.sms"])
        #expect(synced.withLock { $0.count } == 2)
    }

    /// A write error at pass i: the passes before it are delivered only
    /// once synced; unsynced, the whole call is transient.
    @Test func passesBeforeAWriteErrorCountOnlyOnceSynced() async throws {
        let dir = try TemporaryDirectory("spool-sync-partial")
        defer { dir.remove() }
        // Pass 1's e-mail cannot be renamed into place: a directory has its name.
        try FileManager.default.createDirectory(at: dir.appending("bk-sync-v1-1.eml"), withIntermediateDirectories: false)
        var two = Self.booking
        two.attendees.append(Attendee(name: "Bo", email: "bo@example.com", phone: "+491701234568"))
        let request = SendPassRequestBuilder.request(for: two, attendeeIndexes: [0, 1])
        let batch = PassBatch(bookingId: two.id, version: 1, attendeeIndexes: [0, 1], booking: two)
        let failing = Mutex(true)
        let gateway = try SpoolPassGateway(directory: dir.url, sync: { path in
            failing.withLock { $0 } ? "fsync \(path): errno 5" : nil
        })
        let unsynced = await gateway.send(request, batch: batch)
        #expect(unsynced.label == "transient", "pass 0 is not durable: \(unsynced)")
        failing.withLock { $0 = false }
        let synced = await gateway.send(request, batch: batch)
        guard case .passFailed(1, let code, _) = synced else {
            Issue.record("expected pass 1 to fail, got \(synced)")
            return
        }
        #expect(code.rawValue == 4500)
    }

    /// Notices go through the same path.
    @Test func aNoticeIsNotDeliveredBeforeItsDirectoryIsSynced() async throws {
        let dir = try TemporaryDirectory("spool-sync-notice")
        defer { dir.remove() }
        let gateway = try SpoolPassGateway(directory: dir.url, sync: { _ in "fsync: errno 28" })
        let job = NoticeJob(kind: .cancelled, booking: Self.booking, previous: nil, work: [])
        let outcome = await gateway.notify(NotifyRequestBuilder.request(for: job, indexes: [0]),
                                           batch: PassBatch(bookingId: Self.booking.id, version: 1, attendeeIndexes: [0],
                                                            booking: Self.booking, kind: .cancelled))
        #expect(outcome.label == "transient")
    }

    /// The real sync: nil on a directory, what failed on a missing one.
    @Test func theRealSyncReportsWhatFailed() throws {
        let dir = try TemporaryDirectory("spool-sync-real")
        defer { dir.remove() }
        #expect(SpoolPassGateway.syncDirectory(dir.path) == nil)
        let missing = dir.appending("gone").path
        let failure = try #require(SpoolPassGateway.syncDirectory(missing))
        #expect(failure.hasPrefix("open \(missing): errno \(ENOENT)"))
    }
}
