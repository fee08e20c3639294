import AMQPClient
import ArgumentParser
import BookingContracts
import BrokerObjects
import Foundation
import Logging
import PassSender
import ServiceLifecycle
import Synchronization
import TestSupport

/// Passes/s through the pass sender (in this process, as `main` builds it)
/// with the spool gateway and a local HTTP gateway, for bookings of 1, 10
/// and 100 attendees, beside the raw broker rate (publish + confirm +
/// consume of messages of the same size) from the same run; and notices/s
/// (`cancelled` to every attendee who got a pass) through the spool and a
/// local `/notify` gateway on the ledger those passes left.
struct PassBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passes",
        abstract: "Passes/s and notices/s through the spool and local HTTP gateways beside the raw broker rate.")

    @Option(help: "Passes per measurement.")
    var passes = 2000
    @Option(parsing: .upToNextOption, help: "Attendees per booking: one row per value (default 1 10 100).")
    var attendees: [Int] = [1, 10, 100]
    @Option(parsing: .upToNextOption, help: "Gateways to measure: spool, http (default both).")
    var gateways: [String] = ["spool", "http"]
    @Option(help: "Measurements per row (each on a fresh ledger); every one is printed.")
    var rounds = 1
    @Flag(help: "Skip the raw broker rate and the notices (passes/s only).")
    var passesOnly = false
    @Option(help: "PASS_CONCURRENCY of the pass sender measured (default: the service's).")
    var concurrency = PassSenderSettings.defaultConcurrency
    @Option(help: "PASS_GATEWAY_CONCURRENCY of the pass sender measured (default: the service's).")
    var gatewayConcurrency = PassSenderSettings.defaultGatewayConcurrency
    @Option(help: "A PostgreSQL DATABASE_URL (without a query): the ledger there, in a fresh schema per measurement, instead of SQLite.")
    var databaseURL: String?

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        print("broker: \(broker.url)")
        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning

        let gateway = try await LocalGateway.start(logger: logger)
        defer { gateway.stop() }

        print("")
        // CPU µs/pass: this whole process (pass sender, HTTP gateway and the
        // benchmark's own clients) while the passes are sent; not the broker.
        print("attendees  gateway  bookings  passes   passes/s  notices/s   broker msg/s (same body size)   RSS MiB  CPU µs/pass")
        for attendees in self.attendees {
            let bookings = max(1, passes / attendees)
            let sample = makeBenchBooking(attendees: attendees)
            let eventBody = [UInt8](try ContractJSON.encode(BookingEvent(eventId: "x", occurredAt: "2026-11-22T10:00:00Z",
                                                                         booking: sample)))
            let raw = passesOnly ? 0 : try await rawRate(url: broker.url, body: eventBody, count: bookings, logger: logger)
            for _ in 0..<rounds {
                for (label, gatewayURL) in [("spool", nil as String?), ("http", gateway.url)]
                    where gateways.contains(label) {
                    let (rate, noticeRate, cpu) = try await measure(url: broker.url, gatewayURL: gatewayURL, attendees: attendees,
                                                                    bookings: bookings, logger: logger)
                    let name = label.padding(toLength: 7, withPad: " ", startingAt: 0)
                    print(String(format: "%9d  ", attendees) + name
                          + String(format: "  %8d  %6d  %9.0f  %9.0f   %9.0f                        %7.1f  %11.0f",
                                   bookings, bookings * attendees, rate, noticeRate, raw, currentRSSMiB() ?? 0, cpu))
                }
            }
        }
        print(String(format: "peak RSS of the benchmark process (pass sender + HTTP gateway + clients): %.1f MiB", peakRSSMiB()))
    }

    func makeBenchBooking(attendees: Int) -> Booking {
        let date = localDate(daysFromNow: 3)
        return Booking(id: "bench-\(UUID().uuidString)", room: "Berlin", date: date, start: "09:00", end: "10:30",
                       timeZone: "Europe/Berlin", startsAt: "2030-01-01T08:00:00Z", endsAt: "2030-01-01T09:30:00Z",
                       title: "Benchmark", description: "load", status: .confirmed,
                       attendees: (0..<attendees).map { Attendee(name: "Person \($0)", email: "p\($0)@example.com",
                                                                   phone: "+4917012\(String(format: "%05d", $0))") },
                       version: 1)
    }

    /// Publish with confirms + consume with acks of `count` messages of `body`'s size.
    func rawRate(url: AMQPURL, body: [UInt8], count: Int, logger: Logger) async throws -> Double {
        let connection = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "bench-raw"),
                                                          logger: logger)
        let queue = "bench.passes.raw"
        try await connection.declare([.queue(QueueDeclaration(queue, type: .quorum))])
        try await connection.purgeQueue(queue)
        let start = monotonicNow()
        let consumer = try await connection.consume(queue: queue, prefetch: 256)
        let consuming = Task { _ = try await consumer.take(count) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            let window = 64
            for worker in 0..<window {
                group.addTask {
                    for _ in stride(from: worker, to: count, by: window) {
                        try await connection.publish(body, routingKey: queue,
                                                     properties: AMQPProperties(contentType: "application/json", deliveryMode: .persistent))
                    }
                }
            }
            try await group.waitForAll()
        }
        try await consuming.value
        let rate = Double(count) / (Double(monotonicNow() - start) / 1e9)
        consumer.stop()
        try await connection.deleteQueue(queue)
        await connection.close()
        return rate
    }

    /// Publishes `bookings` confirmed events, starts a pass sender and times
    /// until every pass is delivered; then publishes their cancellations,
    /// starts a pass sender again on the same ledger and times until every
    /// `cancelled` notice is delivered. Returns (passes/s, notices/s).
    func measure(url: AMQPURL, gatewayURL: String?, attendees: Int, bookings: Int,
                 logger: Logger) async throws -> (passes: Double, notices: Double, cpuMicrosPerPass: Double) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bench-pass-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "bench-client"),
                                                      logger: logger)
        var settings = PassSenderSettings(gatewayURL: gatewayURL, maxAttempts: 5, retryDelays: [RetryDelay(milliseconds: 1000)],
                                          gatewayTimeout: .seconds(10), concurrency: concurrency,
                                          gatewayConcurrency: gatewayConcurrency, notifyURL: gatewayURL)
        if let databaseURL {
            let schema = "bench_" + UUID().uuidString.prefix(8).lowercased()
            settings.database = try PassSenderSettings(environment: ["DATABASE_URL": databaseURL + "?schema=" + schema]).database
        }
        try await client.declare(PassQueues.declarations(delays: settings.retryDelays))
        try await client.purgeQueue(Topology.passSenderEventsQueue)
        let booked = (0..<bookings).map { _ in makeBenchBooking(attendees: attendees) }
        func publish(_ type: EventType, _ bookings: [Booking]) async throws {
            for b in bookings {
                let e = BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()), booking: b)
                try await client.publish([UInt8](try ContractJSON.encode(e)), exchange: Topology.eventsExchange,
                                         routingKey: type.rawValue,
                                         properties: .persistentJSON(type: type.rawValue, messageID: e.eventId, userID: client.user))
            }
        }
        let total = bookings * attendees
        try await publish(.bookingConfirmed, booked)
        let cpuBefore = cpuNanos(pid: getpid())
        let passes = try await run(url: url, settings: settings, dir: dir, total: total, logger: logger) { $0.delivered.count }
        let cpu = Double(cpuNanos(pid: getpid()) - cpuBefore) / 1000 / Double(total)
        if passesOnly {
            await client.close()
            return (passes, 0, cpu)
        }
        try await publish(.bookingCancelled, booked.map { b in
            var c = b
            c.version = 2
            c.status = .cancelled
            return c
        })
        let notices = try await run(url: url, settings: settings, dir: dir, total: total, logger: logger) {
            $0.notices[.cancelled]?.count ?? 0
        }
        // pass.* events pile up nowhere (no queue bound in the benchmark broker unless the projector's is).
        await client.close()
        return (passes, notices, cpu)
    }

    /// Starts a pass sender on `dir`, times until `count` of the settled
    /// summaries adds up to `total`, stops it; returns per second.
    func run(url: AMQPURL, settings: PassSenderSettings, dir: String, total: Int, logger: Logger,
             count: @escaping @Sendable (PassDispatcher.Summary) -> Int) async throws -> Double {
        let done = Atomic<Int>(0)
        let (finished, signal) = AsyncStream<Void>.makeStream()
        let connection = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "bench-pass"),
                                                          logger: logger)
        let start = monotonicNow()
        let app = try await PassSenderApp.build(connection: connection, settings: settings, dataDirectory: dir, logger: logger,
                                                observer: { s in
            let n = done.add(s.summary.map(count) ?? 0, ordering: .relaxed).newValue
            if n >= total { signal.yield() }
        })
        let (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
        _ = try await withTimeout(600, "all delivered") { await finished.first { _ in true } }
        let seconds = Double(monotonicNow() - start) / 1e9
        await group.triggerGracefulShutdown()
        _ = await running.result
        return Double(total) / seconds
    }
}
