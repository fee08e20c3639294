import BookingContracts
import Foundation
import Testing

@testable import BookingHandler

/// Shared fixtures: a fixed clock and the rooms most tests use.
enum Fixture {
    /// The fixed `now` of these tests: Sunday 2026-11-22 11:00 in Berlin.
    static let now = utc("2026-11-22T10:00:00Z")
    /// A `now` before both 2026 daylight-saving changes, for booking on them.
    static let earlyNow = utc("2026-01-15T10:00:00Z")

    /// Defaults: Europe/Berlin, 07:00–19:00, capacity 8.
    static let berlin = Room(name: "Berlin", capacity: 8)
    /// America/New_York, 07:00–19:00.
    static let newYork = Room(name: "Manhattan", capacity: 4, timeZone: "America/New_York")
    /// Open at night in Berlin, so that daylight-saving gaps are reachable.
    static let nightOwl = Room(name: "Nachteule", capacity: 2, opens: "00:00", closes: "06:00")

    static let ada = AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")
    static let adaNormalised = Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567")

    static func create(room: String = "Berlin", date: DateSpec = .calendarDate("2026-11-23"), start: String = "09:00",
                       end: String = "10:30", title: String = "Sprint review", description: String? = "Q4 demo",
                       attendees: [AttendeeInput] = [ada]) -> CreateBooking {
        CreateBooking(room: room, date: date, start: start, end: end, title: title, description: description,
                      attendees: attendees)
    }

    static func booking(id: String = "b-1", status: BookingStatus = .confirmed, requestedBy: String? = nil) -> Booking {
        Booking(id: id, room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:30", timeZone: "Europe/Berlin",
                startsAt: "2026-11-23T08:00:00Z", endsAt: "2026-11-23T09:30:00Z", title: "Sprint review",
                status: status, attendees: [adaNormalised], requestedBy: requestedBy, version: 1)
    }
}

/// A contract instant `2026-11-23T08:00:00Z`; traps on a typo.
func utc(_ text: String) -> Date {
    guard let date = ContractFormat.parseTimestamp(text) else { fatalError("bad fixture timestamp \(text)") }
    return date
}

/// The success value, recording an issue (with the error) when it failed.
func expectSuccess<T>(_ result: Result<T, ReplyError>, sourceLocation: SourceLocation = #_sourceLocation) -> T? {
    switch result {
    case .success(let value):
        return value
    case .failure(let error):
        Issue.record("expected success, got \(error.code) field \(error.field ?? "nil"): \(error.text)",
                     sourceLocation: sourceLocation)
        return nil
    }
}

/// Expects a failure with exactly this code and field (nil = no field);
/// returns the error for further checks of its text.
@discardableResult
func expectFailure<T>(_ result: Result<T, ReplyError>, _ code: ErrorCode, field: String?,
                      sourceLocation: SourceLocation = #_sourceLocation) -> ReplyError? {
    switch result {
    case .success(let value):
        Issue.record("expected \(code) field \(field ?? "nil"), got success \(value)", sourceLocation: sourceLocation)
        return nil
    case .failure(let error):
        #expect(error.code == code, "text: \(error.text)", sourceLocation: sourceLocation)
        #expect(error.field == field, "text: \(error.text)", sourceLocation: sourceLocation)
        #expect(!error.text.isEmpty, sourceLocation: sourceLocation)
        #expect(error.conflicts == nil, sourceLocation: sourceLocation)
        return error
    }
}
