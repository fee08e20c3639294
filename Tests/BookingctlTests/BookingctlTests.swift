import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// bookingctl as users run it: a real process against a real handler and broker.
@Suite("bookingctl", .serialized)
struct BookingctlTests {
    static let ada = "Ada Lovelace,ada@example.com,0170 1234567"

    func reply(_ result: CLIRunner.Result) throws -> CommandReply {
        try ContractJSON.decode(CommandReply.self, from: Data(result.stdout.utf8))
    }

    @Test func bookConflictConfirmRescheduleCancel() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let date = localDate(daysFromNow: 2)

        // book → exit 0, the booking in the reply; attendee phone normalised.
        let booked = try await cli.run(["book", "--room", "Berlin", "--date", date, "--start", "09:00", "--end", "10:00",
                                        "--title", "Review", "--attendee", Self.ada, "--json"])
        #expect(booked.status == 0, "\(booked.stderr)")
        let booking = try #require(try reply(booked).bookingValue)
        #expect(booking.status == .confirmed && booking.attendees.first?.phone == "+491701234567")
        #expect(booking.requestedBy == handler.url.user, "user_id is the broker login")

        // A conflicting booking → exit 1 with the code and the conflicting id on stderr.
        let clash = try await cli.run(["book", "--room", "Berlin", "--date", date, "--start", "09:30", "--end", "10:30",
                                       "--title", "Clash", "--attendee", Self.ada])
        #expect(clash.status == 1)
        #expect(clash.stderr.contains("error 2000") && clash.stderr.contains(booking.id), "\(clash.stderr)")
        #expect(clash.stdout.isEmpty)

        // confirm of a confirmed booking → 2002 in the JSON reply, exit 1.
        let confirm = try await cli.run(["confirm", booking.id, "--json"])
        #expect(confirm.status == 1)
        #expect(try reply(confirm).errorValue?.code == .statusChangeNotAllowed)

        // reschedule → version 2 at the new time; human output names it.
        let moved = try await cli.run(["reschedule", booking.id, "--date", date, "--start", "14:00", "--end", "15:00"])
        #expect(moved.status == 0, "\(moved.stderr)")
        #expect(moved.stdout.contains("version 2") && moved.stdout.contains("14:00–15:00"), "\(moved.stdout)")

        // cancel with a reason → cancelled, reason kept.
        let cancelled = try await cli.run(["cancel", booking.id, "--reason", "moved online", "--json"])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        let after = try #require(try reply(cancelled).bookingValue)
        #expect(after.status == .cancelled && after.cancelReason == "moved online" && after.version == 3)

        // unknown booking → 2001.
        let missing = try await cli.run(["cancel", "no-such-booking"])
        #expect(missing.status == 1 && missing.stderr.contains("error 2001"), "\(missing.stderr)")
    }

    /// v1.1: `bookings list` pages through `booking.list` (one page and its
    /// cursor, or `--all`), `bookings show` reads one booking.
    @Test func bookingsListAndShow() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let date = localDate(daysFromNow: 2)
        var ids: [String] = []
        for hour in 9..<12 {
            let booked = try await cli.run(["book", "--room", "Hamburg", "--date", date, "--start", String(format: "%02d:00", hour),
                                            "--end", String(format: "%02d:30", hour), "--title", "Standup \(hour)",
                                            "--attendee", Self.ada, "--json"])
            ids.append(try #require(try reply(booked).bookingValue).id)
        }
        let window = ["--from", date, "--to", localDate(daysFromNow: 3), "--room", "Hamburg"]
        let onePage = try await cli.run(["bookings", "list"] + window + ["--limit", "2"])
        #expect(onePage.status == 0, "\(onePage.stderr)")
        #expect(onePage.stdout.contains("Standup 9") && onePage.stdout.contains("Standup 10") && !onePage.stdout.contains("Standup 11"),
                "\(onePage.stdout)")
        #expect(onePage.stdout.contains("more: --cursor "))
        let all = try await cli.run(["bookings", "list"] + window + ["--limit", "2", "--all", "--json"])
        #expect(all.status == 0, "\(all.stderr)")
        guard case .bookings(let listed, let next) = try ContractJSON.decode(BookingQueryReply.self, from: Data(all.stdout.utf8)) else {
            Issue.record("not a list: \(all.stdout)"); return
        }
        #expect(listed.map(\.id) == ids && next == nil)
        let shown = try await cli.run(["bookings", "show", ids[0]])
        #expect(shown.status == 0 && shown.stdout.contains("<ada@example.com>") && shown.stdout.contains("Standup 9"), "\(shown.stdout)")
        let missing = try await cli.run(["bookings", "show", "no-such-booking"])
        #expect(missing.status == 1 && missing.stderr.contains("error 2001"), "\(missing.stderr)")
        let bad = try await cli.run(["bookings", "list", "--from", "someday", "--to", date])
        #expect(bad.status == 64 && bad.stderr.contains("--from"), "\(bad.stderr)")
    }

    /// v1.2: `book --hold` holds a slot until `confirm`; `book --waitlist`
    /// waits for a taken one, `bookings list --status waitlisted` shows the
    /// waiter with its position, and cancelling the hold promotes it.
    @Test func holdConfirmWaitlistAndPromotion() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let date = localDate(daysFromNow: 2)
        let slot = ["--room", "Berlin", "--date", date, "--start", "15:00", "--end", "16:00", "--attendee", Self.ada]
        let held = try await cli.run(["book", "--title", "Hold"] + slot + ["--hold", "20"])
        #expect(held.status == 0 && held.stdout.contains("held") && held.stdout.contains("held until"), "\(held.stdout)\(held.stderr)")
        let id = try #require(held.stdout.split(separator: " ").dropFirst().first.map(String.init))
        let waiting = try await cli.run(["book", "--title", "Wait"] + slot + ["--waitlist", "--json"])
        let waiter = try #require(try reply(waiting).bookingValue, "\(waiting.stdout)\(waiting.stderr)")
        #expect(waiter.status == .waitlisted && waiter.waitlist?.position == 1)
        let listed = try await cli.run(["bookings", "list", "--from", date, "--to", localDate(daysFromNow: 3), "--status", "waitlisted"])
        #expect(listed.status == 0 && listed.stdout.contains("waitlisted #1") && listed.stdout.contains(waiter.id), "\(listed.stdout)")
        let both = try await cli.run(["book", "--title", "x", "--hold", "5", "--waitlist"] + slot)
        #expect(both.status == 64, "\(both.stderr)")

        let confirmed = try await cli.run(["confirm", id, "--json"])
        #expect(try reply(confirmed).bookingValue?.status == .confirmed, "\(confirmed.stdout)\(confirmed.stderr)")
        #expect(try await cli.run(["cancel", id]).status == 0)
        let shown = try await cli.run(["bookings", "show", waiter.id, "--json"])
        guard case .booking(let view) = try ContractJSON.decode(BookingQueryReply.self, from: Data(shown.stdout.utf8)) else {
            Issue.record("\(shown.stdout)"); return
        }
        #expect(view.status == .confirmed && view.version == 2, "promoted when the hold was cancelled")
    }

    /// v1.1: `book --repeat` books a series, `bookings list --series-id`
    /// lists it, `cancel --series --from` cancels its tail.
    @Test func seriesBookListAndCancelFromADate() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let first = localDate(daysFromNow: 3)
        let booked = try await cli.run(["book", "--room", "Hamburg", "--date", first, "--start", "08:00", "--end", "08:30",
                                        "--title", "Stand-up", "--attendee", Self.ada, "--repeat", "weekly", "--count", "4"])
        #expect(booked.status == 0, "\(booked.stderr)")
        #expect(booked.stdout.contains("4 booked, 0 skipped"), "\(booked.stdout)")
        let seriesId = try #require(booked.stdout.split(separator: " ").dropFirst().first.map(String.init))
        let dates = (0..<4).map { localDate(daysFromNow: 3 + 7 * $0) }
        for date in dates { #expect(booked.stdout.contains(date), "\(date) in \(booked.stdout)") }

        // The same week again refuses as a whole, naming every conflicting date.
        let again = try await cli.run(["book", "--room", "Hamburg", "--date", first, "--start", "08:15", "--end", "08:45",
                                       "--title", "Clash", "--attendee", Self.ada, "--repeat", "weekly", "--until", dates[3]])
        #expect(again.status == 1 && again.stderr.contains("error 2000"), "\(again.stderr)")
        #expect(again.stderr.contains("conflicting dates: " + dates.joined(separator: ", ")), "\(again.stderr)")

        let listed = try await cli.run(["bookings", "list", "--from", first, "--to", localDate(daysFromNow: 30),
                                        "--series-id", seriesId, "--json"])
        guard case .bookings(let occurrences, _) = try ContractJSON.decode(BookingQueryReply.self, from: Data(listed.stdout.utf8)) else {
            Issue.record("not a list: \(listed.stdout) \(listed.stderr)"); return
        }
        #expect(occurrences.map(\.date) == dates)
        #expect(occurrences.map { $0.series?.index } == [0, 1, 2, 3])

        let cancelled = try await cli.run(["cancel", "--series", seriesId, "--from", dates[2], "--reason", "done", "--json"])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        guard case .seriesCancelled(let c) = try reply(cancelled) else { Issue.record("\(cancelled.stdout)"); return }
        #expect(c.cancelled.map(\.date) == Array(dates[2...]) && c.version == 2)

        let usage = try await cli.run(["cancel", "some-id", "--series", seriesId])
        #expect(usage.status == 64, "\(usage.stderr)")
        let noUntil = try await cli.run(["book", "--room", "Hamburg", "--date", first, "--start", "08:00", "--end", "08:30",
                                         "--title", "x", "--attendee", Self.ada, "--repeat", "weekly"])
        #expect(noUntil.status == 64 && noUntil.stderr.contains("--until"), "\(noUntil.stderr)")
    }

    @Test func sameMessageIDBooksOnce() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let arguments = ["book", "--room", "Berlin", "--date", localDate(daysFromNow: 3), "--start", "11:00",
                         "--end", "11:15", "--title", "Once", "--attendee", Self.ada, "--message-id", "ctl-once-1", "--json"]
        let first = try await cli.run(arguments)
        let second = try await cli.run(arguments)
        #expect(first.status == 0 && second.status == 0, "\(first.stderr) \(second.stderr)")
        let a = try #require(try reply(first).bookingValue), b = try #require(try reply(second).bookingValue)
        #expect(a.id == b.id, "the repeat gets the stored reply, not a second booking")
    }

    @Test func roomRegisterFromOptionsAndFromBody() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let registered = try await cli.run(["room", "register", "--name", "Kiel", "--capacity", "2",
                                            "--equipment", "tv, whiteboard", "--requires-approval", "--json"])
        #expect(registered.status == 0, "\(registered.stderr)")
        guard case .room(let room) = try reply(registered) else { Issue.record("not a room reply"); return }
        #expect(room.name == "Kiel" && room.capacity == 2 && room.equipment == ["tv", "whiteboard"] && room.requiresApproval)

        // The room is usable, and bookings there start pending.
        let booked = try await cli.run(["book", "--room", "Kiel", "--date", localDate(daysFromNow: 2), "--start", "08:00",
                                        "--end", "09:00", "--title", "Small", "--attendee", Self.ada, "--json"])
        #expect(try reply(booked).bookingValue?.status == .pending)

        // --body - reads the contract body from stdin.
        let body = #"{"name": "Lübeck", "capacity": 4, "timeZone": "Europe/Berlin", "opens": "08:00", "closes": "18:00"}"#
        let fromStdin = try await cli.run(["room", "register", "--body", "-"], stdin: body)
        #expect(fromStdin.status == 0, "\(fromStdin.stderr)")
        #expect(fromStdin.stdout.contains("room Lübeck") && fromStdin.stdout.contains("08:00–18:00"), "\(fromStdin.stdout)")
    }

    /// v1.1: a room that needs check-in from the options, and `checkin`
    /// reaching the handler (too early here: the contract's 2005).
    @Test func checkinRoomAndCheckinCommand() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let cli = CLIRunner(url: handler.url)
        let registered = try await cli.run(["room", "register", "--name", "Desk", "--capacity", "2",
                                            "--auto-release-minutes", "10", "--json"])
        guard case .room(let room) = try reply(registered) else { Issue.record("not a room reply: \(registered.stderr)"); return }
        #expect(room.autoReleaseMinutes == 10)
        let booked = try await cli.run(["book", "--room", "Desk", "--date", localDate(daysFromNow: 2), "--start", "08:00",
                                        "--end", "09:00", "--title", "Small", "--attendee", Self.ada, "--json"])
        let booking = try #require(try reply(booked).bookingValue)
        let early = try await cli.run(["checkin", booking.id])
        #expect(early.status == 1)
        #expect(early.stderr.contains("error 2005"), "\(early.stderr)")
    }

    @Test func invalidRoomIsAnErrorReply() async throws {
        let handler = try await Handler()
        defer { Task { await handler.stop() } }
        let result = try await CLIRunner(url: handler.url).run(["room", "register", "--name", "Zero", "--capacity", "0"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("error 1100"), "\(result.stderr)")
    }

    @Test func badUsageIsRefusedBeforeAnythingIsSent() async throws {
        let cli = CLIRunner(url: try TestBroker.url())
        let noAttendee = try await cli.run(["book", "--room", "Berlin", "--date", "today", "--start", "09:00",
                                            "--end", "10:00", "--title", "x"])
        #expect(noAttendee.status == 64 && noAttendee.stderr.contains("--attendee"), "\(noAttendee.stderr)")
        let badAttendee = try await cli.run(["book", "--room", "B", "--date", "today", "--start", "09:00", "--end", "10:00",
                                             "--title", "x", "--attendee", "only-a-name"])
        #expect(badAttendee.status == 64 && badAttendee.stderr.contains("NAME,EMAIL,PHONE"))
        let badDate = try await cli.run(["rooms", "--date", "tomorrow-ish"])
        #expect(badDate.status == 64 && badDate.stderr.contains("--date"))
        let noSuchDay = try await cli.run(["book", "--room", "B", "--date", "2027-02-30", "--start", "09:00", "--end", "10:00",
                                           "--title", "x", "--attendee", "Ada,ada@example.com,0170 1234567"])
        #expect(noSuchDay.status == 64 && noSuchDay.stderr.contains("--date"), "\(noSuchDay.stderr)")
        // Seconds that would trap when turned into milliseconds.
        for (args, option) in [(["projector", "rebuild", "--wait", "inf"], "--wait"), (["projector", "rebuild", "--wait", "1e20"], "--wait"),
                               (["rooms", "--timeout", "nan"], "--timeout"), (["rooms", "--timeout", "-1"], "--timeout")] {
            let result = try await cli.run(args)
            #expect(result.status == 64 && result.stderr.contains(option), "\(args): \(result.status) \(result.stderr)")
        }
    }

    @Test func unreachableBrokerAndMissingTopologyHaveTheirOwnExitStatus() async throws {
        // Nothing listens on the port → 69, one line, password redacted.
        var dead = try TestBroker.url()
        dead.port = try freeTCPPort()
        let unreachable = try await CLIRunner(url: dead).run(["confirm", "x", "--timeout", "1"])
        #expect(unreachable.status == 69)
        #expect(unreachable.stderr.contains("cannot connect") && !unreachable.stderr.contains(":\(dead.password)@"),
                "\(unreachable.stderr)")

        // A vhost without the contract's topology: the command is unroutable → 68.
        let empty = try TestBroker.isolatedURL("ctl-empty")
        defer { TestBroker.deleteVhost(empty.vhost) }
        let unroutable = try await CLIRunner(url: empty).run(["confirm", "x"])
        #expect(unroutable.status == 68 && unroutable.stderr.contains("topology declare"), "\(unroutable.stderr)")
    }

    /// A command nobody answered in time stays queued and runs when the
    /// handler comes: bookingctl names its id, and repeating with it books
    /// once. A publish the broker refuses is not "unavailable" (69): 77.
    @Test func anUnansweredCommandNamesItsIdAndARefusedOneHasItsOwnStatus() async throws {
        let url = try TestBroker.isolatedURL("ctl-late")
        defer { TestBroker.deleteVhost(url.vhost) }
        let cli = CLIRunner(url: url)
        #expect(try await cli.run(["topology", "declare"]).status == 0)
        let date = localDate(daysFromNow: 4)
        let window = ["--from", date, "--to", localDate(daysFromNow: 5), "--room", "Berlin", "--json"]
        let book = ["book", "--room", "Berlin", "--date", date, "--start", "09:00", "--end", "10:00",
                    "--title", "Late", "--attendee", Self.ada]
        let late = try await cli.run(book + ["--timeout", "1"])
        #expect(late.status == 69, "\(late.stderr)")
        let id = try #require(late.stderr.firstMatch(of: /--message-id (\S+)/).map { String($0.1) }, "\(late.stderr)")

        let handler = try await Handler(url: url)
        defer { Task { await handler.stop() } }
        let again = try await cli.run(book + ["--message-id", id, "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        let listed = try await cli.run(["bookings", "list"] + window)
        guard case .bookings(let bookings, _) = try ContractJSON.decode(BookingQueryReply.self, from: Data(listed.stdout.utf8)) else {
            Issue.record("not a list: \(listed.stdout)"); return
        }
        let againID = try reply(again).bookingValue?.id
        #expect(bookings.count == 1 && bookings.first?.id == againID,
                "the queued command and its repeat booked once")

        var reader = try TestBroker.addUser("ctl-reader-\(UUID().uuidString.prefix(6))", to: url)
        try TestBroker.ctl(["set_permissions", "-p", url.vhost, reader.user, ".*", "^$", ".*"])
        reader.vhost = url.vhost
        let refused = try await CLIRunner(url: reader).run(["confirm", "x", "--timeout", "5"])
        #expect(refused.status == 77 && refused.stderr.contains("refused") && refused.stderr.contains(reader.user),
                "\(refused.status) \(refused.stderr)")
    }

    @Test func topologyDeclareCreatesEveryContractQueue() async throws {
        let url = try TestBroker.isolatedURL("ctl-topo")
        defer { TestBroker.deleteVhost(url.vhost) }
        let result = try await CLIRunner(url: url).run(["topology", "declare", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: url, connectionName: "probe"), logger: testLogger("probe"))
        for queue in Topology.queues {
            #expect((try? await connection.queueInfo(queue.name)) != nil, "\(queue.name) declared")
        }
        await connection.close()
        // Idempotent: a second run succeeds too.
        #expect(try await CLIRunner(url: url).run(["topology", "declare"]).status == 0)
    }

    @Test(arguments: ["room register", "book", "confirm", "reject", "checkin", "cancel", "reschedule", "update", "rooms", "bookings list", "bookings show", "topology declare",
                      "topology upgrade"])
    func helpExplainsWithAnExample(command: String) async throws {
        let result = try await CLIRunner(url: try TestBroker.url())
            .run(command.split(separator: " ").map(String.init) + ["--help"], broker: false)
        #expect(result.status == 0)
        #expect(result.stdout.contains("bookingctl \(command)"), "an example line for \(command): \(result.stdout)")
        #expect(result.stdout.contains("--json"))
    }
}
