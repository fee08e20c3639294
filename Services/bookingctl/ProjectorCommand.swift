import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import BrokerObjects
import Synchronization

/// `bookingctl projector …`: maintenance of the availability projector.
struct ProjectorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "projector",
        abstract: "Maintain the availability projector's read model.",
        subcommands: [ProjectorRebuildCommand.self, ProjectorStatusCommand.self, ProjectorCancelCommand.self])
}

/// Options the projector subcommands share.
struct ProjectorTarget: ParsableArguments {
    @Option(help: "The replica (its PROJECTOR_INSTANCE); default the single projector.")
    var instance: String?

    func validate() throws {
        if let instance { _ = try ProjectorQueues(instance: instance) }
    }

    var controlQueue: String {
        get throws { try instance.map { try ProjectorQueues(instance: $0).control } ?? ProjectorControl.queue }
    }
}

/// One connection to the projector's control queue.
struct ProjectorControlClient: Sendable {
    let connection: AMQPConnection
    let queue: String

    static func connect(_ global: GlobalOptions, _ target: ProjectorTarget) async throws -> ProjectorControlClient {
        do {
            return ProjectorControlClient(connection: try await CommandClient(global: global).connect(),
                                          queue: try target.controlQueue)
        } catch let error as CLIError {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(error.description)\n").utf8))
            throw error.exit
        }
    }

    /// Sends a control request of `type`. It expires after `expiresAfter`
    /// seconds in the queue and does not survive a broker restart: a request
    /// nobody picks up in time must not run later (when a stopped projector
    /// comes back, or once per retry of this command).
    func call(_ type: String, expiresAfter: Double, wait: Duration) async throws(AMQPError) -> ProjectorControl.Reply {
        var properties = AMQPProperties.persistentJSON(type: type, messageID: RandomID.uuidString())
        properties.appID = "bookingctl"
        properties.deliveryMode = .transient
        properties.expiration = String(Int64(max(1, expiresAfter) * 1000))
        let message = try await connection.call(Array("{}".utf8), exchange: "", routingKey: queue,
                                                properties: properties, timeout: wait)
        do {
            return try ContractJSON.decode(ProjectorControl.Reply.self, from: message.body)
        } catch {
            throw AMQPError(.protocolError, "unreadable answer from the projector: \(error)")
        }
    }

    /// Reports a failed call the way every projector subcommand does, and
    /// the exit status for it: 68 without a projector, 69 without an answer.
    func failure(_ error: AMQPError, json: Bool) -> ExitCode {
        let text = error.code == .unroutable
            ? "no availability projector: queue \(queue) does not exist"
            : "no answer from the availability projector: \(error)"
        report(text, json: json)
        return error.code == .unroutable ? ExitStatus.unroutable : ExitStatus.unavailable
    }

    func report(_ text: String, json: Bool) {
        if json {
            let body = try? JSONSerialization.data(withJSONObject: ["ok": false, "error": ["code": NSNull(), "text": text]],
                                                   options: [.sortedKeys])
            print(String(decoding: body ?? Data(), as: UTF8.self))
        } else {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(text)\n").utf8))
        }
    }
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
            availability.changed.

            A rebuild has no time limit; the projector fails it when the replay
            delivers nothing for REBUILD_STALL_TIMEOUT. While it runs, progress goes
            to stderr: a bar on a terminal, a line every --progress-every seconds
            otherwise (the expected counts are the live model's). Ctrl-C cancels
            the rebuild (the live model stays as it was); a second Ctrl-C leaves
            without waiting for the projector's answer.

            Exits 0 when the new model is live, 1 on an error reply (code and text
            printed; 9002 when cancelled), 68 when no projector runs (its control
            queue does not exist), 69 when the projector stopped answering or
            --wait passed.

            Example:
              bookingctl projector rebuild --amqp-url amqp://ops:secret@broker:5672/%2f
              bookingctl projector rebuild --json --progress-every 30
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: ProjectorTarget

    @Option(help: "Seconds to wait for the rebuild at most (default: as long as it makes progress).")
    var wait: Double?

    @Option(name: .customLong("progress-every"),
            help: "Seconds between progress reports (default 1 on a terminal, else 10).")
    var progressEvery: Double?

    @Flag(help: "No progress reports.")
    var quiet = false

    func validate() throws {
        if let wait { try GlobalOptions.checkSeconds(wait, "--wait") }
        if let progressEvery { try GlobalOptions.checkSeconds(progressEvery, "--progress-every") }
    }

    func run() async throws {
        let client = try await ProjectorControlClient.connect(global, target)
        let cancel = CancelOnInterrupt()
        let rebuild = RebuildCall()
        let started = ContinuousClock.now
        let waitLimit = Duration.seconds(wait ?? GlobalOptions.longestWait)
        let pickup = global.timeout
        Task {
            // The rebuild request must be picked up within --timeout; its
            // answer comes when the rebuild is over.
            let result: Result<ProjectorControl.Reply, AMQPError>
            do {
                result = .success(try await client.call(ProjectorControl.rebuildType, expiresAfter: pickup, wait: waitLimit))
            } catch let error as AMQPError {
                result = .failure(error)
            } catch {
                result = .failure(AMQPError(.protocolError, "\(error)"))
            }
            rebuild.finish(result)
        }
        let terminal = isatty(STDERR_FILENO) == 1
        let progress = RebuildProgress(terminal: terminal, enabled: !quiet)
        let interval = Duration.seconds(progressEvery ?? (terminal ? 1 : 10))
        var nextReport = ContinuousClock.now + .milliseconds(500)
        var cancelSent = false
        var seenReplayId: String?
        var goneSince: ContinuousClock.Instant?
        while rebuild.result == nil {
            try? await Task.sleep(for: .milliseconds(100))
            if rebuild.result != nil { break }
            if cancel.requested && !cancelSent {
                cancelSent = true
                progress.clear()
                FileHandle.standardError.write(Data("bookingctl: cancelling the rebuild (Ctrl-C again to leave at once)\n".utf8))
                _ = try? await client.call(ProjectorControl.cancelType, expiresAfter: global.timeout,
                                           wait: .seconds(global.timeout))
            }
            if ContinuousClock.now - started > waitLimit {
                progress.clear()
                client.report("no answer from the availability projector within --wait \(Int(wait ?? 0)) s; the rebuild may still run "
                              + "(bookingctl projector status, bookingctl projector cancel)", json: global.json)
                await client.connection.close()
                throw ExitStatus.unavailable
            }
            guard ContinuousClock.now >= nextReport else { continue }
            nextReport = ContinuousClock.now + interval
            // The status doubles as the liveness check: a projector that
            // restarted has forgotten the rebuild and will never answer it.
            let status = try? await client.call(ProjectorControl.statusType, expiresAfter: global.timeout,
                                                wait: .seconds(global.timeout)).status
            if let status, status.running, seenReplayId == nil || seenReplayId == status.replayId {
                seenReplayId = status.replayId
                goneSince = nil
                progress.show(status)
            } else if rebuild.result == nil {
                let since = goneSince ?? .now
                goneSince = since
                // Not yet picked up, just finished (its answer on the way),
                // or gone: only the last lasts.
                if ContinuousClock.now - since > .seconds(max(global.timeout, 5) * 3) {
                    progress.clear()
                    client.report("the availability projector no longer runs this rebuild and its answer did not come "
                                  + "(restarted, unreachable, or finished with the answer lost); a rebuild swaps its model "
                                  + "in whole or not at all — check `bookingctl projector status`, and run the rebuild again if in doubt",
                                  json: global.json)
                    await client.connection.close()
                    throw ExitStatus.unavailable
                }
            }
        }
        progress.clear()
        await client.connection.close()
        let reply: ProjectorControl.Reply
        switch rebuild.result! {
        case .success(let r): reply = r
        case .failure(let error): throw client.failure(error, json: global.json)
        }
        if global.json {
            print(String(decoding: try ContractJSON.encode(reply), as: UTF8.self))
        } else if let result = reply.rebuild {
            print(String(format: "rebuilt the read model in %.1f s: %d rooms, %d bookings replayed, %d live events during the rebuild, %d room-days changed",
                         result.seconds, result.rooms, result.bookings, result.liveEvents, result.changedDays))
            if let finish = result.finishSeconds {
                print(String(format: "replay %.1f s, room-days and swap %.1f s", result.seconds - finish, finish))
            }
            print("replay id: \(result.replayId)")
        } else if let error = reply.error {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: rebuild failed (\(error.code)): \(error.text)\n").utf8))
        }
        if !reply.ok { throw ExitCode(1) }
    }
}

/// `bookingctl projector status`: the running rebuild's progress.
struct ProjectorStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the progress of the projector's running rebuild.",
        discussion: "Exits 0 (also when no rebuild runs), 68 without a projector, 69 without an answer.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: ProjectorTarget

    func run() async throws {
        let client = try await ProjectorControlClient.connect(global, target)
        let reply: ProjectorControl.Reply
        do {
            reply = try await client.call(ProjectorControl.statusType, expiresAfter: global.timeout, wait: .seconds(global.timeout))
        } catch {
            await client.connection.close()
            throw client.failure(error, json: global.json)
        }
        await client.connection.close()
        if global.json {
            print(String(decoding: try ContractJSON.encode(reply), as: UTF8.self))
        } else if let status = reply.status {
            print(status.running ? RebuildProgress.line(status) : "no rebuild is running")
        }
    }
}

/// `bookingctl projector cancel`: cancel the running rebuild.
struct ProjectorCancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel the projector's running rebuild; the live model stays as it was.",
        discussion: """
            The rebuild's own requester gets error 9002. The booking handler may go on
            publishing the cancelled replay for a while (the projector drops it); a new
            rebuild started meanwhile can be refused with 2003 "already running" until
            it ends. Exits 0 (also when no rebuild was running), 1 when the rebuild was
            already swapping its new model in (too late: it finishes), 68 without a
            projector, 69 without an answer.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: ProjectorTarget

    func run() async throws {
        let client = try await ProjectorControlClient.connect(global, target)
        let reply: ProjectorControl.Reply
        do {
            reply = try await client.call(ProjectorControl.cancelType, expiresAfter: global.timeout, wait: .seconds(global.timeout))
        } catch {
            await client.connection.close()
            throw client.failure(error, json: global.json)
        }
        await client.connection.close()
        if global.json {
            print(String(decoding: try ContractJSON.encode(reply), as: UTF8.self))
        } else if let status = reply.status {
            print(status.running ? "cancelled: " + RebuildProgress.line(status) : "no rebuild is running")
        } else if let error = reply.error {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: not cancelled (\(error.code)): \(error.text)\n").utf8))
        }
        if !reply.ok { throw ExitCode(1) }
    }
}

/// The rebuild request's answer, set once by the task that waits for it.
final class RebuildCall: Sendable {
    private let box = Mutex<Result<ProjectorControl.Reply, AMQPError>?>(nil)
    var result: Result<ProjectorControl.Reply, AMQPError>? { box.withLock { $0 } }
    func finish(_ result: Result<ProjectorControl.Reply, AMQPError>) { box.withLock { $0 = result } }
}

/// Ctrl-C while a rebuild runs: the first asks for a cancel (the rebuild
/// loop sends it), the second exits at once (130).
///
/// A plain signal handler on an atomic counter rather than a dispatch
/// signal source: it needs nothing from the runtime (lock-free atomics and
/// `_exit` are async-signal-safe), whatever the platform's dispatch does
/// with ignored or blocked signals.
struct CancelOnInterrupt {
    init() {
        signal(SIGINT) { _ in
            if interrupts.add(1, ordering: .relaxed).newValue >= 2 { _exit(130) }
        }
        // A parent may hand SIGINT down blocked (test runners, some shells'
        // background jobs): then Ctrl-C would never reach the handler.
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    var requested: Bool { interrupts.load(ordering: .relaxed) > 0 }
}

/// Ctrl-Cs received (``CancelOnInterrupt``).
private let interrupts = Atomic<Int>(0)

/// Progress on stderr: one line redrawn on a terminal, lines in a log.
struct RebuildProgress {
    let terminal: Bool
    let enabled: Bool

    func show(_ status: ProjectorControl.RebuildStatus) {
        guard enabled else { return }
        if terminal {
            FileHandle.standardError.write(Data("\r\u{1B}[2K\(Self.bar(status))".utf8))
        } else {
            FileHandle.standardError.write(Data(TerminalText.safe("bookingctl: \(Self.line(status))\n").utf8))
        }
    }

    func clear() {
        if enabled && terminal { FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8)) }
    }

    /// `rebuild-…: 370512 of ~1000000 bookings (37%), 6 of ~6 rooms, 12345 messages/s, 31 s`
    static func line(_ s: ProjectorControl.RebuildStatus) -> String {
        var text = "\(s.replayId ?? "rebuild"): \(s.bookings)"
        if let expected = s.expectedBookings, expected > 0 { text += " of ~\(expected)" }
        text += " bookings"
        if let percent = percent(s) { text += " (\(percent)%)" }
        text += ", \(s.rooms)" + (s.expectedRooms.map { " of ~\($0)" } ?? "") + " rooms"
        text += ", \(rate(s)) messages/s, \(Int(s.seconds)) s"
        if s.liveEvents > 0 { text += ", \(s.liveEvents) live events" }
        if s.secondsSinceProgress >= 5 {
            text += ", nothing new for \(Int(s.secondsSinceProgress)) s (gives up at \(Int(s.stallTimeoutSeconds)) s)"
        }
        return text
    }

    /// `[##########----------]  50%  500000/~1000000 bookings  12345/s  0:41`
    static func bar(_ s: ProjectorControl.RebuildStatus) -> String {
        let width = 24
        let elapsed = String(format: "%ld:%02ld", Int(s.seconds) / 60, Int(s.seconds) % 60)
        guard let percent = percent(s), let expected = s.expectedBookings else {
            return "rebuilding: \(s.rooms) rooms, \(s.bookings) bookings  \(rate(s))/s  \(elapsed)"
        }
        let filled = width * percent / 100
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            + "] \(String(format: "%3ld", percent))%  \(s.bookings)/~\(expected) bookings  \(rate(s))/s  \(elapsed)"
    }

    /// Share of the expected bookings, at most 99 until the projector says done.
    static func percent(_ s: ProjectorControl.RebuildStatus) -> Int? {
        guard let expected = s.expectedBookings, expected > 0 else { return nil }
        return min(99, s.bookings * 100 / expected)
    }

    static func rate(_ s: ProjectorControl.RebuildStatus) -> Int {
        s.seconds > 0 ? Int(Double(s.rooms + s.bookings) / s.seconds) : 0
    }
}
