import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import BrokerObjects

/// `bookingctl bookings list|show`: reading bookings (contract v1.1,
/// `booking.list`/`booking.get` on the `booking.queries` exchange, answered
/// by the booking handler). What the operator's user sees follows the
/// privacy rule: as an admin (`ADMIN_USERS`) every contact detail.
struct BookingsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bookings", abstract: "Read bookings (asks the booking handler).",
        subcommands: [List.self, Show.self])

    /// Sends one query and returns its reply; an error reply is printed and
    /// ends the command with exit status 1.
    ///
    /// Bookings with a status this build does not know (a newer handler's)
    /// are left out of a list, as contract v1.1 has clients ignore unknown
    /// status values, and named on stderr. A single such booking throws
    /// ``NewerBooking``.
    static func ask(_ type: BookingQueryType, _ body: some Encodable, global: GlobalOptions) async throws -> BookingQueryReply {
        let reply = try await CommandClient(global: global).call(
            exchange: Topology.bookingQueriesExchange, routingKey: type.rawValue, type: type.rawValue,
            body: [UInt8](try ContractJSON.encode(body)), messageID: nil)
        let decoded: BookingQueryReply
        do {
            let read = try BookingQueryReply.decodeIgnoringUnknownStatuses(reply.body)
            decoded = read.reply
            if !read.leftOut.isEmpty {
                let named = read.leftOut.prefix(5).map { "\($0.id) (\($0.status))" }.joined(separator: ", ")
                    + (read.leftOut.count > 5 ? ", …" : "")
                FileHandle.standardError.write(Data(TerminalText.safe(
                    "bookingctl: left out \(read.leftOut.count) booking\(read.leftOut.count == 1 ? "" : "s") with a status this "
                    + "bookingctl does not know (a newer booking handler): \(named)\n").utf8))
            }
        } catch let unknown as UnknownStatusBooking where type == .get {
            throw NewerBooking(booking: unknown, body: reply.body)
        } catch {
            throw CLIError("the handler's reply is not a contract reply: "
                           + TerminalText.safe(String(decoding: reply.body.prefix(2_000), as: UTF8.self)))
        }
        if case .error(let error) = decoded {
            if global.json { print(try Output.json(decoded)) }
            else { FileHandle.standardError.write(Data((TerminalText.safe(Output.describe(error)) + "\n").utf8)) }
            throw ExitStatus.errorReply
        }
        return decoded
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "Bookings overlapping a window, oldest first (booking.list).",
            discussion: """
                --from/--to are local dates (each room's own day) or UTC instants; the window
                spans at most 366 days. Without --all one page is shown and its cursor printed;
                --all follows the cursors to the end (one consistent snapshot).
                Examples:
                  bookingctl bookings list --from 2026-11-23 --to 2026-11-30 --room Berlin
                  bookingctl bookings list --from 2026-11-23 --to 2026-12-01 --status confirmed,inProgress --all --json
                """)

        @OptionGroup var global: GlobalOptions
        @Option(help: "Window start: YYYY-MM-DD or 2026-11-23T00:00:00Z.") var from: String
        @Option(help: "Window end (exclusive): YYYY-MM-DD or an instant.") var to: String
        @Option(help: "Only this room.") var room: String?
        @Option(help: "Only these statuses, comma-separated.") var status: String?
        @Option(name: .customLong("requested-by"), help: "Only bookings of this broker user.") var requestedBy: String?
        @Option(name: .customLong("attendee-email"), help: "Only bookings with this attendee.") var attendeeEmail: String?
        @Option(name: .customLong("series-id"), help: "Only occurrences of this series.") var seriesId: String?
        @Option(help: "Bookings per page (1–1000, default 100).") var limit: Int?
        @Option(help: "Continue from a previous page's cursor.") var cursor: String?
        @Flag(help: "Follow the cursors through every page.") var all = false

        func query(cursor: String?) throws -> ListBookings {
            guard let lower = WindowBound(text: from) else { throw ValidationError("--from must be YYYY-MM-DD or a UTC instant, not '\(from)'") }
            guard let upper = WindowBound(text: to) else { throw ValidationError("--to must be YYYY-MM-DD or a UTC instant, not '\(to)'") }
            return ListBookings(from: lower, to: upper, room: room,
                                status: status.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } },
                                requestedBy: requestedBy, attendeeEmail: attendeeEmail, seriesId: seriesId, limit: limit,
                                cursor: cursor)
        }

        func validate() throws { _ = try query(cursor: cursor) }

        func run() async throws {
            try await reportingErrors {
                var bookings: [BookingView] = []
                var next = cursor
                repeat {
                    guard case .bookings(let page, let following) = try await BookingsCommand.ask(.list, try query(cursor: next),
                                                                                                 global: global) else {
                        throw CLIError("the handler answered booking.list with something else")
                    }
                    bookings += page
                    next = following
                } while all && next != nil
                if global.json {
                    print(try Output.json(BookingQueryReply.bookings(bookings, nextCursor: next)))
                } else {
                    print(Output.table(bookings))
                    if let next { print("more: --cursor \(next)") }
                }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "One booking with its attendees (booking.get).",
            discussion: "Example:\n  bookingctl bookings show 6f1c2a9e-… --json")

        @OptionGroup var global: GlobalOptions
        @Argument(help: "The booking id.") var bookingId: String

        func run() async throws {
            try await reportingErrors {
                do {
                    let reply = try await BookingsCommand.ask(.get, GetBooking(bookingId: bookingId), global: global)
                    guard case .booking(let view) = reply else { throw CLIError("the handler answered booking.get with something else") }
                    print(global.json ? try Output.json(reply) : Output.describe(view))
                } catch let newer as NewerBooking {
                    // The booking exists; only its status is new to this build.
                    if global.json {
                        print(try Output.json(raw: newer.body))
                    } else {
                        print("booking \(newer.booking.id)  \(newer.booking.status)")
                        FileHandle.standardError.write(Data(("bookingctl: the booking has a status this bookingctl does not "
                                                             + "know (a newer booking handler); --json prints all of it\n").utf8))
                    }
                }
            }
        }
    }

    /// `booking.get` answered with a booking whose status this build does
    /// not know; `body` is the reply as received.
    struct NewerBooking: Error {
        let booking: UnknownStatusBooking
        let body: [UInt8]
    }
}

extension Output {
    /// One booking as read back: in full, or busy (another caller's
    /// booking: when and where only).
    static func describe(_ b: BookingView) -> String {
        var lines = [
            "booking \(b.id)  \(b.status.rawValue)  version \(b.version)",
            "  \(b.room)  \(b.date) \(b.start)–\(b.end) (\(b.timeZone))",
            "  " + (b.title.map { $0 + (b.description.map { " — \($0)" } ?? "") }
                ?? "(busy: another caller's booking; only its requester, the room's approvers and admins see details)"),
        ]
        if let requestedBy = b.requestedBy { lines.append("  requested by \(requestedBy)") }
        if let reason = b.cancelReason { lines.append("  ended: \(reason)") }
        if b.status == .held, let expiry = b.holdExpiresAt { lines.append("  held until \(expiry)") }
        if let place = b.waitlist { lines.append("  waitlist position \(place.position)") }
        for (index, a) in (b.attendees ?? []).enumerated() {
            lines.append("  attendee \(index): \(a.name)" + (a.email.map { " <\($0)>" } ?? "") + (a.phone.map { " \($0)" } ?? ""))
        }
        return lines.joined(separator: "\n")
    }

    /// A fixed-width table of bookings (titles cut at 40 characters).
    static func table(_ bookings: [BookingView]) -> String {
        if bookings.isEmpty { return "no bookings match" }
        return columns(header: ["DATE", "TIME", "ROOM", "STATUS", "TITLE", "ID"],
                       rows: bookings.map { [$0.date, "\($0.start)–\($0.end)", $0.room,
                                             $0.status.rawValue + ($0.waitlist.map { " #\($0.position)" } ?? ""),
                                             String(($0.title ?? "(busy)").prefix(40)), $0.id] })
    }
}
