import AMQPClient
import AvailabilityProjector
import BookingContracts
import Foundation
import ServiceSupport
import TestSupport
import Testing

/// Commands through the booking handler to the projector's answers over
/// AMQP and HTTP, against the real broker. Each test has its own vhost.
@Suite("Projector end to end", .serialized)
struct ProjectorEndToEndTests {
    @Test func commandsReachBothQueryPathsAndPublishChanges() async throws {
        let h = try await ProjectorHarness.start()
        let date = localDate(daysFromNow: 3)
        // The six rooms of deploy/rooms.json arrive first.
        try await h.waitForRooms("date=\(date)", "rooms registered") { $0.count == 6 }

        let booking = try await h.create(date: date, start: "09:00", end: "10:30")
        let reply = try await h.waitForRooms("date=\(date)&name=berlin", "Berlin booked") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "10:30 - 19:00"]
        }
        #expect(reply.count == 1)
        #expect(reply[0].location == "2nd floor, east wing")

        // The same answer over RPC, correlated, typed availability.reply.
        let message = try await h.rpc(#"{"date":"\#(date)","name":"berlin"}"#)
        #expect(message.properties.type == "availability.reply")
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: message.body) == reply)
        // v1.1: the same query through the booking.queries exchange, routing key availability.query.
        var properties = AMQPProperties.persistentJSON(type: "availability.query", messageID: UUID().uuidString)
        properties.correlationID = UUID().uuidString
        let viaExchange = try await h.client.call(Array(#"{"date":"\#(date)","name":"berlin"}"#.utf8),
                                                  exchange: Topology.bookingQueriesExchange, routingKey: Topology.availabilityQueryKey,
                                                  properties: properties, timeout: .seconds(30))
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: viaExchange.body) == reply)
        // … and the booking itself through booking.get, answered by the handler.
        var get = AMQPProperties.persistentJSON(type: "booking.get", messageID: UUID().uuidString)
        get.correlationID = UUID().uuidString
        let read = try await h.client.call(Array(#"{"bookingId":"\#(booking.id)"}"#.utf8), exchange: Topology.bookingQueriesExchange,
                                           routingKey: "booking.get", properties: get, timeout: .seconds(30))
        guard case .booking(let view) = try ContractJSON.decode(BookingQueryReply.self, from: read.body) else {
            Issue.record("booking.get: \(String(decoding: read.body, as: UTF8.self))"); return await h.stop()
        }
        #expect(view.id == booking.id && view.attendees?.first?.email != nil, "made without user_id: in full for an anonymous reader")

        // GET /rooms/{name}
        let (status, body) = try await httpGet(h.base + "/rooms/Berlin?date=\(date)")
        #expect(status == 200)
        #expect(try ContractJSON.decode(RoomAvailability.self, from: Data(body.utf8)) == reply[0])

        // availability.changed for the booked day.
        let changed = try await h.nextChanges(1)
        #expect(changed.map(\.room) == ["Berlin"])
        #expect(changed.first?.date == date)
        #expect(changed.first?.avail == ["07:00 - 09:00", "10:30 - 19:00"])

        // Reschedule to another day: two days change.
        let other = localDate(daysFromNow: 4)
        let moved = try await h.send(.rescheduleBooking, RescheduleBooking(
            bookingId: booking.id, date: .calendarDate(other), start: "13:00", end: "14:00"))
        #expect(moved.isOK)
        let two = try await h.nextChanges(2)
        #expect(Set(two.map(\.date)) == [date, other])
        #expect(two.first { $0.date == date }?.avail == ["07:00 - 19:00"])
        #expect(two.first { $0.date == other }?.avail == ["07:00 - 13:00", "14:00 - 19:00"])
        try await h.waitForRooms("date=\(other)&name=Berlin", "rescheduled") {
            room($0, "Berlin")?.avail == ["07:00 - 13:00", "14:00 - 19:00"]
        }

        // Cancel: free again.
        #expect(try await h.send(.cancelBooking, CancelBooking(bookingId: booking.id)).isOK)
        try await h.waitForRooms("date=\(other)&name=Berlin", "cancelled") { room($0, "Berlin")?.avail == ["07:00 - 19:00"] }
        await h.stop()
    }

    @Test func outOfOrderAndRepeatedEventsChangeNothing() async throws {
        // One event at a time, in queue order, so the sentinel proves the
        // events before it were handled.
        let h = try await ProjectorHarness.start(eventConcurrency: 1)
        let date = localDate(daysFromNow: 5)
        try await h.waitForRooms("date=\(date)", "rooms registered") { $0.count == 6 }
        func event(_ id: String, _ start: String, _ end: String, _ status: BookingStatus, _ version: Int, date: String = date) -> BookingEvent {
            Self.hamburgEvent(id, date: date, start, end, status, version)
        }
        // The cancel arrives before its create; then the create, twice.
        try await h.publishEvent(.bookingCancelled, event("x1", "09:00", "10:00", .cancelled, 2))
        try await h.publishEvent(.bookingCreated, event("x1", "09:00", "10:00", .confirmed, 1))
        try await h.publishEvent(.bookingConfirmed, event("x1", "09:00", "10:00", .confirmed, 1))
        // Another booking: confirmed twice (same version), then an older reschedule.
        let confirmed = event("x2", "12:00", "13:00", .confirmed, 2)
        try await h.publishEvent(.bookingConfirmed, confirmed)
        try await h.publishEvent(.bookingConfirmed, confirmed)
        try await h.publishEvent(.bookingRescheduled, event("x2", "15:00", "16:00", .confirmed, 1))
        // A newer version with a status this projector does not know
        // (v1.1: ignored): acked, not dead-lettered, and x2 stays 12–13.
        let unknown = String(decoding: try ContractJSON.encode(event("x2", "15:00", "16:00", .confirmed, 3)), as: UTF8.self)
            .replacingOccurrences(of: #""status":"confirmed""#, with: #""status":"noShow""#)
        try await h.client.publish(Array(unknown.utf8), exchange: Topology.eventsExchange, routingKey: "booking.updated",
                                   properties: .persistentJSON(type: "booking.updated", userID: h.client.user))
        // An unreadable event is dead-lettered, not a crash.
        try await h.client.publish(Array("{oops".utf8), exchange: Topology.eventsExchange, routingKey: "booking.created",
                                   properties: .persistentJSON(type: "booking.created", messageID: "unreadable-1", userID: h.client.user))
        // Sentinel on another day.
        let sentinelDate = localDate(daysFromNow: 6)
        try await h.publishEvent(.bookingConfirmed, event("x3", "07:00", "08:00", .confirmed, 1, date: sentinelDate))
        try await h.waitForRooms("date=\(sentinelDate)&name=Hamburg", "sentinel") { room($0, "Hamburg")?.avail == ["08:00 - 19:00"] }

        let reply = try await h.rooms("date=\(date)&name=Hamburg")
        #expect(room(reply, "Hamburg")?.avail == ["07:00 - 12:00", "13:00 - 19:00"])
        // Exactly two availability.changed: x2 on `date`, x3 on the sentinel date.
        let changes = try await h.nextChanges(2)
        #expect(changes.map(\.date) == [date, sentinelDate])
        // Dead-lettering is asynchronous: a second unreadable event after
        // everything else marks the end; the queue dead-letters in order,
        // so when it is there, whatever came before it is too.
        try await h.client.publish(Array("{oops".utf8), exchange: Topology.eventsExchange, routingKey: "booking.created",
                                   properties: .persistentJSON(type: "booking.created", messageID: "unreadable-2", userID: h.client.user))
        let client = h.client
        let dead = try await withTimeout(60, "dead-lettered events") {
            var ids: [String] = []
            while !ids.contains("unreadable-2") {
                if let message = try await client.get(queue: Topology.deadLetterQueue(for: Topology.projectorEventsQueue)) {
                    ids.append(message.properties.messageID ?? "?")
                } else {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            return ids
        }
        #expect(dead == ["unreadable-1", "unreadable-2"], "the unknown status is not dead-lettered")
        await h.stop()
    }

    /// A booking event for Hamburg (Europe/Berlin) as the handler would publish it.
    static func hamburgEvent(_ id: String, date: String, _ start: String, _ end: String, _ status: BookingStatus,
                             _ version: Int) -> BookingEvent {
        let zone = "Europe/Berlin"
        let booking = Booking(
            id: id, room: "Hamburg", date: date, start: start, end: end, timeZone: zone,
            startsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: start, timeZone: zone)!),
            endsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: end, timeZone: zone)!),
            title: "t", status: status, attendees: [Attendee(name: "A", email: "a@example.com", phone: "+491701234567")],
            version: version)
        return BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: booking)
    }

    /// A change committed to the read model whose `availability.changed`
    /// the broker did not confirm is published again when the event comes
    /// back — under the same `message_id`, derived from the event's id, so
    /// consumers (and replicas' copies) drop the repeats. Here every publish
    /// fails while `booking.public` is gone: the `booking.events` copy of
    /// each attempt is routed before the `booking.public` one closes the
    /// channel.
    @Test func aChangeWhoseConfirmFailedIsPublishedAgainUnderTheSameID() async throws {
        let h = try await ProjectorHarness.start(eventConcurrency: 1)
        let date = localDate(daysFromNow: 5)
        try await h.waitForRooms("date=\(date)", "rooms registered") { $0.count == 6 }
        try await h.client.deleteExchange(Topology.publicExchange)
        try await h.publishEvent(.bookingConfirmed, Self.hamburgEvent("c1", date: date, "09:00", "10:00", .confirmed, 1),
                                 messageID: "cause-c1")
        // The first attempt and at least one retry of the redelivered event.
        var copies = try await withTimeout(60, "two attempts") { try await h.changes.take(2) }
        try await h.client.declare([.exchange(ExchangeDeclaration(Topology.publicExchange, kind: .topic))])
        copies += try await withTimeout(60, "the attempt after the exchange is back") { try await h.changes.take(1) }
        let ids = Set(copies.map { $0.properties.messageID ?? "" })
        #expect(ids.count == 1, "every attempt under one message_id: \(ids)")
        let bodies = try copies.map { try ContractJSON.decode(AvailabilityChanged.self, from: $0.body) }
        #expect(Set(bodies.map(\.eventId)) == ids)
        #expect(bodies.allSatisfy { $0.date == date && $0.avail == ["07:00 - 09:00", "10:00 - 19:00"] })

        // Unstuck: a later event is applied and its change published.
        let later = localDate(daysFromNow: 6)
        try await h.publishEvent(.bookingConfirmed, Self.hamburgEvent("c2", date: later, "07:00", "08:00", .confirmed, 1))
        try await h.waitForRooms("date=\(later)&name=Hamburg", "later event") { room($0, "Hamburg")?.avail == ["08:00 - 19:00"] }
        let reply = try await h.rooms("date=\(date)&name=Hamburg")
        #expect(room(reply, "Hamburg")?.avail == ["07:00 - 09:00", "10:00 - 19:00"])
        await h.stop()
    }

    /// Names as browsers and form encoders send them: a space as `+` in a
    /// query (`URLSearchParams`), percent escapes in queries and paths.
    @Test func roomNamesWithSpacesAndAccentsAreFoundAsClientsEncodeThem() async throws {
        let h = try await ProjectorHarness.start()
        let date = localDate(daysFromNow: 3)
        try await h.waitForRooms("date=\(date)", "rooms registered") { $0.count == 6 }
        for query in ["name=quiet+room", "name=quiet%20room", "name=Quiet+Room&date=\(date)", "na%6De=quiet+room"] {
            let reply = try await h.rooms(query)
            #expect(reply.map(\.name) == ["Quiet Room"], "GET /rooms?\(query)")
        }
        #expect(try await h.rooms("name=m%C3%BCnchen").map(\.name) == ["München"])
        #expect(try await h.rooms("name=new+york").map(\.name) == ["New York"])
        for path in ["/rooms/Quiet%20Room", "/rooms/M%C3%BCnchen", "/api/week?room=Quiet+Room", "/api/week?room=New%20York"] {
            let (status, body) = try await httpGet(h.base + path)
            #expect(status == 200, "GET \(path): \(body)")
        }
        // A plus in a path is a plus: no room is called "Quiet+Room".
        let (plus, _) = try await httpGet(h.base + "/rooms/Quiet+Room")
        #expect(plus == 404)
        await h.stop()
    }

    @Test func badQueriesGetContractErrors() async throws {
        let h = try await ProjectorHarness.start()
        let (s1, b1) = try await httpGet(h.base + "/rooms?date=2026-02-30")
        #expect(s1 == 400)
        let e1 = try ContractJSON.decode(CommandReply.self, from: Data(b1.utf8))
        #expect(e1 == .failure(.invalidField, "date '2026-02-30' is not a calendar date", field: "date"))
        let (s2, b2) = try await httpGet(h.base + "/rooms?freeFrom=11:00&freeTo=10:00")
        #expect(s2 == 400)
        #expect(b2.contains("1104"))
        let (s3, b3) = try await httpGet(h.base + "/rooms/Atlantis?date=today")
        #expect(s3 == 404)
        #expect(b3.contains("1101"))
        let (s4, _) = try await httpGet(h.base + "/rooms?minCapacity=lots")
        #expect(s4 == 400)

        let bad = try await h.rpc("this is not json")
        #expect(bad.properties.type == "availability.reply")
        let error = try ContractJSON.decode(CommandReply.self, from: bad.body)
        #expect(error.isOK == false)
        if case .error(let e) = error { #expect(e.code == .invalidJSON) }
        let wrong = try await h.rpc(#"{"equipment":"beamer"}"#)
        if case .error(let e) = try ContractJSON.decode(CommandReply.self, from: wrong.body) {
            #expect(e.field == "equipment")
        } else {
            Issue.record("expected an error reply")
        }
        // The projector still answers, and nothing was dead-lettered.
        let fine = try await h.rpc("{}")
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: fine.body).count == 6)
        #expect(try await h.client.queueInfo(Topology.deadLetterQueue(for: Topology.availabilityQueriesQueue)).messageCount == 0)
        let (healthy, _) = try await httpGet(h.base + "/healthz")
        #expect(healthy == 200)
        await h.stop()
    }

    @Test func replayIsOnlyForPermittedRequestersAndProjectorQueues() async throws {
        let h = try await ProjectorHarness.start()
        // Without user_id: refused (v1.1); the handler's own user (the
        // default REPLAY_USERS, as the projector logs in alike) may.
        let anonymous = try await h.send(.replayBookings, ReplayBookings(queue: ProjectorControl.replayQueue))
        #expect(anonymous == .failure(.notPermitted, "booking.replay is only permitted for REPLAY_USERS and ADMIN_USERS"))
        if case .error(let e) = try await h.send(.replayBookings, ReplayBookings(queue: "pass-sender.events"), userID: "guest") {
            #expect(e.code == .notPermitted)
        } else {
            Issue.record("replay to a foreign queue was accepted")
        }
        if case .error(let e) = try await h.send(.replayBookings, ReplayBookings(queue: "availability-projector.replay.missing"),
                                                 userID: "guest") {
            #expect(e.code == .invalidField)
            #expect(e.field == "queue")
        } else {
            Issue.record("replay to a missing queue was accepted")
        }
        await h.stop()
    }
}
