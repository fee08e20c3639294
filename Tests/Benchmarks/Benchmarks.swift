import AMQPClient
import ArgumentParser
import Foundation
import Logging
import TestSupport

/// Prints throughput and latency of the Swift AMQP layer beside thin loops
/// over raw rabbitmq-c, measured in the same run against the same broker.
///
///     swift run -c release benchmarks            # starts a private broker
///     AMQP_URL=amqp://… swift run -c release benchmarks --messages 50000
@main
struct Benchmarks: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "benchmarks",
        abstract: "Throughput and latency figures, each beside a raw rabbitmq-c baseline measured in the same run.",
        subcommands: [AMQPBenchmark.self, BookingBenchmark.self, PipelineBenchmark.self, ScaleBenchmark.self, StoresBenchmark.self, StoreBenchmark.self, ReadsBenchmark.self, SeriesBenchmark.self, PassBenchmark.self,
                      ProjectorBenchmark.self, SuggestBenchmark.self],
        defaultSubcommand: AMQPBenchmark.self)

    /// ArgumentParser's own entry point, after making standard output line
    /// buffered: the tables are mostly read from a file or a pipe (`| tee`,
    /// CI logs), where the C library would otherwise hold a long run's
    /// lines until exit and interleave them with the services' stderr.
    static func main() async {
        lineBufferStandardOutput()
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// The broker to measure against: `AMQP_URL`, or a private node.
struct BenchmarkBroker {
    let url: AMQPURL
    let node: RabbitMQNode?

    static func start() throws -> BenchmarkBroker {
        // Every benchmark drives the services as one caller, far over the
        // per-caller rate (CALLER_RATE, 100/s by default): the services it
        // starts inherit `off` unless the caller set a rate.
        setenv("CALLER_RATE", "off", 0)
        if let env = ProcessInfo.processInfo.environment["AMQP_URL"] {
            return BenchmarkBroker(url: try AMQPURL(env), node: nil)
        }
        print("starting a private RabbitMQ node…")
        let node = try RabbitMQNode.start()
        return BenchmarkBroker(url: node.url, node: node)
    }

    func stop() { node?.stop() }

    /// The broker's TLS listener and CA: the private node's, or
    /// `AMQPS_URL` with `AMQP_CA_FILE` beside `AMQP_URL`; nil when neither.
    func tls() throws -> (url: AMQPURL, caFile: String)? {
        if let node {
            let tls = try node.tls
            return (tls.url, tls.caFile)
        }
        let environment = ProcessInfo.processInfo.environment
        guard let text = environment["AMQPS_URL"], let ca = environment["AMQP_CA_FILE"] else { return nil }
        return (try AMQPURL(text), ca)
    }

    /// A client connection to the broker, logging warnings only.
    func client(_ name: String) async throws -> AMQPConnection {
        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning
        return try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: name), logger: logger)
    }
}

struct AMQPBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "amqp",
        abstract: "Swift AMQP layer vs raw rabbitmq-c: confirms, pipelined RPC, one-at-a-time RPC.")

    @Option(help: "Persistent messages to publish with confirms.")
    var messages = 20_000
    @Option(help: "Publishes in flight (raw window / Swift concurrent tasks).")
    var publishWindow = 256
    @Option(help: "RPC round trips for the pipelined measurement.")
    var rpcCalls = 20_000
    @Option(help: "RPC requests in flight.")
    var inFlight = 64
    @Option(help: "RPC round trips one at a time.")
    var singleCalls = 2_000
    @Option(help: "Repetitions of each measurement; the best is reported.")
    var rounds = 2
    @Flag(inversion: .prefixedNo, help: "Also measure the Swift layer over TLS beside plain AMQP (needs the private node, or AMQPS_URL and AMQP_CA_FILE).")
    var tls = true

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        let url = broker.url
        print("broker: \(url)")

        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: url, connectionName: "benchmarks"), logger: logger)
        let body = Array(#"{"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:30"}"#.utf8)
        var rows: [Row] = []

        // (a) persistent publish with confirms
        let pubQueue = "bench.publish"
        try await connection.declare([.queue(QueueDeclaration(pubQueue, type: .classic, maxLength: 1))])
        var swiftPub = 0.0, rawPub = 0.0
        for _ in 0..<rounds {
            rawPub = max(rawPub, Raw.publishConfirmed(url: url, queue: pubQueue, count: messages, window: publishWindow, body: body))
            swiftPub = max(swiftPub, try await swiftPublish(connection, queue: pubQueue, body: body))
        }
        rows.append(Row(name: "persistent publish + confirm (msg/s)", swiftRate: swiftPub, rawRate: rawPub))

        // (b) and (c) RPC against the same raw echo server
        let rpcQueue = "bench.rpc"
        try await connection.declare([.queue(QueueDeclaration(rpcQueue, type: .classic))])
        try await connection.purgeQueue(rpcQueue)
        let server = Raw.EchoServer(url: url, queue: rpcQueue)
        defer { server.stop() }
        for (label, calls, window) in [("RPC, \(inFlight) in flight (calls/s)", rpcCalls, inFlight),
                                       ("RPC, one at a time (calls/s)", singleCalls, 1)] {
            var best: (swift: (Double, Latencies), raw: (Double, Latencies))?
            for _ in 0..<rounds {
                let raw = Raw.rpc(url: url, queue: rpcQueue, count: calls, inFlight: window, body: body)
                let swift = try await swiftRPC(connection, queue: rpcQueue, count: calls, inFlight: window, body: body)
                if best == nil || swift.0 > best!.swift.0 { best = (swift, best?.raw.0 ?? 0 > raw.0 ? best!.raw : raw) }
                else if raw.0 > best!.raw.0 { best!.raw = raw }
            }
            let (s, r) = best!
            rows.append(Row(name: label, swiftRate: s.0, rawRate: r.0,
                            swiftP50: s.1.percentile(50), rawP50: r.1.percentile(50),
                            swiftP99: s.1.percentile(99), rawP99: r.1.percentile(99)))
        }
        await connection.close()
        printTable(rows)
        print(String(format: "peak RSS of the benchmark process: %.1f MiB", peakRSSMiB()))
        if let single = rows.last, let sp = single.swiftP50, let rp = single.rawP50 {
            print(String(format: "one-at-a-time p50 added by the Swift layer: %.3f ms", sp - rp))
        }
        if tls {
            if let endpoint = try broker.tls() {
                try await transports(plain: url, tls: endpoint, rpcQueue: rpcQueue, publishQueue: pubQueue, body: body, logger: logger)
            } else {
                print("TLS: skipped (AMQP_URL given without AMQPS_URL and AMQP_CA_FILE)")
            }
        }
    }

    /// One transport's figures: the Swift layer's publish rate, RPC rates
    /// and latencies, and this process's CPU per message.
    struct TransportFigures {
        var publishRate = 0.0, publishCPU: Double?
        var rpcRate = 0.0, rpcP50 = 0.0, rpcP99 = 0.0
        var singleRate = 0.0, singleP50 = 0.0, singleP99 = 0.0, rpcCPU: Double?
    }

    /// The Swift layer over plain AMQP and over TLS (rabbitmq-c's OpenSSL
    /// socket, with the write buffer under it), in the same run against the
    /// same broker and the same raw echo server; the best of `rounds`,
    /// alternating the transports.
    func transports(plain: AMQPURL, tls endpoint: (url: AMQPURL, caFile: String), rpcQueue: String, publishQueue: String,
                    body: [UInt8], logger: Logger) async throws {
        var tlsURL = endpoint.url
        tlsURL.vhost = plain.vhost
        let configurations = [
            ("plain", AMQPConfiguration(url: plain, connectionName: "benchmarks-plain")),
            ("TLS", AMQPConfiguration(url: tlsURL, connectionName: "benchmarks-tls", tlsCACertificatePath: endpoint.caFile)),
        ]
        let server = Raw.EchoServer(url: plain, queue: rpcQueue)
        defer { server.stop() }
        var best: [String: TransportFigures] = [:]
        let pid = getpid()
        for _ in 0..<rounds {
            for (name, configuration) in configurations {
                let connection = try await AMQPConnection.connect(configuration: configuration, logger: logger)
                var f = TransportFigures()
                var cpu = CPUTime.of(pid: pid)
                f.publishRate = try await swiftPublish(connection, queue: publishQueue, body: body)
                f.publishCPU = CPUTime.micros(from: cpu, to: CPUTime.of(pid: pid), per: messages)
                cpu = CPUTime.of(pid: pid)
                let pipelined = try await swiftRPC(connection, queue: rpcQueue, count: rpcCalls, inFlight: inFlight, body: body)
                f.rpcCPU = CPUTime.micros(from: cpu, to: CPUTime.of(pid: pid), per: rpcCalls)
                (f.rpcRate, f.rpcP50, f.rpcP99) = (pipelined.0, pipelined.1.percentile(50), pipelined.1.percentile(99))
                let single = try await swiftRPC(connection, queue: rpcQueue, count: singleCalls, inFlight: 1, body: body)
                (f.singleRate, f.singleP50, f.singleP99) = (single.0, single.1.percentile(50), single.1.percentile(99))
                await connection.close()
                if let previous = best[name] {
                    // Each figure its best of the rounds (rates highest, latencies and CPU lowest).
                    f.publishRate = max(f.publishRate, previous.publishRate)
                    f.publishCPU = [f.publishCPU, previous.publishCPU].compactMap { $0 }.min()
                    f.rpcRate = max(f.rpcRate, previous.rpcRate)
                    f.rpcP50 = min(f.rpcP50, previous.rpcP50)
                    f.rpcP99 = min(f.rpcP99, previous.rpcP99)
                    f.rpcCPU = [f.rpcCPU, previous.rpcCPU].compactMap { $0 }.min()
                    f.singleRate = max(f.singleRate, previous.singleRate)
                    f.singleP50 = min(f.singleP50, previous.singleP50)
                    f.singleP99 = min(f.singleP99, previous.singleP99)
                }
                best[name] = f
            }
        }
        func cell(_ value: Double?, _ format: String) -> String {
            guard let value, value.isFinite else { return "-" }
            return String(format: format, value)
        }
        print("")
        print("Swift layer over plain AMQP and over TLS (\(tlsURL.host):\(tlsURL.port)), same run, best of \(rounds):")
        let lines: [(String, (TransportFigures) -> String)] = [
            ("persistent publish + confirm (msg/s)", { cell($0.publishRate, "%.0f") }),
            ("  CPU of this process per publish (µs)", { cell($0.publishCPU, "%.1f") }),
            ("RPC, \(inFlight) in flight (calls/s)", { cell($0.rpcRate, "%.0f") }),
            ("  p50 / p99 (ms)", { cell($0.rpcP50, "%.3f") + " / " + cell($0.rpcP99, "%.3f") }),
            ("  CPU of this process per call (µs)¹", { cell($0.rpcCPU, "%.1f") }),
            ("RPC, one at a time (calls/s)", { cell($0.singleRate, "%.0f") }),
            ("  p50 / p99 (ms)", { cell($0.singleP50, "%.3f") + " / " + cell($0.singleP99, "%.3f") }),
        ]
        func pad(_ text: String, _ width: Int) -> String { text + String(repeating: " ", count: max(0, width - text.count)) }
        print(pad("measurement", 42) + pad("plain", 20) + "TLS")
        for (label, value) in lines {
            print(pad(label, 42) + pad(value(best["plain"]!), 20) + value(best["TLS"]!))
        }
        print("¹ includes the raw echo server's thread in this process, which is plain AMQP in both columns")
        if let p = best["plain"], let t = best["TLS"] {
            print(String(format: "TLS/plain: publish rate %.2f, RPC rate %.2f, one-at-a-time p50 %+.3f ms",
                         t.publishRate / p.publishRate, t.rpcRate / p.rpcRate, t.singleP50 - p.singleP50))
        }
    }

    func swiftPublish(_ connection: AMQPConnection, queue: String, body: [UInt8]) async throws -> Double {
        let start = monotonicNow()
        let window = publishWindow, total = messages
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<window {
                group.addTask {
                    let properties = AMQPProperties(contentType: "application/json", deliveryMode: .persistent)
                    for _ in stride(from: worker, to: total, by: window) {
                        try await connection.publish(body, routingKey: queue, properties: properties)
                    }
                }
            }
            try await group.waitForAll()
        }
        return Double(total) / (Double(monotonicNow() - start) / 1e9)
    }

    func swiftRPC(_ connection: AMQPConnection, queue: String, count: Int, inFlight: Int, body: [UInt8]) async throws -> (Double, Latencies) {
        let start = monotonicNow()
        let perWorker = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for worker in 0..<inFlight {
                group.addTask {
                    var samples: [UInt64] = []
                    let properties = AMQPProperties(contentType: "application/json", deliveryMode: .persistent)
                    for _ in stride(from: worker, to: count, by: inFlight) {
                        let t0 = monotonicNow()
                        _ = try await connection.call(body, routingKey: queue, properties: properties, timeout: .seconds(30))
                        samples.append(monotonicNow() - t0)
                    }
                    return samples
                }
            }
            var all: [[UInt64]] = []
            for try await samples in group { all.append(samples) }
            return all
        }
        var latencies = Latencies()
        for samples in perWorker { latencies.add(contentsOf: samples) }
        return (Double(count) / (Double(monotonicNow() - start) / 1e9), latencies)
    }
}

/// Makes C's `stdout` (what `print` writes to) line buffered. Swift 6
/// refuses a reference to the imported `stdout` global as shared mutable
/// state; the symbol table gives the same `FILE` pointer, read once before
/// anything runs concurrently.
private func lineBufferStandardOutput() {
    guard let symbol = dlsym(nil, "stdout") else { return }  // nil: RTLD_DEFAULT
    setvbuf(symbol.load(as: UnsafeMutablePointer<FILE>?.self), nil, _IOLBF, 0)
}
