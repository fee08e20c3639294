import AMQPClient
import AvailabilityProjector
import BookingContracts
import BrokerObjects
import Foundation
import ServiceLifecycle
import Testing
import TestSupport

/// "Find me a room" over the real broker and HTTP (contract v1.2):
/// `availability.suggest` published to `booking.queries` reaches the
/// projectors' shared queue; two replicas with the same clock and the same
/// bookings answer byte for byte alike over HTTP, and the RPC answer (from
/// whichever replica took it) is that answer; `days` on `GET /rooms` and on
/// `availability.query`; `bookingctl suggest` as a table and as JSON.
@Suite("Suggestions end to end")
struct SuggestEndToEndTests {
    /// A replica whose clock is `now`.
    static func replica(_ h: ProjectorHarness, instance: String, now: Date) async throws
        -> (app: ProjectorApp, port: Int, stop: @Sendable () async -> Void) {
        let logger = testLogger("suggest-\(instance)")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("suggest-\(instance)")).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: h.url, connectionName: "suggest-\(instance)"), logger: logger)
        let port = try freeTCPPort()
        let app = try await ProjectorApp.build(connection: connection, dataDirectory: directory, httpPort: port, logger: logger,
                                               now: { now }, rebuildStallTimeout: .seconds(50),
                                               queues: try ProjectorQueues(instance: instance))
        let (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
        try await withTimeout(60, "replica \(instance) ready") {
            while (try? await httpGet("http://127.0.0.1:\(port)/readyz"))?.status != 200 {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        return (app, port, {
            await group.triggerGracefulShutdown()
            _ = await running.result
            try? FileManager.default.removeItem(atPath: directory)
        })
    }

    func rpc(_ h: ProjectorHarness, key: String, _ body: String) async throws -> [UInt8] {
        var properties = AMQPProperties.persistentJSON(messageID: UUID().uuidString)
        properties.correlationID = UUID().uuidString
        return try await h.client.call(Array(body.utf8), exchange: Topology.bookingQueriesExchange, routingKey: key,
                                       properties: properties, timeout: .seconds(30)).body
    }

    @Test func twoReplicasSuggestAlikeOverRPCAndHTTP() async throws {
        let h = try await ProjectorHarness.start(startProjector: false)
        let date = localDate(daysFromNow: 4)
        // Berlin (8, beamer) is taken 07:00–09:00; München (16, beamer) is free.
        _ = try await h.create(room: "Berlin", date: date, start: "07:00", end: "09:00")
        // One clock for both replicas: the day before, at noon UTC.
        let d = ContractFormat.calendarDate(date)!
        let now = Date(timeIntervalSince1970: TimeInterval(CivilDays.days(year: d.year, month: d.month, day: d.day) * 86_400 - 12 * 3600))
        let a = try await Self.replica(h, instance: "sa", now: now)
        let b = try await Self.replica(h, instance: "sb", now: now)
        for app in [a.app, b.app] { #expect(try await app.store.counts().bookings == 1) }

        let query = "from=\(date)&to=\(LocalClock.adding(days: 1, to: date)!)&durationMinutes=60&minCapacity=6&equipment=beamer&limit=4&stepMinutes=60"
        let answers = try await [httpGet("http://127.0.0.1:\(a.port)/suggest?\(query)"),
                                 httpGet("http://127.0.0.1:\(b.port)/suggest?\(query)")]
        #expect(answers[0].status == 200, "\(answers[0].body)")
        #expect(answers[0].body == answers[1].body, "same model, same now: same answer")
        let http = try SuggestReply.decode(body: Array(answers[0].body.utf8)).get()
        // 07:00: only München (Berlin is booked); 08:00: München (16) before Boardroom (24, opens at
        // 08:00); 09:00: Berlin (8), the smallest.
        #expect(http.map { "\($0.start) \($0.room)" } == ["07:00 München", "08:00 München", "08:00 Boardroom", "09:00 Berlin"],
                "\(http)")
        #expect(http.allSatisfy { $0.date == date && $0.timeZone == "Europe/Berlin" })

        // RPC through booking.queries: one of the two answers, the same suggestions.
        let body = """
            {"from": "\(date)", "to": "\(LocalClock.adding(days: 1, to: date)!)", "durationMinutes": 60, "minCapacity": 6,
             "equipment": ["beamer"], "limit": 4, "stepMinutes": 60}
            """
        for _ in 0..<4 {
            #expect(try SuggestReply.decode(body: try await rpc(h, key: SuggestContract.suggestKey, body)).get() == http)
        }
        // A refused query: the contract's error, field named.
        guard case .failure(let error) = try SuggestReply.decode(
            body: try await rpc(h, key: SuggestContract.suggestKey, #"{"from": "\#(date)", "to": "\#(date)", "durationMinutes": 60}"#)) else {
            Issue.record("to = from was answered"); return
        }
        #expect(error.code == .invalidField && error.field == "to")
        let badHTTP = try await httpGet("http://127.0.0.1:\(a.port)/suggest?from=\(date)&to=\(date)&durationMinutes=61")
        #expect(badHTTP.status == 400 && badHTTP.body.contains("1100"), "\(badHTTP.body)")

        // days on availability.query (RPC through the exchange) and GET /rooms: the same three days.
        let rooms = try ContractJSON.decode(AvailabilityReply.self, from: try await rpc(
            h, key: Topology.availabilityQueryKey, #"{"date": "\#(date)", "name": "berlin", "days": 3}"#))
        let berlin = try #require(rooms.first)
        #expect(berlin.days?.map(\.date) == [date, LocalClock.adding(days: 1, to: date)!, LocalClock.adding(days: 2, to: date)!])
        #expect(berlin.days?.first?.avail == ["09:00 - 19:00"] && berlin.avail == ["09:00 - 19:00"])
        let overHTTP = try await httpGet("http://127.0.0.1:\(b.port)/rooms?date=\(date)&name=berlin&days=3")
        #expect(try ContractJSON.decode(AvailabilityReply.self, from: Data(overHTTP.body.utf8)) == rooms)
        let tooMany = try await httpGet("http://127.0.0.1:\(b.port)/rooms?date=\(date)&days=32")
        #expect(tooMany.status == 400 && tooMany.body.contains("\"days\""), "\(tooMany.body)")

        await a.stop()
        await b.stop()
        await h.stop()
    }

    @Test func bookingctlSuggestPrintsATableAndJSON() async throws {
        let h = try await ProjectorHarness.start()
        let date = localDate(daysFromNow: 6)
        _ = try await h.create(room: "Hamburg", date: date, start: "07:00", end: "12:00")
        try await h.waitForRooms("date=\(date)&name=hamburg", "booking visible") {
            $0.first?.avail == ["12:00 - 19:00"]
        }
        let next = LocalClock.adding(days: 1, to: date)!
        let json = try await RebuildAndPageTests.bookingctl(h, ["suggest", "--from", date, "--to", next, "--duration", "60",
                                                                "--equipment", "tv", "--people", "4", "--limit", "3", "--json"])
        #expect(json.status == 0, "\(json.err)")
        let suggestions = try SuggestReply.decode(body: Array(json.out.utf8)).get()
        // Hamburg is booked until 12:00 Berlin time (11:00Z), New York opens at 07:00 its time (12:00Z or later).
        #expect(!suggestions.isEmpty && suggestions.allSatisfy { $0.room != "Hamburg" || $0.start >= "12:00" }, "\(suggestions)")
        #expect(suggestions.count == 3)
        let table = try await RebuildAndPageTests.bookingctl(h, ["suggest", "--from", date, "--to", next, "--duration", "60",
                                                                 "--name", "hamburg", "--limit", "2"])
        #expect(table.status == 0, "\(table.err)")
        #expect(table.out.contains("DATE") && table.out.contains("\(date)  12:00  13:00  Hamburg"), "\(table.out)")
        let bad = try await RebuildAndPageTests.bookingctl(h, ["suggest", "--from", date, "--to", next, "--duration", "50"])
        #expect(bad.status == 1 && bad.err.contains("error 1100"), "\(bad.err)")
        await h.stop()
    }
}
