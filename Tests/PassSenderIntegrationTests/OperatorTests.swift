import AMQPClient
import BookingContracts
import BrokerObjects
import FailedMessages
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
        #expect(moved.entries.map(\.key) == ["\(a.id):1:1"])
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
        #expect(discarded.entries.map(\.key) == ["\(b.id):1:1"])
        #expect(try await queue.list().isEmpty)
        let audit = try #require(try await h.client.get(queue: PassQueues.discarded))
        #expect(audit.properties.headers["discard-reason"]?.stringValue == "attendee left the company")
        #expect(audit.properties.messageID == "\(b.id):1:1")
        try await audit.ack()
        await h.stop()
    }

    /// The broker drops the operator's connections before the third of four
    /// passes is retried (bookingctl's connection does not reconnect): the
    /// run stops there, the error lists the two it moved, and the other two
    /// stay in `passes.failed`. Before, the error alone was thrown and what
    /// was already moved went unreported.
    @Test func aRetryStoppedByALostConnectionListsWhatItMoved() async throws {
        let gateway = try await FaultGateway.start(passRule: { _, _ in false })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 2, delays: "100ms")
        let a = makeBooking(attendees: 4, room: "Berlin")
        for index in 0..<4 {
            try await h.client.publish([UInt8](try ContractJSON.encode(failedPass(a, index: index, attempts: 2))),
                                       routingKey: Topology.passesFailedQueue,
                                       properties: .persistentJSON(type: "pass.failed", messageID: "\(a.id):1:\(index)"))
        }
        let name = uniqueName("operator")
        var configuration = AMQPConfiguration(url: h.url, connectionName: name)
        configuration.reconnectsAfterLoss = false  // as bookingctl connects
        let op = try await AMQPConnection.connect(configuration: configuration, logger: testLogger(name))
        let queue = FailedPassQueue(connection: op)
        let vhost = h.url.vhost
        var asked = 0
        let error = await #expect(throws: PartiallyMoved.self) {
            _ = try await queue.retry { _ in
                asked += 1
                guard asked == 3 else { return true }
                let rows = (try? TestBroker.ctl(["list_connections", "-s", "pid", "vhost", "client_properties"])) ?? ""
                for row in rows.split(separator: "\n") {
                    let f = row.split(separator: "\t", maxSplits: 2)
                    guard f.count == 3, f[1] == vhost,
                          f[2].contains("\"\(name)\"") || f[2].contains("\"snapshot \(Topology.passesFailedQueue)\"") else { continue }
                    _ = try? TestBroker.ctl(["close_connection", String(f[0]), "test: the broker went away"])
                }
                let lost = DispatchSemaphore(value: 0)
                op.whenDisconnected { lost.signal() }
                #expect(lost.wait(timeout: .now() + 30) == .success, "the loss was seen")
                return true
            }
        }
        #expect(error?.moved.map(\.key) == ["\(a.id):1:0", "\(a.id):1:1"])
        #expect(error?.stoppedAt?.key == "\(a.id):1:2")
        #expect(error?.connectionLost == true)
        try await withTimeout(30, "the two unmoved passes back in passes.failed") {
            while try await h.client.queueInfo(Topology.passesFailedQueue).messageCount < 2 {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(try await h.failedQueue().list().map(\.key) == ["\(a.id):1:2", "\(a.id):1:3"])
        await op.close()
        await h.stop()
    }

    /// A queue longer than one read can hold (65,535 messages; 3 here):
    /// a read, a retry and a discard say they saw only the first, and those
    /// behind are neither moved nor reordered.
    @Test func aRunThatCouldNotReadTheWholeQueueSaysSo() async throws {
        let gateway = try await FaultGateway.start(passRule: { _, _ in false })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 2, delays: "100ms")
        let a = makeBooking(attendees: 5, room: "Berlin")
        for index in 0..<5 {
            try await h.client.publish([UInt8](try ContractJSON.encode(failedPass(a, index: index, attempts: 2))),
                                       routingKey: Topology.passesFailedQueue,
                                       properties: .persistentJSON(type: "pass.failed", messageID: "\(a.id):1:\(index)"))
        }
        let short = FailedPassQueue(connection: h.client, perQueue: 3)
        let read = try await short.read()
        #expect(read.entries.map(\.key) == (0..<3).map { "\(a.id):1:\($0)" } && !read.isComplete)
        let discarded = try await short.discard(reason: "test", by: "test") { _ in true }
        #expect(discarded.entries.count == 3 && !discarded.isComplete)
        let rest = try await short.read()
        #expect(rest.entries.map(\.key) == ["\(a.id):1:3", "\(a.id):1:4"] && rest.isComplete)
        let moved = try await short.retry { _ in true }
        #expect(moved.entries.count == 2 && moved.isComplete)
        #expect(try await h.failedQueue().read().entries.isEmpty)
        await h.stop()
    }
}
