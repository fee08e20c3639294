import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import Testing
import TestSupport

/// `passes.failed` as operators use it: list without losing or reordering,
/// retry once the gateway works again (delivered exactly once), discard.
@Suite("Pass sender operator workflow", .serialized)
struct OperatorTests {
    @Test func listRetryAndDiscard() async throws {
        let broken = LockedBox(true)
        let gateway = try await FaultGateway.start(passRule: { key, _ in key.index == 1 && broken.withLock { $0 } })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 2, delays: "100ms")
        let a = makeBooking(attendees: 3, room: "Berlin")
        let b = makeBooking(attendees: 2, room: "Hamburg")
        try await h.publish(.bookingConfirmed, a)
        try await h.waitFailed(a, indexes: [1])
        try await h.publish(.bookingConfirmed, b)
        try await h.waitFailed(b, indexes: [1])

        // Listing twice: same count, same order, nothing lost.
        let queue = h.failedQueue()
        let first = try await queue.list()
        let second = try await queue.list()
        #expect(first.map(\.key) == ["\(a.id):1:1", "\(b.id):1:1"])
        #expect(second.map(\.key) == first.map(\.key))
        let third = try await queue.list()
        #expect(third.map(\.key) == first.map(\.key))

        // The gateway recovers; retry booking a's pass: delivered exactly once.
        broken.withLock { $0 = false }
        let moved = try await queue.retry { $0.pass?.bookingId == a.id }
        #expect(moved.map(\.key) == ["\(a.id):1:1"])
        try await h.settled.wait("operator retry delivered") { all in
            all.contains { $0.queue == PassQueues.retry && $0.bookingId == a.id && $0.summary?.delivered == [1] }
        }
        let key = PassKey(bookingId: a.id, version: 1, index: 1)
        #expect(h.gateway.sentCounts[key] == 1)
        #expect(try await queue.list().map(\.key) == ["\(b.id):1:1"], "only b's pass remains")

        // Retrying a pass that was meanwhile delivered sends nothing.
        let stale = failedPass(a, index: 1, attempts: 2)
        let again = PassRetryMessage.operatorRetry(of: stale, token: UUID().uuidString)
        let settledBefore = h.settled.current.count
        try await h.client.publish([UInt8](try ContractJSON.encode(again)), routingKey: PassQueues.retry,
                                   properties: .persistentJSON(type: PassQueues.retryMessageType, messageID: UUID().uuidString,
                                                               userID: h.client.user))
        try await h.settled.wait("second operator retry settled") { $0.count > settledBefore }
        #expect(h.settled.current.last?.summary?.gatewayCalls == 0)
        #expect(h.gateway.sentCounts[key] == 1)

        // Discard b's pass with a reason: gone from passes.failed, kept in the audit queue.
        let discarded = try await queue.discard(reason: "attendee left the company", by: "test") { _ in true }
        #expect(discarded.map(\.key) == ["\(b.id):1:1"])
        #expect(try await queue.list().isEmpty)
        let audit = try #require(try await h.client.get(queue: PassQueues.discarded))
        #expect(audit.properties.headers["discard-reason"]?.stringValue == "attendee left the company")
        #expect(audit.properties.messageID == "\(b.id):1:1")
        try await audit.ack()
        await h.stop()
    }
}
