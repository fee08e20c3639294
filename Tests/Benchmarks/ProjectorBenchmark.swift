import AMQPClient
import ArgumentParser
import AvailabilityProjector
import BookingContracts
import Foundation
import Logging
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The availability projector under a large read model: queries over HTTP
/// (`GET /rooms?date=`) and RPC, and the lag from `booking.confirmed`
/// published to the matching `availability.changed` received, at a fixed
/// event rate. The projector runs as its own process (the release
/// `availability-projector` binary) on a database filled beforehand
/// through the store's bulk API, so its memory is its own.
struct ProjectorBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "projector",
        abstract: "Availability queries (HTTP and RPC) over a large read model, and event lag.")

    @Option(help: "Rooms in the read model.")
    var rooms = 200
    @Option(help: "Days per room.")
    var days = 365
    @Option(help: "Most bookings a room has on a day (each day gets 0…this many).")
    var maxPerDay = 20
    @Option(help: "Sequential queries for the latency figures (per path).")
    var queries = 3_000
    @Option(help: "Connections / requests in flight for the throughput figures.")
    var inFlight = 8
    @Option(help: "booking.confirmed events per second for the lag measurement.")
    var rate = 1_000
    @Option(help: "Seconds of events for the lag measurement.")
    var seconds = 10

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-projector-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }

        // 1. Fill the read model directly through the store.
        let firstDate = localDate(daysFromNow: 1)
        let fillStart = monotonicNow()
        let total = try await fill(path: work.appendingPathComponent("availability-projector.sqlite").path, firstDate: firstDate)
        print(String(format: "read model: %d rooms × %d days, %d bookings, filled in %.1f s", rooms, days, total,
                     Double(monotonicNow() - fillStart) / 1e9))

        // 2. The projector as users run it.
        let port = try freeTCPPort()
        let projector = try launch(url: broker.url, dataDirectory: work.path, port: port)
        defer { if projector.isRunning { projector.terminate(); projector.waitUntilExit() } }
        let startWait = monotonicNow()
        while (try? RawHTTPClient(port: port).get("/readyz").status) != 200 {
            guard projector.isRunning else { throw ValidationError("availability-projector exited (\(projector.terminationStatus))") }
            try await Task.sleep(for: .milliseconds(50))
        }
        print(String(format: "projector pid %d ready in %.2f s; RSS %.1f MiB", projector.processIdentifier,
                     Double(monotonicNow() - startWait) / 1e9, currentRSSMiB(pid: projector.processIdentifier) ?? .nan))

        // 3. HTTP GET /rooms?date=<a day in the middle>.
        let day = LocalClockBench.date(firstDate, plus: days / 2)
        let path = "/rooms?date=\(day)"
        let sample = try RawHTTPClient(port: port).get(path)
        let decoded = try ContractJSON.decode(AvailabilityReply.self, from: Data(sample.body))
        print("GET \(path): \(sample.status), \(decoded.count) rooms, \(sample.body.count) bytes")
        var httpSeq = Latencies()
        let client = try RawHTTPClient(port: port)
        for _ in 0..<200 { _ = try client.get(path) }  // warm-up
        for _ in 0..<queries {
            let t0 = monotonicNow()
            _ = try client.get(path)
            httpSeq.add(monotonicNow() - t0)
        }
        let (httpRate, httpPar) = try parallelHTTP(port: port, path: path)

        // 4. RPC on availability.queries.
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: broker.url, connectionName: "bench-client"), logger: logger)
        let body = Array(#"{"date":"\#(day)"}"#.utf8)
        let rpcProps = AMQPProperties(contentType: "application/json")
        for _ in 0..<200 { _ = try await connection.call(body, routingKey: Topology.availabilityQueriesQueue, properties: rpcProps) }
        var rpcSeq = Latencies()
        for _ in 0..<queries {
            let t0 = monotonicNow()
            _ = try await connection.call(body, routingKey: Topology.availabilityQueriesQueue, properties: rpcProps)
            rpcSeq.add(monotonicNow() - t0)
        }
        let rpcStart = monotonicNow()
        let rpcPar = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for worker in 0..<64 {
                group.addTask {
                    var samples: [UInt64] = []
                    for _ in stride(from: worker, to: queries, by: 64) {
                        let t0 = monotonicNow()
                        _ = try await connection.call(body, routingKey: Topology.availabilityQueriesQueue,
                                                      properties: rpcProps, timeout: .seconds(30))
                        samples.append(monotonicNow() - t0)
                    }
                    return samples
                }
            }
            var all = Latencies()
            for try await s in group { all.add(contentsOf: s) }
            return all
        }
        let rpcRate = Double(queries) / (Double(monotonicNow() - rpcStart) / 1e9)

        // 5. Event lag: booking.confirmed published → availability.changed received.
        let lag = try await eventLag(connection, firstDate: firstDate)
        let rss = currentRSSMiB(pid: projector.processIdentifier) ?? .nan
        let peak = peakRSSOf(pid: projector.processIdentifier) ?? .nan
        projector.terminate()
        projector.waitUntilExit()
        await connection.close()

        func ms(_ l: Latencies, _ p: Double) -> String { String(format: "%.3f", l.percentile(p)) }
        print("")
        print("measurement                                         p50 ms    p99 ms    per second")
        print("GET /rooms?date= (200 rooms), one at a time      \(pad(ms(httpSeq, 50)))\(pad(ms(httpSeq, 99)))\(pad(String(format: "%.0f", 1e3 / httpSeq.percentile(50))))")
        print("GET /rooms?date=, \(inFlight) connections               \(pad(ms(httpPar, 50)))\(pad(ms(httpPar, 99)))\(pad(String(format: "%.0f", httpRate)))")
        print("RPC availability query, one at a time            \(pad(ms(rpcSeq, 50)))\(pad(ms(rpcSeq, 99)))\(pad(String(format: "%.0f", 1e3 / rpcSeq.percentile(50))))")
        print("RPC availability query, 64 in flight             \(pad(ms(rpcPar, 50)))\(pad(ms(rpcPar, 99)))\(pad(String(format: "%.0f", rpcRate)))")
        print("event lag booking.confirmed → availability.changed \(pad(ms(lag.latencies, 50)))\(pad(ms(lag.latencies, 99)))\(pad(String(format: "%.0f", lag.rate)))")
        print(String(format: "events: %d published at %d/s, %d availability.changed received, max lag %.1f ms",
                     lag.published, rate, lag.received, lag.latencies.percentile(100)))
        print(String(format: "projector RSS after the run: %.1f MiB (peak %.1f MiB); exit status %d", rss, peak,
                     projector.terminationStatus))
    }

    func pad(_ s: String) -> String { String(repeating: " ", count: max(0, 10 - s.count)) + s }

    /// Bookings of one room-day: up to `maxPerDay` half-hour or hour slots
    /// between 07:00 and 19:00, not overlapping.
    func fill(path: String, firstDate: String) async throws -> Int {
        let store = try ProjectorStore(path: path)
        var rng = SplitMix(seed: 42)
        let roomList = (0..<rooms).map { i in
            Room(name: String(format: "Room %03d", i), location: "Floor \(i / 20)", equipment: i % 3 == 0 ? ["beamer"] : ["tv"],
                 size: "20m2", capacity: 4 + i % 12)
        }
        try await store.applyBulk(roomList.map { .room($0, occurredAt: "2026-01-01T00:00:00Z") })
        var batch: [ModelChange] = []
        var count = 0
        for d in 0..<days {
            let date = LocalClockBench.date(firstDate, plus: d)
            for room in roomList {
                let n = Int(rng.next() % UInt64(maxPerDay + 1))
                var slot = 7 * 60
                for k in 0..<n {
                    // 48 quarter-hours in 12 hours: 20 bookings of 15–30 min with gaps fit.
                    let length = 15 * (1 + Int(rng.next() % 2))
                    let gap = 15 * Int(rng.next() % 2)
                    guard slot + gap + length <= 19 * 60 else { break }
                    slot += gap
                    let status: BookingStatus = rng.next() % 10 == 0 ? .pending : .confirmed
                    batch.append(.booking(BookingState(id: "\(room.name)-\(date)-\(k)", room: room.name, date: date,
                                                       startMinute: slot, endMinute: slot + length, status: status,
                                                       version: 1)))
                    slot += length
                    count += 1
                }
            }
            if batch.count >= 20_000 {
                try await store.applyBulk(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        try await store.applyBulk(batch)
        return count
    }

    func launch(url: AMQPURL, dataDirectory: String, port: Int, environment extra: [String: String] = [:]) throws -> Process {
        let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = binDirectory.appendingPathComponent("availability-projector")
        guard FileManager.default.isExecutableFile(atPath: process.executableURL!.path) else {
            throw ValidationError("build the projector first: swift build -c release --product availability-projector")
        }
        var environment = ServiceProcess.inheritedEnvironment
        environment["AMQP_URL"] = url.urlStringWithCredentials
        environment["DATA_DIR"] = dataDirectory
        environment["HTTP_PORT"] = String(port)
        environment["LOG_LEVEL"] = "warning"
        environment.merge(extra) { $1 }
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return process
    }

    func parallelHTTP(port: Int, path: String) throws -> (Double, Latencies) {
        let results = LockedBox<[[UInt64]]>([])
        let errors = LockedBox<[any Error]>([])
        let perThread = queries / inFlight
        let start = monotonicNow()
        var threads: [Thread] = []
        let done = DispatchGroup()
        for _ in 0..<inFlight {
            done.enter()
            let thread = Thread {
                defer { done.leave() }
                do {
                    let client = try RawHTTPClient(port: port)
                    var samples: [UInt64] = []
                    for _ in 0..<perThread {
                        let t0 = monotonicNow()
                        _ = try client.get(path)
                        samples.append(monotonicNow() - t0)
                    }
                    results.withLock { $0.append(samples) }
                } catch {
                    errors.withLock { $0.append(error) }
                }
            }
            threads.append(thread)
            thread.start()
        }
        done.wait()
        if let error = errors.withLock({ $0.first }) { throw error }
        var latencies = Latencies()
        for s in results.withLock({ $0 }) { latencies.add(contentsOf: s) }
        return (Double(perThread * inFlight) / (Double(monotonicNow() - start) / 1e9), latencies)
    }

    struct Lag {
        var latencies: Latencies
        var published: Int
        var received: Int
        var rate: Double
    }

    /// Publishes `rate` × `seconds` `booking.confirmed` events, each on its
    /// own room-day after the filled range (so each changes `avail` once),
    /// and times each until its `availability.changed` arrives.
    func eventLag(_ connection: AMQPConnection, firstDate: String) async throws -> Lag {
        let queue = "bench.changes"
        try await connection.declare([
            .queue(QueueDeclaration(queue, type: .classic, durable: false, autoDelete: true)),
            .binding(QueueBinding(queue: queue, exchange: Topology.eventsExchange, routingKey: EventType.availabilityChanged.rawValue)),
        ])
        let changes = try await connection.consume(queue: queue, prefetch: 1000)
        let count = rate * seconds
        let sent = LockedBox<[String: UInt64]>([:])
        let zone = "Europe/Berlin"
        func event(_ i: Int) -> (key: String, body: [UInt8]) {
            let room = String(format: "Room %03d", i % rooms)
            let date = LocalClockBench.date(firstDate, plus: days + 1 + i / rooms)
            let booking = Booking(
                id: "lag-\(i)", room: room, date: date, start: "09:00", end: "10:00", timeZone: zone,
                startsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: "09:00", timeZone: zone)!),
                endsAt: ContractFormat.timestamp(ContractFormat.instant(date: date, time: "10:00", timeZone: zone)!),
                title: "lag", status: .confirmed,
                attendees: [Attendee(name: "A", email: "a@example.com", phone: "+491701234567")], version: 1)
            let body = try! ContractJSON.encode(BookingEvent(eventId: "e-\(i)", occurredAt: ContractFormat.timestamp(Date()), booking: booking))
            return (room + "|" + date, [UInt8](body))
        }
        let bodies = (0..<count).map(event)
        let receiver = Task { () -> (Latencies, Int) in
            var latencies = Latencies()
            var received = 0
            for try await delivery in changes {
                let now = monotonicNow()
                try? await delivery.ack()
                guard let change = try? ContractJSON.decode(AvailabilityChanged.self, from: delivery.body) else { continue }
                if let t0 = sent.withLock({ $0.removeValue(forKey: change.room + "|" + change.date) }) {
                    latencies.add(now - t0)
                    received += 1
                    if received == count { break }
                }
            }
            return (latencies, received)
        }
        // 10 ms ticks, each publishing its share as one ordered batch.
        let perTick = max(1, rate / 100)
        let start = monotonicNow()
        try await withThrowingTaskGroup(of: Void.self) { group in
            var i = 0
            var tick: UInt64 = 0
            while i < count {
                let due = start + tick * 10_000_000
                let now = monotonicNow()
                if due > now { try await Task.sleep(nanoseconds: due - now) }
                let slice = Array(bodies[i..<min(count, i + perTick)])
                i += slice.count
                tick += 1
                group.addTask {
                    let t0 = monotonicNow()
                    sent.withLock { s in for e in slice { s[e.key] = t0 } }
                    let results = await connection.publish(batch: slice.map { e in
                        OutgoingMessage(body: e.body, exchange: Topology.eventsExchange, routingKey: EventType.bookingConfirmed.rawValue,
                                        properties: AMQPProperties.persistentJSON(type: EventType.bookingConfirmed.rawValue,
                                                                                  messageID: UUID().uuidString, userID: connection.user))
                    })
                    if let error = results.compactMap({ $0 }).first { throw error }
                }
            }
            try await group.waitForAll()
        }
        let publishSeconds = Double(monotonicNow() - start) / 1e9
        let outcome = try await withTimeout(120, "availability.changed for every event") { try await receiver.value }
        changes.stop()
        return Lag(latencies: outcome.0, published: count, received: outcome.1, rate: Double(count) / publishSeconds)
    }
}

enum LocalClockBench {
    static func date(_ first: String, plus days: Int) -> String { LocalClock.adding(days: days, to: first)! }
}

/// A minimal blocking HTTP/1.1 keep-alive client on one TCP connection, so
/// the figures measure the server, not a client library.
final class RawHTTPClient {
    private let fd: Int32
    private var buffer: [UInt8] = []

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let ok = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard ok else {
            close(fd)
            throw ValidationError("cannot connect to 127.0.0.1:\(port)")
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close(fd) }

    func get(_ path: String) throws -> (status: Int, body: [UInt8]) {
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else {
            throw ValidationError("send failed")
        }
        let separator = Array("\r\n\r\n".utf8)
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = find(separator)
            if headerEnd == nil { try fill() }
        }
        let head = String(decoding: buffer[0..<headerEnd!], as: UTF8.self)
        let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        var length = 0
        for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
            length = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
        }
        let bodyStart = headerEnd! + 4
        while buffer.count < bodyStart + length { try fill() }
        let body = Array(buffer[bodyStart..<(bodyStart + length)])
        buffer.removeFirst(bodyStart + length)
        return (status, body)
    }

    private func find(_ needle: [UInt8]) -> Int? {
        guard buffer.count >= needle.count else { return nil }
        for i in 0...(buffer.count - needle.count) where buffer[i] == needle[0] && Array(buffer[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { throw ValidationError("connection closed") }
        buffer.append(contentsOf: chunk[0..<n])
    }
}
