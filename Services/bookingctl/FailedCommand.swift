import AMQPClient
import ArgumentParser
import BookingContracts
import FailedMessages
import Foundation

/// `bookingctl failed …`: one console for every failed message of the set —
/// the dead-letter queues of every service queue and `passes.failed`.
struct FailedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failed",
        abstract: "Every failed message of the set: list, show, retry, discard, purge the archive.",
        discussion: """
            Covers \(FailedQueues.all.joined(separator: ", ")).

            Reading never loses or reorders a queue: its messages, up to an end
            marker put at the queue's end, are held unacknowledged by a consumer
            of its own and go back in queue order when it closes (one operator's bookingctl at a time; a second one
            waits up to --timeout; at most 65,535 per queue are read). retry publishes a
            message to the exchange and routing key it originally came by, as
            its original sender (the broker user needs the impersonator tag),
            and removes the dead copy only after the broker confirmed the
            retry; a passes.failed message goes back to the pass sender.
            discard keeps an audit copy in \(FailedQueues.archive).

            ID is the 16-hex-digit id list prints (or a unique prefix of at
            least 6); it stays the same across listings. G is a group as list
            prints it, e.g. 'reason:rejected', 'type:booking.create',
            'queue:booking-handler.commands.dead', 'day:2026-11-23'.

            Exit status: 0 done; 1 a message could not be moved (it stays), or
            --all left messages unread behind the first 65535 of a queue;
            3 nothing matched; 64 bad usage; 69 broker unreachable, the
            connection lost during the run (what was moved is still listed;
            bookingctl does not reconnect), or another operator's run held
            the lock for --timeout seconds.
            """,
        subcommands: [List.self, Show.self, Retry.self, Discard.self, PurgeArchived.self],
        defaultSubcommand: List.self)

    /// Options of every `failed` subcommand.
    struct Common: ParsableArguments {
        @OptionGroup var global: GlobalOptions
        @Option(name: .customLong("queue"), help: "Only this queue (repeatable; default every one).")
        var queues: [String] = []
        @Option(help: "The booking handler's broker user: its dead-letter copies name the original sender in x-original-user-id.")
        var handlerUser = ProcessInfo.processInfo.environment["BOOKING_HANDLER_USER"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "booking-handler"
        @Option(help: "The pass sender's broker user: its dead-letter copies carry the reason in x-death-reason.")
        var passSenderUser = ProcessInfo.processInfo.environment["PASS_SENDER_USER"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "pass-sender"
        @Option(help: "The availability projector's broker user: its dead-letter copies carry the reason in x-death-reason.")
        var projectorUser = ProcessInfo.processInfo.environment["PROJECTOR_USER"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "availability-projector"

        func validate() throws {
            for queue in queues where !FailedQueues.isKnown(queue) {
                throw ValidationError("--queue \(queue): not one of \(FailedQueues.all.joined(separator: ", ")), "
                                      + "nor a projector replica's availability-projector.events.<instance>.dead")
            }
        }

        /// The set's queues in listing order, then replicas' queues as named.
        var selectedQueues: [String] {
            guard !queues.isEmpty else { return FailedQueues.all }
            var replicas: [String] = []
            for queue in queues where !FailedQueues.all.contains(queue) && !replicas.contains(queue) { replicas.append(queue) }
            return FailedQueues.all.filter(queues.contains) + replicas
        }

        /// Runs `body` with a prepared console under the operators' lock.
        func console<T: Sendable>(_ body: (FailedConsole) async throws -> T) async throws -> T {
            try await FailedCommand.withConsole(global, serviceUsers: ServiceUsers(handler: handlerUser, passSender: passSenderUser, projector: projectorUser), body)
        }
    }

    /// Runs `body` with a console (lock taken, archive there) on one connection.
    /// - Parameter serviceUsers: whose dead-letter copies' `x-death-reason`
    ///   and `x-original-*` headers are believed (``FailedConsole``).
    static func withConsole<T: Sendable>(_ global: GlobalOptions, serviceUsers: ServiceUsers,
                                         _ body: (FailedConsole) async throws -> T) async throws -> T {
        try await OperatorRun.run(global) { connection in
            let console = FailedConsole(connection: connection, serviceUsers: serviceUsers)
            do {
                try await console.prepare(lockTimeout: global.timeout)
            } catch {
                OperatorRun.fail("cannot use \(FailedQueues.archive): \(error)",
                                 OperatorRunError.isLoss(error) ? ExitStatus.unavailable : ExitCode(1))
            }
            return try await body(console)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Count per queue, groups, and every failed message, oldest first per queue.",
            discussion: """
                Examples:
                  bookingctl failed list
                  bookingctl failed list --group-by type --queue booking-handler.commands.dead
                  bookingctl failed list --json | jq '.messages[].id'
                """)
        @OptionGroup var common: Common
        @Option(help: "Group by reason, queue, type or day.") var groupBy: FailedGrouping = .reason

        func run() async throws {
            let queues = common.selectedQueues
            let listing = try await common.console { try await $0.list(queues) }
            let groups = OperatorRun.counts(listing.messages) { $0.group(groupBy) }
            var perQueue: [String: Int] = [:]
            for queue in queues where !listing.missing.contains(queue) { perQueue[queue] = 0 }
            for m in listing.messages { perQueue[m.queue, default: 0] += 1 }
            if common.global.json {
                OperatorRun.printJSON([
                    "count": listing.messages.count, "queues": perQueue, "missing": listing.missing,
                    "incomplete": listing.incomplete,
                    "groupBy": groupBy.rawValue,
                    "groups": groups.map { ["group": $0.key, "count": $0.count] as [String: Any] },
                    "messages": listing.messages.map(messageJSON),
                ] as [String: Any])
                return
            }
            print("failed messages: \(listing.messages.count)")
            for queue in queues where perQueue[queue] != nil { print("  \(queue): \(perQueue[queue] ?? 0)") }
            if !listing.missing.isEmpty { print("  (not on this broker: \(listing.missing.joined(separator: ", ")))") }
            for queue in listing.incomplete {
                print("  (\(queue): more messages wait behind the first \(QueueSnapshot.maximumHeld), not read; act on these first)")
            }
            guard !listing.messages.isEmpty else { return }
            print("\nby \(groupBy.rawValue) (use as --group):")
            for g in groups { print("  \(String(g.count).padding(toLength: 6, withPad: " ", startingAt: 0)) \(g.key)") }
            print("")
            print(Output.columns(header: ["ID", "QUEUE", "TYPE", "FAILED", "USER", "REASON"], rows: listing.messages.map { m in
                [m.id, m.queue, m.type, m.failedAt.map(ContractFormat.timestamp) ?? "?", m.originalUser ?? "-", m.reason]
            }))
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Everything about one failed message: properties, headers, body.",
            discussion: """
                Example:
                  bookingctl failed show 3f9a1c2b7d4e5f60
                """)
        @OptionGroup var common: Common
        @Argument(help: "The message id list prints (or a unique prefix).") var id: String

        func run() async throws {
            let queues = common.selectedQueues, id = self.id
            let listing = try await common.console { try await $0.list(queues) }
            let full = resolve(id, in: listing.messages)
            guard let m = listing.messages.first(where: { $0.id == full }) else {
                let unread = listing.incomplete.isEmpty ? ""
                    : " (only the first \(QueueSnapshot.maximumHeld) messages of \(listing.incomplete.joined(separator: ", ")) were read)"
                OperatorRun.fail("no failed message \(id) in \(queues.count == 1 ? queues[0] : "any failed-message queue")" + unread,
                                 ExitCode(3))
            }
            if common.global.json {
                OperatorRun.printJSON(messageJSON(m))
                return
            }
            let p = m.properties
            var lines = [
                "message     \(m.id)   (position \(m.position) in \(m.queue))",
                "type        \(m.type)",
                "reason      \(m.reason)",
                "failed at   \(m.failedAt.map(ContractFormat.timestamp) ?? "unknown")",
                "sender      \(m.originalUser ?? "(anonymous)")" + (p.userID != m.originalUser ? "   (copy by \(p.userID ?? "?"))" : ""),
                "retry to    " + (m.target.map { "exchange '\($0.exchange)' routing key '\($0.routingKey)'" }
                    ?? "the pass sender (pass-sender.retry, attempts reset)"),
            ]
            if let v = p.messageID { lines.append("message_id  \(v)") }
            if let v = p.correlationID { lines.append("correlation \(v)") }
            if let v = p.replyTo { lines.append("reply_to    \(v)") }
            if let v = p.appID { lines.append("app_id      \(v)") }
            for death in p.xDeath {
                lines.append("x-death     \(death.queue): \(death.reason) ×\(death.count) (exchange '\(death.exchange)', "
                             + "keys \(death.routingKeys.joined(separator: ",")))")
            }
            for (key, value) in p.headers.sorted(by: { $0.key < $1.key }) where key != "x-death" {
                lines.append("header      \(key) = \(value.stringValue ?? value.intValue.map(String.init) ?? "\(value)")")
            }
            lines.append("body:")
            lines.append(TerminalText.body(m.body))
            print(lines.joined(separator: "\n"))
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send failed messages again to where they came from, as their original sender.",
            discussion: """
                Each message is published (publisher-confirmed) to its original
                exchange and routing key with its original user_id, message_id
                and properties; only then is it removed. A command keeps its
                sender's idempotency scope: one that already ran is answered
                from the handler's inbox and changes nothing. Events keep the
                booking handler's user_id; consumers drop repeats by version.
                passes.failed messages go back to the pass sender (attempts
                reset). pass-sender.retry.dead messages go back into
                pass-sender.retry.
                Examples:
                  bookingctl failed retry 3f9a1c2b7d4e5f60
                  bookingctl failed retry --group 'type:booking.create'
                  bookingctl failed retry --queue pass-sender.retry.dead --all
                """)
        @OptionGroup var common: Common
        @OptionGroup var selection: Selection

        func validate() throws { try selection.check(common) }

        func run() async throws {
            let queues = common.selectedQueues, selection = self.selection
            let who = operatorName(common.global)
            let outcome = try await common.console { console in
                let predicate = try await selection.predicate(console, queues)
                return try await console.retry(queues, by: who, where: predicate)
            }
            report(outcome, verb: "retried", selection: selection, json: common.global.json)
        }
    }

    struct Discard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove failed messages for good, keeping an audit copy with the reason.",
            discussion: """
                The copy (body and properties, plus headers x-archived-from,
                x-archived-id, x-archive-reason, x-archived-by, x-archived-at)
                goes to \(FailedQueues.archive) and is confirmed before the
                message is removed. purge-archived removes the copies older than --older-than.
                Example:
                  bookingctl failed discard 3f9a1c2b7d4e5f60 --reason "test message from partner-a"
                """)
        @OptionGroup var common: Common
        @OptionGroup var selection: Selection
        @Option(help: "Why (kept with the audit copy).") var reason: String

        func validate() throws {
            try selection.check(common)
            if reason.trimmingCharacters(in: .whitespaces).isEmpty { throw ValidationError("--reason must not be empty") }
        }

        func run() async throws {
            let queues = common.selectedQueues, selection = self.selection, reason = self.reason
            let who = operatorName(common.global)
            let outcome = try await common.console { console in
                let predicate = try await selection.predicate(console, queues)
                return try await console.discard(queues, reason: reason, by: who, where: predicate)
            }
            report(outcome, verb: "discarded", selection: selection, json: common.global.json)
        }
    }

    struct PurgeArchived: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "purge-archived",
            abstract: "Delete audit copies of discarded messages older than a given age.",
            discussion: """
                Ages: 30d, 12h, 90m, 2w (x-archived-at older than that is deleted).
                Example:
                  bookingctl failed purge-archived --older-than 90d
                """)
        @OptionGroup var global: GlobalOptions
        @Option(help: "Age, e.g. 90d, 12h, 30m, 2w.") var olderThan: String

        func validate() throws {
            if Self.seconds(olderThan) == nil { throw ValidationError("--older-than: give a number with d, h, m, s or w, like 30d") }
        }

        static func seconds(_ text: String) -> TimeInterval? {
            guard let unit = text.last, let n = Double(text.dropLast()), n.isFinite, n >= 0 else { return nil }
            switch unit {
            case "s": return n
            case "m": return n * 60
            case "h": return n * 3600
            case "d": return n * 86_400
            case "w": return n * 604_800
            default: return nil
            }
        }

        func run() async throws {
            let cutoff = Date().addingTimeInterval(-(Self.seconds(olderThan) ?? 0))
            let purged = try await FailedCommand.withConsole(global, serviceUsers: ServiceUsers()) {
                try await $0.purgeArchived(before: cutoff)
            }
            if global.json {
                OperatorRun.printJSON(["purged": purged.removed, "before": ContractFormat.timestamp(cutoff),
                                       "stopped": purged.stopped.map { $0 as Any } ?? NSNull()])
            } else {
                print("purged \(purged.removed) archived message(s) older than \(olderThan) (before \(ContractFormat.timestamp(cutoff)))")
            }
            if let stopped = purged.stopped {
                FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(stopped)\n").utf8))
                BookingCtl.exit(withError: purged.connectionLost ? ExitStatus.unavailable : ExitCode(1))
            }
        }
    }

    /// Which messages retry/discard act on.
    struct Selection: ParsableArguments {
        @Argument(help: "A message id as list prints it (or a unique prefix).") var id: String?
        @Option(help: "Every message of this group, as list prints it (e.g. 'reason:rejected').") var group: String?
        @Flag(help: "Every message of the --queue given.") var all = false

        func validate() throws {
            let chosen = [id != nil, group != nil, all].filter { $0 }.count
            if chosen != 1 { throw ValidationError("give exactly one of ID, --group G, --queue Q --all") }
        }

        /// `--all` only with `--queue`: everything everywhere at once is never
        /// what an operator means.
        func check(_ common: Common) throws {
            if all && common.queues.isEmpty { throw ValidationError("--all needs --queue Q (one queue at a time)") }
        }

        /// The predicate; an id prefix is resolved against a listing first.
        func predicate(_ console: FailedConsole, _ queues: [String]) async throws -> @Sendable (FailedMessage) -> Bool {
            if all { return { _ in true } }
            if let group { return { $0.isIn(group: group) } }
            var full = id ?? ""
            if full.count < 16 {
                full = resolve(full, in: try await console.list(queues).messages)
            }
            let chosen = full
            return { $0.id == chosen }
        }
    }
}

extension FailedGrouping: ExpressibleByArgument {}

/// `prefix` resolved to the one id it starts (at least 6 characters);
/// exits 64 when it names several, returns it unchanged when none.
private func resolve(_ prefix: String, in messages: [FailedMessage]) -> String {
    guard prefix.count >= 6 else {
        if messages.contains(where: { $0.id == prefix }) { return prefix }
        OperatorRun.fail("give the message id as list prints it (at least 6 of its 16 hex digits)", ExitCode(64))
    }
    let ids = Set(messages.map(\.id).filter { $0.hasPrefix(prefix) })
    if ids.count > 1 { OperatorRun.fail("\(prefix) is ambiguous: \(ids.sorted().joined(separator: ", "))", ExitCode(64)) }
    return ids.first ?? prefix
}

/// Who acted, for the audit headers: the login name and the broker user.
private func operatorName(_ global: GlobalOptions) -> String {
    let login = ProcessInfo.processInfo.environment["USER"] ?? "unknown"
    let user = (try? global.brokerURL().user) ?? "?"
    return "\(login) (broker user \(user))"
}

private func messageJSON(_ m: FailedMessage) -> [String: Any] {
    var object: [String: Any] = ["id": m.id, "queue": m.queue, "position": m.position, "type": m.type, "reason": m.reason,
                                 "headers": m.properties.headers.mapValues(OperatorRun.jsonValue)]
    if let at = m.failedAt { object["failedAt"] = ContractFormat.timestamp(at) }
    if let user = m.originalUser { object["originalUser"] = user }
    if let t = m.target { object["retryTo"] = ["exchange": t.exchange, "routingKey": t.routingKey] }
    let p = m.properties
    var properties: [String: Any] = [:]
    if let v = p.messageID { properties["messageId"] = v }
    if let v = p.correlationID { properties["correlationId"] = v }
    if let v = p.replyTo { properties["replyTo"] = v }
    if let v = p.userID { properties["userId"] = v }
    if let v = p.type { properties["type"] = v }
    if let v = p.appID { properties["appId"] = v }
    if let v = p.timestamp { properties["timestamp"] = v }
    object["properties"] = properties
    if let body = try? JSONSerialization.jsonObject(with: Data(m.body), options: [.fragmentsAllowed]) {
        object["body"] = body
    } else {
        object["bodyText"] = String(decoding: m.body, as: UTF8.self)
    }
    return object
}

private func report(_ outcome: FailedConsole.Outcome, verb: String, selection: FailedCommand.Selection, json: Bool) {
    if json {
        OperatorRun.printJSON([
            "count": outcome.done.count,
            verb: outcome.done.map { ["id": $0.id, "queue": $0.queue] },
            "failed": outcome.failed.map { ["id": $0.message.id, "queue": $0.message.queue, "error": $0.error] },
            "stopped": outcome.stopped.map { $0 as Any } ?? NSNull(),
            "incomplete": outcome.incomplete,
        ] as [String: Any])
    } else {
        print("\(verb) \(outcome.done.count) message(s)")
        for m in outcome.done { print("  \(m.id)  \(m.queue)  \(m.type)") }
        for f in outcome.failed {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(f.message.id) (\(f.message.queue)) stays: \(f.error)\n").utf8))
        }
        if let stopped = outcome.stopped {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(stopped)\n").utf8))
        }
    }
    // With an id, the id came from those same first messages: nothing to say.
    for queue in outcome.incomplete where selection.id == nil {
        let next = selection.all ? "run it again for them"
            : "a group's messages among them stay until the ones in front are retried or discarded"
        FileHandle.standardError.write(Data(TerminalText.safe(
            "bookingctl: \(queue): only the first \(QueueSnapshot.maximumHeld) messages were read; more wait behind them, "
            + "not touched: \(next)\n").utf8))
    }
    // The broker went away mid-run: unavailable, as when it cannot be reached.
    if outcome.connectionLost { BookingCtl.exit(withError: ExitStatus.unavailable) }
    // --all with messages left unread is not done (a rerun reads them; it
    // would not for a group, whose unread members wait behind the others).
    let unread = !outcome.incomplete.isEmpty && selection.all
    if !outcome.failed.isEmpty || outcome.stopped != nil || unread { BookingCtl.exit(withError: ExitCode(1)) }
    if outcome.done.isEmpty && !selection.all { BookingCtl.exit(withError: ExitCode(3)) }
}
