import BookingContracts
import Foundation
import Logging
import ServiceSettings
import Testing
@testable import AvailabilityProjector

/// `PAGE_USER`: the page books as one ordinary caller or not at all, and
/// shows the handler's refusals in words.
@Suite("The page's booking user and its answers")
struct PageBookingTests {
    @Test func pageUserIsOffByDefaultAndNeverAnAdminOrTheHandler() throws {
        #expect(try ProjectorSettings(environment: [:]).pageBooking == nil)
        let set = try ProjectorSettings(environment: ["PAGE_USER": "kiosk", "PAGE_PASSWORD": "s3cret"]).pageBooking
        #expect(set?.user == "kiosk" && set?.password == "s3cret")
        for environment in [["PAGE_USER": "root", "PAGE_PASSWORD": "x", "ADMIN_USERS": "ops,root"],
                            ["PAGE_USER": "handler", "PAGE_PASSWORD": "x", "BOOKING_HANDLER_USER": "handler"],
                            ["PAGE_USER": "kiosk"],
                            ["PAGE_PASSWORD": "x"],
                            ["PAGE_USER": "kiosk", "PAGE_PASSWORD_FILE": "/nonexistent/page-password"]] {
            #expect(throws: SettingsError.self, "\(environment)") { try ProjectorSettings(environment: environment) }
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("page-password-\(ProcessInfo.processInfo.processIdentifier)")
        try "from-a-file\n".write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let fromFile = try ProjectorSettings(environment: ["PAGE_USER": "kiosk", "PAGE_PASSWORD_FILE": file.path]).pageBooking
        #expect(fromFile?.password == "from-a-file")
    }

    @Test func refusalsReadAsSentences() {
        let request = PageBookingRequest(room: "Berlin", date: "2026-11-30", start: "09:00", end: "10:00", title: "t",
                                         name: "Ada", email: "ada@example.com", phone: "0170 1234567")
        func message(_ error: ReplyError) -> String { PageBooker.answer(.error(error), request: request).message }
        #expect(message(ReplyError(code: .overlap, text: "x")).hasPrefix("Taken: Berlin is booked then"))
        #expect(message(ReplyError(code: .roomClosed, text: "x", closure: RoomClosure(id: "c", room: "Berlin", from: "a", to: "b",
                                                                                      reason: "holidays")))
                == "Closed: Berlin is closed then (holidays).")
        let quota = message(ReplyError(code: .quotaExceeded, text: "x", limit: 2))
        #expect(quota.hasPrefix("Quota used:") && quota.contains("2 active bookings of Berlin"))
        #expect(message(ReplyError(code: .rateLimited, text: "x", retryAfterMs: 2_500)).hasSuffix("Try again in 3 seconds."))
        #expect(message(ReplyError(code: .unknownRoom, text: "unknown room 'Berlin'")) == "Not booked: unknown room 'Berlin'.")
        let answer = PageBooker.answer(.error(ReplyError(code: .overlap, text: "x")), request: request)
        #expect(!answer.ok && answer.code == 2000)
    }

    /// A newer handler's reply (a booking status this build does not know)
    /// still tells the person the booking was made; only a reply that is
    /// not a reply at all leaves it open.
    @Test func aNewerHandlersReplyStillSaysTheBookingWasMade() throws {
        let request = PageBookingRequest(room: "Berlin", date: "2026-11-30", start: "09:00", end: "10:00", title: "t",
                                         name: "Ada", email: "ada@example.com", phone: "0170 1234567")
        let logger = Logger(label: "page-test")
        let booking = #"""
            {"id":"b-1","room":"Berlin","date":"2026-11-30","start":"09:00","end":"10:00","timeZone":"Europe/Berlin",
             "startsAt":"2026-11-30T08:00:00Z","endsAt":"2026-11-30T09:00:00Z","title":"t","status":"tentative",
             "attendees":[{"name":"Ada","email":"ada@example.com","phone":"+491701234567"}],"version":1}
            """#
        let body = #"{"ok":true,"booking":\#(booking)}"#
        let accepted = PageBooker.answer(body: Array(body.utf8), request: request, logger: logger)
        #expect(accepted.ok && accepted.bookingId == "b-1" && accepted.status == "tentative")
        #expect(accepted.message.hasPrefix("Accepted: Berlin, 2026-11-30 09:00–10:00") && accepted.message.contains("tentative"),
                "\(accepted.message)")
        let refused = PageBooker.answer(body: Array(#"{"ok":false,"error":{"code":2999,"text":"a newer rule"}}"#.utf8),
                                        request: request, logger: logger)
        #expect(!refused.ok && refused.code == 2999 && refused.message == "Not booked: a newer rule.")
        // Not a reply, or broken in more than its status: nothing is claimed.
        for garbage in ["<html>", #"{"ok":true}"#, #"{"ok":true,"booking":{"id":"b-1","status":"tentative"}}"#] {
            let answer = PageBooker.answer(body: Array(garbage.utf8), request: request, logger: logger)
            #expect(!answer.ok && answer.message.contains("may or may not have been made"), "\(garbage)")
        }
        let known = PageBooker.answer(body: Array(try ContractJSON.encode(CommandReply.failure(.overlap, "x"))),
                                      request: request, logger: logger)
        #expect(known.message.hasPrefix("Taken:"), "a reply read in full keeps its words")
    }

    /// The names `POST /api/book` may be addressed to: loopback, the bind
    /// address, `PAGE_HOSTS`; with or without a port; `Origin` too.
    @Test func bookingRequestsAreTakenOnlyForThePagesOwnNames() throws {
        let hosts = PageHosts(bind: "10.0.0.5", extra: ["Rooms.Example.com", "2001:db8::1"])
        for host in ["localhost:8080", "127.0.0.1", "[::1]:8080", "10.0.0.5:8080", "rooms.example.com", "ROOMS.example.com:443",
                     "[2001:db8::1]:8080"] {
            #expect(hosts.refusal(host: host, origin: nil) == nil, "\(host)")
        }
        for host in ["evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example", "10.0.0.6", "", "[::2]"] {
            #expect(hosts.refusal(host: host, origin: nil) != nil, "\(host)")
        }
        #expect(hosts.refusal(host: nil, origin: nil) != nil)
        #expect(hosts.refusal(host: "localhost:8080", origin: "http://localhost:8080") == nil)
        #expect(hosts.refusal(host: "rooms.example.com", origin: "https://rooms.example.com") == nil)
        for origin in ["http://evil.example", "null", "file://", "chrome-extension://abc", "http://localhost.evil.example"] {
            #expect(hosts.refusal(host: "localhost:8080", origin: origin) != nil, "\(origin)")
        }
        // Bound to every address: only loopback and the configured names.
        #expect(PageHosts(bind: "0.0.0.0").names == ["localhost", "127.0.0.1", "[::1]"])
        #expect(try ProjectorSettings(environment: ["PAGE_HOSTS": " rooms.example.com , ,kiosk:8080"]).pageHosts
            == ["rooms.example.com", "kiosk:8080"])
    }
}
