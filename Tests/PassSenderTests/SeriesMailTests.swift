import BookingContracts
import Foundation
import Logging
import TestSupport
import Testing
@testable import PassSender

/// A series in the spool (contract v1.1): one e-mail per attendee for the
/// whole series once its occurrences are known, with an `RRULE` that an
/// independent reader (Python's icalendar + dateutil) expands to exactly
/// the booked instants, and `RECURRENCE-ID` for a change to one occurrence.
@Suite("Series e-mails")
struct SeriesMailTests {
    static func day(_ text: String) -> Int64 { SeriesCalendar.day(text)! }

    @Test func theRuleIsInferredFromTheDates() {
        func rule(_ dates: [String]) -> (String, [String]) {
            let (r, generated) = SeriesCalendar.rule(for: dates.map(Self.day))
            let missing = generated.filter { !Set(dates.map(Self.day)).contains($0) }.map(SeriesCalendar.dateText)
            return (r, missing)
        }
        #expect(rule(["2027-03-16", "2027-03-23", "2027-03-30"]) == ("FREQ=WEEKLY;COUNT=3", []))
        #expect(rule(["2027-03-16", "2027-03-30", "2027-04-13"]) == ("FREQ=WEEKLY;INTERVAL=2;COUNT=3", []))
        #expect(rule(["2027-03-16", "2027-03-23", "2027-04-06"]) == ("FREQ=WEEKLY;COUNT=4", ["2027-03-30"]), "a skipped week")
        #expect(rule(["2027-01-31", "2027-03-31", "2027-05-31"]) == ("FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", []),
                "months without the 31st are not instances")
        #expect(rule(["2027-03-12", "2027-03-15", "2027-03-16"]) == ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;COUNT=3", []))
        #expect(rule(["2027-03-12", "2027-03-13", "2027-03-15"]) == ("FREQ=DAILY;COUNT=4", ["2027-03-14"]))
        #expect(rule(["2027-03-12"]).0.hasSuffix("COUNT=1"))
    }

    static func occurrence(_ seriesId: String, _ index: Int, _ date: String, count: Int) -> Booking {
        var b = PassMailTests.booking(date, "09:00", "10:30", id: "\(seriesId)-\(index)")
        b.series = SeriesRef(id: seriesId, index: index, count: count, version: 1)
        return b
    }

    @Test func oneEmailPerAttendeeForTheSeriesAndInstanceUpdates() async throws {
        let dir = try TemporaryDirectory("series")
        defer { dir.remove() }
        let ledger = try PassLedger(path: dir.appending("l.sqlite").path)
        let outbox = dir.appending("outbox")
        let spool = try SpoolPassGateway(directory: outbox, series: { try await ledger.seriesOccurrences(seriesId: $0) })
        let d = PassDispatcher(ledger: ledger, gateway: spool, settings: PassSenderSettings(), logger: Logger(label: "t"))
        // Weekly across the spring clock change (28 Mar 2027), 30 Mar skipped at booking.
        let dates = ["2027-03-16", "2027-03-23", "2027-04-06", "2027-04-13"]
        let series = dates.enumerated().map { Self.occurrence("ser-1", $0.offset, $0.element, count: 4) }
        func emails() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: outbox.path).filter { $0.hasSuffix(".eml") }.sorted()
        }
        for b in series.prefix(3) {
            #expect(try await d.handle(event: .bookingConfirmed, booking: b, previous: nil).delivered == [0, 1])
        }
        #expect(try emails().isEmpty, "no e-mail until every occurrence is known")
        #expect(try FileManager.default.contentsOfDirectory(atPath: outbox.path).filter { $0.hasSuffix(".sms") }.count == 6,
                "an SMS per occurrence and attendee at once")
        _ = try await d.handle(event: .bookingConfirmed, booking: series[3], previous: nil)
        let seriesFiles = try emails()
        #expect(seriesFiles.count == 2 && seriesFiles.allSatisfy { $0.hasPrefix("ser-1-series-") }, "\(seriesFiles)")
        let summaries = try PassMailTests.summarise(seriesFiles.map { outbox.appendingPathComponent($0).path })
        for s in summaries {
            #expect(s.method == "REQUEST" && s.uid == "ser-1" && s.sequence == 1 && s.defects == [])
            #expect(s.rrule == "FREQ=WEEKLY;COUNT=5", "\(s.rrule ?? "-")")
            #expect(s.instances_utc == series.map(\.startsAt), "\(s.instances_utc ?? [])")
            #expect(s.text?.contains("Tue 6 Apr 2027, 09:00–10:30 CEST") == true)
        }
        #expect(Set(summaries.compactMap(\.to_addr)) == ["zoe@example.com", "ada@example.com"])
        #expect(series[0].startsAt == "2027-03-16T08:00:00Z" && series[2].startsAt == "2027-04-06T07:00:00Z", "09:00 CET, then CEST")

        // One occurrence moves: its holders are told, with that instance of the series entry.
        var moved = series[1]
        moved.version = 2
        moved.start = "11:00"
        moved.end = "12:00"
        moved.startsAt = "2027-03-23T10:00:00Z"
        moved.endsAt = "2027-03-23T11:00:00Z"
        let s2 = try await d.handle(event: .bookingRescheduled, booking: moved, previous: BookingSnapshot(series[1]))
        #expect(s2.notices[.rescheduled] == [0, 1] && s2.delivered == [0, 1])
        // Another is cancelled.
        var gone = series[2]
        gone.version = 2
        gone.status = .cancelled
        _ = try await d.handle(event: .bookingCancelled, booking: gone, previous: BookingSnapshot(series[2]))
        let instanceFiles = try emails().filter { !$0.hasPrefix("ser-1-series-") }
        #expect(instanceFiles == ["ser-1-1-v2-0.eml", "ser-1-1-v2-1.eml", "ser-1-1-v2-rescheduled-0.eml", "ser-1-1-v2-rescheduled-1.eml",
                                  "ser-1-2-v2-cancelled-0.eml", "ser-1-2-v2-cancelled-1.eml"])
        let byFile = Dictionary(uniqueKeysWithValues: try PassMailTests.summarise(instanceFiles.map { outbox.appendingPathComponent($0).path })
            .map { ($0.file, $0) })
        for name in ["ser-1-1-v2-0.eml", "ser-1-1-v2-rescheduled-0.eml"] {
            let s = try #require(byFile[name])
            #expect(s.method == "REQUEST" && s.uid == "ser-1" && s.sequence == 2, "\(name)")
            #expect(s.recurrence_id_utc == series[1].startsAt && s.dtstart_utc == moved.startsAt, "\(name)")
            #expect(s.instances_utc == nil, "an instance, not a new series")
        }
        let cancelled = try #require(byFile["ser-1-2-v2-cancelled-1.eml"])
        #expect(cancelled.method == "CANCEL" && cancelled.uid == "ser-1" && cancelled.status == "CANCELLED")
        #expect(cancelled.recurrence_id_utc == series[2].startsAt && cancelled.sequence == 2)
    }
}
