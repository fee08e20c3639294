import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import Testing
import TestSupport

/// What the ledger's outbox still holds for a booking (committed, never
/// confirmed: another instance died between its commit and its publish, or
/// a publish of ours failed) goes out with the booking's next message,
/// before that message's own follow-ups and before its ack. The admission
/// finds these rows in its own transaction; nothing reads the outbox per
/// message any more (docs/pass-sender.md, "Delivery and the ledger").
@Suite("Pass sender leftover outbox rows", .serialized)
struct LeftoverOutboxTests {
    /// A `pass.delivered` event for `booking`'s attendee `index` under `eventId`, as the dispatcher writes one.
    private func deliveredEvent(_ booking: Booking, index: Int, eventId: String) throws -> OutboxMessage {
        let a = booking.attendees[index]
        let event = PassDelivered(eventId: eventId, occurredAt: ContractFormat.timestamp(Date()), bookingId: booking.id,
                                  version: booking.version, attendeeIndex: index, name: a.name, email: a.email, phone: a.phone,
                                  channel: .gateway)
        return OutboxMessage(exchange: Topology.eventsExchange, routingKey: EventType.passDelivered.rawValue,
                             messageID: eventId, type: EventType.passDelivered.rawValue, body: [UInt8](try ContractJSON.encode(event)),
                             headers: ["booking-id": .string(booking.id)])
    }

    /// Leaves a committed, unpublished outbox row for `booking` (after the
    /// pass sender's start-up flush, so only the next message can find it).
    private func leaveRow(_ h: PassHarness, _ booking: Booking, eventId: String) async throws {
        let written = try await h.app.ledger.record(bookingId: booking.id, version: booking.version, delivered: [],
                                                    deliveredAt: ContractFormat.timestamp(Date()), failures: [],
                                                    outbox: [try deliveredEvent(booking, index: 0, eventId: eventId)])
        #expect(written.count == 1 && written[0].message.messageID == eventId, "record returns the rows it wrote")
        #expect(try await h.app.ledger.unpublished(bookingId: booking.id).map(\.id) == written.map(\.id))
    }

    @Test func aBookingsLeftoverGoesOutWithItsNextMessageBeforeThatMessagesOwnEvents() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "pass-leftover")
        let b = makeBooking(attendees: 2)
        let other = makeBooking(attendees: 1)
        try await leaveRow(h, b, eventId: "leftover-\(b.id)")

        // Another booking's message does not publish b's row.
        try await h.publish(.bookingConfirmed, other)
        try await h.waitDelivered(other, indexes: [0])
        try await h.settled.wait("the other booking's event acked") { all in
            all.contains { $0.bookingId == other.id && $0.outcome == .acked }
        }
        #expect(!h.events.current.delivered.contains { $0.eventId == "leftover-\(b.id)" })
        #expect(try await h.app.ledger.unpublished(bookingId: b.id).count == 1)

        try await h.publish(.bookingConfirmed, b)
        try await h.waitDelivered(b, indexes: [0, 1])
        try await h.settled.wait("b's event acked") { all in all.contains { $0.bookingId == b.id && $0.outcome == .acked } }
        let ofB = h.events.current.delivered.filter { $0.bookingId == b.id }
        // Published on one channel in outbox order: the leftover first.
        #expect(ofB.first?.eventId == "leftover-\(b.id)", "order: \(ofB.map(\.eventId))")
        #expect(ofB.count == 3 && ofB.filter { $0.eventId == "leftover-\(b.id)" }.count == 1)
        // The marks are queued, not awaited before the ack; a write queued
        // after them runs after them (the group commit is first in, first out).
        try await h.app.ledger.prunePublished(olderThan: 1e9)
        #expect(try await h.app.ledger.unpublished().isEmpty, "every published row is marked")
        #expect(gateway.sentCounts.values.allSatisfy { $0 == 1 })
        await h.stop()
    }

    /// A follow-up for a queue that is gone (a retry delay queue deleted by
    /// hand) is not confirmed as published: the broker returns it, the row
    /// stays in the outbox, and it goes out once the queue is back.
    @Test func aFollowUpForAMissingQueueStaysInTheOutbox() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "pass-unroutable")
        let b = makeBooking(attendees: 1)
        let queue = uniqueName("pass-sender.retry.delay.gone")
        let message = OutboxMessage(exchange: Topology.defaultExchange, routingKey: queue, messageID: "retry-\(b.id)",
                                    type: "pass-sender.retry", body: Array("{}".utf8))
        _ = try await h.app.ledger.record(bookingId: b.id, version: b.version, delivered: [],
                                          deliveredAt: ContractFormat.timestamp(Date()), failures: [], outbox: [message])
        await #expect(throws: AMQPError.self) { try await h.app.consumer.flush(bookingId: b.id) }
        #expect(try await h.app.ledger.unpublished(bookingId: b.id).map(\.message.messageID) == ["retry-\(b.id)"],
                "not marked published")
        try await h.client.declare([.queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: false))])
        try await h.app.consumer.flush(bookingId: b.id)
        #expect(try await h.app.ledger.unpublished(bookingId: b.id).isEmpty)
        #expect(try await h.client.queueInfo(queue).messageCount == 1, "delivered once the queue is back")
        try await h.client.deleteQueue(queue)
        await h.stop()
    }

    /// A leftover whose booking gets no further message (the publish after
    /// its commit failed, or the commit reached the database after its
    /// caller gave up) is published by the sweep, once.
    @Test func aLeftoverWithoutAnotherMessageIsPublishedByTheSweep() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "pass-leftover-sweep",
                                            environment: ["PASS_OUTBOX_SWEEP": "300ms"])
        let b = makeBooking(attendees: 1)
        try await leaveRow(h, b, eventId: "swept-\(b.id)")
        try await h.events.wait("the leftover published by the sweep") { log in
            log.delivered.contains { $0.eventId == "swept-\(b.id)" }
        }
        try await withTimeout(30, "the swept row marked published") {
            while !(try await h.app.ledger.unpublished().isEmpty) { try await Task.sleep(for: .milliseconds(50)) }
        }
        // Several sweeps later it has gone out once: marked rows are not swept again.
        let sweepsLater = ContinuousClock.now + .seconds(1)
        try await Task.sleep(until: sweepsLater, clock: .continuous)
        #expect(h.events.current.delivered.filter { $0.eventId == "swept-\(b.id)" }.count == 1)
        #expect(gateway.state.current.calls == 0, "the sweep publishes; it sends no pass")
        await h.stop()
    }

    /// A leftover that cannot be published (here a routing key over
    /// AMQP's 255 bytes; in life a nack) holds back the message's own
    /// follow-ups: they stay unpublished, the message is requeued, and its
    /// pass is not sent again on the redelivery.
    @Test func aLeftoverThatFailsKeepsTheNewerFollowUpsBack() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "pass-leftover-fails")
        let b = makeBooking(attendees: 1)
        var bad = try deliveredEvent(b, index: 0, eventId: "unpublishable-\(b.id)")
        bad.routingKey = String(repeating: "x", count: 300)
        _ = try await h.app.ledger.record(bookingId: b.id, version: b.version, delivered: [],
                                          deliveredAt: ContractFormat.timestamp(Date()), failures: [], outbox: [bad])
        try await h.publish(.bookingConfirmed, b)
        try await h.settled.wait("b's event requeued") { all in all.contains { $0.bookingId == b.id && $0.outcome == .requeued } }
        // Read behind any queued mark: nothing of b's was marked published.
        let left = try await h.app.ledger.unpublishedQueued(bookingId: b.id)
        #expect(left.map(\.message.messageID).first == "unpublishable-\(b.id)")
        #expect(left.count == 2 && left.last?.message.routingKey == EventType.passDelivered.rawValue,
                "the pass's own pass.delivered is held back: \(left.map(\.message.routingKey))")
        #expect(!h.events.current.delivered.contains { $0.bookingId == b.id })
        // The redelivery sends nothing again (the pass is delivered in the ledger).
        try await h.settled.wait("b's event requeued twice") { all in
            all.filter { $0.bookingId == b.id && $0.outcome == .requeued }.count >= 2
        }
        #expect(gateway.sentCounts.values.allSatisfy { $0 == 1 } && gateway.sentCounts.count == 1)
        await h.stop()
    }

    /// An unusable retry message (its admission throws, so it returns no
    /// leftovers) still publishes the booking's leftovers before it is
    /// dead-lettered.
    @Test func anUnusableRetryStillPublishesTheBookingsLeftover() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway, name: "pass-leftover-poison")
        let b = makeBooking(attendees: 1)
        try await leaveRow(h, b, eventId: "leftover-\(b.id)")
        let retry = PassRetryMessage(kind: .backoff, bookingId: b.id, version: b.version, booking: b,
                                     passes: [PassRetryMessage.Pass(attendeeIndex: 5, attempts: 1, firstFailureAt: nil,
                                                                    lastFailureAt: nil, lastErrorCode: 4001, lastErrorText: "x")])
        try await h.client.publish([UInt8](try ContractJSON.encode(retry)), routingKey: PassQueues.retry,
                                   properties: .persistentJSON(type: PassQueues.retryMessageType, messageID: "unusable-\(b.id)",
                                                               userID: h.client.user))
        try await h.settled.wait("the retry dead-lettered") { all in
            all.contains { s in
                guard s.bookingId == b.id, case .deadLettered(let why) = s.outcome else { return false }
                return why.contains("attendee index 5")
            }
        }
        try await h.events.wait("the leftover published") { log in log.delivered.contains { $0.eventId == "leftover-\(b.id)" } }
        #expect(try await h.app.ledger.unpublished().isEmpty, "marked (awaited on this path)")
        #expect(gateway.state.current.calls == 0, "nothing sent")
        await h.stop()
    }
}
