import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation

/// `bookingctl suggest`: "find me a room" (`availability.suggest` on
/// `booking.queries`, answered by the availability projector).
struct SuggestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suggest",
        abstract: "Rooms and times free for a meeting, earliest first (asks the availability projector).",
        discussion: """
            --from and --to are local dates (the start of that day in each room's zone;
            --to is exclusive) or instants such as 2026-11-30T09:00:00Z, at most 31 days
            apart. Suggestions come earliest first, then the smallest room that fits,
            then by name. Examples:
              bookingctl suggest --from 2026-11-30 --to 2026-12-05 --duration 60 --people 6 --equipment beamer
              bookingctl suggest --from 2026-11-30T08:00:00Z --to 2026-11-30T18:00:00Z --duration 30 --json
            """)

    @OptionGroup var global: GlobalOptions
    @Option(help: "Start of the window: YYYY-MM-DD or an instant.") var from: String
    @Option(help: "End of the window (exclusive): YYYY-MM-DD or an instant.") var to: String
    @Option(help: "Minutes, 15–720, a multiple of 15.") var duration: Int
    @Option(help: "At least this many seats (minCapacity).") var people: Int?
    @Option(help: "Comma-separated equipment the room must all have.") var equipment: String?
    @Option(help: "Case-insensitive substring of the room name.") var name: String?
    @Option(help: "How many suggestions, 1–100 (default 10).") var limit: Int?
    @Option(help: "Starts on multiples of this many minutes from local midnight, 15–240 (default 15).") var step: Int?

    func query() -> SuggestQuery {
        SuggestQuery(from: from, to: to, durationMinutes: duration, minCapacity: people,
                     equipment: equipment.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } },
                     name: name, limit: limit, stepMinutes: step)
    }

    func run() async throws {
        try await reportingErrors {
            let reply = try await CommandClient(global: global).call(
                exchange: Topology.bookingQueriesExchange, routingKey: SuggestContract.suggestKey,
                type: SuggestContract.suggestKey, body: [UInt8](try ContractJSON.encode(query())), messageID: nil)
            switch try? SuggestReply.decode(body: reply.body) {
            case .success(let suggestions)?:
                print(global.json ? try Output.json(SuggestReply(suggestions: suggestions)) : Self.table(suggestions))
            case .failure(let error)?:
                if global.json { print(try Output.json(CommandReply.error(error))) }
                else { FileHandle.standardError.write(Data((TerminalText.safe(Output.describe(error)) + "\n").utf8)) }
                throw ExitStatus.errorReply
            case nil:
                throw CLIError("the projector's reply is not a contract reply: \(String(decoding: reply.body, as: UTF8.self))")
            }
        }
    }

    /// One line per suggestion, in the reply's order.
    static func table(_ suggestions: [Suggestion]) -> String {
        if suggestions.isEmpty { return "nothing free matches" }
        return Output.columns(header: ["DATE", "START", "END", "ROOM", "CAP", "ZONE", "STARTS (UTC)"], rows: suggestions.map {
            [$0.date, $0.start, $0.end, $0.room, String($0.capacity), $0.timeZone, $0.startsAt]
        })
    }
}
