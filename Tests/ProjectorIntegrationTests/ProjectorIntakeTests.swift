import AMQPClient
import BookingContracts
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// Contract v1.2 on the projector's `availability.queries`: `CALLER_RATE`
/// per caller (admins exempt, read from `ADMIN_USERS`), and events routed
/// into the queue ignored.
@Suite("Projector intake (rate, foreign routing)", .serialized)
struct ProjectorIntakeTests {
    @Test func queriesOverACallersRateGet1010AndAdminsAndOthersAreServed() async throws {
        let h = try await ProjectorHarness.start(startProjector: false)
        let limitedURL = try TestBroker.addUser("rate-\(UUID().uuidString.prefix(6))", to: h.url)
        let otherURL = try TestBroker.addUser("rate-\(UUID().uuidString.prefix(6))", to: h.url)
        let adminURL = try TestBroker.addUser("ops-\(UUID().uuidString.prefix(6))", to: h.url)
        try await h.startProjector(callerRate: CallerRate(perSecond: 0.5, burst: 2), rateExempt: [adminURL.user])
        func ask(_ url: AMQPURL) async throws -> CommandReply? {
            let c = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: url.user),
                                                     logger: testLogger(url.user))
            defer { Task { await c.close() } }
            var properties = AMQPProperties.persistentJSON(messageID: UUID().uuidString)
            properties.userID = url.user
            let reply = try await c.call(Array(#"{"date": "now"}"#.utf8), routingKey: Topology.availabilityQueriesQueue,
                                         properties: properties, timeout: .seconds(30))
            // A rate refusal is an error reply; an answer is the array of rooms.
            return try? ContractJSON.decode(CommandReply.self, from: reply.body)
        }
        #expect(try await ask(limitedURL) == nil, "within the burst: answered")
        #expect(try await ask(limitedURL) == nil, "within the burst: answered")
        let refused = try #require(try await ask(limitedURL)?.errorValue, "the third in a burst of two is refused")
        #expect(refused.code == .rateLimited)
        #expect((refused.retryAfterMs ?? 0) > 0 && (refused.retryAfterMs ?? 0) <= 2000)
        #expect(try await ask(otherURL) == nil, "another caller has a bucket of its own")
        for _ in 0..<5 { #expect(try await ask(adminURL) == nil, "admins are never limited") }
        await h.stop()
    }

    @Test func eventsRoutedIntoTheQueryQueueAreAckedUnanswered() async throws {
        let h = try await ProjectorHarness.start()
        // An event published straight into the queue, as an outside binding
        // would route it — with a body that is a valid query and a reply_to
        // the sender may use, so that answering it would show.
        let replies = h.url.user + "." + uniqueName("foreign-replies")
        try await h.client.declare([.queue(QueueDeclaration(replies, type: .classic, durable: false, autoDelete: false))])
        var properties = AMQPProperties.persistentJSON(type: "booking.created", messageID: UUID().uuidString, replyTo: replies,
                                                       userID: h.url.user)
        properties.correlationID = "foreign"
        try await h.client.publish(Array(#"{"date": "now"}"#.utf8), routingKey: Topology.availabilityQueriesQueue,
                                   properties: properties)
        // A real query after it, answered: the projector is serving.
        let answer = try await h.rpc(#"{"date": "now"}"#)
        #expect((try? ContractJSON.decode(AvailabilityReply.self, from: answer.body)) != nil, "answered with rooms")
        // A graceful stop settles every delivery: what is left is exact.
        await h.stopProjector()
        #expect(try await h.client.queueInfo(Topology.availabilityQueriesQueue).messageCount == 0, "acked")
        #expect(try await h.client.queueInfo(Topology.deadLetterQueue(for: Topology.availabilityQueriesQueue)).messageCount == 0)
        #expect(try await h.client.queueInfo(replies).messageCount == 0, "not answered")
        await h.stop()
    }

    /// An outside queue bound to `booking.public` that refuses everything
    /// (its own `reject-publish` bound) makes the broker nack each
    /// `availability.changed` copy there: the copy counts as published
    /// (``PublicCopies``), so the projector neither repeats its events nor
    /// leaves the booking events behind them unsettled.
    @Test func aQueueRefusingPublicEventsHoldsUpNoOne() async throws {
        let h = try await ProjectorHarness.start()
        let refusing = h.url.user + "." + uniqueName("refuses")
        try await h.client.declare([
            .queue(QueueDeclaration(refusing, type: .classic, durable: false, autoDelete: false, maxLength: 0,
                                    arguments: ["x-overflow": .string("reject-publish")])),
            .binding(QueueBinding(queue: refusing, exchange: Topology.publicExchange, routingKey: "#")),
        ])
        let first = localDate(daysFromNow: 2), second = localDate(daysFromNow: 3)
        _ = try await h.create(date: first, start: "09:00", end: "10:00")
        _ = try await h.create(date: second, start: "09:00", end: "10:00")
        let changes = try await h.nextChanges(2)
        #expect(changes.map(\.date) == [first, second], "each once, in order: \(changes.map(\.date))")
        await h.stopProjector()
        #expect(try await h.client.queueInfo(refusing).messageCount == 0)
        _ = try await h.client.deleteQueue(refusing)
        await h.stop()
    }
}
