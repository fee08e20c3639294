import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import Logging
import ServiceSupport
import TestSupport

/// `booking.create` through booking-handler processes on each store, in one
/// run: one handler on SQLite, one on PostgreSQL, two on PostgreSQL (the
/// set run beyond one machine, here on one). For each: commands/s with 64
/// in flight and one at a time, p50/p99, and CPU per booking of the
/// handlers and of the PostgreSQL server processes (from `/proc`).
struct StoresBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stores",
        abstract: "booking.create: one handler on SQLite vs one and two on PostgreSQL, same run.")

    @Option(help: "Commands for the pipelined measurement of each configuration.")
    var pipelined = 10_000
    @Option(help: "Commands for the one-at-a-time measurement of each configuration.")
    var single = 1_000
    @Option(help: "Requests in flight for the pipelined measurement.")
    var inFlight = 64
    @Option(help: "Rooms to spread the bookings over.")
    var rooms = 200

    struct Configuration {
        var name: String
        var handlers: Int
        var postgres: Bool
    }

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        let databaseURL = try TestPostgres.databaseURL()
        print("broker: \(broker.url); PostgreSQL: \(databaseURL.replacingOccurrences(of: #":[^:@/]+@"#, with: ":***@", options: .regularExpression))")
        let client = try await broker.client("bench-stores")
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-stores-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let roomsFile = work.appendingPathComponent("rooms.json")
        try ContractJSON.encode((0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }).write(to: roomsFile)

        let configurations = [
            Configuration(name: "SQLite, 1 handler", handlers: 1, postgres: false),
            Configuration(name: "PostgreSQL, 1 handler", handlers: 1, postgres: true),
            Configuration(name: "PostgreSQL, 2 handlers", handlers: 2, postgres: true),
        ]
        var lines: [String] = []
        for (index, configuration) in configurations.enumerated() {
            // Each configuration books into an empty store, from an empty queue.
            _ = try? await client.purgeQueue(Topology.handlerCommandsQueue)
            let schema = "bench_\(getpid())_\(index)"
            var environment = ["HTTP_PORT": "0"]
            if configuration.postgres { environment["DATABASE_URL"] = databaseURL + "?schema=\(schema)" }
            let handlers = try (0..<configuration.handlers).map { i in
                let directory = work.appendingPathComponent("\(index)-\(i)")
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                return try BookingBenchmark().launchHandler(url: broker.url, dataDirectory: directory.path,
                                                            roomsFile: roomsFile.path, environment: environment)
            }
            defer { for h in handlers where h.isRunning { h.terminate(); h.waitUntilExit() } }
            while (try? await client.queueInfo(Topology.handlerCommandsQueue).consumerCount) != configuration.handlers {
                try await Task.sleep(for: .milliseconds(100))
            }
            let booker = BookingBenchmark()
            let slots = SlotSequence(rooms: rooms)
            let cpuBefore = handlers.map { cpuNanos(pid: $0.processIdentifier) }, pgBefore = postgresCPUNanos()
            let pipelinedResult = try await booker.book(client, slots: slots, count: pipelined, inFlight: inFlight)
            let cpuAfter = handlers.map { cpuNanos(pid: $0.processIdentifier) }, pgAfter = postgresCPUNanos()
            let singleResult = try await booker.book(client, slots: slots, count: single, inFlight: 1)
            let handlerCPU = zip(cpuAfter, cpuBefore).map { Double($0 - $1) / Double(pipelined) / 1000 }
            let pgCPU = configuration.postgres ? Double(pgAfter &- pgBefore) / Double(pipelined) / 1000 : 0
            let rss = handlers.map { currentRSSMiB(pid: $0.processIdentifier) ?? .nan }
            lines.append(String(
                format: "%-24@ %8.0f cmd/s  p50 %6.2f ms  p99 %6.2f ms | one at a time p50 %5.2f ms p99 %6.2f ms | "
                    + "handler CPU %@ µs/booking, PostgreSQL %.0f µs/booking | RSS %@ MiB | failed %d",
                configuration.name as NSString, pipelinedResult.rate, pipelinedResult.latencies.percentile(50),
                pipelinedResult.latencies.percentile(99), singleResult.latencies.percentile(50), singleResult.latencies.percentile(99),
                handlerCPU.map { String(format: "%.0f", $0) }.joined(separator: " + ") as NSString, pgCPU,
                rss.map { String(format: "%.0f", $0) }.joined(separator: ", ") as NSString,
                pipelinedResult.failures + singleResult.failures))
            print(lines.last!)
        }
        let leftOver = await BookingBenchmark.purgeDownstream(client)
        await client.close()
        if leftOver > 0 { print("purged \(leftOver) events this run left in the pass sender's and the projector's queues") }
        print("\n\(inFlight) in flight, \(pipelined) creates per row (\(single) one at a time); fresh store and queue per row, same broker and PostgreSQL:")
        for line in lines { print(line) }
    }

    /// CPU time of every process named `postgres` (the server and its
    /// backends), so far.
    func postgresCPUNanos() -> UInt64 {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        var total: UInt64 = 0
        for entry in entries {
            guard let pid = Int32(entry),
                  let comm = try? String(contentsOfFile: "/proc/\(entry)/comm", encoding: .utf8),
                  comm.hasPrefix("postgres") else { continue }
            total += cpuNanos(pid: pid)
        }
        return total
    }
}
