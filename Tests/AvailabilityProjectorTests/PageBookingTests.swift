import BookingContracts
import Foundation
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
}
