import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// The projector applies only what the booking handler's broker user
/// published, and refuses anonymous queries when identities are required
/// (docs/security.md).
@Suite("Projector: trusted senders and identified callers", .serialized)
struct ProjectorTrustTests {
    @Test func eventsFromAnotherUserChangeNothingAndAreDeadLettered() async throws {
        let h = try await ProjectorHarness.start(eventConcurrency: 1)
        let date = localDate(daysFromNow: 5)
        try await h.waitForRooms("date=\(date)", "rooms registered") { $0.count == 6 }
        func event(_ id: String, _ start: String, _ end: String, date: String) -> BookingEvent {
            let zone = "Europe/Berlin"
            let booking = Booking(
                id: id, room: "Hamburg", date: date, start: start, end: end, timeZone: zone,
                startsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: start, timeZone: zone)!),
                endsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: end, timeZone: zone)!),
                title: "t", status: .confirmed, attendees: [Attendee(name: "A", email: "a@example.com", phone: "+491701234567")],
                version: 1)
            return BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: booking)
        }
        let peerURL = try TestBroker.addUser(uniqueName("peer"), to: h.url)
        let peer = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: peerURL, connectionName: "peer"),
                                                    logger: testLogger("peer"))
        try await peer.publish([UInt8](try ContractJSON.encode(event("forged", "09:00", "12:00", date: date))),
                               exchange: Topology.eventsExchange, routingKey: EventType.bookingConfirmed.rawValue,
                               properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: "forged",
                                                           userID: peerURL.user))
        // A sentinel from the trusted user, after it in the same queue.
        let sentinelDate = localDate(daysFromNow: 6)
        try await h.publishEvent(.bookingConfirmed, event("sentinel", "07:00", "08:00", date: sentinelDate))
        try await h.waitForRooms("date=\(sentinelDate)&name=Hamburg", "sentinel") { room($0, "Hamburg")?.avail == ["08:00 - 19:00"] }
        let reply = try await h.rooms("date=\(date)&name=Hamburg")
        #expect(room(reply, "Hamburg")?.avail == ["07:00 - 19:00"], "the forged booking is not in the read model")
        let dead = try await h.client.consume(queue: Topology.deadLetterQueue(for: Topology.projectorEventsQueue))
        let got = try await withTimeout(60, "the forged event dead-lettered") { try await dead.take(1) }
        #expect(got.first?.properties.messageID == "forged")
        // The projector's copy, saying why and naming the peer the broker verified.
        let headers = got.first?.properties.headers ?? [:]
        #expect(headers["x-death-reason"]?.stringValue?.contains("published by '\(peerURL.user)'") == true, "\(headers)")
        #expect(headers["x-original-user-id"]?.stringValue == peerURL.user)
        #expect(headers["x-dead-lettered-by"]?.stringValue == "availability-projector")
        #expect(got.first?.properties.userID != nil && got.first?.properties.userID != peerURL.user, "the projector's own user_id")
        dead.stop()
        await peer.close()
        await h.stop()
    }

    /// An ordinary broker account that writes a replay page of its own into
    /// the replay queue, under the running rebuild's replay id, changes
    /// nothing: only the booking handler's user is trusted there, so the
    /// rebuild ends with the handler's counts and without the forged booking.
    @Test func aReplayPageFromAnotherUserIsNotApplied() async throws {
        let h = try await ProjectorHarness.start(replayRate: 2)
        let date = localDate(daysFromNow: 8)
        try await h.waitForRooms("date=\(date)", "rooms registered") { $0.count == 6 }
        _ = try await h.create(date: date, start: "09:00", end: "10:00")
        let app = try #require(h.projector.withLock { $0 })
        let rebuild = Task { try await app.rebuilder.rebuild() }
        let replayId = try await withTimeout(30, "the rebuild running") {
            while true {
                if let id = app.rebuilder.status().replayId { return id }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let zone = "Europe/Berlin"
        let forged = Booking(id: "forged", room: "Hamburg", date: date, start: "11:00", end: "15:00", timeZone: zone,
                             startsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: "11:00", timeZone: zone)!),
                             endsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: "15:00", timeZone: zone)!),
                             title: "t", status: .confirmed, attendees: [], version: 9)
        let peerURL = try TestBroker.addUser(uniqueName("peer"), to: h.url)
        let peer = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: peerURL, connectionName: "peer"),
                                                    logger: testLogger("peer"))
        try await peer.publish([UInt8](try ContractJSON.encode(ReplayPage(bookings: [forged]))), exchange: "",
                               routingKey: ProjectorControl.replayQueue,
                               properties: .persistentJSON(type: ReplayStream.pageType, messageID: "forged-page",
                                                           headers: [ReplayStream.replayIdHeader: .string(replayId)],
                                                           userID: peerURL.user))
        let result = try await rebuild.value
        #expect(result.rooms == 6 && result.bookings == 1, "\(result)")
        #expect(room(try await h.rooms("date=\(date)&name=Hamburg"), "Hamburg")?.avail == ["07:00 - 19:00"],
                "the forged booking is not in the rebuilt model")
        await peer.close()
        await h.stop()
    }

    @Test func withRequireUserIDAnonymousQueriesGet2003() async throws {
        let h = try await ProjectorHarness.start(requireUserID: true)
        let anonymous = try await h.rpc(#"{"date": "today"}"#)
        let refused = try ContractJSON.decode(CommandReply.self, from: anonymous.body)
        #expect(refused == .failure(.notPermitted, "queries must carry the AMQP user_id property (REQUIRE_USER_ID is set)"))
        let named = try await h.rpc(#"{"date": "today"}"#, userID: h.url.user)
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: named.body).count == 6)
        await h.stop()
    }
}
