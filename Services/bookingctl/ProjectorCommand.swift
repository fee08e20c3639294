import AMQPClient
import ArgumentParser
import AvailabilityProjector
import BookingContracts
import Foundation

/// `bookingctl projector …`: maintenance of the availability projector.
struct ProjectorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "projector",
        abstract: "Maintain the availability projector's read model.",
        subcommands: [ProjectorRebuildCommand.self])
}

/// `bookingctl projector rebuild`: rebuild the read model from the booking
/// handler's data and wait until the projector swapped it in.
struct ProjectorRebuildCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebuild",
        abstract: "Rebuild the projector's read model from the booking handler's data.",
        discussion: """
            Asks the availability projector (queue availability-projector.control) to
            rebuild: it sends booking.replay to the booking handler, which publishes
            every room and booking (current versions) to availability-projector.replay;
            the projector loads them into a fresh model while live events keep
            arriving, then swaps it in. Answers stay the same unless the old model
            had drifted; the rooms-days that changed are counted and published as
            availability.changed. Exits 0 when the new model is live, 1 on an error
            reply (code and text printed), 3 when no projector answered in time.

            Example:
              bookingctl projector rebuild --amqp-url amqp://ops:secret@broker:5672/%2f
              bookingctl projector rebuild --json --wait 900
            """)

    @OptionGroup var global: GlobalOptions

    @Option(help: "Seconds to wait for the rebuild to finish.")
    var wait: Double = 600

    func run() async throws {
        let connection = try await global.connect()
        var properties = AMQPProperties.persistentJSON(type: ProjectorControl.rebuildType,
                                                       messageID: UUID().uuidString.lowercased())
        properties.appID = "bookingctl"
        let message: AMQPMessage
        do {
            message = try await connection.call(Array("{}".utf8), exchange: "", routingKey: ProjectorControl.queue,
                                                properties: properties, timeout: .milliseconds(Int64(wait * 1000)))
        } catch {
            let text = error.code == .unroutable
                ? "no availability projector: queue \(ProjectorControl.queue) does not exist"
                : "no answer from the availability projector: \(error)"
            if global.json {
                print(#"{"ok":false,"error":{"code":null,"text":"\#(text.replacingOccurrences(of: "\"", with: "'"))"}}"#)
            } else {
                FileHandle.standardError.write(Data("bookingctl: \(text)\n".utf8))
            }
            await connection.close()
            throw ExitCode(3)
        }
        await connection.close()
        let reply = try ContractJSON.decode(ProjectorControl.Reply.self, from: message.body)
        if global.json {
            print(String(decoding: try ContractJSON.encode(reply), as: UTF8.self))
        } else if let result = reply.rebuild {
            print(String(format: "rebuilt the read model in %.1f s: %d rooms, %d bookings replayed, %d live events during the rebuild, %d room-days changed",
                         result.seconds, result.rooms, result.bookings, result.liveEvents, result.changedDays))
            print("replay id: \(result.replayId)")
        } else if let error = reply.error {
            FileHandle.standardError.write(Data("bookingctl: rebuild failed (\(error.code)): \(error.text)\n".utf8))
        }
        if !reply.ok { throw ExitCode(1) }
    }
}
