import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// The outbox relay when publishing fails: nothing is lost, and once the
/// broker takes events again they go out in commit order, including those
/// committed while publishing failed.
@Suite("Booking handler outbox relay")
struct RelayRecoveryTests {
    @Test func eventsHeldBackByFailedPublishesGoOutLaterInCommitOrder() async throws {
        let h = try await HandlerHarness.start()
        _ = try await h.nextEvents(6)  // room.registered
        // Every event publish now fails (404: no such exchange); replies
        // (default exchange) still work.
        try await h.client.deleteExchange(Topology.eventsExchange)
        var ids: [String] = []
        func hh(_ hour: Int, _ minute: Int) -> String { String(format: "%02d:%02d", hour, minute) }
        for hour in [9, 11, 13] {
            let created = try #require(try await h.send(
                "booking.create", json: createJSON(start: hh(hour, 0), end: hh(hour, 30))).booking)
            ids.append(created.id)
        }
        for (id, hour) in zip(ids, [9, 11, 13]) {
            let moved = try #require(try await h.send(
                "booking.reschedule",
                json: #"{"bookingId": "\#(id)", "date": "\#(TestDates.tomorrow)", "start": "\#(hh(hour, 30))", "end": "\#(hh(hour + 1, 0))"}"#).booking)
            #expect(moved.version == 2)
            let cancelled = try #require(try await h.send("booking.cancel", json: #"{"bookingId": "\#(id)", "reason": "test"}"#).booking)
            #expect(cancelled.version == 3)
        }
        #expect(try await h.client.queueInfo(h.eventsQueue).messageCount == 0, "nothing got through meanwhile")
        #expect(try await h.app.store.counts().outboxPending >= 12)

        // The broker takes events again (the exchange is back, and with it
        // the test queue's binding).
        try await h.client.declare([
            .exchange(ExchangeDeclaration(Topology.eventsExchange, kind: .topic)),
            .binding(QueueBinding(queue: h.eventsQueue, exchange: Topology.eventsExchange, routingKey: "#")),
        ])
        // 4 events per booking; repeats are allowed (consumers drop them by
        // version), so read until every booking is complete.
        var seen: [String: [(type: String, version: Int)]] = [:]
        while !ids.allSatisfy({ Set((seen[$0] ?? []).map(\.type)).count == 4 }) {
            for event in try await h.nextEvents(1, timeout: 30) {
                let booking = try ContractJSON.decode(BookingEvent.self, from: Data(event.body)).booking
                seen[booking.id, default: []].append((event.type, booking.version))
            }
        }
        for id in ids {
            let sequence = try #require(seen[id])
            #expect(sequence.map(\.version) == sequence.map(\.version).sorted(), "versions never go back: \(sequence)")
            var firsts: [String] = []
            for entry in sequence where !firsts.contains(entry.type) { firsts.append(entry.type) }
            #expect(firsts == ["booking.created", "booking.confirmed", "booking.rescheduled", "booking.cancelled"])
        }
        // New events flow again, from memory.
        let next = try #require(try await h.send("booking.create", json: createJSON(start: "15:00", end: "16:00")).booking)
        var after: [String] = []
        while after.count < 2 {
            for event in try await h.nextEvents(1, timeout: 30)
            where try ContractJSON.decode(BookingEvent.self, from: Data(event.body)).booking.id == next.id {
                after.append(event.type)
            }
        }
        #expect(after == ["booking.created", "booking.confirmed"])
        await h.stop()
    }
}
