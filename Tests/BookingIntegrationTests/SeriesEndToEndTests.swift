import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// Recurring bookings (contract v1.1) through the broker: one command, one
/// reply, one `booking.created`/`booking.confirmed` pair per occurrence in
/// order; and `"reject"` all or nothing against conflicting commands that
/// two handler processes run at the same time.
@Suite("Recurring bookings end to end")
struct SeriesEndToEndTests {
    static func seriesJSON(room: String = "Berlin", date: String, start: String, end: String, recurrence: String,
                           onConflict: String = "reject") -> String {
        #"""
        {"room":"\#(room)","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"Weekly sync",
         "attendees":[{"name":"Ada Lovelace","email":"ada@example.com","phone":"0170 1234567"},
                      {"name":"Grace Hopper","email":"grace@example.com","phone":"+1 212 555 0100"}],
         "recurrence":\#(recurrence),"onConflict":"\#(onConflict)"}
        """#
    }

    @Test func oneCommandOneReplyAndTheEventsOfEveryOccurrenceInOrder() async throws {
        let h = try await HandlerHarness.start()
        defer { Task { await h.stop() } }
        let first = localDate(daysFromNow: 2)
        let messageID = UUID().uuidString
        let json = Self.seriesJSON(date: first, start: "11:00", end: "11:30", recurrence: #"{"frequency":"weekly","count":3}"#)
        let reply = try await h.send("booking.create", json: json, messageID: messageID)
        guard case .series(let series) = reply else { Issue.record("\(reply)"); return }
        #expect(series.bookings.count == 3)
        let events = try await h.nextEvents(6 + 6).dropFirst(6)  // 6 room.registered from ROOMS_FILE first
        #expect(events.map(\.type) == Array(repeating: ["booking.created", "booking.confirmed"], count: 3).flatMap { $0 })
        let carried = try events.map { try ContractJSON.decode(BookingEvent.self, from: Data($0.body)).booking }
        #expect(carried.map(\.id) == series.bookings.flatMap { [$0.id, $0.id] })
        #expect(carried.map { $0.series?.index } == [0, 0, 1, 1, 2, 2])
        #expect(carried.allSatisfy { $0.series?.id == series.id && $0.series?.count == 3 && $0.series?.version == 1 })

        // The same message again: the stored reply, no second series, no events.
        let again = try await h.send("booking.create", json: json, messageID: messageID)
        #expect(again == reply)
        let probe = try await h.send("booking.create", json: createJSON(room: "Hamburg", date: first, start: "07:00", end: "07:15"))
        let next = try await h.nextEvents(2)
        #expect(next.map(\.type) == ["booking.created", "booking.confirmed"])
        #expect(try ContractJSON.decode(BookingEvent.self, from: Data(next[0].body)).booking.id == probe.booking?.id,
                "the next events are the probe's: the repeat published nothing")
    }

    /// Each round races a weekly series against a single booking of one of
    /// its dates, both published at once to two handler processes sharing
    /// one database: exactly one wins, and the loser leaves nothing behind.
    @Test func rejectIsAllOrNothingAgainstAConcurrentCommandInAnotherProcess() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashRecoveryTests.binary.path), "build booking-handler first")
        let url = try TestBroker.isolatedURL("series-race")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("series-race")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let log = URL(fileURLWithPath: dataDirectory).appendingPathComponent("handlers.log")
        let ports = [try freeTCPPort(), try freeTCPPort()]
        let processes = try ports.map {
            try CrashRecoveryTests.launch(url: url, dataDirectory: dataDirectory, log: log, environment: ["HTTP_PORT": "\($0)"])
        }
        defer { for p in processes where p.isRunning { p.terminate(); p.waitUntilExit() } }
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "series-race"),
                                                      logger: testLogger("series-race"))
        defer { Task { await client.close() } }
        do {
            try await withTimeout(120, "two handler consumers") {
                while (try? await client.queueInfo(Topology.handlerCommandsQueue).consumerCount) != 2 {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
        } catch {
            Issue.record("handlers did not start: \(String(decoding: (try? Data(contentsOf: log)) ?? Data(), as: UTF8.self).suffix(3000))")
            throw error
        }

        func send(_ json: String) async throws -> CommandReply {
            let properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
            let reply = try await client.call(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: "booking.create",
                                              properties: properties, timeout: .seconds(60))
            return try ContractJSON.decode(CommandReply.self, from: reply.body)
        }

        let first = localDate(daysFromNow: 2)
        let occurrences = 8
        var seriesWon = 0, singleWon = 0
        // One time slot per round, so rounds never conflict with each other.
        for round in 0..<24 {
            let start = String(format: "%02d:%02d", 7 + round / 2, round % 2 * 30)
            let end = String(format: "%02d:%02d", 7 + round / 2, round % 2 * 30 + 15)
            let clashDate = localDate(daysFromNow: 2 + 7 * (1 + round % (occurrences - 1)))
            let seriesBody = Self.seriesJSON(room: "Hamburg", date: first, start: start, end: end,
                                             recurrence: #"{"frequency":"weekly","count":\#(occurrences)}"#)
            async let seriesReply = send(seriesBody)
            async let singleReply = send(createJSON(room: "Hamburg", date: clashDate, start: start, end: end))
            let (s, one) = try await (seriesReply, singleReply)
            switch (s, one) {
            case (.series(let series), .error(let error)):
                seriesWon += 1
                #expect(series.bookings.count == occurrences && series.skipped.isEmpty)
                #expect(error.code == .overlap)
                let clashing = try #require(series.bookings.first { $0.date == clashDate })
                #expect(error.conflicts == [clashing.id])
            case (.error(let error), .booking(let single)):
                singleWon += 1
                #expect(error.code == .overlap)
                #expect(error.conflictDates == [clashDate] && error.conflicts == [single.id], "\(error)")
            default:
                Issue.record("round \(round): both or neither booked: \(s) / \(one)")
            }
        }

        // What the database holds: per slot, either the whole series or the
        // single booking, never a part of the series.
        var properties = AMQPProperties.persistentJSON(type: "booking.list", messageID: UUID().uuidString)
        properties.userID = url.user
        let query = ListBookings(from: .date(first), to: .date(localDate(daysFromNow: 2 + 7 * occurrences)), room: "Hamburg",
                                 status: ["confirmed"], limit: 1000)
        let listReply = try await client.call([UInt8](try ContractJSON.encode(query)), exchange: Topology.bookingQueriesExchange,
                                              routingKey: "booking.list", properties: properties, timeout: .seconds(60))
        guard case .bookings(let stored, nil) = try ContractJSON.decode(BookingQueryReply.self, from: listReply.body) else {
            Issue.record("no list"); return
        }
        let perSlot = Dictionary(grouping: stored, by: \.start).mapValues(\.count)
        #expect(perSlot.count == 24)
        #expect(perSlot.values.filter { $0 == occurrences }.count == seriesWon)
        #expect(perSlot.values.filter { $0 == 1 }.count == singleWon)
        #expect(stored.filter { $0.series != nil }.count == seriesWon * occurrences)

        // Both processes ran booking.create commands.
        for port in ports {
            let metrics = try await httpGet("http://127.0.0.1:\(port)/metrics").body
            let creates = metrics.split(separator: "\n").filter { $0.hasPrefix("booking_commands_total") && $0.contains("booking.create") }
                .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
            #expect(creates > 0, "handler on port \(port) ran no booking.create")
        }
        print("series race: the series won \(seriesWon) rounds, the single booking \(singleWon)")
    }
}
