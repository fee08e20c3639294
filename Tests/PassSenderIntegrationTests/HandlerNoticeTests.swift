import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import ServiceSupport
import Testing
import TestSupport

/// The real `booking-handler` binary in front of the pass sender: the
/// events it publishes for create, update, reschedule and cancel (with
/// `previous`, `booking.updated` now bound) become exactly the notices and
/// passes of the contract's table.
@Suite("Notices from the booking handler's own events", .serialized)
struct HandlerNoticeTests {
    /// The real `booking-handler` binary on `h`'s broker, its data in
    /// `dataDirectory` and its log beside it. Its queues are declared
    /// first, so commands sent before it consumes wait for it.
    static func launchHandler(_ h: PassHarness, dataDirectory: TemporaryDirectory) async throws -> Process {
        try await h.client.declare(ContractTopology.declarations(queues: [Topology.handlerCommandsQueue,
                                                                          Topology.bookingQueriesQueue]))
        return try ServiceProcess.launch(
            handlerBinary,
            environment: ["AMQP_URL": h.url.urlStringWithCredentials, "DATA_DIR": dataDirectory.path, "HTTP_PORT": "0",
                          "LOG_LEVEL": "warning"],
            log: dataDirectory.appending("handler.log"))
    }

    static var handlerBinary: URL { ServiceProcess.binary("booking-handler") }

    static func command(_ h: PassHarness, _ type: CommandType, _ json: String) async throws -> CommandReply {
        let reply = try await h.client.call(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type.rawValue,
                                            properties: .persistentJSON(type: type.rawValue, messageID: UUID().uuidString,
                                                                        userID: h.client.user),
                                            timeout: .seconds(30))
        return try ContractJSON.decode(CommandReply.self, from: reply.body)
    }

    static func booking(_ reply: CommandReply) throws -> Booking {
        guard case .booking(let b) = reply else { throw CocoaError(.coderInvalidValue, userInfo: [NSDebugDescriptionErrorKey: "\(reply)"]) }
        return b
    }

    static func person(_ n: Int) -> String {
        #"{"name": "Person \#(n)", "email": "p\#(n)@example.com", "phone": "0170 123456\#(n)"}"#
    }

    @Test func createUpdateRescheduleCancelTellEveryoneConcernedOnce() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.handlerBinary.path), "build booking-handler first")
        let gateway = try await FaultGateway.start(notices: true)
        // The harness's 500 ms gateway timeout is for tests of timeouts; here
        // a call that outlasts it on a loaded machine (tests in parallel)
        // is tried again although the gateway already told the person: the
        // documented timeout window, which would fail "nobody told twice".
        let h = try await PassHarness.start(gateway: gateway, timeout: .seconds(5), name: "handler-notices", notify: true)
        let dataDirectory = try TemporaryDirectory("handler")
        defer { dataDirectory.remove() }
        let process = try await Self.launchHandler(h, dataDirectory: dataDirectory)
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }

        let date = localDate(daysFromNow: 3)
        _ = try await Self.command(h, .registerRoom, #"{"name": "Berlin", "capacity": 8, "timeZone": "Europe/Berlin", "opens": "07:00", "closes": "19:00"}"#)
        let v1 = try Self.booking(try await Self.command(h, .createBooking, #"""
            {"room": "Berlin", "date": "\#(date)", "start": "09:00", "end": "10:30", "title": "Review",
             "attendees": [\#(Self.person(0)), \#(Self.person(1)), \#(Self.person(2))]}
            """#))
        #expect(v1.status == .confirmed)
        try await h.waitDelivered(v1, indexes: [0, 1, 2])

        // P1 removed, P3 added, order changed.
        let v2 = try Self.booking(try await Self.command(h, .updateBooking, #"""
            {"bookingId": "\#(v1.id)", "attendees": [\#(Self.person(2)), \#(Self.person(3)), \#(Self.person(0))]}
            """#))
        try await h.waitNotices(v2, .removed, count: 1)
        try await h.waitDelivered(v2, indexes: [1])

        let v3 = try Self.booking(try await Self.command(h, .rescheduleBooking, #"""
            {"bookingId": "\#(v1.id)", "date": "\#(date)", "start": "13:00", "end": "14:30"}
            """#))
        try await h.waitNotices(v3, .rescheduled, count: 3)
        try await h.waitDelivered(v3, indexes: [0, 1, 2])

        let v4 = try Self.booking(try await Self.command(h, .cancelBooking, #"{"bookingId": "\#(v1.id)", "reason": "moved"}"#))
        try await h.waitNotices(v4, .cancelled, count: 3)

        let s = gateway.state.current
        let told = Set(s.noticesSent.map { "\($0.version):\($0.kind.rawValue):\($0.email)" })
        #expect(s.noticesSent.count == told.count, "nobody told twice: \(s.noticesSent)")
        #expect(told == ["2:removed:p1@example.com",
                         "3:rescheduled:p2@example.com", "3:rescheduled:p3@example.com", "3:rescheduled:p0@example.com",
                         "4:cancelled:p2@example.com", "4:cancelled:p3@example.com", "4:cancelled:p0@example.com"])
        let passes = s.sent.map { "\($0.version):\($0.index)" }
        #expect(passes.sorted() == ["1:0", "1:1", "1:2", "2:1", "3:0", "3:1", "3:2"], "\(passes)")
        let moved = try #require(s.noticeRequests.first { $0.kind == .rescheduled })
        #expect(moved.previous?.timeStart == SendPassRequestBuilder.request(for: v1, attendeeIndexes: []).booking.timeStart)
        await h.stop()
    }

    /// Contract v1.2: a `room.close` cancels the bookings it covers, and
    /// the attendees who had a pass get the `cancelled` notice through the
    /// gateway exactly as for any cancellation; the booking outside the
    /// closure is left alone.
    @Test func aClosureTellsEveryAttendeeWithAPassThatTheirBookingIsCancelled() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.handlerBinary.path), "build booking-handler first")
        let gateway = try await FaultGateway.start(notices: true)
        let h = try await PassHarness.start(gateway: gateway, timeout: .seconds(5), name: "closure-notices", notify: true)
        let dataDirectory = try TemporaryDirectory("handler")
        defer { dataDirectory.remove() }
        let process = try await Self.launchHandler(h, dataDirectory: dataDirectory)
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }

        let date = localDate(daysFromNow: 3), after = localDate(daysFromNow: 4)
        _ = try await Self.command(h, .registerRoom, #"{"name": "Berlin", "capacity": 8, "timeZone": "Europe/Berlin", "opens": "07:00", "closes": "19:00"}"#)
        let covered = try Self.booking(try await Self.command(h, .createBooking, #"""
            {"room": "Berlin", "date": "\#(date)", "start": "09:00", "end": "10:30", "title": "Review",
             "attendees": [\#(Self.person(0)), \#(Self.person(1))]}
            """#))
        let outside = try Self.booking(try await Self.command(h, .createBooking, #"""
            {"room": "Berlin", "date": "\#(after)", "start": "09:00", "end": "10:30", "title": "Planning",
             "attendees": [\#(Self.person(2))]}
            """#))
        try await h.waitDelivered(covered, indexes: [0, 1])
        try await h.waitDelivered(outside, indexes: [0])

        let closed = try await Self.command(h, .closeRoom, #"{"room": "Berlin", "from": "\#(date)", "to": "\#(after)", "reason": "flooding"}"#)
        guard case .closure(let reply) = closed, let cancelled = reply.cancelled?.first else {
            Issue.record("room.close: \(closed)"); return await h.stop()
        }
        #expect(reply.cancelled?.count == 1 && cancelled.id == covered.id && cancelled.version == 2)
        var v2 = covered
        v2.version = 2
        try await h.waitNotices(v2, .cancelled, count: 2)

        let s = gateway.state.current
        let told = Set(s.noticesSent.map { "\($0.version):\($0.kind.rawValue):\($0.email)" })
        #expect(s.noticesSent.count == told.count, "nobody told twice: \(s.noticesSent)")
        #expect(told == ["2:cancelled:p0@example.com", "2:cancelled:p1@example.com"], "only the covered booking's attendees")
        await h.stop()
    }
}
