import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// Every contract error code end to end, and the status machine.
@Suite("Booking rules end to end")
struct CommandRulesEndToEndTests {
    @Test func everyValidationErrorCodeReachesTheSender() async throws {
        let h = try await HandlerHarness.start()
        let yesterday = TestDates.berlinDate(daysFromNow: -1)
        let cases: [(String, Int, String?)] = [
            (createJSON(room: "Atlantis"), 1101, "room"),
            (createJSON(start: "06:30", end: "08:00"), 1102, "start"),
            (createJSON(start: "18:00", end: "19:30"), 1102, "end"),
            (createJSON(start: "09:10", end: "10:00"), 1103, "start"),
            (createJSON(start: "10:00", end: "09:00"), 1104, "end"),
            (createJSON(date: yesterday), 1105, "start"),
            (createJSON(room: "Quiet Room", attendees: #"[{"name":"A","email":"a@example.com","phone":"0170 1234567"},{"name":"B","email":"b@example.com","phone":"0170 1234568"},{"name":"C","email":"c@example.com","phone":"0170 1234569"}]"#), 1106, "attendees"),
            (createJSON(attendees: #"[{"name":"  ","email":"a@example.com","phone":"0170 1234567"}]"#), 1110, "attendees[0].name"),
            (createJSON(attendees: #"[{"name":"Ada","email":"not-an-email","phone":"0170 1234567"}]"#), 1111, "attendees[0].email"),
            (createJSON(attendees: #"[{"name":"Ada","email":"ada@example.com","phone":"12"}]"#), 3000, "attendees[0].phone"),
            (createJSON(attendees: "[]"), 1100, "attendees"),
            (createJSON(date: "2026-02-30"), 1100, "date"),
            (#"{"room": "Berlin"}"#, 1100, nil),
        ]
        for (json, code, field) in cases {
            let reply = try await h.send("booking.create", json: json)
            let error = try #require(reply.error, "expected \(code) for \(json), got \(reply)")
            #expect(error.code.rawValue == code, "for \(json): \(error)")
            if let field { #expect(error.field == field, "for \(json): \(error)") }
        }
        #expect(try await h.app.store.counts().bookings == 0)
        await h.stop()
    }

    @Test func overlapsAreRefusedWithTheConflictingIdsAndBackToBackIsFine() async throws {
        let h = try await HandlerHarness.start()
        let first = try #require(try await h.send("booking.create", json: createJSON(start: "09:00", end: "10:00")).booking)
        let clash = try #require(try await h.send("booking.create", json: createJSON(start: "09:30", end: "10:30")).error)
        #expect(clash.code == .overlap)
        #expect(clash.conflicts == [first.id])
        #expect(clash.text.contains("09:00-10:00"))
        #expect(try await h.send("booking.create", json: createJSON(start: "10:00", end: "11:00")).booking != nil)
        #expect(try await h.send("booking.create", json: createJSON(start: "08:00", end: "09:00")).booking != nil)
        // Another room at the same time is fine.
        #expect(try await h.send("booking.create", json: createJSON(room: "Hamburg", start: "09:00", end: "10:00")).booking != nil)
        await h.stop()
    }

    @Test func statusMachineAndEventsWithGrowingVersions() async throws {
        // Confirming needs an approver or an admin (contract v1.1).
        let h = try await HandlerHarness.start(administrators: ["guest"])
        _ = try await h.nextEvents(6)  // room.registered × 6
        // Boardroom requires approval: pending, then confirm.
        let pending = try #require(try await h.send("booking.create", json: createJSON(room: "Boardroom", start: "09:00", end: "10:00")).booking)
        #expect(pending.status == .pending)
        let confirmed = try #require(try await h.send("booking.confirm", json: #"{"bookingId": "\#(pending.id)"}"#, userID: "guest").booking)
        #expect(confirmed.status == .confirmed)
        #expect(confirmed.version == 2)
        let again = try #require(try await h.send("booking.confirm", json: #"{"bookingId": "\#(pending.id)"}"#, userID: "guest").error)
        #expect(again.code == .statusChangeNotAllowed)
        let moved = try #require(try await h.send("booking.reschedule", json: #"{"bookingId": "\#(pending.id)", "date": "\#(TestDates.tomorrow)", "start": "09:30", "end": "10:30"}"#).booking)
        #expect(moved.start == "09:30")
        #expect(moved.version == 3)
        #expect(moved.status == .pending, "a room that needs approval needs it again after a reschedule")
        let cancelled = try #require(try await h.send("booking.cancel", json: #"{"bookingId": "\#(pending.id)", "reason": "moved online"}"#).booking)
        #expect(cancelled.status == .cancelled)
        #expect(cancelled.cancelReason == "moved online")
        #expect(cancelled.version == 4)
        let afterCancel = try #require(try await h.send("booking.reschedule", json: #"{"bookingId": "\#(pending.id)", "date": "\#(TestDates.tomorrow)", "start": "11:00", "end": "12:00"}"#).error)
        #expect(afterCancel.code == .statusChangeNotAllowed)
        let missing = try #require(try await h.send("booking.cancel", json: #"{"bookingId": "no-such-booking"}"#).error)
        #expect(missing.code == .bookingNotFound)
        // The cancelled slot is free again.
        #expect(try await h.send("booking.create", json: createJSON(room: "Boardroom", start: "09:30", end: "10:30")).booking != nil)

        let events = try await h.nextEvents(5)
        let forBooking = try events.compactMap { event -> (String, Int, BookingSnapshot?)? in
            guard event.type.hasPrefix("booking.") else { return nil }
            let e = try ContractJSON.decode(BookingEvent.self, from: event.body)
            return e.booking.id == pending.id ? (event.type, e.booking.version, e.previous) : nil
        }
        #expect(forBooking.map(\.0) == ["booking.created", "booking.confirmed", "booking.rescheduled", "booking.cancelled"])
        #expect(forBooking.map(\.1) == [1, 2, 3, 4])
        // `previous` (v1.1): the state before each change.
        #expect(forBooking.map { $0.2?.status } == [nil, .pending, .confirmed, .pending])
        #expect(forBooking[2].2?.start == "09:00", "the reschedule's previous time")
        await h.stop()
    }

    @Test func onlyTheRequesterOrAnAdministratorMayChangeABooking() async throws {
        let h = try await HandlerHarness.start(administrators: ["approver"])
        let otherURL = try TestBroker.addUser(uniqueName("other"), to: h.url)
        let approverURL = try TestBroker.addUser("approver", to: h.url)
        let created = try #require(try await h.send("booking.create", Array(createJSON().utf8), userID: "guest").0.booking)
        #expect(created.requestedBy == "guest")

        func cancel(as url: AMQPURL) async throws -> CommandReply {
            let c = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "as-\(url.user)"),
                                                     logger: testLogger("other"))
            defer { Task { await c.close() } }
            let reply = try await c.call(Array(#"{"bookingId": "\#(created.id)"}"#.utf8), exchange: Topology.commandsExchange,
                                         routingKey: "booking.cancel",
                                         properties: AMQPProperties(messageID: UUID().uuidString, userID: url.user), timeout: .seconds(60))
            return try ContractJSON.decode(CommandReply.self, from: reply.body)
        }
        #expect(try await cancel(as: otherURL).error?.code == .notPermitted)
        // No user_id at all is not the requester either.
        #expect(try await h.send("booking.cancel", json: #"{"bookingId": "\#(created.id)"}"#).error?.code == .notPermitted)
        #expect(try await cancel(as: approverURL).booking?.status == .cancelled)
        await h.stop()
    }
}
