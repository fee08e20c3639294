import AMQPClient
import AvailabilityProjector
import BookingContracts
import Foundation
import PostgresSupport
import ServiceSupport
import TestSupport
import Testing

/// Contract v1.2 closures and the quota through the real broker, on both
/// handler stores: `room.close` cancels what it covers and publishes
/// `room.closed` and the cancellations, new bookings get 1112, the
/// `room.closures` query and bookingctl list them, the projector answers
/// `closed` for a closed day and leaves a partial closure out of the free
/// ranges (also after a rebuild from the handler's replay), `room.reopen`
/// publishes `room.reopened` and frees the time again.
@Suite("Closures end to end", .serialized)
struct ClosureEndToEndTests {
    enum Store: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sqlite, postgres
        var testDescription: String { rawValue }

        func settings() throws -> PostgresSettings? {
            self == .postgres ? try PostgresSettings(url: try TestPostgres.url(schemaPrefix: "closure")) : nil
        }
    }

    /// A queue of the handler's room and booking events, to await them.
    static func eventQueue(_ h: ProjectorHarness) async throws -> AMQPConsumer {
        let queue = uniqueName("closure-events")
        try await h.client.declare([
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: queue, exchange: Topology.eventsExchange, routingKey: "room.#")),
            .binding(QueueBinding(queue: queue, exchange: Topology.eventsExchange, routingKey: "booking.cancelled")),
        ])
        return try await h.client.consume(queue: queue, prefetch: 100)
    }

    /// A queue of what `booking.public` carries about rooms.
    static func publicQueue(_ h: ProjectorHarness) async throws -> AMQPConsumer {
        let queue = uniqueName("closure-public")
        try await h.client.declare([
            .exchange(ExchangeDeclaration(Topology.publicExchange, kind: .topic)),
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: queue, exchange: Topology.publicExchange, routingKey: "room.#")),
        ])
        return try await h.client.consume(queue: queue, prefetch: 100)
    }

    /// Takes events until each of `types` arrived (in any order); returns
    /// the body of each, by type.
    static func collect(_ types: Set<String>, from events: AMQPConsumer) async throws -> [String: [UInt8]] {
        try await withTimeout(60, types.sorted().joined(separator: ", ")) { () async throws -> [String: [UInt8]] in
            var seen: [String: [UInt8]] = [:]
            for try await event in events {
                try await event.ack()
                if types.contains(event.routingKey) { seen[event.routingKey] = event.body }
                if Set(seen.keys) == types { return seen }
            }
            throw HarnessError("the event stream ended before \(types)")
        }
    }

    /// `room.closures` on `booking.queries`.
    static func closures(_ h: ProjectorHarness, _ body: String) async throws -> BookingQueryReply {
        var properties = AMQPProperties.persistentJSON(type: BookingQueryType.closures.rawValue, messageID: UUID().uuidString)
        properties.correlationID = UUID().uuidString
        let reply = try await h.client.call(Array(body.utf8), exchange: Topology.bookingQueriesExchange,
                                            routingKey: BookingQueryType.closures.rawValue, properties: properties,
                                            timeout: .seconds(30))
        return try ContractJSON.decode(BookingQueryReply.self, from: reply.body)
    }

    @Test(arguments: Store.allCases)
    func aClosureCancelsRefusesIsListedProjectedReplayedAndReopened(_ store: Store) async throws {
        let h = try await ProjectorHarness.start(database: try store.settings())
        let events = try await Self.eventQueue(h)
        let publicEvents = try await Self.publicQueue(h)
        let day = localDate(daysFromNow: 4), next = localDate(daysFromNow: 5)
        try await h.waitForRooms("date=\(day)", "rooms") { $0.count == 6 }
        let booked = try await h.create(date: day, start: "09:00", end: "10:30")

        // room.close over the whole day: the booking is cancelled.
        guard case .closure(let reply) = try await h.send(.closeRoom, CloseRoom(room: "Berlin", from: day, to: next, reason: "holidays")) else {
            Issue.record("room.close refused"); return await h.stop()
        }
        #expect(reply.cancelled?.map(\.id) == [booked.id])
        #expect(reply.cancelled?.first?.status == .cancelled)
        let first = try await Self.collect(["booking.cancelled", "room.closed"], from: events)
        let cancelled = try ContractJSON.decode(BookingEvent.self, from: try #require(first["booking.cancelled"]))
        #expect(cancelled.booking.id == booked.id && cancelled.booking.cancelReason == "room closed: holidays"
                && cancelled.previous?.status == .confirmed)
        let closed = try ContractJSON.decode(RoomClosureEvent.self, from: try #require(first["room.closed"]))
        #expect(closed.closure == reply.closure)
        // booking.public carries room.closed too, the same body.
        let publicClosed = try await Self.collect(["room.closed"], from: publicEvents)
        #expect(try ContractJSON.decode(RoomClosureEvent.self, from: try #require(publicClosed["room.closed"])) == closed)

        // New bookings into it: 1112 with the closure.
        let refused = try await h.send(.createBooking, CreateBooking(
            room: "Berlin", date: .calendarDate(day), start: "12:00", end: "13:00", title: "T",
            attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")]))
        #expect(refused.errorValue?.code == .roomClosed && refused.errorValue?.closure == reply.closure)

        // The projector: a closed day reads differently from a full one.
        try await h.waitForRooms("date=\(day)&name=berlin", "Berlin closed") {
            room($0, "Berlin")?.avail == [] && room($0, "Berlin")?.closed == "holidays"
        }
        // A partial closure the next day (12:00–14:00 local): left out of the free ranges.
        let noon = try #require(ContractFormat.instant(date: next, time: "12:00", timeZone: "Europe/Berlin"))
        guard case .closure(let partial) = try await h.send(.closeRoom, CloseRoom(
            room: "Berlin", from: ContractFormat.timestamp(noon), to: ContractFormat.timestamp(noon.addingTimeInterval(7200)),
            reason: "cleaning")) else { Issue.record("partial closure refused"); return await h.stop() }
        _ = try await Self.collect(["room.closed"], from: events)
        try await h.waitForRooms("date=\(next)&name=berlin", "partial closure projected") {
            room($0, "Berlin")?.avail == ["07:00 - 12:00", "14:00 - 19:00"] && room($0, "Berlin")?.closed == nil
        }
        let (_, dayView) = try await httpGet(h.base + "/api/day?date=\(next)&name=berlin")
        #expect(dayView.contains(#""from":"12:00","reason":"cleaning","state":"closed","to":"14:00""#),
                "the page's data names the closure: \(dayView.prefix(800))")

        // room.closures on the handler's query path, and through bookingctl.
        guard case .closures(let listed) = try await Self.closures(h, #"{"room": "Berlin"}"#) else {
            Issue.record("room.closures failed"); return await h.stop()
        }
        #expect(listed == [reply.closure, partial.closure])
        guard case .closures(let window) = try await Self.closures(h, #"{"room": "Berlin", "from": "\#(next)", "to": "\#(localDate(daysFromNow: 6))"}"#) else {
            Issue.record("room.closures failed"); return await h.stop()
        }
        #expect(window == [partial.closure])
        let unknown = try await Self.closures(h, #"{"room": "Atlantis"}"#)
        guard case .error(let error) = unknown else { Issue.record("\(unknown)"); return await h.stop() }
        #expect(error.code == .unknownRoom)
        let cli = try await RebuildAndPageTests.bookingctl(h, ["room", "closures", "--room", "Berlin"])
        #expect(cli.status == 0 && cli.out.contains(reply.closure.id) && cli.out.contains("holidays") && cli.out.contains("cleaning"),
                "\(cli.out)\(cli.err)")

        // The projector rebuilt from the handler's replay keeps both closures.
        let app = try #require(h.projector.withLock { $0 })
        let rebuilt = try await app.rebuilder.rebuild()
        #expect(rebuilt.rooms == 6)
        #expect(room(try await h.rooms("date=\(day)&name=berlin"), "Berlin")?.closed == "holidays")
        #expect(room(try await h.rooms("date=\(next)&name=berlin"), "Berlin")?.avail == ["07:00 - 12:00", "14:00 - 19:00"])

        // room.reopen (through bookingctl): room.reopened, the time is free again; the booking stays cancelled.
        let reopened = try await RebuildAndPageTests.bookingctl(h, ["room", "reopen", "--room", "Berlin", "--closure", partial.closure.id])
        #expect(reopened.status == 0, "\(reopened.out)\(reopened.err)")
        let removed = try ContractJSON.decode(RoomClosureEvent.self,
                                              from: try #require(try await Self.collect(["room.reopened"], from: events)["room.reopened"]))
        #expect(removed.closure == partial.closure)
        try await h.waitForRooms("date=\(next)&name=berlin", "reopened") { room($0, "Berlin")?.avail == ["07:00 - 19:00"] }
        let again = try await RebuildAndPageTests.bookingctl(h, ["room", "reopen", "--room", "Berlin", "--closure", partial.closure.id])
        #expect(again.status != 0 && again.err.contains("2001"), "\(again.out)\(again.err)")

        // bookingctl room close.
        let cliClose = try await RebuildAndPageTests.bookingctl(h, ["room", "close", "--room", "Hamburg", "--from", next, "--to",
                                                                    localDate(daysFromNow: 6), "--reason", "works", "--json"])
        #expect(cliClose.status == 0 && cliClose.out.contains(#""closure""#) && cliClose.out.contains(#""cancelled""#),
                "\(cliClose.out)\(cliClose.err)")
        _ = try await Self.collect(["room.closed"], from: events)

        // The quota over the broker: room.register carries it, room.registered
        // too, and the second active booking of one requester gets 1113.
        let quota = try await h.send(.registerRoom, RegisterRoom(name: "Quota", capacity: 4, maxActiveBookings: 1))
        #expect(quota.roomValue?.maxActiveBookings == 1)
        let registered = try ContractJSON.decode(RoomRegistered.self, from: try #require(try await Self.collect(["room.registered"], from: events)["room.registered"]))
        #expect(registered.room.maxActiveBookings == 1)
        func book(_ start: String, _ end: String) async throws -> CommandReply {
            try await h.send(.createBooking, CreateBooking(
                room: "Quota", date: .calendarDate(day), start: start, end: end, title: "T",
                attendees: [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567")]),
                userID: h.client.user)
        }
        #expect(try await book("09:00", "10:00").bookingValue != nil)
        let over = try await book("11:00", "12:00")
        #expect(over.errorValue?.code == .quotaExceeded && over.errorValue?.limit == 1, "\(over)")
        events.stop()
        publicEvents.stop()
        await h.stop()
    }

    /// The time-bar page in a real headless browser: a partial closure is a
    /// greyed bar with its reason written on it, a whole closed day says
    /// why instead of "fully booked".
    @Test func thePageShowsClosuresInAHeadlessBrowser() async throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let chromium else {
            Issue.record("Debian's chromium is not installed: run scripts/install-deps.sh")
            return
        }
        let h = try await ProjectorHarness.start()
        let day = localDate(daysFromNow: 3)
        try await h.waitForRooms("date=\(day)", "rooms") { $0.count == 6 }
        _ = try await h.create(date: day, start: "09:00", end: "10:00")
        let noon = try #require(ContractFormat.instant(date: day, time: "12:00", timeZone: "Europe/Berlin"))
        #expect(try await h.send(.closeRoom, CloseRoom(room: "Berlin", from: ContractFormat.timestamp(noon),
                                                       to: ContractFormat.timestamp(noon.addingTimeInterval(3 * 3600)),
                                                       reason: "floor polishing")).isOK)
        #expect(try await h.send(.closeRoom, CloseRoom(room: "Hamburg", from: day, to: localDate(daysFromNow: 4),
                                                       reason: "company holiday")).isOK)
        try await h.waitForRooms("date=\(day)", "closures projected") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "10:00 - 12:00", "15:00 - 19:00"]
                && room($0, "Hamburg")?.closed == "company holiday"
        }
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("chromium")).path
        defer { try? FileManager.default.removeItem(atPath: profile) }
        let common = ["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-dev-shm-usage",
                      "--user-data-dir=\(profile)", "--virtual-time-budget=5000"]
        let url = h.base + "/?date=\(day)"
        let dump = try await RebuildAndPageTests.run(chromium, common + ["--dump-dom", url], timeout: 60)
        #expect(dump.status == 0, "chromium: \(dump.err.suffix(2000))")
        let dom = dump.out
        #expect(dom.contains(#"data-loaded="true""#), "page did not finish drawing:\n\(dom.prefix(3000))")
        // Berlin: the closure is its own greyed segment, its reason on the bar and in its title.
        #expect(dom.contains(#"class="seg closed closure""#), "\(dom.prefix(4000))")
        #expect(dom.contains(#"data-room="Berlin" data-from="12:00" data-to="15:00" data-state="closed" data-reason="floor polishing""#),
                "\(dom.prefix(4000))")
        #expect(dom.contains(#"<span class="reason">floor polishing</span>"#))
        #expect(dom.contains(#"title="12:00–15:00 floor polishing""#))
        // Hamburg: closed all day, the reason instead of "fully booked".
        #expect(dom.contains(#"data-closed="company holiday""#))
        #expect(dom.contains(#"<div class="meta">company holiday</div>"#))
        #expect(dom.contains(#"data-room="Hamburg" data-from="07:00" data-to="19:00" data-state="closed" data-reason="company holiday""#))

        let artifacts = ProjectorHarness.repositoryRoot.appendingPathComponent("test-artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        let path = artifacts.appendingPathComponent("projector-page-closures.png").path
        try? FileManager.default.removeItem(atPath: path)
        let shot = try await RebuildAndPageTests.run(chromium, common + ["--hide-scrollbars", "--window-size=1280,900",
                                                                         "--screenshot=\(path)", url], timeout: 60)
        #expect(shot.status == 0, "chromium: \(shot.err.suffix(2000))")
        await h.stop()
    }
}
