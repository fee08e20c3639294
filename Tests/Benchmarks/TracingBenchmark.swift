import AMQPClient
import BookingContracts
import Foundation
import Hummingbird
import Logging
import Synchronization
import TestSupport

/// A stand-in OpenTelemetry collector for `benchmarks booking --tracing`:
/// takes OTLP/HTTP exports at `POST /v1/traces` (in the benchmark's own
/// process), counts requests and bytes, answers 200. What the handler pays
/// to export — building, batching, encoding and sending spans — is all
/// there; a real collector's work is not the handler's.
struct CollectorStandIn {
    let url: String
    private let server: Task<Void, any Error>
    let requests: Counter
    let bytes: Counter

    final class Counter: Sendable {
        let value = Atomic<Int>(0)
        var current: Int { value.load(ordering: .relaxed) }
    }

    static func start(logger: Logger) async throws -> CollectorStandIn {
        let router = Router()
        let requests = Counter(), bytes = Counter()
        router.post("v1/traces") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 1 << 26)
            requests.value.add(1, ordering: .relaxed)
            bytes.value.add(body.readableBytes, ordering: .relaxed)
            return Response(status: .ok, headers: [.contentType: "application/x-protobuf"], body: .init(byteBuffer: ByteBuffer()))
        }
        let port = try freeTCPPort()
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), logger: logger)
        let server = Task { try await app.runService(gracefulShutdownSignals: []) }
        try await Task.sleep(for: .milliseconds(300))  // let the listener bind (benchmark only)
        return CollectorStandIn(url: "http://127.0.0.1:\(port)", server: server, requests: requests, bytes: bytes)
    }

    private init(url: String, server: Task<Void, any Error>, requests: Counter, bytes: Counter) {
        self.url = url
        self.server = server
        self.requests = requests
        self.bytes = bytes
    }

    func stop() { server.cancel() }
}

/// The three ways a handler can run with respect to traces, measured
/// against each other in one run (`benchmarks booking --tracing`).
enum TracingMode: String, CaseIterable {
    /// `OTEL_SDK_DISABLED=true`: the no-op tracer, no headers read or written.
    case off
    /// No endpoint: W3C context carried through, nothing recorded.
    case propagate = "on, no endpoint"
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` at the stand-in collector.
    case export = "on, exporting"

    /// One client sends everything: no caller rate. The exporter's queue
    /// holds a second of spans at this rate (its default of 2,048 drops
    /// spans beyond some 300 commands a second, which would make exporting
    /// look cheaper than it is).
    func environment(collector: String) -> [String: String] {
        var environment = ["CALLER_RATE": "off"]
        switch self {
        case .off: environment["OTEL_SDK_DISABLED"] = "true"
        case .propagate: break
        case .export:
            environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector
            environment["OTEL_BSP_MAX_QUEUE_SIZE"] = "65536"
            environment["OTEL_BSP_SCHEDULE_DELAY"] = "1000"
        }
        return environment
    }
}

extension BookingBenchmark {
    /// Fresh handlers, one per mode and round (modes alternate, so drift of
    /// the machine hits all alike); each books `pipelined` commands
    /// `inFlight` at a time and `single` one at a time. Prints the rates,
    /// latencies and the handler's CPU per booking of each mode.
    func runTracingComparison(broker: BenchmarkBroker, client: AMQPConnection, rounds: Int) async throws {
        var logger = Logger(label: "collector")
        logger.logLevel = .warning
        let collector = try await CollectorStandIn.start(logger: logger)
        defer { collector.stop() }
        struct Figures { var pipelined: [Double] = []; var single: [Double] = []; var p50: [Double] = []; var p99: [Double] = []
                         var singleP50: [Double] = []; var cpu: [Double] = [] }
        var figures: [TracingMode: Figures] = [:]
        var startDay = 0
        for round in 1...rounds {
            for mode in TracingMode.allCases {
                let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-tracing-\(getpid())-\(round)-\(mode)")
                try? FileManager.default.removeItem(at: work)
                try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: work) }
                let roomsFile = work.appendingPathComponent("rooms.json")
                try ContractJSON.encode((0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }).write(to: roomsFile)
                let handler = try launchHandler(url: broker.url, dataDirectory: work.path, roomsFile: roomsFile.path, binary: handlerBinary,
                                                environment: mode.environment(collector: collector.url))
                defer { if handler.isRunning { handler.terminate(); handler.waitUntilExit() } }
                while (try? await client.queueInfo(Topology.handlerCommandsQueue).consumerCount) != 1 {
                    try await Task.sleep(for: .milliseconds(100))
                }
                // Days of their own: each handler has a fresh database, but
                // the projector-free broker keeps nothing between them anyway.
                let slots = SlotSequence(rooms: rooms, startDay: startDay)
                startDay += (pipelined + single) / (rooms * 48) + 1
                let pid = handler.processIdentifier
                let cpu0 = CPUTime.of(pid: pid)
                let fast = try await book(client, slots: slots, count: pipelined, inFlight: inFlight)
                let cpu1 = CPUTime.of(pid: pid)
                let slow = try await book(client, slots: slots, count: single, inFlight: 1)
                handler.terminate()
                handler.waitUntilExit()
                _ = await Self.purgeDownstream(client)
                var f = figures[mode] ?? Figures()
                f.pipelined.append(fast.rate)
                f.single.append(slow.rate)
                f.p50.append(fast.latencies.percentile(50))
                f.p99.append(fast.latencies.percentile(99))
                f.singleP50.append(slow.latencies.percentile(50))
                if let cpu0, let cpu1 {
                    f.cpu.append(((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / Double(pipelined) * 1e6)
                }
                figures[mode] = f
                print(String(format: "round %d, tracing %@: %.0f cmd/s (%d in flight), %.0f cmd/s one at a time; failures %d/%d",
                             round, mode.rawValue, fast.rate, inFlight, slow.rate, fast.failures, slow.failures))
            }
        }
        func median(_ values: [Double]) -> Double {
            guard !values.isEmpty else { return .nan }
            let sorted = values.sorted()
            return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
        }
        print("")
        print("tracing (median of \(rounds) rounds) | \(inFlight) in flight cmd/s | p50 ms | p99 ms | one at a time cmd/s | p50 ms | handler CPU µs/booking")
        for mode in TracingMode.allCases {
            let f = figures[mode] ?? Figures()
            print(String(format: "%@ | %.0f | %.2f | %.2f | %.0f | %.2f | %.0f", mode.rawValue, median(f.pipelined), median(f.p50),
                         median(f.p99), median(f.single), median(f.singleP50), median(f.cpu)))
        }
        print("collector stand-in: \(collector.requests.current) export requests, \(collector.bytes.current / 1024) KiB")
    }
}
