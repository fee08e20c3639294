import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import ServiceSupport
import Testing
import TestSupport

/// Contract v1.2: the real `booking-handler` binary in front of the pass
/// sender and the HTTP gateway. No pass while a booking is held or
/// waitlisted; the pass goes out when a hold is confirmed and when a
/// waiter is promoted, as for any confirmation; a hold or waiter that
/// ends without a pass tells nobody; `booking.submitted` is acknowledged
/// without a pass, and the approval sends it.
@Suite("Passes for holds and promoted waiters", .serialized)
struct HoldPassTests {
    @Test func heldAndWaitingGetNoPassAndConfirmationOrPromotionSendsIt() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: HandlerNoticeTests.handlerBinary.path), "build booking-handler first")
        let gateway = try await FaultGateway.start(notices: true)
        let h = try await PassHarness.start(gateway: gateway, timeout: .seconds(5), name: "hold-passes", notify: true)
        let dataDirectory = try TemporaryDirectory("handler")
        defer { dataDirectory.remove() }
        let process = try await HandlerNoticeTests.launchHandler(h, dataDirectory: dataDirectory)
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }
        func command(_ type: CommandType, _ json: String) async throws -> Booking {
            try HandlerNoticeTests.booking(try await HandlerNoticeTests.command(h, type, json))
        }
        func create(_ start: String, _ end: String, person: Int, extra: String) -> String {
            #"{"room": "Berlin", "date": "\#(localDate(daysFromNow: 3))", "start": "\#(start)", "end": "\#(end)", "title": "T", "attendees": [\#(HandlerNoticeTests.person(person))]\#(extra)}"#
        }

        _ = try await HandlerNoticeTests.command(h, .registerRoom, #"{"name": "Berlin", "capacity": 8, "opens": "07:00", "closes": "19:00"}"#)
        let held = try await command(.createBooking, create("09:00", "10:00", person: 0, extra: #", "hold": {"minutes": 30}"#))
        let waiter = try await command(.createBooking, create("09:00", "10:00", person: 1, extra: #", "ifTaken": "waitlist""#))
        let confirmedHold = try await command(.createBooking, create("12:00", "13:00", person: 2, extra: #", "hold": {}"#))
        #expect(held.status == .held && waiter.status == .waitlisted && confirmedHold.status == .held)

        // Confirming the second hold sends its pass.
        let v2 = try await command(.confirmBooking, #"{"bookingId": "\#(confirmedHold.id)"}"#)
        #expect(v2.status == .confirmed)
        try await h.waitDelivered(v2, indexes: [0])

        // Cancelling the first hold promotes the waiter: its pass goes out.
        _ = try await command(.cancelBooking, #"{"bookingId": "\#(held.id)"}"#)
        var promoted = waiter
        promoted.version = 2
        promoted.status = .confirmed
        try await h.waitDelivered(promoted, indexes: [0])

        // By now every event before the promotion was handled (one queue,
        // in order): the held and waiting versions got nothing, and the
        // cancelled hold told nobody (nobody had a pass).
        let s = gateway.state.current
        #expect(Set(s.sent.map { "\($0.bookingId):\($0.version)" }) == ["\(confirmedHold.id):2", "\(waiter.id):2"], "\(s.sent)")
        #expect(s.noticesSent.isEmpty, "\(s.noticesSent)")

        // The promotion's event once more (a redelivery, a republished
        // outbox row): the pass went out once and does not go again.
        let again = BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: promoted,
                                 previous: BookingSnapshot(waiter), promoted: true)
        try await h.client.publish([UInt8](try ContractJSON.encode(again)), exchange: Topology.eventsExchange,
                                   routingKey: EventType.bookingConfirmed.rawValue,
                                   properties: .persistentJSON(type: EventType.bookingConfirmed.rawValue, messageID: again.eventId,
                                                               userID: h.client.user))
        try await h.settled.wait("the repeated promotion settled") { all in
            all.filter { $0.bookingId == waiter.id && $0.type == EventType.bookingConfirmed.rawValue }.count >= 2
        }
        #expect(gateway.sentCounts[PassKey(bookingId: waiter.id, version: 2, index: 0)] == 1, "\(gateway.state.current.sent)")
        await h.stop()
    }

    /// In a room that requires approval a confirmed hold and a promoted
    /// waiter become pending (`booking.submitted`): the pass sender is
    /// bound to it, acknowledges it without a pass and without
    /// dead-lettering it, and the pass goes out once on the approval.
    @Test func submittedIsAcknowledgedWithoutAPassAndTheApprovalSendsIt() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: HandlerNoticeTests.handlerBinary.path), "build booking-handler first")
        let gateway = try await FaultGateway.start(notices: true)
        let h = try await PassHarness.start(gateway: gateway, timeout: .seconds(5), name: "submitted-passes", notify: true)
        let dataDirectory = try TemporaryDirectory("handler")
        defer { dataDirectory.remove() }
        let process = try await HandlerNoticeTests.launchHandler(h, dataDirectory: dataDirectory)
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }
        func command(_ type: CommandType, _ json: String) async throws -> Booking {
            try HandlerNoticeTests.booking(try await HandlerNoticeTests.command(h, type, json))
        }
        func create(_ start: String, _ end: String, person: Int, extra: String = "") -> String {
            #"{"room": "Board", "date": "\#(localDate(daysFromNow: 3))", "start": "\#(start)", "end": "\#(end)", "title": "T", "attendees": [\#(HandlerNoticeTests.person(person))]\#(extra)}"#
        }

        // The approver is a broker user of its own (a requester may not approve).
        let approver = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: try TestBroker.addUser(uniqueName("approver"), to: h.url), connectionName: "approver"),
            logger: testLogger("approver"))
        func approve(_ id: String) async throws -> Booking {
            let reply = try await approver.call(Array(#"{"bookingId": "\#(id)"}"#.utf8), exchange: Topology.commandsExchange,
                                                routingKey: CommandType.confirmBooking.rawValue,
                                                properties: .persistentJSON(type: CommandType.confirmBooking.rawValue,
                                                                            messageID: UUID().uuidString, userID: approver.user),
                                                timeout: .seconds(30))
            return try HandlerNoticeTests.booking(try ContractJSON.decode(CommandReply.self, from: reply.body))
        }
        _ = try await HandlerNoticeTests.command(h, .registerRoom, #"""
            {"name": "Board", "capacity": 8, "opens": "07:00", "closes": "19:00", "requiresApproval": true, "approvers": ["\#(approver.user)"]}
            """#)
        let hold = try await command(.createBooking, create("12:00", "13:00", person: 0, extra: #", "hold": {}"#))
        let blocker = try await command(.createBooking, create("09:00", "10:00", person: 1))
        let waiter = try await command(.createBooking, create("09:00", "10:00", person: 2, extra: #", "ifTaken": "waitlist""#))
        #expect(hold.status == .held && blocker.status == .pending && waiter.status == .waitlisted)

        // The hold confirmed and the waiter promoted: both pending, each by booking.submitted.
        let submittedHold = try await command(.confirmBooking, #"{"bookingId": "\#(hold.id)"}"#)
        #expect(submittedHold.status == .pending)
        _ = try await command(.cancelBooking, #"{"bookingId": "\#(blocker.id)"}"#)
        let submitted = EventType.bookingSubmitted.rawValue
        try await h.settled.wait("both booking.submitted settled") { all in
            Set(all.filter { $0.type == submitted }.compactMap(\.bookingId)) == [hold.id, waiter.id]
        }
        let settledSubmitted = h.settled.current.filter { $0.type == submitted }
        #expect(settledSubmitted.allSatisfy { $0.outcome == .acked }, "\(settledSubmitted.map(\.outcome))")

        // The approvals send the passes, once each.
        let approvedHold = try await approve(hold.id)
        let approvedWaiter = try await approve(waiter.id)
        #expect(approvedHold.status == .confirmed && approvedWaiter.status == .confirmed)
        try await h.waitDelivered(approvedHold, indexes: [0])
        try await h.waitDelivered(approvedWaiter, indexes: [0])
        let s = gateway.state.current
        #expect(s.sent.map { "\($0.bookingId):\($0.version)" }.sorted()
                    == ["\(hold.id):\(approvedHold.version)", "\(waiter.id):\(approvedWaiter.version)"].sorted(), "\(s.sent)")
        #expect(h.settled.current.allSatisfy { if case .deadLettered = $0.outcome { false } else { true } },
                "\(h.settled.current.map { "\($0.type) \($0.outcome)" })")
        await approver.close()
        await h.stop()
    }
}
