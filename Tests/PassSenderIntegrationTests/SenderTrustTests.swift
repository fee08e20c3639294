import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import Testing
import TestSupport

/// The pass sender acts only on events the booking handler's broker user
/// published, and on retries from itself or an operator (docs/security.md):
/// a peer user that can write into its queues through the default
/// exchange must not make it text arbitrary numbers.
@Suite("Pass sender: trusted senders only", .serialized)
struct SenderTrustTests {
    @Test func anEventFromAnotherUserSendsNothingAndIsDeadLettered() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "trust")
        let peerURL = try TestBroker.addUser(uniqueName("peer"), to: h.url)
        let peer = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: peerURL, connectionName: "peer"),
                                                    logger: testLogger("peer"))
        let forged = makeBooking(attendees: 2)
        let event = BookingEvent(eventId: "forged-1", occurredAt: ContractFormat.timestamp(Date()), booking: forged)
        // Straight into the pass sender's queue, as the default exchange allows.
        try await peer.publish([UInt8](try ContractJSON.encode(event)), routingKey: Topology.passSenderEventsQueue,
                               properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: "forged-1",
                                                           userID: peerURL.user))
        // And one without any user_id.
        try await peer.publish([UInt8](try ContractJSON.encode(event)), routingKey: Topology.passSenderEventsQueue,
                               properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: "forged-2"))
        try await h.settled.wait("both forged events settled") { $0.count >= 2 }
        #expect(h.settled.current.prefix(2).allSatisfy { $0.outcome == .deadLettered("untrusted sender") })
        let dead = try await h.client.consume(queue: Topology.deadLetterQueue(for: Topology.passSenderEventsQueue))
        let got = try await withTimeout(60, "forged events in pass-sender.events.dead") { try await dead.take(2) }
        #expect(Set(got.compactMap(\.properties.messageID)) == ["forged-1", "forged-2"])
        // The pass sender's copies name the peer (the broker verified its
        // user_id) and say why; the one without a user_id names nobody.
        let byID = Dictionary(uniqueKeysWithValues: got.map { ($0.properties.messageID ?? "", $0) })
        #expect(byID["forged-1"]?.properties.headers["x-original-user-id"]?.stringValue == peerURL.user)
        #expect(byID["forged-2"]?.properties.headers["x-original-user-id"] == nil)
        #expect(got.allSatisfy { $0.properties.userID == h.client.user
                    && $0.properties.headers["x-death-reason"]?.stringValue?.contains("published by") == true },
                "\(got.map { $0.properties.headers["x-death-reason"]?.stringValue ?? "-" })")
        dead.stop()
        // A retry message from the peer is refused too.
        let retry = PassRetryMessage.operatorRetry(
            of: FailedPass(bookingId: forged.id, version: 1, attendeeIndex: 0, name: "X", email: "x@example.com",
                           phone: "+491701234567", attempts: 1, firstFailureAt: ContractFormat.timestamp(Date()),
                           lastFailureAt: ContractFormat.timestamp(Date()), lastErrorCode: 4001, lastErrorText: "x",
                           room: forged.room, date: forged.date, start: forged.start, end: forged.end, title: forged.title),
            token: UUID().uuidString)
        try await peer.publish([UInt8](try ContractJSON.encode(retry)), routingKey: PassQueues.retry,
                               properties: .persistentJSON(type: PassQueues.retryMessageType, messageID: "forged-3",
                                                           userID: peerURL.user))
        try await h.settled.wait("forged retry settled") { $0.count >= 3 }
        #expect(h.settled.current[2].outcome == .deadLettered("untrusted sender"))
        #expect(gateway.state.current.sent.isEmpty, "nothing was sent to anyone")
        // The real handler's events still work.
        let real = makeBooking(attendees: 1)
        try await h.publish(.bookingConfirmed, real)
        try await h.waitDelivered(real, indexes: [0])
        await peer.close()
        await h.stop()
    }

    /// As deployed: the handler and the operators are other broker users
    /// than the pass sender, named through the environment.
    @Test func trustsTheConfiguredHandlerAndOperatorsNotItself() async throws {
        let gateway = try await FaultGateway.start()
        let handlerUser = uniqueName("handler"), operatorUser = uniqueName("operator")
        let h = try await PassHarness.start(gateway: gateway, name: "trust-env",
                                            environment: ["BOOKING_HANDLER_USER": handlerUser, "ADMIN_USERS": operatorUser])
        let handlerURL = try TestBroker.addUser(handlerUser, to: h.url)
        let operatorURL = try TestBroker.addUser(operatorUser, to: h.url)
        let handler = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: handlerURL, connectionName: "h"),
                                                       logger: testLogger("h"))
        let operators = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: operatorURL, connectionName: "o"),
                                                         logger: testLogger("o"))
        // The pass sender's own user is no longer the handler.
        let own = makeBooking(attendees: 1)
        try await publishEvent(.bookingConfirmed, own, on: h.client)
        try await h.settled.wait("own-user event settled") { $0.count >= 1 }
        #expect(h.settled.current[0].outcome == .deadLettered("untrusted sender"))
        // The configured handler's event is delivered.
        let real = makeBooking(attendees: 1)
        try await publishEvent(.bookingConfirmed, real, on: handler)
        try await h.waitDelivered(real, indexes: [0])
        // An operator's retry is accepted (and finds the pass delivered).
        let settledBefore = h.settled.current.count
        let pass = failedPass(real, index: 0, attempts: 1)
        let retry = PassRetryMessage.operatorRetry(of: pass, token: UUID().uuidString)
        try await operators.publish([UInt8](try ContractJSON.encode(retry)), routingKey: PassQueues.retry,
                                    properties: .persistentJSON(type: PassQueues.retryMessageType, messageID: "op-1",
                                                                userID: operatorUser))
        try await h.settled.wait("operator retry settled") { $0.count > settledBefore }
        #expect(h.settled.current.last?.outcome == .acked)
        #expect(gateway.sentCounts[PassKey(bookingId: real.id, version: 1, index: 0)] == 1, "sent once, not again")
        await handler.close()
        await operators.close()
        await h.stop()
    }
}
