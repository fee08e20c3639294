import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// docs/integrating.md's example for other systems, run as written: Debian's
/// amqp-tools (a client that is not ours) publish a booking.create with
/// reply_to and an idempotency-key header, then read the reply.
@Suite("Publishing from another system")
struct ExternalClientTests {
    func runExample(_ url: AMQPURL, _ arguments: [String] = [], script: String = "publish-booking.sh") throws -> (Int32, String) {
        try Command.exitStatus("/bin/bash", [HandlerHarness.repositoryRoot.appendingPathComponent("docs/examples/\(script)").path] + arguments,
                               environment: ["AMQP_URL": url.urlStringWithCredentials])
    }

    @Test func amqpToolsExampleBooksARoomAndReadsTheReply() async throws {
        let h = try await HandlerHarness.start()
        let (status, output) = try runExample(h.url)
        #expect(status == 0, "\(output)")
        let reply = try ContractJSON.decode(CommandReply.self, from: Array(output.utf8))
        let booking = try #require(reply.booking, "\(output)")
        #expect(booking.room == "Berlin")
        #expect(booking.attendees.first?.phone == "+491701234567")
        // Same idempotency key again: the same reply, no second booking.
        let (again, secondOutput) = try runExample(h.url)
        #expect(again == 0)
        #expect(try ContractJSON.decode(CommandReply.self, from: Array(secondOutput.utf8)) == reply)
        #expect(try await h.app.store.counts().bookings == 1)

        // docs/integrating.md's reading example (v1.1), with the same client: the
        // booking just made is listed, contacts included (it was made without
        // user_id, so they are nobody's secret).
        let (listed, listing) = try runExample(h.url, script: "list-bookings.sh")
        #expect(listed == 0, "\(listing)")
        guard case .bookings(let bookings, let next) = try ContractJSON.decode(BookingQueryReply.self, from: Array(listing.utf8)) else {
            Issue.record("not a list: \(listing)"); return await h.stop()
        }
        #expect(bookings.map(\.id) == [booking.id])
        #expect(bookings.first?.attendees?.first?.email == "ada@example.com", "an anonymous reader sees a booking made without user_id in full")
        #expect(next == nil)
        await h.stop()
    }

    /// Contract v1.2 with the same outside client: a hold, then a waiter
    /// for the same slot, each read back from the raw reply.
    @Test func amqpToolsExampleHoldsASlotAndWaitsForIt() async throws {
        let h = try await HandlerHarness.start()
        let (status, output) = try runExample(h.url, ["Berlin", "11:00", "12:00", #""hold": {"minutes": 10}"#])
        #expect(status == 0, "\(output)")
        let held = try #require(try ContractJSON.decode(CommandReply.self, from: Array(output.utf8)).booking, "\(output)")
        #expect(held.status == .held && held.holdExpiresAt != nil)
        #expect(output.contains(#""holdExpiresAt":"#))
        let (waited, waiting) = try runExample(h.url, ["Berlin", "11:00", "12:00", #""ifTaken": "waitlist""#])
        #expect(waited == 0, "\(waiting)")
        #expect(waiting.contains(#""status":"waitlisted""#) && waiting.contains(#""waitlist":{"position":1}"#), "\(waiting)")
        await h.stop()
    }
}
