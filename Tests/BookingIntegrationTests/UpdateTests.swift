import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// `booking.update` (contract v1.1): details change with the create rules,
/// status and time stay, one `booking.updated` event per change.
@Suite("booking.update")
struct UpdateTests {
    @Test func detailsChangeWithTheCreateRulesAndTimeStays() async throws {
        let clock = LockedBox(Date())
        let h = try await HandlerHarness.start(now: { clock.withLock { $0 } })
        _ = try await h.nextEvents(6)  // room.registered × 6
        let booking = try #require(try await h.send("booking.create", json: createJSON(start: "09:00", end: "10:00")).booking)
        _ = try await h.nextEvents(2)  // created, confirmed
        let id = booking.id
        func update(_ fields: String, userID: String? = nil) async throws -> CommandReply {
            try await h.send("booking.update", json: #"{"bookingId": "\#(id)", \#(fields)}"#, userID: userID)
        }
        // Refusals, each changing nothing.
        #expect(try await h.send("booking.update", json: #"{"bookingId": "\#(id)"}"#).error?.code == .invalidField)
        #expect(try await update(#""title": "   ""#).error?.field == "title")
        let ada = #"{"name": "Ada", "email": "ada@example.com", "phone": "0170 1234567"}"#
        #expect(try await update(#""attendees": [\#(ada), {"name": "Ada 2", "email": "ada@example.com", "phone": "0170 7654321"}]"#)
            .error?.code == .attendeeEmailInvalid)
        #expect(try await update(#""attendees": [{"name": "Bob", "email": "bob@example.com", "phone": "12"}]"#)
            .error?.code == .attendeePhoneInvalid)
        let crowd = (0..<9).map { #"{"name": "P\#($0)", "email": "p\#($0)@example.com", "phone": "0170 123456\#($0)"}"# }
        #expect(try await update(#""attendees": [\#(crowd.joined(separator: ","))]"#).error?.code == .overCapacity)
        // A named user may not touch an anonymous booking.
        let otherURL = try TestBroker.addUser(uniqueName("other"), to: h.url)
        let other = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: otherURL, connectionName: "other"),
                                                     logger: testLogger("other"))
        let foreign = try await other.call(Array(#"{"bookingId": "\#(id)", "title": "Mine"}"#.utf8),
                                           exchange: Topology.commandsExchange, routingKey: "booking.update",
                                           properties: AMQPProperties(messageID: UUID().uuidString, userID: otherURL.user),
                                           timeout: .seconds(30))
        #expect(try ContractJSON.decode(CommandReply.self, from: foreign.body).error?.code == .notPermitted)
        await other.close()
        #expect(try await h.app.store.transaction { tx in try tx.booking(id: id) }?.version == 1, "nothing changed")

        // The update itself.
        let updated = try #require(try await update(
            #""title": "Sprint review (online)", "description": "", "attendees": [\#(ada), {"name": "Grace", "email": "Grace@Example.COM", "phone": "+1 415 555 0100"}]"#)
            .booking)
        #expect(updated.title == "Sprint review (online)")
        #expect(updated.description == nil)
        #expect(updated.attendees.map(\.email) == ["ada@example.com", "Grace@example.com"])
        #expect(updated.attendees.last?.phone == "+14155550100")
        #expect(updated.version == 2)
        #expect(updated.status == booking.status && updated.startsAt == booking.startsAt && updated.endsAt == booking.endsAt)
        let events = try await h.nextEvents(1)
        #expect(events.map(\.type) == ["booking.updated"])
        let event = try ContractJSON.decode(BookingEvent.self, from: events[0].body)
        #expect(event.booking == updated)
        // `previous` (v1.1): the fields before the change.
        #expect(event.previous == BookingSnapshot(booking))
        #expect(event.previous?.title == "Sprint review")
        #expect(event.previous?.description == "Q4 demo")

        // Once it has started, details can no longer change (2004).
        let startsAt = try #require(ContractFormat.parseTimestamp(booking.startsAt))
        clock.withLock { $0 = startsAt.addingTimeInterval(60) }
        #expect(try await update(#""title": "Too late""#).error?.code == .tooLateToChange)
        await h.stop()
    }
}
