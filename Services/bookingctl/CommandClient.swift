import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation

/// Exit statuses of bookingctl, documented in `bookingctl --help`.
enum ExitStatus {
    /// The service answered with an error reply (its code is printed).
    static let errorReply = ExitCode(1)
    /// The broker could not be reached, refused the login, or no reply came in time.
    static let unavailable = ExitCode(69)
    /// The broker has no queue for the message (topology not declared, service never started).
    static let unroutable = ExitCode(68)
    /// The broker refused the message: the user may not write to the exchange (`EX_NOPERM`).
    static let refused = ExitCode(77)
}

/// Sends one contract command to `booking.commands` and waits for its reply
/// through direct reply-to.
///
/// Every command carries a fresh `message_id` (or the caller's
/// `--message-id`), so repeating a bookingctl invocation with the same id is
/// safe: the handler answers with the stored reply and does nothing twice.
/// `user_id` is the broker login, so the handler records who asked
/// (`requestedBy`) and applies its ownership rule (ADMIN_USERS may change
/// anyone's booking).
struct CommandClient {
    let global: GlobalOptions

    func send<Body: Encodable>(_ type: CommandType, _ body: Body, messageID: String?) async throws -> SentReply {
        let data = try ContractJSON.encode(body)
        let reply = try await call(exchange: Topology.commandsExchange, routingKey: type.rawValue,
                                   type: type.rawValue, body: [UInt8](data), messageID: messageID)
        do {
            return .full(try ContractJSON.decode(CommandReply.self, from: Data(reply.body)))
        } catch {
            if let outline = ReplyOutline.read(reply.body) { return .outline(outline, body: reply.body) }
            throw CLIError("the reply is not a contract reply (\(error)): "
                           + TerminalText.safe(String(decoding: reply.body.prefix(2_000), as: UTF8.self)))
        }
    }

    /// Publishes `body` with the contract's properties and waits for the reply.
    func call(exchange: String, routingKey: String, type: String, body: [UInt8],
              messageID: String?) async throws -> AMQPMessage {
        let url = try global.brokerURL()
        let connection = try await connect()
        let id = messageID ?? RandomID.uuidString()
        let properties = AMQPProperties(
            contentType: MessageProperties.contentType, deliveryMode: .persistent,
            messageID: id,
            timestamp: UInt64(Date().timeIntervalSince1970), type: type, userID: url.user, appID: "bookingctl")
        do {
            let reply = try await connection.call(body, exchange: exchange, routingKey: routingKey,
                                                  properties: properties,
                                                  timeout: .milliseconds(Int64(global.timeout * 1000)))
            await connection.close()
            return reply
        } catch {
            await connection.close()
            let missingExchange = error.code == .channelClosed && error.replyCode == 404
            let refused = error.code == .channelClosed && error.replyCode == 403
            switch error.code {
            case _ where refused:
                throw CLIError("the broker refused \(routingKey) on '\(exchange.isEmpty ? "(default exchange)" : exchange)' "
                               + "for user '\(url.user)': \(error.message)", exit: ExitStatus.refused)
            case _ where missingExchange:
                throw CLIError("the broker has no exchange '\(exchange)': "
                               + "declare the topology first (bookingctl topology declare) or start the services",
                               exit: ExitStatus.unroutable)
            case .unroutable:
                throw CLIError("no queue receives \(routingKey) on '\(exchange.isEmpty ? "(default exchange)" : exchange)': "
                               + "is the service running, or the topology declared (bookingctl topology declare)?",
                               exit: ExitStatus.unroutable)
            case .timeout where exchange == Topology.commandsExchange:
                // The command stays queued and runs when the handler takes
                // it: only its id lets the operator repeat it safely.
                throw CLIError("no reply within \(global.timeout) s (is the service running? --timeout to wait longer); "
                               + "the command may still be carried out later: to repeat it without doing it twice, "
                               + "add --message-id \(id)", exit: ExitStatus.unavailable)
            case .timeout:
                throw CLIError("no reply within \(global.timeout) s (is the service running? --timeout to wait longer)",
                               exit: ExitStatus.unavailable)
            default:
                throw CLIError("\(error)", exit: ExitStatus.unavailable)
            }
        }
    }

    func connect() async throws -> AMQPConnection {
        do {
            return try await global.connect()
        } catch let error as AMQPError {
            throw CLIError("cannot connect to \(try global.brokerURL()): \(error.message)", exit: ExitStatus.unavailable)
        }
    }
}

/// A command's reply: read in full, or only in outline when it is a newer
/// handler's successful reply (booking statuses this build does not know,
/// which contract v1.1 has clients ignore rather than refuse).
enum SentReply {
    case full(CommandReply)
    /// `body` is the reply as received; it parsed as JSON.
    case outline(ReplyOutline, body: [UInt8])
}

/// A failure bookingctl reports in one line on stderr, with its exit status.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    let exit: ExitCode

    init(_ description: String, exit: ExitCode = ExitCode(1)) {
        self.description = description
        self.exit = exit
    }
}

extension AsyncParsableCommand {
    /// Runs `body`, printing a ``CLIError`` as `bookingctl: …` on stderr and
    /// exiting with its status.
    func reportingErrors(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as CLIError {
            FileHandle.standardError.write(Data("bookingctl: \(error.description)\n".utf8))
            throw error.exit
        }
    }
}
