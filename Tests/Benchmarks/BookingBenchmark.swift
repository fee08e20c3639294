import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import Logging
import ServiceSupport
import TestSupport

/// `booking.create` end to end through a real booking-handler process
/// (publish with confirm → reply received), beside raw rabbitmq-c RPC round
/// trips against a trivial echo server in the same run, and the handler's
/// resident memory after filling its database.
struct BookingBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "booking",
        abstract: "booking.create end to end (64 in flight and one at a time) vs raw RPC; handler memory after N bookings.")

    @Option(help: "Commands for the pipelined measurement.")
    var pipelined = 20_000
    @Option(help: "Commands for the one-at-a-time measurement.")
    var single = 2_000
    @Option(help: "Requests in flight for the pipelined measurements.")
    var inFlight = 64
    @Option(help: "Total bookings to reach before reading the handler's memory.")
    var fill = 100_000
    @Option(help: "Rooms to spread the bookings over.")
    var rooms = 200
    @Option(help: "Instead of the usual figures: handlers with tracing off, on without an endpoint and exporting to a local stand-in collector, this many rounds each (alternating).")
    var tracing: Int?
    @Option(help: "The booking-handler executable to run (default: the one beside this benchmark).")
    var handlerBinary: String?

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        print("broker: \(broker.url)")
        let client = try await broker.client("bench-client")
        if let tracing {
            try await runTracingComparison(broker: broker, client: client, rounds: max(1, tracing))
            await client.close()
            return
        }
        let baseline = try await BrokerBaseline.measure(client, url: broker.url, pipelined: pipelined, single: single,
                                                        inFlight: inFlight)
        let rawPipelined = baseline.raw.pipelined, rawSingle = baseline.raw.single
        let rawQuorumPipelined = baseline.quorum.pipelined, rawQuorumSingle = baseline.quorum.single
        let rawShapedPipelined = baseline.shaped.pipelined, rawShapedSingle = baseline.shaped.single

        // The handler, as users run it.
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-handler-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let roomsFile = work.appendingPathComponent("rooms.json")
        let roomList = (0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }
        try ContractJSON.encode(roomList).write(to: roomsFile)
        let handler = try launchHandler(url: broker.url, dataDirectory: work.path, roomsFile: roomsFile.path, binary: handlerBinary)
        defer { if handler.isRunning { handler.terminate(); handler.waitUntilExit() } }
        while (try? await client.queueInfo(Topology.handlerCommandsQueue).consumerCount) != 1 {
            try await Task.sleep(for: .milliseconds(100))
        }
        print("booking-handler pid \(handler.processIdentifier) ready; RSS \(String(format: "%.1f", currentRSSMiB(pid: handler.processIdentifier) ?? 0)) MiB")

        let slots = SlotSequence(rooms: rooms)
        let pid = handler.processIdentifier
        let cpu0 = CPUTime.of(pid: pid)
        let swiftPipelined = try await book(client, slots: slots, count: pipelined, inFlight: inFlight)
        let cpu1 = CPUTime.of(pid: pid)
        let swiftSingle = try await book(client, slots: slots, count: single, inFlight: 1)
        let cpu2 = CPUTime.of(pid: pid)
        var total = pipelined + single
        let fillStart = monotonicNow()
        while total < fill {
            let n = min(20_000, fill - total)
            _ = try await book(client, slots: slots, count: n, inFlight: inFlight)
            total += n
        }
        let fillRate = Double(max(0, fill - pipelined - single)) / (Double(monotonicNow() - fillStart) / 1e9)
        let rss = currentRSSMiB(pid: handler.processIdentifier) ?? .nan
        let peak = peakRSSOf(pid: handler.processIdentifier) ?? .nan

        handler.terminate()
        handler.waitUntilExit()
        let leftOver = await Self.purgeDownstream(client)
        await client.close()

        printTable([
            Row(name: "booking.create, \(inFlight) in flight (cmd/s)", swiftRate: swiftPipelined.rate, rawRate: rawPipelined.0,
                swiftP50: swiftPipelined.latencies.percentile(50), rawP50: rawPipelined.1.percentile(50),
                swiftP99: swiftPipelined.latencies.percentile(99), rawP99: rawPipelined.1.percentile(99)),
            Row(name: "booking.create, one at a time (cmd/s)", swiftRate: swiftSingle.rate, rawRate: rawSingle.0,
                swiftP50: swiftSingle.latencies.percentile(50), rawP50: rawSingle.1.percentile(50),
                swiftP99: swiftSingle.latencies.percentile(99), rawP99: rawSingle.1.percentile(99)),
        ])
        print("(raw = RPC round trip to a raw rabbitmq-c echo server, no work: the transport's ceiling)")
        print(String(format: "raw echo through a durable quorum queue (the handler's queue type): %d in flight %.0f calls/s "
                     + "(p50 %.2f ms, p99 %.2f ms); one at a time %.0f calls/s (p50 %.2f ms, p99 %.2f ms)",
                     inFlight, rawQuorumPipelined.0, rawQuorumPipelined.1.percentile(50), rawQuorumPipelined.1.percentile(99),
                     rawQuorumSingle.0, rawQuorumSingle.1.percentile(50), rawQuorumSingle.1.percentile(99)))
        print(String(format: "raw booking-shaped echo (quorum queue; reply + 2 events, persistent, confirmed before the ack): %d in flight %.0f calls/s "
                     + "(p50 %.2f ms, p99 %.2f ms); one at a time %.0f calls/s (p50 %.2f ms, p99 %.2f ms)",
                     inFlight, rawShapedPipelined.0, rawShapedPipelined.1.percentile(50), rawShapedPipelined.1.percentile(99),
                     rawShapedSingle.0, rawShapedSingle.1.percentile(50), rawShapedSingle.1.percentile(99)))
        print("failed replies: pipelined \(swiftPipelined.failures), single \(swiftSingle.failures)")
        // The handler's own CPU per booking in each phase, up to its last
        // reply (the measure of the handler's CPU target; the client's CPU is this process's and
        // not counted; `benchmarks pipeline` also counts the drain after).
        for (name, from, to, count) in [("\(inFlight) in flight", cpu0, cpu1, pipelined), ("one at a time", cpu1, cpu2, single)] {
            guard let from, let to, count > 0 else { continue }
            let user = (to.user - from.user) / Double(count) * 1e6, system = (to.system - from.system) / Double(count) * 1e6
            print(String(format: "booking-handler CPU per booking, %@: user %.0f µs, system %.0f µs, total %.0f µs",
                         name, user, system, user + system))
        }
        if leftOver > 0 { print("purged \(leftOver) events this run left in the pass sender's and the projector's queues (its bookings' and the echo's)") }
        print(String(format: "fill to %d bookings: %.0f cmd/s; handler RSS after: %.1f MiB (peak %.1f MiB); handler exit status %d",
                     total, fillRate, rss, peak, handler.terminationStatus))
    }

    /// Empties the pass sender's and the projector's queues; how many
    /// messages they held. A benchmark that runs handlers alone calls it at
    /// its end: on a broker that outlives the run, the handlers' events (and
    /// the echo's) would wait there for whichever benchmark starts those
    /// services next (`benchmarks pipeline` purges them itself too).
    static func purgeDownstream(_ client: AMQPConnection) async -> Int {
        var purged = 0
        for queue in [Topology.passSenderEventsQueue, Topology.projectorEventsQueue] {
            purged += (try? await client.purgeQueue(queue)) ?? 0
        }
        return purged
    }

    /// A release booking-handler beside this executable, or `binary`;
    /// `extra` adds to or overrides its environment. Other benchmarks call
    /// this on an unparsed `BookingBenchmark()`, so it reads none of its
    /// options (``handlerBinary`` is passed in by this command's own runs).
    func launchHandler(url: AMQPURL, dataDirectory: String, roomsFile: String, binary: String? = nil,
                       environment extra: [String: String] = [:]) throws -> Process {
        let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = binary.map { URL(fileURLWithPath: $0) } ?? binDirectory.appendingPathComponent("booking-handler")
        guard FileManager.default.isExecutableFile(atPath: process.executableURL!.path) else {
            throw ValidationError("build the handler first: swift build -c release --product booking-handler")
        }
        // The benchmark picks the store (`extra`), not the shell.
        var environment = ServiceProcess.inheritedEnvironment
        environment["AMQP_URL"] = url.urlStringWithCredentials
        environment["DATA_DIR"] = dataDirectory
        environment["ROOMS_FILE"] = roomsFile
        environment["LOG_LEVEL"] = "warning"
        environment.merge(extra) { _, new in new }
        process.environment = environment
        try process.run()
        return process
    }

    struct Result {
        var rate: Double
        var latencies: Latencies
        var failures: Int
    }

    func book(_ client: AMQPConnection, slots: SlotSequence, count: Int, inFlight: Int) async throws -> Result {
        try await Self.book(client, slots: slots, count: count, inFlight: inFlight)
    }

    /// Books `count` slots, `inFlight` at a time, each a `call` answered by
    /// the handler; `onReply` sees each reply with its arrival time.
    static func book(_ client: AMQPConnection, slots: SlotSequence, count: Int, inFlight: Int,
                     onReply: (@Sendable (CommandReply, UInt64) -> Void)? = nil) async throws -> Result {
        let start = monotonicNow()
        let perWorker = try await withThrowingTaskGroup(of: ([UInt64], Int).self) { group in
            for _ in 0..<inFlight {
                group.addTask {
                    var samples: [UInt64] = []
                    var failures = 0
                    while let command = slots.next(limit: count) {
                        let properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
                        let t0 = monotonicNow()
                        let reply = try await client.call(command, exchange: Topology.commandsExchange, routingKey: "booking.create",
                                                          properties: properties, timeout: .seconds(60))
                        let t1 = monotonicNow()
                        samples.append(t1 - t0)
                        let decoded = try ContractJSON.decode(CommandReply.self, from: reply.body)
                        if !decoded.isOK { failures += 1 }
                        onReply?(decoded, t1)
                    }
                    return (samples, failures)
                }
            }
            var all: [([UInt64], Int)] = []
            for try await r in group { all.append(r) }
            return all
        }
        slots.resetLimit()
        var latencies = Latencies()
        for (samples, _) in perWorker { latencies.add(contentsOf: samples) }
        return Result(rate: Double(latencies.samples.count) / (Double(monotonicNow() - start) / 1e9),
                      latencies: latencies, failures: perWorker.map(\.1).reduce(0, +))
    }
}

/// Distinct free slots: (day, room, quarter hour) in order, tomorrow on.
final class SlotSequence: @unchecked Sendable {  // all state behind `lock`
    private let lock = NSLock()
    private let rooms: Int
    private var index = 0
    private var issuedInRound = 0
    private var dates: [String] = []

    /// `startDay`: days after tomorrow where the sequence begins (to stay
    /// clear of bookings a benchmark wrote by other means).
    ///
    /// `spread`: consecutive bookings go to different rooms (room after
    /// room, then the next quarter hour), instead of filling one room's
    /// day before the next: bookings in flight together then share no
    /// room-day, as in an office with many rooms.
    init(rooms: Int, startDay: Int = 0, spread: Bool = false) {
        self.rooms = rooms
        self.startDay = startDay
        self.spread = spread
    }
    private let startDay: Int
    private let spread: Bool

    /// The next command body, or nil once `limit` were handed out this round.
    func next(limit: Int) -> [UInt8]? {
        lock.withLock {
            guard issuedInRound < limit else { return nil }
            issuedInRound += 1
            let perDay = rooms * 48
            let day = index / perDay + 1 + startDay
            let room = spread ? (index % perDay) % rooms : (index % perDay) / 48
            let quarter = spread ? (index % perDay) / rooms : index % 48
            index += 1
            while dates.count < day { dates.append(localDate(daysFromNow: dates.count + 1)) }
            let start = 7 * 60 + quarter * 15
            let json = #"{"room":"Room \#(room)","date":"\#(dates[day - 1])","start":"\#(hhmm(start))","end":"\#(hhmm(start + 15))","title":"Benchmark","attendees":[{"name":"Ada Lovelace","email":"ada@example.com","phone":"0170 1234567"}]}"#
            return Array(json.utf8)
        }
    }

    func resetLimit() { lock.withLock { issuedInRound = 0 } }

    private func hhmm(_ minutes: Int) -> String { String(format: "%02d:%02d", minutes / 60, minutes % 60) }

}

/// Peak resident set size of a process, MiB (VmHWM).
func peakRSSOf(pid: Int32) -> Double? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return (line.split(separator: " ").compactMap { Double($0) }.first ?? 0) / 1024
    }
    return nil
}
