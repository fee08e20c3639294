import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// `booking.get` and `booking.list` (contract v1.1) over the real broker
/// with the shipped users and permissions: through the `booking.queries`
/// exchange, answered from committed state, the full view only for the
/// booking's requester, the room's approvers and admins, the busy view
/// (contract v1.2) for every other caller.
@Suite("Reading bookings over the broker (shipped users)", .serialized)
struct ReadingBookingsTests {
    /// Sends a query as `user` (`user_id` set unless `anonymous`) to the
    /// `booking.queries` exchange over direct reply-to.
    static func query(_ w: CallerModelTests.World, _ type: String, _ json: String, as user: String,
                      anonymous: Bool = false) async throws -> (BookingQueryReply, AMQPMessage) {
        let c = try await w.connection(user)
        var properties = AMQPProperties.persistentJSON(type: type, messageID: UUID().uuidString)
        properties.userID = anonymous ? nil : user
        let reply = try await c.call(Array(json.utf8), exchange: Topology.bookingQueriesExchange, routingKey: type,
                                     properties: properties, timeout: .seconds(60))
        return (try ContractJSON.decode(BookingQueryReply.self, from: reply.body), reply)
    }

    @Test func readYourWritesAndContactsOnlyForThoseEntitled() async throws {
        let w = try await CallerModelTests.World.start()
        let room = #"{"name": "Desk", "capacity": 4, "approvers": ["facility-desk"]}"#
        #expect(try await w.send("room.register", room, as: "bookingctl").error == nil)
        let json = createJSON(room: "Desk", date: TestDates.tomorrow, start: "09:00", end: "10:00")
        let booking = try #require(try await w.send("booking.create", json, as: "partner-a").booking)

        // The reply came: the next query sees it, in any reader's view.
        for (user, full) in [("partner-a", true), ("facility-desk", true), ("bookingctl", true), ("partner-b", false)] {
            let (reply, message) = try await Self.query(w, "booking.get", #"{"bookingId": "\#(booking.id)"}"#, as: user)
            guard case .booking(let view) = reply else { Issue.record("\(user): \(reply)"); continue }
            #expect(view.id == booking.id && view.version == booking.version)
            if full {
                #expect(view.attendees?.map(\.name) == ["Ada Lovelace"])
                #expect(view.attendees?.first?.email == "ada@example.com", "\(user)")
                #expect(view.attendees?.first?.phone == "+491701234567", "\(user)")
                #expect(view.requestedBy == "partner-a")
            } else {
                let text = String(decoding: message.body, as: UTF8.self)
                for secret in ["ada@example.com", "Ada Lovelace", "partner-a", "\"title\""] {
                    #expect(!text.contains(secret), "\(user) reads the busy view: \(text)")
                }
            }
            #expect(message.properties.type == "booking.reply")
            #expect(message.properties.userID == "booking-handler", "replies carry the handler's verified user")
        }
        let list = #"{"from": "\#(TestDates.tomorrow)", "to": "\#(TestDates.berlinDate(daysFromNow: 2))", "room": "Desk"}"#
        guard case .bookings(let seen, let next) = try await Self.query(w, "booking.list", list, as: "partner-b").0 else {
            Issue.record("no list"); return await w.stop()
        }
        #expect(seen.map(\.id) == [booking.id] && next == nil)
        #expect(seen[0].isBusy && seen[0].attendees == nil && seen[0].requestedBy == nil)
        // Searching by someone else's attendee e-mail finds nothing.
        let byEmail = #"{"from": "\#(TestDates.tomorrow)", "to": "\#(TestDates.berlinDate(daysFromNow: 2))", "attendeeEmail": "ada@example.com"}"#
        guard case .bookings(let none, _) = try await Self.query(w, "booking.list", byEmail, as: "partner-b").0,
              case .bookings(let mine, _) = try await Self.query(w, "booking.list", byEmail, as: "partner-a").0 else {
            Issue.record("no list"); return await w.stop()
        }
        #expect(none.isEmpty)
        #expect(mine.map(\.id) == [booking.id])

        // REQUIRE_USER_ID (the shipped compose): a query without user_id is 2003.
        let (anonymous, _) = try await Self.query(w, "booking.get", #"{"bookingId": "\#(booking.id)"}"#, as: "partner-b",
                                                  anonymous: true)
        #expect(anonymous == .error(ReplyError(code: .notPermitted,
                                               text: "queries must carry the AMQP user_id property (REQUIRE_USER_ID is set)")))
        await w.stop()
    }

    /// `booking.public` (v1.1): another outside system follows bookings with
    /// its own queue and sees names, never another requester's attendees'
    /// e-mail or phone; it cannot publish there nor read `booking.events`.
    @Test func otherSystemsFollowBookingPublicWithoutContactDetails() async throws {
        let w = try await CallerModelTests.World.start()
        let follower = try await w.connection("partner-b")
        let queue = "partner-b.public-\(UUID().uuidString.prefix(8))"
        try await follower.declare([
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: false)),
            .binding(QueueBinding(queue: queue, exchange: Topology.publicExchange, routingKey: "booking.#")),
        ])
        let events = try await follower.consume(queue: queue)
        let json = createJSON(room: "Berlin", date: TestDates.tomorrow, start: "11:00", end: "12:00",
                              attendees: #"[{"name": "Grace Hopper", "email": "grace@example.com", "phone": "+1 415 555 0100"}]"#)
        let booking = try #require(try await w.send("booking.create", json, as: "partner-a").booking)
        let received = try await withTimeout(60, "booking.public events") { try await events.take(2) }
        #expect(received.map(\.routingKey) == ["booking.created", "booking.confirmed"], "in order")
        for message in received {
            let text = String(decoding: message.body, as: UTF8.self)
            #expect(!text.contains("grace@example.com") && !text.contains("+14155550100"), "\(text)")
            // v1.2: the busy view, not even names, titles or the requester.
            #expect(!text.contains("Grace Hopper") && !text.contains("partner-a") && !text.contains("\"title\""), "\(text)")
            let event = try ContractJSON.decode(PublicBookingEvent.self, from: message.body)
            #expect(event.booking.id == booking.id && event.booking.attendees == nil && event.booking.isBusy)
            #expect(message.properties.userID == "booking-handler")
        }
        events.stop()
        // Refused: publishing to booking.public, binding to booking.events.
        let probe = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: w.vhost.url("partner-b"), connectionName: "probe"), logger: testLogger("probe"))
        let publish = await #expect(throws: AMQPError.self) {
            try await probe.publish(Array("{}".utf8), exchange: Topology.publicExchange, routingKey: "booking.created",
                                    properties: AMQPProperties.persistentJSON(userID: "partner-b"))
        }
        #expect(publish?.replyCode == 403, "\(String(describing: publish))")
        let bind = await #expect(throws: AMQPError.self) {
            try await probe.declare([.binding(QueueBinding(queue: queue, exchange: Topology.eventsExchange, routingKey: "#"))])
        }
        #expect(bind?.replyCode == 403, "\(String(describing: bind))")
        await probe.close()
        await w.stop()
    }

    @Test func badQueriesGetTheContractsErrors() async throws {
        let w = try await CallerModelTests.World.start()
        func code(_ type: String, _ json: String) async throws -> (ErrorCode?, String?) {
            guard case .error(let e) = try await Self.query(w, type, json, as: "partner-a").0 else { return (nil, nil) }
            return (e.code, e.field)
        }
        #expect(try await code("booking.get", #"{"bookingId": "nope"}"#) == (.bookingNotFound, "bookingId"))
        #expect(try await code("booking.get", "not json").0 == .invalidJSON)
        #expect(try await code("booking.list", #"{"to": "2026-11-24"}"#).0 == .invalidField)
        #expect(try await code("booking.list", #"{"from": "2026-11-23", "to": "2026-11-24", "limit": 5000}"#) == (.invalidField, "limit"))
        #expect(try await code("booking.list", #"{"from": "yesterday", "to": "2026-11-24"}"#).0 == .invalidField)
        #expect(try await code("booking.list", #"{"from": "2026-11-23", "to": "2026-11-24", "cursor": "x"}"#) == (.invalidField, "cursor"))
        // The query named in the body when the type property says nothing.
        let c = try await w.connection("partner-a")
        var properties = AMQPProperties.persistentJSON(type: nil, messageID: UUID().uuidString)
        properties.userID = "partner-a"
        let named = try await c.call(Array(#"{"query": "booking.get", "bookingId": "nope"}"#.utf8), exchange: Topology.bookingQueriesExchange,
                                     routingKey: "booking.get", properties: properties, timeout: .seconds(60))
        #expect(try ContractJSON.decode(BookingQueryReply.self, from: named.body)
            == .error(ReplyError(code: .bookingNotFound, text: "booking 'nope' not found", field: "bookingId")))
        await w.stop()
    }
}
