import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// bookingctl against a newer booking handler, whose replies carry a
/// booking status this build does not know. Contract v1.1 has clients
/// ignore unknown status values: the command still reads as done, a list
/// leaves such bookings out and says so, and `--json` keeps the reply.
@Suite("bookingctl and a newer handler", .serialized)
struct NewerHandlerTests {
    /// Stands in for a newer booking handler on the shipped topology, as
    /// the shipped `booking-handler` user: answers every command and query
    /// on its queues with `answer(type)`.
    final class NewerHandler: Sendable {
        let connection: AMQPConnection
        let serving: Task<Void, Never>

        init(_ vhost: ShippedVhost, answer: @escaping @Sendable (String) -> String) async throws {
            let connection = try await AMQPConnection.connect(
                configuration: AMQPConfiguration(url: vhost.url("booking-handler"), connectionName: "newer-handler"),
                logger: testLogger("newer-handler"))
            self.connection = connection
            let consumers = [try await connection.consume(queue: Topology.handlerCommandsQueue),
                             try await connection.consume(queue: Topology.bookingQueriesQueue)]
            serving = Task {
                await withTaskGroup(of: Void.self) { group in
                    for consumer in consumers {
                        group.addTask {
                            do {
                                for try await delivery in consumer {
                                    let properties = AMQPProperties(contentType: "application/json",
                                                                    correlationID: delivery.properties.correlationID)
                                    try await connection.publish(Array(answer(delivery.properties.type ?? "").utf8),
                                                                 routingKey: delivery.properties.replyTo ?? "",
                                                                 properties: properties)
                                    try await delivery.ack()
                                }
                            } catch {}
                        }
                    }
                }
            }
        }

        func stop() async {
            serving.cancel()
            await connection.close()
            _ = await serving.value
        }
    }

    static let tentative = """
        {"id":"b-new","room":"Berlin","date":"2030-01-07","start":"09:00","end":"10:00","timeZone":"Europe/Berlin",
         "startsAt":"2030-01-07T08:00:00Z","endsAt":"2030-01-07T09:00:00Z","title":"Review","status":"tentative",
         "attendees":[{"name":"Ada","email":"ada@example.com","phone":"+491701234567"}],"requestedBy":"bookingctl","version":1}
        """
    static let confirmed = tentative.replacingOccurrences(of: #""b-new""#, with: #""b-old""#)
        .replacingOccurrences(of: #""tentative""#, with: #""confirmed""#)

    static func answer(_ type: String) -> String {
        switch type {
        case "booking.list": #"{"ok":true,"bookings":[\#(confirmed),\#(tentative)]}"#
        case "booking.get": #"{"ok":true,"booking":\#(tentative)}"#
        // A cancel by series whose second booking has a status with an
        // escape in it: the terminal gets it inert.
        case "booking.cancel":
            #"{"ok":true,"series":{"id":"s-1","version":2,"cancelled":[\#(confirmed),\#(tentative.replacingOccurrences(of: "tentative", with: "tent\\u001b[2Kative"))],"skipped":[]}}"#
        // A closure that cancelled a booking of a newer status.
        case "room.close":
            #"{"ok":true,"closure":{"id":"c-1","room":"Berlin","from":"2030-01-06T23:00:00Z","to":"2030-01-07T23:00:00Z","reason":"holidays"},"cancelled":[\#(confirmed),\#(tentative)]}"#
        // No booking: not a reply this build can read, newer or not.
        case "booking.confirm": #"{"ok":true}"#
        default: #"{"ok":true,"booking":\#(tentative)}"#
        }
    }

    @Test func aNewerStatusReadsAsDoneAndIsLeftOutOfLists() async throws {
        let vhost = try ShippedBroker.vhost("newer")
        defer { vhost.delete() }
        let handler = try await NewerHandler(vhost) { Self.answer($0) }
        let cli = CLIRunner(url: vhost.url("bookingctl"))
        let book = ["book", "--room", "Berlin", "--date", "2030-01-07", "--start", "09:00", "--end", "10:00",
                    "--title", "Review", "--attendee", "Ada Lovelace,ada@example.com,0170 1234567"]

        let booked = try await cli.run(book)
        #expect(booked.status == 0, "\(booked.stderr)")
        #expect(booked.stdout.contains("booking b-new  tentative"), "\(booked.stdout)")
        #expect(booked.stderr.contains("does not know"), "\(booked.stderr)")

        let bookedJSON = try await cli.run(book + ["--json"])
        #expect(bookedJSON.status == 0, "\(bookedJSON.stderr)")
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(bookedJSON.stdout.utf8)) as? [String: Any])
        #expect((reply["booking"] as? [String: Any])?["status"] as? String == "tentative", "--json keeps the whole reply")
        #expect((reply["booking"] as? [String: Any])?["version"] as? Int == 1)

        let listed = try await cli.run(["bookings", "list", "--from", "2030-01-07", "--to", "2030-01-08", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        guard case .bookings(let views, _) = try ContractJSON.decode(BookingQueryReply.self, from: Data(listed.stdout.utf8)) else {
            Issue.record("not a list: \(listed.stdout)")
            return
        }
        #expect(views.map(\.id) == ["b-old"])
        #expect(listed.stderr.contains("left out 1 booking") && listed.stderr.contains("b-new (tentative)"), "\(listed.stderr)")

        let shown = try await cli.run(["bookings", "show", "b-new"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout.contains("booking b-new  tentative"), "\(shown.stdout)")
        let shownJSON = try await cli.run(["bookings", "show", "b-new", "--json"])
        let one = try #require(try JSONSerialization.jsonObject(with: Data(shownJSON.stdout.utf8)) as? [String: Any])
        #expect((one["booking"] as? [String: Any])?["status"] as? String == "tentative")

        let series = try await cli.run(["cancel", "--series", "s-1"])
        #expect(series.status == 0, "\(series.stderr)")
        #expect(series.stdout.contains("series s-1") && series.stdout.contains("booking b-new  tent\\u001b[2Kative")
                && !series.stdout.contains("\u{1B}"), "\(series.stdout)")

        let closed = try await cli.run(["room", "close", "--room", "Berlin", "--from", "2030-01-07", "--to", "2030-01-08",
                                        "--reason", "holidays"])
        #expect(closed.status == 0, "\(closed.stderr)")
        #expect(closed.stdout.contains("closure c-1") && closed.stdout.contains("  booking b-new  tentative")
                && !closed.stdout.contains("b-old"), "\(closed.stdout)")
        #expect(closed.stderr.contains("does not know"), "\(closed.stderr)")

        let bare = try await cli.run(["confirm", "b-new"])
        #expect(bare.status == 1 && bare.stderr.contains("not a contract reply"), "\(bare.stdout) \(bare.stderr)")
        await handler.stop()
    }

    /// A reply that is not a contract reply at all is still an error.
    @Test func aReplyThatIsNotJSONIsStillAnError() async throws {
        let vhost = try ShippedBroker.vhost("newer")
        defer { vhost.delete() }
        let handler = try await NewerHandler(vhost) { _ in "\u{1B}]52;c;eA==\u{07}not json" }
        let cli = CLIRunner(url: vhost.url("bookingctl"))
        let result = try await cli.run(["cancel", "b-1"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("not a contract reply") && result.stderr.contains("\\u001b"), "\(result.stderr)")
        await handler.stop()
    }
}
