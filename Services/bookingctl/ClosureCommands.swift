import ArgumentParser
import BookingContracts
import Foundation

/// `bookingctl room close|reopen|closures` (contract v1.2, closures).
extension RoomCommand {
    struct Close: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "close",
            abstract: "Close a room for a while (room.close): cancels every booking the closure covers.",
            discussion: """
                --from/--to are local dates of the room (a date is the start of that day, so --to
                is exclusive) or UTC instants on the 15-minute grid. Room managers and admins only.
                Example (closes the 24th to the 27th):
                  bookingctl room close --room Berlin --from 2026-12-24 --to 2026-12-28 --reason holidays
                """)

        @OptionGroup var global: GlobalOptions
        @OptionGroup var send: SendOptions
        @Option(help: "Room name.") var room: String
        @Option(help: "Start: YYYY-MM-DD or 2026-12-24T08:00:00Z.") var from: String
        @Option(help: "End (exclusive): YYYY-MM-DD or an instant.") var to: String
        @Option(help: "Why (shown on the page and in every cancellation).") var reason: String

        func run() async throws {
            try await reportingErrors {
                try await sendAndPrint(.closeRoom, CloseRoom(room: room, from: from, to: to, reason: reason),
                                       global: global, send: send)
            }
        }
    }

    struct Reopen: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reopen",
            abstract: "Remove a closure (room.reopen); what it cancelled stays cancelled.",
            discussion: """
                Example:
                  bookingctl room reopen --room Berlin --closure 6f1c…
                """)

        @OptionGroup var global: GlobalOptions
        @OptionGroup var send: SendOptions
        @Option(help: "Room name.") var room: String
        @Option(name: .customLong("closure"), help: "The closure's id (room close or room closures shows it).")
        var closureId: String

        func run() async throws {
            try await reportingErrors {
                try await sendAndPrint(.reopenRoom, ReopenRoom(room: room, closureId: closureId), global: global, send: send)
            }
        }
    }

    struct Closures: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "closures",
            abstract: "List a room's closures (room.closures; asks the booking handler).",
            discussion: """
                Without --from/--to: every closure that has not ended.
                Examples:
                  bookingctl room closures --room Berlin
                  bookingctl room closures --room Berlin --from 2026-12-01 --to 2027-01-01 --json
                """)

        @OptionGroup var global: GlobalOptions
        @Option(help: "Room name.") var room: String
        @Option(help: "Window start: YYYY-MM-DD (the room's day) or a UTC instant.") var from: String?
        @Option(help: "Window end (exclusive).") var to: String?

        func query() throws -> ListClosures {
            let lower = try from.map { text in
                guard let bound = WindowBound(text: text) else { throw ValidationError("--from must be YYYY-MM-DD or a UTC instant, not '\(text)'") }
                return bound
            }
            let upper = try to.map { text in
                guard let bound = WindowBound(text: text) else { throw ValidationError("--to must be YYYY-MM-DD or a UTC instant, not '\(text)'") }
                return bound
            }
            return ListClosures(room: room, from: lower, to: upper)
        }

        func validate() throws { _ = try query() }

        func run() async throws {
            try await reportingErrors {
                let reply = try await BookingsCommand.ask(.closures, try query(), global: global)
                guard case .closures(let closures) = reply else {
                    throw CLIError("the handler answered room.closures with something else")
                }
                if global.json {
                    print(try Output.json(reply))
                } else if closures.isEmpty {
                    print("no closures")
                } else {
                    print(closures.map(Output.describe).joined(separator: "\n"))
                }
            }
        }
    }
}
