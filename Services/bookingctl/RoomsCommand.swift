import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import BrokerObjects

/// `bookingctl rooms`: the availability query (RPC on `availability.queries`).
struct RoomsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rooms",
        abstract: "Which rooms are free when (asks the availability projector).",
        discussion: """
            Every filter is optional. Examples:
              bookingctl rooms --date 2026-11-23
              bookingctl rooms --date today --equipment beamer --min-capacity 6 --free-from 10:00 --free-to 11:00
              bookingctl rooms --available-next-hour --json
              bookingctl rooms --date 2026-11-23 --days 5 --name berlin
            """)

    @OptionGroup var global: GlobalOptions
    @Option(help: "Local date: YYYY-MM-DD, 'today', 'now' or UNIX seconds (default today).") var date: String?
    @Option(help: "Case-insensitive substring of the room name.") var name: String?
    @Option(help: "Comma-separated equipment the room must all have.") var equipment: String?
    @Option(name: .customLong("min-capacity"), help: "At least this many seats.") var minCapacity: Int?
    @Option(name: .customLong("free-from"), help: "Free from HH:mm …") var freeFrom: String?
    @Option(name: .customLong("free-to"), help: "… until HH:mm.") var freeTo: String?
    @Flag(name: .customLong("available-next-hour"), help: "Free for the next hour, in the room's zone.")
    var availableNextHour = false
    @Option(help: "How many days from --date on (1–31, default 1): one line per room and day.") var days: Int?

    func query() throws -> AvailabilityQuery {
        var parsedDate: AvailabilityDate?
        if let date {
            guard let value = AvailabilityDate(queryValue: date) else {
                throw ValidationError("--date must be YYYY-MM-DD, 'today', 'now' or UNIX seconds, not '\(date)'")
            }
            parsedDate = value
        }
        if let days, !(1...31).contains(days) {
            throw ValidationError("--days must be 1 to 31, not \(days)")
        }
        return AvailabilityQuery(
            date: parsedDate, name: name,
            equipment: equipment.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } },
            minCapacity: minCapacity, freeFrom: freeFrom, freeTo: freeTo,
            availableNextHour: availableNextHour ? true : nil, days: days)
    }

    func validate() throws { _ = try query() }

    func run() async throws {
        try await reportingErrors {
            let body = [UInt8](try ContractJSON.encode(try query()))
            let reply = try await CommandClient(global: global).call(
                exchange: Topology.defaultExchange, routingKey: Topology.availabilityQueriesQueue,
                type: "availability.query", body: body, messageID: nil)
            let data = Data(reply.body)
            if let rooms = try? ContractJSON.decode(AvailabilityReply.self, from: data) {
                print(global.json ? try Output.json(rooms) : Output.table(rooms))
            } else if case .error(let error)? = try? ContractJSON.decode(CommandReply.self, from: data) {
                if global.json { print(try Output.json(CommandReply.error(error))) }
                else { FileHandle.standardError.write(Data((TerminalText.safe(Output.describe(error)) + "\n").utf8)) }
                throw ExitStatus.errorReply
            } else {
                throw CLIError("the projector's reply is not a contract reply: \(String(decoding: data, as: UTF8.self))")
            }
        }
    }
}

/// `bookingctl topology declare` and `upgrade`.
struct TopologyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "topology", abstract: "The contract's exchanges and queues on the broker.",
        subcommands: [Declare.self, TopologyUpgrade.self])

    struct Declare: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "declare",
            abstract: "Declare every exchange, queue and binding of wire contract v1 (idempotent).",
            discussion: """
                Useful before the services first start, so commands published by other
                systems are queued rather than dropped. Declaring with other arguments than
                an existing queue fails (PRECONDITION_FAILED) and changes nothing.

                Example:
                  bookingctl topology declare --amqp-url amqp://admin:secret@rabbitmq:5672/%2f
                """)

        @OptionGroup var global: GlobalOptions

        func run() async throws {
            try await reportingErrors {
                let connection = try await CommandClient(global: global).connect()
                let items = ContractTopology.declarations(queues: Topology.serviceQueues.map(\.name)
                                                          + [Topology.passesFailedQueue])
                do {
                    try await connection.declare(items)
                } catch {
                    await connection.close()
                    throw CLIError("declaring the topology failed: \(error)")
                }
                await connection.close()
                let names = Topology.exchanges.map(\.name) + Topology.queues.map(\.name)
                if global.json {
                    print(try Output.json(["declared": names]))
                } else {
                    print("declared \(Topology.exchanges.count) exchanges and \(Topology.queues.count) queues:")
                    for name in names { print("  \(name)") }
                }
            }
        }
    }
}
