import BookingContracts
import Foundation
import TestSupport
import Testing
@testable import PassSender

/// Spooled notices and hostile input, read back by Python's `email` and
/// `icalendar` (scripts/ical_summary.py), not by our code.
@Suite("Notice e-mails and hostile names")
struct NoticeMailTests {
    func spool(_ kind: NoticeKind, _ booking: Booking, previous: BookingSnapshot?, indexes: [Int],
               into gateway: SpoolPassGateway) async -> GatewayOutcome {
        let job = NoticeJob(kind: kind, booking: booking, previous: previous, work: [])
        if kind == .pass {
            return await gateway.send(SendPassRequestBuilder.request(for: booking, attendeeIndexes: indexes),
                                      batch: PassBatch(bookingId: booking.id, version: booking.version, attendeeIndexes: indexes,
                                                       booking: booking))
        }
        return await gateway.notify(NotifyRequestBuilder.request(for: job, indexes: indexes),
                                    batch: PassBatch(bookingId: booking.id, version: booking.version, attendeeIndexes: indexes,
                                                     booking: booking, kind: kind, previous: previous))
    }

    /// Pass v1, reschedule v2 (notice + new pass), removal v3, cancellation
    /// v4: one calendar entry (same UID) that each message updates with a
    /// higher SEQUENCE; REQUEST for passes and reschedules, CANCEL for the rest.
    @Test func noticesUpdateTheSameCalendarEntry() async throws {
        let dir = try TemporaryDirectory("notice")
        defer { dir.remove() }
        let gateway = try SpoolPassGateway(directory: dir.url)
        let v1 = PassMailTests.booking("2027-03-21", "09:00", "10:30")
        let v2 = PassMailTests.booking("2027-03-28", "11:00", "12:00", version: 2)
        var v3 = v2
        v3.version = 3
        v3.attendees = [v2.attendees[1]]
        var v4 = v3
        v4.version = 4
        v4.status = .cancelled
        #expect(await spool(.pass, v1, previous: nil, indexes: [0, 1], into: gateway) == .success)
        #expect(await spool(.rescheduled, v2, previous: BookingSnapshot(v1), indexes: [0, 1], into: gateway) == .success)
        #expect(await spool(.removed, v3, previous: BookingSnapshot(v2), indexes: [0], into: gateway) == .success)
        #expect(await spool(.cancelled, v4, previous: BookingSnapshot(v3), indexes: [0], into: gateway) == .success)
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".eml") }.sorted()
        #expect(files == ["bk-1-v1-0.eml", "bk-1-v1-1.eml", "bk-1-v2-rescheduled-0.eml", "bk-1-v2-rescheduled-1.eml",
                          "bk-1-v3-removed-0.eml", "bk-1-v4-cancelled-0.eml"])
        let byFile = Dictionary(uniqueKeysWithValues: try PassMailTests.summarise(files.map { dir.appending($0).path })
            .map { ($0.file, $0) })
        let moved = try #require(byFile["bk-1-v2-rescheduled-0.eml"])
        #expect(moved.method == "REQUEST" && moved.part_method_param == "REQUEST" && moved.uid == "bk-1" && moved.sequence == 2)
        #expect(moved.dtstart_utc == v2.startsAt && moved.status == "CONFIRMED")
        #expect(moved.subject.hasPrefix("Moved: ") && moved.subject.contains("11:00–12:00 CEST"), "\(moved.subject)")
        let text = try #require(moved.text)
        #expect(text.contains("from Sun 21 Mar 2027, 09:00–10:30 CET") && text.contains("to Sun 28 Mar 2027, 11:00–12:00 CEST"), "\(text)")
        let removed = try #require(byFile["bk-1-v3-removed-0.eml"])
        #expect(removed.method == "CANCEL" && removed.part_method_param == "CANCEL" && removed.uid == "bk-1" && removed.sequence == 3)
        #expect(removed.status == "CANCELLED" && removed.to_addr == "zoe@example.com", "the removed attendee, from previous")
        #expect(removed.attendees == [.init(email: "mailto:zoe@example.com", cn: "Zoë Ünal, PhD")])
        let cancelled = try #require(byFile["bk-1-v4-cancelled-0.eml"])
        #expect(cancelled.method == "CANCEL" && cancelled.sequence == 4 && cancelled.status == "CANCELLED")
        #expect(cancelled.to_addr == "ada@example.com" && cancelled.subject.hasPrefix("Cancelled: "))
        #expect(cancelled.dtstart_utc_vtimezone == v4.startsAt)
        for s in byFile.values { #expect(s.defects == [], "\(s.file): \(s.defects ?? [])") }
        let sms = try String(contentsOf: dir.appending("bk-1-v4-cancelled-0.sms"), encoding: .utf8)
        #expect(sms.hasPrefix("To: +491701234568\n\n") && sms.contains("is cancelled") && sms.contains("CEST"), "\(sms)")
    }

    /// Names and titles made to break the message: line breaks followed by
    /// a header, quotes and backslashes, text that looks like an encoded
    /// word, a description that contains the MIME boundary. A reader sees
    /// the same headers as for a harmless name, one recipient with that
    /// (cleaned) name, and two intact parts.
    @Test(arguments: [
        "Eve\r\nBcc: victim@example.org",
        "Eve\nX-Injected: 1",
        "Eve\rSubject: pwned",
        "\"Eve\" <evil@example.org>, \"Mallory\\\"",
        "=?utf-8?B?QWRtaW4gPGFkbWluQGV4YW1wbGUub3JnPg==?=",
        "=?utf-8?Q?evil?= Ünal",
        "Zoë \u{0}\u{7}\u{1b}[31m",
        "Ünal\r\n =?utf-8?B?Zm9v?=\r\nBcc: x@y.z",
        String(repeating: "Ä", count: 120),
    ])
    func hostileNamesCannotInjectHeadersOrBreakMIME(name: String) async throws {
        let dir = try TemporaryDirectory("hostile")
        defer { dir.remove() }
        let gateway = try SpoolPassGateway(directory: dir.url)
        var b = PassMailTests.booking("2026-11-23", "09:00", "10:30",
                                      attendees: [Attendee(name: name, email: "eve@example.com", phone: "+491701234567")])
        b.title = "Review\r\nBcc: all@example.org"
        // The boundary the pass e-mail would use, closing the multipart early.
        b.description = "--=_pass_bk-1-v1-0pass-sender.room-booking.invalid--\r\nContent-Type: text/html\r\n\r\n<script>"
        var v2 = b
        v2.version = 2
        v2.status = .cancelled
        #expect(await spool(.pass, b, previous: nil, indexes: [0], into: gateway) == .success)
        #expect(await spool(.cancelled, v2, previous: BookingSnapshot(b), indexes: [0], into: gateway) == .success)
        let paths = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".eml") }.sorted()
            .map { dir.appending($0).path }
        #expect(paths.count == 2)
        let expectedName = PassMail.oneLine(name)
        for s in try PassMailTests.summarise(paths) {
            #expect(s.header_names == ["From", "To", "Subject", "Date", "Message-ID", "MIME-Version", "Content-Type"], "\(s.file)")
            #expect(s.to_count == 1 && s.to_addr == "eve@example.com", "\(s.file): \(s.to_addr ?? "-")")
            // Python keeps the folding space between adjacent encoded-words of a
            // phrase (RFC 2047 6.2 says to drop it; its own generator's output
            // reads back the same way), so spaces are not compared.
            #expect(s.to_name?.replacingOccurrences(of: " ", with: "") == expectedName.replacingOccurrences(of: " ", with: ""),
                    "\(s.file): \(s.to_name ?? "-")")
            #expect(s.content_type == "multipart/mixed" && s.mime_parts == 3 && s.calendar_parts == 1, "\(s.file)")
            #expect(s.defects == [], "\(s.file): \(s.defects ?? [])")
            #expect(s.subject.contains("Review  Bcc: all@example.org"), "the title's line break is spaces: \(s.subject)")
            if s.file.hasSuffix("-v1-0.eml") {
                #expect(s.text?.contains("<script>") == true, "the description stays inside the text part")
            }
            #expect(s.attendees?.first?.cn?.contains("\r") == false && s.attendees?.first?.cn?.contains("\n") == false)
        }
        // Every header line of the raw file is short and none starts a header we did not write.
        for path in paths {
            let raw = try String(contentsOfFile: path, encoding: .utf8)
            let head = raw.components(separatedBy: "\r\n\r\n")[0]
            for line in head.components(separatedBy: "\r\n") {
                #expect(line.utf8.count <= 998)
                #expect(!line.hasPrefix("Bcc") && !line.hasPrefix("X-Injected") && !line.hasPrefix("Subject: pwned"), "\(line)")
            }
            #expect(!head.contains("\n") || head.replacingOccurrences(of: "\r\n", with: "").contains("\n") == false,
                    "no bare LF in the header")
        }
    }
}
