import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// The booking handler end to end: commands over the real broker, replies,
/// events, the SQLite file. Each test has its own vhost and database.
@Suite("Booking handler end to end")
struct BookingHandlerEndToEndTests {
    @Test func createRepliesAndPublishesCreatedAndConfirmed() async throws {
        let h = try await HandlerHarness.start()
        let (reply, message) = try await h.send("booking.create", Array(createJSON().utf8), messageID: "create-1", userID: "guest")
        let booking = try #require(reply.booking, "expected ok, got \(reply)")
        #expect(booking.status == .confirmed)
        #expect(booking.version == 1)
        #expect(booking.room == "Berlin")
        #expect(booking.attendees == [Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567")])
        #expect(booking.requestedBy == "guest")  // from user_id, which RabbitMQ checked
        #expect(message.properties.type == "reply")
        #expect(message.properties.contentType == "application/json")

        let events = try await h.nextEvents(2 + 6)  // 6 room.registered from ROOMS_FILE first
        let bookingEvents = events.filter { $0.type.hasPrefix("booking.") }
        #expect(bookingEvents.map(\.type) == ["booking.created", "booking.confirmed"])
        for event in bookingEvents {
            let decoded = try ContractJSON.decode(BookingEvent.self, from: event.body)
            #expect(decoded.booking == booking)
            #expect(decoded.previous == nil, "a booking's first events carry no previous (v1.1)")
            #expect(event.messageID == decoded.eventId)
        }
        #expect(events.filter { $0.type == "room.registered" }.count == 6)
        await h.stop()
    }

    @Test func replyCorrelatesByCorrelationIdElseMessageId() async throws {
        let h = try await HandlerHarness.start()
        // The harness sets a correlation_id: the reply must carry it.
        var properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: "m-1")
        properties.correlationID = "c-1"
        let viaCorrelation = try await h.client.call(Array(createJSON(start: "11:00", end: "11:30").utf8),
                                                     exchange: Topology.commandsExchange, routingKey: "booking.create",
                                                     properties: properties, timeout: .seconds(60))
        #expect(viaCorrelation.properties.correlationID == "c-1")
        await h.stop()
    }
}
