import BookingContracts
import Foundation
import TestSupport
import Testing
@testable import PassSender

/// What attendees read (contract v1.1, "Notifications to attendees"):
/// times local to the room with the zone's abbreviation, correct on DST
/// days, and an iCalendar part that independent software reads as the
/// same event.
@Suite("Pass e-mails: local times and iCalendar")
struct PassMailTests {
    static func booking(_ date: String, _ start: String, _ end: String, zone: String = "Europe/Berlin", id: String = "bk-1",
                        version: Int = 1, attendees: [Attendee]? = nil) -> Booking {
        let startsAt = ContractFormat.instant(date: date, time: start, timeZone: zone)!
        let endsAt = ContractFormat.instant(date: date, time: end, timeZone: zone)!
        return Booking(id: id, room: "Berlin", date: date, start: start, end: end, timeZone: zone,
                       startsAt: ContractFormat.timestamp(startsAt), endsAt: ContractFormat.timestamp(endsAt),
                       title: "Sprint review; Q4, \"final\"", description: "Line one\nline two",
                       status: .confirmed,
                       attendees: attendees ?? [Attendee(name: "Zoë Ünal, PhD", email: "zoe@example.com", phone: "+491701234567"),
                                                Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234568")],
                       version: version)
    }

    @Test func localTimesCarryTheZoneAbbreviationOfTheDay() {
        #expect(LocalTimeText.when(Self.booking("2026-11-23", "09:00", "10:30")) == "Mon 23 Nov 2026, 09:00–10:30 CET")
        // Both 2026 change days in Berlin are ordinary days for a 09:00 meeting.
        #expect(LocalTimeText.when(Self.booking("2026-03-29", "09:00", "10:30")) == "Sun 29 Mar 2026, 09:00–10:30 CEST")
        #expect(LocalTimeText.when(Self.booking("2026-10-25", "09:00", "10:30")) == "Sun 25 Oct 2026, 09:00–10:30 CET")
        // A night booking across the change names both.
        #expect(LocalTimeText.when(Self.booking("2026-10-25", "01:00", "04:00")) == "Sun 25 Oct 2026, 01:00 CEST–04:00 CET")
        #expect(LocalTimeText.when(Self.booking("2026-07-01", "09:00", "10:00", zone: "America/New_York")) == "Wed 1 Jul 2026, 09:00–10:00 EDT")
        #expect(LocalTimeText.when(Self.booking("2026-12-01", "09:00", "10:00", zone: "America/New_York")) == "Tue 1 Dec 2026, 09:00–10:00 EST")
        #expect(LocalTimeText.when(Self.booking("2026-12-01", "09:00", "10:00", zone: "Asia/Kolkata")) == "Tue 1 Dec 2026, 09:00–10:00 IST")
        #expect(LocalTimeText.when(Self.booking("2026-12-01", "09:00", "10:00", zone: "Asia/Dubai")) == "Tue 1 Dec 2026, 09:00–10:00 +04")
        // Negative DST: Irish Standard Time is the summer time.
        #expect(LocalTimeText.when(Self.booking("2026-07-01", "09:00", "10:00", zone: "Europe/Dublin")) == "Wed 1 Jul 2026, 09:00–10:00 IST")
        #expect(LocalTimeText.when(Self.booking("2026-12-01", "09:00", "10:00", zone: "Europe/Dublin")) == "Tue 1 Dec 2026, 09:00–10:00 GMT")
    }

    @Test func posixFootersParse() {
        #expect(ZoneAbbreviation.parse("CET-1CEST,M3.5.0,M10.5.0/3")
                == .init(standard: "CET", standardOffset: 3600, daylight: "CEST", daylightOffset: 7200))
        #expect(ZoneAbbreviation.parse("<+0530>-5:30") == .init(standard: "+0530", standardOffset: 19_800))
        #expect(ZoneAbbreviation.parse("IST-1GMT0,M10.5.0,M3.5.0/1")
                == .init(standard: "IST", standardOffset: 3600, daylight: "GMT", daylightOffset: 0))
        #expect(ZoneAbbreviation.parse("") == nil)
    }

    /// Every spooled e-mail, read by Python's `email` and `icalendar`: an
    /// invitation for the room's local time (the same instants whether the
    /// reader resolves the TZID itself or uses the message's VTIMEZONE), for
    /// that attendee; the next version updates the same entry.
    @Test func spooledPassesCarryAnInvitationIndependentReadersAgreeWith() async throws {
        let dir = try TemporaryDirectory("ical")
        defer { dir.remove() }
        let gateway = try SpoolPassGateway(directory: dir.url)
        // Version 1 in winter time, version 2 moved onto the spring change day.
        let v1 = Self.booking("2027-03-21", "09:00", "10:30")
        let v2 = Self.booking("2027-03-28", "11:00", "12:00", version: 2)
        for b in [v1, v2] {
            let request = SendPassRequestBuilder.request(for: b, attendeeIndexes: [0, 1])
            let outcome = await gateway.send(request, batch: PassBatch(bookingId: b.id, version: b.version, attendeeIndexes: [0, 1], booking: b))
            #expect(outcome == .success)
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".eml") }.sorted()
        #expect(files == ["bk-1-v1-0.eml", "bk-1-v1-1.eml", "bk-1-v2-0.eml", "bk-1-v2-1.eml"])
        let summaries = try Self.summarise(files.map { dir.appending($0).path })
        #expect(summaries.count == 4)
        for s in summaries {
            let b = s.file.contains("-v1-") ? v1 : v2
            let attendee = b.attendees[s.file.hasSuffix("-0.eml") ? 0 : 1]
            #expect(s.content_type == "multipart/mixed" && s.calendar_parts == 1 && s.part_method_param == "REQUEST", "\(s.file)")
            #expect(s.method == "REQUEST" && s.version == "2.0" && s.events == 1)
            #expect(s.uid == b.id && s.sequence == b.version, "\(s.file): same UID, SEQUENCE = version")
            #expect(s.tzid == "Europe/Berlin" && s.vtimezone_tzids == ["Europe/Berlin"])
            #expect(s.dtstart_utc == b.startsAt && s.dtend_utc == b.endsAt, "\(s.file): \(s.dtstart_utc ?? "-")")
            #expect(s.dtstart_utc_vtimezone == b.startsAt && s.dtend_utc_vtimezone == b.endsAt, "\(s.file): by the message's VTIMEZONE")
            #expect(s.organizer == "mailto:passes@room-booking.invalid")
            #expect(s.attendees == [.init(email: "mailto:\(attendee.email)", cn: attendee.name)])
            #expect(s.summary == b.title && s.location == "Berlin" && s.description == "Line one\nline two" && s.status == "CONFIRMED")
            #expect(s.rrule == nil)
            #expect(s.subject.contains(LocalTimeText.when(b)) && !s.subject.contains("UTC"), "\(s.subject)")
        }
        #expect(v2.startsAt == "2027-03-28T09:00:00Z", "11:00 CEST")
        let sms = try String(contentsOf: dir.appending("bk-1-v2-1.sms"), encoding: .utf8)
        #expect(sms.contains("Sun 28 Mar 2027, 11:00–12:00 CEST"), "\(sms)")
    }

    @Test func longAndSpecialTextFoldsAndEscapes() {
        let line = "SUMMARY:" + PassCalendar.text(String(repeating: "ä", count: 60) + ";,\\")
        let folded = PassCalendar.fold(line)
        for part in folded.components(separatedBy: "\r\n") { #expect(part.utf8.count <= 75) }
        #expect(folded.replacingOccurrences(of: "\r\n ", with: "") == line)
        #expect(line.hasSuffix("\\;\\,\\\\"))
    }

    /// Rewritten without Foundation's string search; these pin
    /// what the old code did — except one tightening: the old E.164 regex's
    /// `$` (ICU) also matched before a final line break, so "+49170\n"
    /// passed it; the check by hand refuses it.
    @Test func bodyTextEndsEveryLineWithCRLFAndBlanksControls() {
        #expect(PassMail.bodyText("a\r\nb\nc\rd") == "a\r\nb\r\nc\r\nd")
        #expect(PassMail.bodyText("\r\r\n\n") == "\r\n\r\n\r\n")
        #expect(PassMail.bodyText("tab\there\u{7}bell\u{85}nel\u{2028}ls") == "tab\there bell nel ls")
        #expect(PassMail.bodyText("e\u{301}\r\n") == "e\u{301}\r\n")
    }

    @Test func spoolChecksE164ByHand() {
        for good in ["+491701234567", "+12", "+123456789012345"] { #expect(SpoolPassGateway.isE164(good), "\(good)") }
        for bad in ["+0123", "+1", "+1234567890123456", "491701234567", "+49 170", "+49170\n", "+４９170", ""] {
            #expect(!SpoolPassGateway.isE164(bad), "\(bad)")
        }
    }

    @Test func headerTextIsEncodedForNonASCIIOrAnEncodedWordStart() {
        #expect(!PassMail.needsEncoding("Ada Lovelace"))
        #expect(PassMail.needsEncoding("Jürgen"))
        #expect(PassMail.needsEncoding("=?utf-8?B?QWRtaW4=?="))
        #expect(!PassMail.needsEncoding("a = b ?"))
    }

    @Test func theVTimeZoneOfAZoneIsTheSameForEveryBookingOfADay() {
        let nine = ContractFormat.instant(date: "2027-03-28", time: "09:00", timeZone: "Europe/Berlin")!
        let eleven = ContractFormat.instant(date: "2027-03-28", time: "11:00", timeZone: "Europe/Berlin")!
        let a = PassCalendar.timeZone("Europe/Berlin", around: nine, nine.addingTimeInterval(3600))
        let b = PassCalendar.timeZone("Europe/Berlin", around: eleven, eleven.addingTimeInterval(3600))
        #expect(a == b)
        // A year either side: the changes of 2026, 2027 and 2028 around the event's.
        #expect(a.filter { $0 == "BEGIN:DAYLIGHT" }.count == 3 && a.filter { $0 == "BEGIN:STANDARD" }.count == 2, "\(a)")
        #expect(a.contains("DTSTART:20270328T020000"), "the day's own change, in CET")
        let utc = PassCalendar.timeZone("UTC", around: nine, nine)
        #expect(utc.contains("TZOFFSETTO:+0000") && utc.contains("BEGIN:STANDARD"), "\(utc)")
        #expect(PassCalendar.timeZone("Not/AZone", around: nine, nine).isEmpty)
    }

    struct Summary: Decodable {
        struct Attendee: Decodable, Equatable {
            var email: String
            var cn: String?
        }
        var file: String
        var content_type: String
        var subject: String
        var calendar_parts: Int
        var part_method_param: String?
        var method: String?
        var version: String?
        var events: Int?
        var uid: String?
        var sequence: Int?
        var tzid: String?
        var dtstart_utc: String?
        var dtend_utc: String?
        var dtstart_utc_vtimezone: String?
        var dtend_utc_vtimezone: String?
        var vtimezone_tzids: [String]?
        var organizer: String?
        var attendees: [Attendee]?
        var summary: String?
        var location: String?
        var description: String?
        var rrule: String?
        var status: String?
        var header_names: [String]?
        var to_name: String?
        var to_addr: String?
        var to_count: Int?
        var defects: [String]?
        var mime_parts: Int?
        var text: String?
        var recurrence_id_utc: String?
        var instances_utc: [String]?
    }

    static func summarise(_ paths: [String]) throws -> [Summary] {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/ical_summary.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path] + paths
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: String(decoding: errors, as: UTF8.self)])
        }
        return try JSONDecoder().decode([Summary].self, from: data)
    }
}
