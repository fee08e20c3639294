import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import Testing
import TestSupport

/// The scripted fault cases (docs/pass-sender.md, "Tests"), each against a real broker (own
/// vhost), the pass sender as `main` builds it, and a real HTTP gateway.
@Suite("Pass sender retry semantics", .serialized)
struct RetrySemanticsTests {
    private func key(_ b: Booking, _ i: Int) -> PassKey { PassKey(bookingId: b.id, version: b.version, index: i) }

    /// Exactly one pass per listed attendee, none for the others.
    private func expectSentOnce(_ h: PassHarness, _ b: Booking, _ indexes: [Int], sourceLocation: SourceLocation = #_sourceLocation) {
        let counts = h.gateway.sentCounts
        for i in b.attendees.indices {
            #expect(counts[key(b, i), default: 0] == (indexes.contains(i) ? 1 : 0), "attendee \(i): \(counts[key(b, i), default: 0]) passes",
                    sourceLocation: sourceLocation)
        }
    }

    @Test func failIndexOneTwiceThenSucceed() async throws {
        let gateway = try await FaultGateway.start(passRule: { key, failures in key.index == 1 && failures < 2 })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 3)
        let b = makeBooking(attendees: 3)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitDelivered(b, indexes: [0, 1, 2])
        expectSentOnce(h, b, [0, 1, 2])
        let requests = gateway.state.current.requests.map { $0.map(\.index) }
        // [0,1,2] fails at 1 → [2] at once → [1] after back-off (fails) → [1] again (succeeds).
        #expect(requests == [[0, 1, 2], [2], [1], [1]])
        let passes = try await h.app.ledger.passes(bookingId: b.id)
        #expect(passes.allSatisfy { $0.status == .delivered })
        #expect(passes.first { $0.attendeeIndex == 1 }?.attempts == 2)
        #expect(try await h.failedQueue().list().isEmpty)
        #expect(h.events.current.failed.isEmpty)
        await h.stop()
    }

    @Test func failIndexZeroAndTwoOnTheFirstCall() async throws {
        let gateway = try await FaultGateway.start(passRule: { key, failures in [0, 2].contains(key.index) && failures == 0 })
        let h = try await PassHarness.start(gateway: gateway)
        let b = makeBooking(attendees: 4)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitDelivered(b, indexes: [0, 1, 2, 3])
        expectSentOnce(h, b, [0, 1, 2, 3])
        let requests = gateway.state.current.requests.map { $0.map(\.index) }
        #expect(Array(requests.prefix(2)) == [[0, 1, 2, 3], [1, 2, 3]], "the passes after a failed one are sent at once")
        #expect(requests.count == 5)  // + [3] after 2 failed, then 0 and 2 retried alone
        #expect(try await h.statuses(b).values.allSatisfy { $0 == .delivered })
        #expect(try await h.failedQueue().list().isEmpty)
        await h.stop()
    }

    @Test func alwaysFailIndexThreeEndsInPassesFailed() async throws {
        let gateway = try await FaultGateway.start(passRule: { key, _ in key.index == 3 })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 3)
        let b = makeBooking(attendees: 5)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitFailed(b, indexes: [3])
        try await h.waitDelivered(b, indexes: [0, 1, 2, 4])
        expectSentOnce(h, b, [0, 1, 2, 4])
        #expect(gateway.state.current.failures[key(b, 3)] == 3, "exactly PASS_MAX_ATTEMPTS attempts")

        let failed = try await h.failedQueue().list()
        try #require(failed.count == 1)
        let entry = failed[0]
        #expect(entry.messageID == "\(b.id):1:3")
        let pass = try #require(entry.pass)
        #expect(pass.attendeeIndex == 3 && pass.attempts == 3 && pass.lastErrorCode == 4001)
        #expect(pass.name == b.attendees[3].name && pass.email == b.attendees[3].email && pass.phone == b.attendees[3].phone)
        #expect(pass.lastErrorText == "mailbox unavailable")
        #expect(pass.room == b.room && pass.title == b.title && pass.date == b.date)
        #expect(ContractFormat.parseTimestamp(pass.firstFailureAt)! <= ContractFormat.parseTimestamp(pass.lastFailureAt)!)
        #expect(entry.headers["booking-id"]?.stringValue == b.id)
        #expect(entry.headers["booking-version"]?.intValue == 1)
        #expect(entry.headers["attendee-index"]?.intValue == 3)
        #expect(entry.headers["attendee-name"]?.stringValue == b.attendees[3].name)
        #expect(entry.headers["attendee-email"]?.stringValue == b.attendees[3].email)
        #expect(entry.headers["attendee-phone"]?.stringValue == b.attendees[3].phone)
        #expect(entry.headers["attempts"]?.intValue == 3)
        #expect(entry.headers["last-error-code"]?.intValue == 4001)
        #expect(entry.headers["last-error-text"]?.stringValue == "mailbox unavailable")
        #expect(entry.headers["first-failure-at"]?.stringValue == pass.firstFailureAt)
        #expect(entry.headers["last-failure-at"]?.stringValue == pass.lastFailureAt)
        let event = try #require(h.events.current.failed.first)
        #expect(event.attendeeIndex == 3 && event.attempts == 3 && event.errorCode == 4001 && event.channel == .gateway)
        #expect(try await h.statuses(b)[3] == .failed)
        await h.stop()
    }

    @Test func code3000IsNotRetried() async throws {
        let gateway = try await FaultGateway.start(requestRule: { call, _ in call == 0 ? .reject(code: 3000, index: 1) : .proceed })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 5)
        let b = makeBooking(attendees: 3)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitFailed(b, indexes: [1])
        try await h.waitDelivered(b, indexes: [0, 2])
        expectSentOnce(h, b, [0, 2])
        // The invalid pass was tried once; the others were sent again at once.
        #expect(gateway.state.current.requests.map { $0.map(\.index) } == [[0, 1, 2], [0, 2]])
        let failed = try await h.failedQueue().list()
        #expect(failed.count == 1)
        #expect(failed.first?.pass?.attendeeIndex == 1)
        #expect(failed.first?.pass?.attempts == 1)
        #expect(failed.first?.pass?.lastErrorCode == 3000)
        #expect(failed.first?.headers["last-error-code"]?.intValue == 3000)
        await h.stop()
    }

    @Test func code3000WithoutIndexIsolatesTheWrongPass() async throws {
        // Without an index the passes are sent one by one; only attendee 2 is wrong.
        let gateway = try await FaultGateway.start(requestRule: { _, keys in
            keys.contains { $0.index == 2 } ? .reject(code: 3000, index: nil) : .proceed
        })
        let h = try await PassHarness.start(gateway: gateway)
        let b = makeBooking(attendees: 3)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitFailed(b, indexes: [2])
        try await h.waitDelivered(b, indexes: [0, 1])
        expectSentOnce(h, b, [0, 1])
        #expect(gateway.state.current.requests.map { $0.map(\.index) } == [[0, 1, 2], [0], [1], [2]])
        await h.stop()
    }

    @Test func timeoutIsRetriedWithBackoff() async throws {
        let gateway = try await FaultGateway.start(requestRule: { call, _ in call == 0 ? .hang : .proceed })
        let h = try await PassHarness.start(gateway: gateway, timeout: .milliseconds(300))
        let b = makeBooking(attendees: 2)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitDelivered(b, indexes: [0, 1])
        expectSentOnce(h, b, [0, 1])
        #expect(gateway.state.current.requests.map { $0.map(\.index) } == [[0, 1], [0, 1]])
        #expect(try await h.failedQueue().list().isEmpty)
        await h.stop()
    }

    @Test func garbageAnd5xxAndRateLimitAreTransient() async throws {
        let gateway = try await FaultGateway.start(requestRule: { call, _ in
            switch call {
            case 0: .garbage
            case 1: .status(503, #"{"error":{"text":"busy","code":3000}}"#)
            case 2: .status(429, "slow down")
            default: .proceed
            }
        })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 4, delays: "100ms")
        let b = makeBooking(attendees: 2)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitDelivered(b, indexes: [0, 1])
        expectSentOnce(h, b, [0, 1])
        #expect(gateway.state.current.calls == 4)
        let passes = try await h.app.ledger.passes(bookingId: b.id)
        #expect(passes.allSatisfy { $0.attempts == 3 && $0.status == .delivered })
        await h.stop()
    }

    @Test func garbageUntilTheLastAttemptGivesUpWithoutCode() async throws {
        let gateway = try await FaultGateway.start(requestRule: { _, _ in .garbage })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 2, delays: "100ms")
        let b = makeBooking(attendees: 2)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitFailed(b, indexes: [0, 1])
        expectSentOnce(h, b, [])
        let failed = try await h.failedQueue().list()
        #expect(failed.compactMap(\.pass?.attendeeIndex).sorted() == [0, 1])
        #expect(failed.allSatisfy { $0.pass?.lastErrorCode == nil && $0.headers["last-error-code"] == nil && $0.pass?.attempts == 2 })
        await h.stop()
    }

    @Test func cancelDropsPendingRetries() async throws {
        let gateway = try await FaultGateway.start(passRule: { key, _ in key.index == 1 })
        let h = try await PassHarness.start(gateway: gateway, maxAttempts: 5, delays: "1s")
        let b = makeBooking(attendees: 3)
        try await h.publish(.bookingConfirmed, b)
        try await h.waitDelivered(b, indexes: [0, 2])
        var cancelled = b
        cancelled.version = 2
        cancelled.status = .cancelled
        try await h.publish(.bookingCancelled, cancelled)
        // The retry of attendee 1 comes back from its delay queue and is dropped.
        try await h.waitDropped(b, queue: PassQueues.retry, reason: .cancelled)
        #expect(gateway.state.current.failures[key(b, 1)] == 1, "attendee 1 was tried once, before the cancel")
        expectSentOnce(h, b, [0, 2])
        #expect(try await h.statuses(b)[1] == .dropped)
        // A late confirmed event of the cancelled booking sends nothing either.
        try await h.publish(.bookingConfirmed, b)
        try await h.waitDropped(b, queue: Topology.passSenderEventsQueue, reason: .cancelled)
        expectSentOnce(h, b, [0, 2])
        #expect(try await h.failedQueue().list().isEmpty)
        await h.stop()
    }

    @Test func staleVersionsSendNothing() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway)
        var v3 = makeBooking(version: 3, attendees: 2)
        v3.start = "11:00"
        try await h.publish(.bookingRescheduled, v3)
        try await h.waitDelivered(v3, indexes: [0, 1])
        var v2 = v3
        v2.version = 2
        try await h.publish(.bookingConfirmed, v2)
        try await h.waitDropped(v2, queue: Topology.passSenderEventsQueue, reason: .stale)
        // The same event again (redelivery) sends nothing new either.
        try await h.publish(.bookingRescheduled, v3)
        let id = v3.id
        try await h.settled.wait("second v3 settled") { all in all.filter { $0.bookingId == id }.count == 3 }
        expectSentOnce(h, v3, [0, 1])
        #expect(!gateway.state.current.sent.contains { $0.version == 2 })
        await h.stop()
    }

    /// Contract v1.1: consumers ignore unknown status values. An event
    /// from a newer handler is acked without a pass (whether one is due
    /// cannot be told) and is not dead-lettered; the booking's next known
    /// state is handled as usual, though its `previous` has that status.
    @Test func anUnknownStatusIsIgnoredNotDeadLettered() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway)
        var booking = makeBooking(version: 1, attendees: 2)
        let event = BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: booking)
        let body = String(decoding: try ContractJSON.encode(event), as: UTF8.self)
            .replacingOccurrences(of: #""status":"confirmed""#, with: #""status":"tentative""#)
        try await h.client.publish(Array(body.utf8), exchange: Topology.eventsExchange,
                                   routingKey: EventType.bookingConfirmed.rawValue,
                                   properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: event.eventId,
                                                               userID: h.client.user))
        let id = booking.id
        try await h.settled.wait("unknown status settled") { !$0.isEmpty }
        #expect(h.settled.current.map(\.outcome) == [.acked])
        #expect(h.settled.current.first?.bookingId == id)
        #expect(gateway.state.current.sent.isEmpty)
        // The next event carries that status as the state before
        // (`previous`): handled without the snapshot, the pass goes out.
        var before = booking
        before.status = .pending
        booking.version = 2
        let next = BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: booking,
                                previous: BookingSnapshot(before))
        let nextBody = String(decoding: try ContractJSON.encode(next), as: UTF8.self)
            .replacingOccurrences(of: #""status":"pending""#, with: #""status":"tentative""#)
        #expect(nextBody.contains(#""status":"tentative""#) && nextBody.contains(#""status":"confirmed""#))
        try await h.client.publish(Array(nextBody.utf8), exchange: Topology.eventsExchange,
                                   routingKey: EventType.bookingConfirmed.rawValue,
                                   properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: next.eventId,
                                                               userID: h.client.user))
        try await h.waitDelivered(booking, indexes: [0, 1])
        #expect(try await h.client.queueInfo(Topology.deadLetterQueue(for: Topology.passSenderEventsQueue)).messageCount == 0)
        await h.stop()
    }

    @Test func poisonEventsAreDeadLettered() async throws {
        let gateway = try await FaultGateway.start()
        let h = try await PassHarness.start(gateway: gateway)
        let dead = try await h.client.consume(queue: Topology.deadLetterQueue(for: Topology.passSenderEventsQueue))
        try await h.client.publish(Array("not json".utf8), exchange: Topology.eventsExchange,
                                   routingKey: EventType.bookingConfirmed.rawValue,
                                   properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: "poison-1",
                                                               userID: h.client.user))
        let got = try await withTimeout(60, "poison in pass-sender.events.dead") { try await dead.take(1) }
        // The pass sender's copy, saying why (a reject would only say `rejected`).
        let copy = try #require(got.first)
        #expect(copy.properties.messageID == "poison-1" && copy.properties.xDeath.isEmpty)
        #expect(copy.properties.headers["x-death-reason"]?.stringValue?.hasPrefix("body is not a booking event") == true)
        #expect(copy.properties.headers["x-dead-lettered-by"]?.stringValue == "pass-sender")
        #expect(copy.properties.headers["x-original-routing-key"]?.stringValue == EventType.bookingConfirmed.rawValue)
        #expect(copy.properties.headers["x-original-exchange"]?.stringValue == Topology.eventsExchange)
        #expect(copy.properties.userID == h.client.user && copy.body == Array("not json".utf8))
        dead.stop()
        // A poison retry message goes to pass-sender.retry.dead.
        let deadRetry = try await h.client.consume(queue: Topology.deadLetterQueue(for: PassQueues.retry))
        try await h.client.publish(Array(#"{"schemaVersion":99}"#.utf8), routingKey: PassQueues.retry,
                                   properties: .persistentJSON(type: PassQueues.retryMessageType, messageID: "poison-2",
                                                               userID: h.client.user))
        let got2 = try await withTimeout(60, "poison in pass-sender.retry.dead") { try await deadRetry.take(1) }
        #expect(got2.first?.properties.messageID == "poison-2")
        #expect(got2.first?.properties.headers["x-death-reason"]?.stringValue == "retry message schema version 99 is not supported"
                || got2.first?.properties.headers["x-death-reason"]?.stringValue?.hasPrefix("body is not a retry message") == true)
        deadRetry.stop()
        await h.stop()
    }
}

/// `PASS_GATEWAY_CONCURRENCY` against a real HTTP gateway: more messages
/// in progress than gateway calls, and the gateway never sees more calls
/// at once than the bound, however many messages wait.
@Suite("Pass sender gateway concurrency", .serialized)
struct GatewayConcurrencyTests {
    /// Waits (at most 60 s) until `count` gateway calls wait for a slot. A
    /// semaphore's queue has no event to await, so this polls it.
    static func waitForSlotWaiters(_ h: PassHarness, _ count: Int) async throws {
        try await withTimeout(60, "\(count) calls waiting for a gateway slot") {
            while h.app.dispatcher.waitingForGateway < count { try await Task.sleep(for: .milliseconds(10)) }
        }
    }

    @Test func theGatewaySeesNoMoreCallsAtOnceThanTheBound() async throws {
        let blocking = LockedBox(true)
        let gateway = try await FaultGateway.start(requestRule: { _, _ in blocking.withLock { $0 } ? .block : .proceed })
        // A timeout far longer than the test: a held call never times out
        // and frees its slot early.
        let h = try await PassHarness.start(gateway: gateway, delays: "100ms", timeout: .seconds(120), name: "gateway-bound",
                                            concurrency: 12, gatewayConcurrency: 3)
        let bookings = (0..<12).map { _ in makeBooking(attendees: 1) }
        for b in bookings { try await h.publish(.bookingConfirmed, b) }
        // Three calls held by the gateway; the other nine messages were
        // admitted and wait for a slot, none of them at the gateway.
        try await gateway.state.wait("three calls held") { $0.blocked >= 3 }
        try await Self.waitForSlotWaiters(h, 9)
        #expect(gateway.state.current.blocked == 3)
        #expect(gateway.state.current.calls == 3)
        blocking.withLock { $0 = false }
        gateway.release()  // the held calls answer 503: retried after 100 ms
        for b in bookings { try await h.waitDelivered(b, indexes: [0]) }
        #expect(gateway.state.current.mostInFlight == 3, "never more than three calls at once")
        #expect(gateway.sentCounts.values.allSatisfy { $0 == 1 } && gateway.sentCounts.count == 12, "each pass sent once")
        await h.stop()
    }

    /// A stop that runs out of time while messages wait for a gateway slot
    /// (the gateway holds the one call in flight): the waiting messages go
    /// back to the queue having sent nothing, instead of keeping the
    /// process until it is killed.
    @Test func aStopOutOfTimeGivesWaitingMessagesBack() async throws {
        let gateway = try await FaultGateway.start(requestRule: { _, _ in .block })
        let h = try await PassHarness.start(gateway: gateway, timeout: .seconds(120), name: "gateway-stop",
                                            concurrency: 4, gatewayConcurrency: 1)
        let bookings = (0..<3).map { _ in makeBooking(attendees: 1) }
        for b in bookings { try await h.publish(.bookingConfirmed, b) }
        try await gateway.state.wait("one call held") { $0.blocked >= 1 }
        try await Self.waitForSlotWaiters(h, 2)
        await h.stopImpatiently()
        let requeued = h.settled.current.filter { $0.outcome == .requeued }.compactMap(\.bookingId)
        #expect(Set(requeued).count >= 2 && Set(requeued).isSubset(of: Set(bookings.map(\.id))),
                "the waiting messages went back: \(h.settled.current.map { "\($0.bookingId ?? "-") \($0.outcome)" })")
        #expect(gateway.state.current.calls == 1, "nothing more reached the gateway")
        // They went back before their call: no attempt recorded (a waiter
        // that kept waiting would have made a call in a cancelled task and
        // recorded it as a failed attempt).
        let ledger = try PassLedger(path: h.dataDirectory + "/pass-sender.sqlite")
        var untried = 0
        for b in bookings {
            if let pass = try await ledger.passes(bookingId: b.id).first, pass.status == .attempting && pass.attempts == 0 { untried += 1 }
        }
        await ledger.close()
        #expect(untried == 2, "two passes claimed and never tried")
        await h.stop()
    }

    /// The HTTP client keeps as many connections per host as there are
    /// slots: 12 calls at once all reach the gateway (the client's own
    /// default is 8; the others would wait inside their timeout).
    @Test func theHTTPClientKeepsAConnectionPerSlot() async throws {
        let gateway = try await FaultGateway.start(requestRule: { _, _ in .block })
        let client = HTTPPassGateway(baseURL: gateway.url, timeout: .seconds(120), connectionsPerHost: 12,
                                     logger: testLogger("http-slots"))
        let booking = makeBooking(attendees: 1)
        let request = SendPassRequestBuilder.request(for: booking, attendeeIndexes: [0])
        let calls = (0..<12).map { i in
            Task {
                await client.send(request, batch: PassBatch(bookingId: "b\(i)", version: 1, attendeeIndexes: [0], booking: booking,
                                                            kind: .pass, previous: nil))
            }
        }
        try await gateway.state.wait("twelve calls at the gateway at once") { $0.blocked == 12 }
        #expect(gateway.state.current.mostInFlight == 12)
        gateway.release()
        for call in calls { _ = await call.value }
        await client.shutdown()
        await gateway.stop()
    }
}
