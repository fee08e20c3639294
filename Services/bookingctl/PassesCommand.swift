import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import FailedMessages
import BrokerObjects

/// `bookingctl passes …`: what operators do with passes that could not be
/// delivered (the `passes.failed` queue).
struct PassesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passes",
        abstract: "Inspect and act on passes that could not be delivered.",
        subcommands: [FailedPassesCommand.self])
}

/// `bookingctl passes failed list|show|retry|discard`.
struct FailedPassesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failed",
        abstract: "The passes.failed queue: list, show, retry, discard.",
        discussion: """
            Reading never loses or reorders passes.failed: messages are held
            unacknowledged by a connection of its own and go back in queue
            order when it closes (also when bookingctl dies). retry and discard remove a
            message only after its replacement (a retry message for the pass
            sender, or the audit copy in pass-sender.discarded) was confirmed.
            At most the first 65535 messages are read; list, retry and
            discard say so when more wait behind them ("incomplete" in
            --json names the queue, as bookingctl failed does).

            Exit status: 0 done; 1 a pass could not be moved (it and the
            rest stay), or --all left passes unread behind the first 65535;
            3 nothing matched; 64 bad usage; 69 broker unreachable or the
            connection lost during the run (what was moved is still listed).
            """,
        subcommands: [List.self, Show.self, Retry.self, Discard.self],
        defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Count, oldest, and passes grouped by error code and by room.",
            discussion: """
                Example:
                  bookingctl passes failed list
                  bookingctl passes failed list --json | jq '.passes[].key'
                """)
        @OptionGroup var global: GlobalOptions

        func run() async throws {
            let listing = try await withQueue(global) { try await $0.read() }
            let entries = listing.entries
            if global.json {
                var object = listJSON(entries)
                object["incomplete"] = listing.isComplete ? [] : [Topology.passesFailedQueue]
                printJSON(object)
                return
            }
            print("passes.failed: \(entries.count) pass(es)")
            if !listing.isComplete {
                print("  (more passes wait behind the first \(QueueSnapshot.maximumHeld), not read; act on these first)")
            }
            guard let oldest = entries.first else { return }
            print("oldest: \(oldest.key) (last failure \(oldest.pass?.lastFailureAt ?? "?"))")
            print("by error code: " + grouped(entries) { $0.pass.map { $0.lastErrorCode.map(String.init) ?? "none" } ?? "unreadable" })
            print("by room:       " + grouped(entries) { $0.pass?.room ?? "unreadable" })
            print("by kind:       " + grouped(entries) { $0.pass?.noticeKind.rawValue ?? "unreadable" })
            print("")
            for e in entries { print(line(e)) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Everything about one failed pass.",
            discussion: """
                KEY is <bookingId>:<version>:<attendeeIndex> for a pass and
                <bookingId>:<version>:<kind>:<attendeeIndex> for a notice
                (rescheduled, cancelled, removed), as list prints it.
                Example:
                  bookingctl passes failed show 5b1c…:2:1
                """)
        @OptionGroup var global: GlobalOptions
        @Argument(help: "The key <bookingId>:<version>:<attendeeIndex> (a pass) or <bookingId>:<version>:<kind>:<attendeeIndex> (a notice).") var key: String

        func run() async throws {
            let listing = try await withQueue(global) { try await $0.read() }
            guard let entry = listing.entries.first(where: { $0.key == key }) else {
                let unread = listing.isComplete ? "" : " (only its first \(QueueSnapshot.maximumHeld) messages were read)"
                FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: no pass \(key) in passes.failed\(unread)\n").utf8))
                throw ExitCode(3)
            }
            if global.json {
                printJSON(entryJSON(entry))
                return
            }
            if let p = entry.pass {
                print("""
                    pass        \(entry.key)   (position \(entry.position) in passes.failed)
                    kind        \(p.noticeKind.rawValue)
                    attendee    #\(p.attendeeIndex) \(p.name) <\(p.email)> \(p.phone)
                    booking     \(p.bookingId) v\(p.version): \(p.title), \(p.room) \(p.date) \(p.start)-\(p.end)
                    attempts    \(p.attempts), first failure \(p.firstFailureAt), last failure \(p.lastFailureAt)
                    last error  \(p.lastErrorCode.map { "\($0) " } ?? "")\(p.lastErrorText)
                    """)
            } else {
                print("message \(entry.key) is not a passes.failed body:\n\(String(decoding: entry.body, as: UTF8.self))")
            }
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send failed passes again (attempts reset).",
            discussion: """
                Moves the chosen passes back into the pass sender (queue
                pass-sender.retry, publisher-confirmed) and only then removes
                them from passes.failed. A pass that was delivered meanwhile is
                not sent again (the pass sender's ledger knows it).
                Examples:
                  bookingctl passes failed retry 5b1c…:2:1
                  bookingctl passes failed retry --booking 5b1c…
                  bookingctl passes failed retry --all
                """)
        @OptionGroup var global: GlobalOptions
        @OptionGroup var selection: Selection

        func run() async throws {
            let predicate = try selection.predicate()
            let moved = try await reportingPartialMoves(verb: "retried", json: global.json) {
                try await withQueue(global) { try await $0.retry(where: predicate) }
            }
            try report(moved, verb: "retried", json: global.json, selection: selection)
        }
    }

    struct Discard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove failed passes for good, with a reason.",
            discussion: """
                The passes leave passes.failed; a copy with the reason (headers
                discard-reason, discarded-by, discarded-at) goes to the queue
                pass-sender.discarded first.
                Example:
                  bookingctl passes failed discard 5b1c…:2:1 --reason "attendee left"
                """)
        @OptionGroup var global: GlobalOptions
        @OptionGroup var selection: Selection
        @Option(help: "Why (kept with the audit copy).") var reason: String

        func validate() throws {
            if reason.trimmingCharacters(in: .whitespaces).isEmpty { throw ValidationError("--reason must not be empty") }
        }

        func run() async throws {
            let predicate = try selection.predicate()
            let who = ProcessInfo.processInfo.environment["USER"] ?? "bookingctl"
            let gone = try await reportingPartialMoves(verb: "discarded", json: global.json) {
                try await withQueue(global) { try await $0.discard(reason: reason, by: who, where: predicate) }
            }
            try report(gone, verb: "discarded", json: global.json, selection: selection)
        }
    }

    /// Which passes retry/discard act on.
    struct Selection: ParsableArguments {
        @Argument(help: "A key <bookingId>:<version>:<attendeeIndex> (pass) or <bookingId>:<version>:<kind>:<attendeeIndex> (notice).")
        var key: String?
        @Option(help: "Every failed pass and notice of this booking id.") var booking: String?
        @Flag(help: "Every failed pass and notice.") var all = false
        @Option(help: "With --booking or --all: only this kind (pass, rescheduled, cancelled, removed).") var kind: String?

        func validate() throws {
            let chosen = [key != nil, booking != nil, all].filter { $0 }.count
            if chosen != 1 { throw ValidationError("give exactly one of KEY, --booking ID, --all") }
            if let kind {
                if NoticeKind(rawValue: kind) == nil {
                    throw ValidationError("--kind must be one of \(NoticeKind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                if key != nil { throw ValidationError("--kind goes with --booking or --all (a KEY names its kind)") }
            }
        }

        func predicate() throws -> @Sendable (FailedPassEntry) -> Bool {
            let key = self.key, booking = self.booking, all = self.all, kind = self.kind.flatMap(NoticeKind.init(rawValue:))
            return { entry in
                guard let pass = entry.pass else { return false }
                if let kind, pass.noticeKind != kind { return false }
                if all { return true }
                if let key { return entry.key == key }
                return entry.pass?.bookingId == booking
            }
        }
    }
}

/// One run over `passes.failed` under the operators' lock (see ``OperatorRun``).
private func withQueue<T: Sendable>(_ global: GlobalOptions, _ body: (FailedPassQueue) async throws -> T) async throws -> T {
    try await OperatorRun.run(global) { connection in
        let queue = FailedPassQueue(connection: connection)
        do {
            try await queue.declare()
        } catch {
            OperatorRun.fail("cannot use \(Topology.passesFailedQueue): \(error)",
                             OperatorRunError.isLoss(error) ? ExitStatus.unavailable : ExitCode(1))
        }
        return try await body(queue)
    }
}

private func grouped(_ entries: [FailedPassEntry], by key: (FailedPassEntry) -> String) -> String {
    OperatorRun.counts(entries, by: key).map { "\($0.key)=\($0.count)" }.joined(separator: " ")
}

private func line(_ e: FailedPassEntry) -> String {
    guard let p = e.pass else { return "\(e.key)  (unreadable body)" }
    return "\(e.key)  \(p.noticeKind.rawValue)  \(p.name) <\(p.email)>  \(p.room) \(p.date) \(p.start)  attempts=\(p.attempts)  "
        + "error=\(p.lastErrorCode.map(String.init) ?? "none") \(p.lastErrorText)  last=\(p.lastFailureAt)"
}

private func entryJSON(_ e: FailedPassEntry) -> [String: Any] {
    var object: [String: Any] = ["key": e.key, "position": e.position]
    if let id = e.messageID { object["messageId"] = id }
    if let p = e.pass, let data = try? ContractJSON.encode(p), let body = try? JSONSerialization.jsonObject(with: data) {
        object["pass"] = body
    } else {
        object["body"] = String(decoding: e.body, as: UTF8.self)
    }
    return object
}

private func listJSON(_ entries: [FailedPassEntry]) -> [String: Any] {
    var byCode: [String: Int] = [:], byRoom: [String: Int] = [:], byKind: [String: Int] = [:]
    for e in entries {
        byCode[e.pass.map { $0.lastErrorCode.map(String.init) ?? "none" } ?? "unreadable", default: 0] += 1
        byRoom[e.pass?.room ?? "unreadable", default: 0] += 1
        byKind[e.pass?.noticeKind.rawValue ?? "unreadable", default: 0] += 1
    }
    var object: [String: Any] = ["count": entries.count, "byErrorCode": byCode, "byRoom": byRoom, "byKind": byKind,
                                 "passes": entries.map(entryJSON)]
    if let oldest = entries.first { object["oldest"] = entryJSON(oldest) }
    return object
}

/// Runs a retry or discard; when it stopped partway, reports what it moved
/// (as a finished run does, plus the stop on stderr and `stopped` in JSON)
/// and exits 69 for a lost connection, else 1.
private func reportingPartialMoves(verb: String, json: Bool,
                                   _ body: () async throws -> FailedPassQueue.Listing) async throws -> FailedPassQueue.Listing {
    do {
        return try await body()
    } catch let partial as PartiallyMoved {
        if json {
            printJSON(["count": partial.moved.count, verb: partial.moved.map(\.key), "stopped": partial.description])
        } else {
            print("\(verb) \(partial.moved.count) pass(es)")
            for e in partial.moved { print("  \(e.key)") }
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(partial.description)\n").utf8))
        }
        BookingCtl.exit(withError: partial.connectionLost || OperatorRunError.isLoss(partial.error) ? ExitStatus.unavailable : ExitCode(1))
    }
}

/// Prints what a finished retry or discard moved. Exits 1 when `--all`
/// left passes unread behind the first ``QueueSnapshot/maximumHeld`` (a
/// rerun reaches them), 3 when a key or booking matched nothing read.
private func report(_ moved: FailedPassQueue.Listing, verb: String, json: Bool, selection: FailedPassesCommand.Selection) throws {
    let entries = moved.entries
    if json {
        printJSON(["count": entries.count, verb: entries.map(\.key),
                   "incomplete": moved.isComplete ? [] : [Topology.passesFailedQueue]] as [String: Any])
    } else {
        print("\(verb) \(entries.count) pass(es)")
        for e in entries { print("  \(e.key)") }
    }
    if !moved.isComplete {
        let next = selection.all ? "run it again for them"
            : "any of them chosen stay until the ones in front are retried or discarded"
        FileHandle.standardError.write(Data(TerminalText.safe(
            "bookingctl: passes.failed: only the first \(QueueSnapshot.maximumHeld) messages were read; more wait behind them, "
            + "not touched: \(next)\n").utf8))
        if selection.all { throw ExitCode(1) }
    }
    if entries.isEmpty && !selection.all { throw ExitCode(3) }
}

private func printJSON(_ object: Any) { OperatorRun.printJSON(object) }
