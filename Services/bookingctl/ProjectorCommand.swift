import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import SetTopology

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
            reply (code and text printed), 68 when no projector runs (its control queue
            does not exist), 69 when none answered in time.

            Example:
              bookingctl projector rebuild --amqp-url amqp://ops:secret@broker:5672/%2f
              bookingctl projector rebuild --json --wait 900
            """)

    @OptionGroup var global: GlobalOptions

    @Option(help: "Seconds to wait for the rebuild to finish (the projector gives a replay 600 s).")
    var wait: Double = 660

    @Option(help: "The replica to rebuild (its PROJECTOR_INSTANCE); default the single projector.")
    var instance: String?

    func validate() throws {
        try GlobalOptions.checkSeconds(wait, "--wait")
        if let instance { _ = try ProjectorQueues(instance: instance) }
    }

    func run() async throws {
        let connection: AMQPConnection
        do {
            connection = try await CommandClient(global: global).connect()
        } catch let error as CLIError {
            FileHandle.standardError.write(Data("bookingctl: \(error.description)\n".utf8))
            throw error.exit
        }
        var properties = AMQPProperties.persistentJSON(type: ProjectorControl.rebuildType,
                                                       messageID: RandomID.uuidString())
        properties.appID = "bookingctl"
        // A request nobody answers in time must not run later (when a stopped
        // projector comes back, or once per retry of this command): it
        // expires with our wait and does not survive a broker restart.
        properties.deliveryMode = .transient
        properties.expiration = String(Int64(max(1, wait) * 1000))
        let controlQueue = try instance.map { try ProjectorQueues(instance: $0).control } ?? ProjectorControl.queue
        let message: AMQPMessage
        do {
            message = try await connection.call(Array("{}".utf8), exchange: "", routingKey: controlQueue,
                                                properties: properties, timeout: .milliseconds(Int64(wait * 1000)))
        } catch {
            let text = error.code == .unroutable
                ? "no availability projector: queue \(controlQueue) does not exist"
                : "no answer from the availability projector: \(error)"
            if global.json {
                let body = try? JSONSerialization.data(withJSONObject: ["ok": false, "error": ["code": NSNull(), "text": text]],
                                                       options: [.sortedKeys])
                print(String(decoding: body ?? Data(), as: UTF8.self))
            } else {
                FileHandle.standardError.write(Data("bookingctl: \(text)\n".utf8))
            }
            await connection.close()
            throw error.code == .unroutable ? ExitStatus.unroutable : ExitStatus.unavailable
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
