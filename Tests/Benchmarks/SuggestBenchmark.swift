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

/// "Find me a room" at catalogue size: 2,000 rooms and 200,000 bookings in
/// the read model (filled through the store's bulk API, then served by
/// the release `availability-projector` as its own process). Measures a
/// 7-day, 60-minute `availability.suggest` and a 7-day `availability.query`
/// filtered to 50 rooms, over RPC (as other systems ask) and HTTP, plus
/// the engine alone in this process; prints the projector's RSS.
struct SuggestBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suggest",
        abstract: "availability.suggest and 7-day availability.query over 2,000 rooms and 200,000 bookings.")

    @Option(help: "Rooms in the read model.")
    var rooms = 2_000
    @Option(help: "Bookings in the read model.")
    var bookings = 200_000
    @Option(help: "Days the bookings are spread over, from tomorrow.")
    var days = 30
    @Option(help: "Queries per measurement.")
    var queries = 1_000

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-suggest-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }

        let firstDate = localDate(daysFromNow: 1)
        let fillStart = monotonicNow()
        let store = try ProjectorStore(path: work.appendingPathComponent("availability-projector.sqlite").path)
        let total = try await fill(store, firstDate: firstDate)
        print(String(format: "read model: %d rooms, %d bookings over %d days, filled in %.1f s", rooms, total, days,
                     Double(monotonicNow() - fillStart) / 1e9))

        let week = LocalClockBench.date(firstDate, plus: 7)
        let suggestBody = #"{"from":"\#(firstDate)","to":"\#(week)","durationMinutes":60,"minCapacity":6,"equipment":["beamer"]}"#
        let suggestPath = "/suggest?from=\(firstDate)&to=\(week)&durationMinutes=60&minCapacity=6&equipment=beamer"
        // Heavy: a 12-hour meeting in rooms open 12 hours, booked most days —
        // nearly every room and day is computed to find 100.
        let emptyBody = #"{"from":"\#(firstDate)","to":"\#(week)","durationMinutes":720,"limit":100}"#
        let queryBody = #"{"date":"\#(firstDate)","equipment":["piano"],"days":7}"#
        let queryPath = "/rooms?date=\(firstDate)&equipment=piano&days=7"

        // The engine alone, in this process, on the same model.
        let engine = QueryEngine(index: store.index)
        let checkedSuggest = try QueryEngine.parseSuggest(body: Array(suggestBody.utf8)).get()
        let checkedEmpty = try QueryEngine.parseSuggest(body: Array(emptyBody.utf8)).get()
        let checkedQuery = try QueryEngine.parse(body: Array(queryBody.utf8)).get()
        let sample = engine.suggest(checkedSuggest)
        print("suggest sample: \(sample.prefix(3).map { "\($0.date) \($0.start) \($0.room) (\($0.capacity))" }.joined(separator: ", ")) …")
        let filtered = try ContractJSON.decode(AvailabilityReply.self, from: try engine.replyBody(checkedQuery).get())
        print("7-day availability.query: \(filtered.count) rooms × \(filtered.first?.days?.count ?? 0) days")
        guard filtered.count == 50, sample.count == 10 else {
            throw ValidationError("the benchmark's model is not what it should be (50 rooms with a piano, 10 suggestions)")
        }
        print("12-hour suggest: \(engine.suggest(checkedEmpty).count) suggestions")
        let engineSuggest = measure { _ = engine.suggest(checkedSuggest) }
        let engineEmpty = measure { _ = engine.suggest(checkedEmpty) }
        let engineQuery = measure { _ = try? engine.replyBody(checkedQuery).get() }
        // Around an offset change the days Friday to Monday take the exact
        // path; a week starting on that Friday against the week after it
        // (both beyond the bookings, so equally empty).
        let (dstFriday, laterFriday) = try Self.fridayBeforeTheNextOffsetChange()
        func weekFrom(_ day: String) throws -> CheckedSuggest {
            let body = #"{"from":"\#(day)","to":"\#(LocalClockBench.date(day, plus: 7))","durationMinutes":60,"minCapacity":6,"equipment":["beamer"]}"#
            return try QueryEngine.parseSuggest(body: Array(body.utf8)).get()
        }
        let checkedDST = try weekFrom(dstFriday), checkedLater = try weekFrom(laterFriday)
        guard engine.suggest(checkedDST).count == 10, engine.suggest(checkedLater).count == 10 else {
            throw ValidationError("the weeks around the offset change should have 10 suggestions each")
        }
        let engineDST = measure { _ = engine.suggest(checkedDST) }
        let engineLater = measure { _ = engine.suggest(checkedLater) }

        // The projector as users run it.
        let port = try freeTCPPort()
        let projector = try launch(url: broker.url, dataDirectory: work.path, port: port)
        defer { if projector.isRunning { projector.terminate(); projector.waitUntilExit() } }
        while (try? RawHTTPClient(port: port).get("/readyz").status) != 200 {
            guard projector.isRunning else { throw ValidationError("availability-projector exited (\(projector.terminationStatus))") }
            try await Task.sleep(for: .milliseconds(50))
        }
        let client = try RawHTTPClient(port: port)
        let httpSuggest = try measureThrows { _ = try client.get(suggestPath) }
        let httpQuery = try measureThrows { _ = try client.get(queryPath) }
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: broker.url, connectionName: "bench-suggest"), logger: logger)
        func rpc(_ key: String, _ body: String) async throws {
            let properties = AMQPProperties(contentType: "application/json", type: key)
            let reply = try await connection.call(Array(body.utf8), exchange: Topology.bookingQueriesExchange, routingKey: key,
                                                  properties: properties, timeout: .seconds(30))
            if reply.body.starts(with: Array(#"{"error""#.utf8)) { throw ValidationError(String(decoding: reply.body, as: UTF8.self)) }
        }
        var rpcSuggest = Latencies(), rpcEmpty = Latencies(), rpcQuery = Latencies()
        for i in 0..<(queries + 50) {
            for (latencies, key, body) in [(0, SuggestContract.suggestKey, suggestBody), (1, SuggestContract.suggestKey, emptyBody),
                                           (2, Topology.availabilityQueryKey, queryBody)] {
                let t0 = monotonicNow()
                try await rpc(key, body)
                guard i >= 50 else { continue }
                switch latencies {
                case 0: rpcSuggest.add(monotonicNow() - t0)
                case 1: rpcEmpty.add(monotonicNow() - t0)
                default: rpcQuery.add(monotonicNow() - t0)
                }
            }
        }
        let rss = currentRSSMiB(pid: projector.processIdentifier) ?? .nan
        let peak = peakRSSOf(pid: projector.processIdentifier) ?? .nan
        await connection.close()
        projector.terminate()
        projector.waitUntilExit()

        func ms(_ l: Latencies) -> String { String(format: "%8.3f  %8.3f", l.percentile(50), l.percentile(99)) }
        print("")
        print("measurement                                                    p50 ms    p99 ms")
        print("suggest 7 days, 60 min, ≥6 people, beamer — engine         \(ms(engineSuggest))")
        print("suggest 7 days, 60 min, ≥6 people, beamer — HTTP           \(ms(httpSuggest))")
        print("suggest 7 days, 60 min, ≥6 people, beamer — RPC            \(ms(rpcSuggest))   goal p99 ≤ 20")
        print("suggest 7 days, 720 min, limit 100 — engine          \(ms(engineEmpty))")
        print("suggest as above from \(dstFriday) (offset change) — engine \(ms(engineDST))")
        print("suggest as above from \(laterFriday) (a week later) — engine \(ms(engineLater))")
        print("suggest 7 days, 720 min, limit 100 — RPC             \(ms(rpcEmpty))")
        print("availability.query 7 days, 50 rooms — engine              \(ms(engineQuery))")
        print("availability.query 7 days, 50 rooms — HTTP                \(ms(httpQuery))")
        print("availability.query 7 days, 50 rooms — RPC                 \(ms(rpcQuery))   goal p99 ≤ 10")
        print(String(format: "projector RSS after the run: %.1f MiB (peak %.1f MiB)", rss, peak))
    }

    /// The Friday before Europe/Berlin's next offset change (its Sunday
    /// minus two days) and the Friday a week later, as local dates.
    static func fridayBeforeTheNextOffsetChange() throws -> (String, String) {
        guard let zone = TimeZone(identifier: "Europe/Berlin"),
              let change = zone.nextDaylightSavingTimeTransition(after: Date().addingTimeInterval(3 * 86_400)) else {
            throw ValidationError("no offset change ahead in Europe/Berlin")
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let sunday = calendar.startOfDay(for: change.addingTimeInterval(-3600))
        let formatter = DateFormatter()
        formatter.calendar = calendar
        formatter.timeZone = zone
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd"
        let friday = formatter.string(from: sunday.addingTimeInterval(-2 * 86_400 + 7_200))
        return (friday, LocalClockBench.date(friday, plus: 7))
    }

    func measure(_ body: () -> Void) -> Latencies {
        var latencies = Latencies()
        for i in 0..<(queries + 50) {
            let t0 = monotonicNow()
            body()
            if i >= 50 { latencies.add(monotonicNow() - t0) }
        }
        return latencies
    }

    func measureThrows(_ body: () throws -> Void) throws -> Latencies {
        var latencies = Latencies()
        for i in 0..<(queries + 50) {
            let t0 = monotonicNow()
            try body()
            if i >= 50 { latencies.add(monotonicNow() - t0) }
        }
        return latencies
    }

    /// Rooms: capacities 2–25, a third with a beamer, every 40th with a
    /// piano (50 of 2,000), open 07:00–19:00 in Berlin, some with a buffer.
    /// Bookings: random 30–120-minute slots between 07:00 and 19:00 on the
    /// next `days` days, spread evenly over rooms (overlaps merge in the
    /// masks, as in a real model out of order).
    func fill(_ store: ProjectorStore, firstDate: String) async throws -> Int {
        var rng = SplitMix(seed: 38)
        let roomList = (0..<rooms).map { i in
            Room(name: String(format: "Room %04d", i), equipment: (i % 3 == 0 ? ["beamer"] : ["tv"]) + (i % 40 == 0 ? ["piano"] : []),
                 capacity: 2 + i * 7 % 24, bufferMinutes: i % 5 == 0 ? 15 : nil)
        }
        try await store.applyBulk(roomList.map { .room($0, occurredAt: "2026-01-01T00:00:00Z") })
        let dates = (0..<days).map { LocalClockBench.date(firstDate, plus: $0) }
        var batch: [ModelChange] = []
        for k in 0..<bookings {
            let room = roomList[k % rooms]
            let date = dates[Int(rng.next() % UInt64(days))]
            let length = 30 * (1 + Int(rng.next() % 4))
            let start = 7 * 60 + 15 * Int(rng.next() % UInt64((12 * 60 - length) / 15 + 1))
            batch.append(.booking(BookingState(id: "b\(k)", room: room.name, date: date, startMinute: start,
                                               endMinute: start + length, status: rng.next() % 10 == 0 ? .pending : .confirmed,
                                               version: 1)))
            if batch.count == 20_000 {
                try await store.applyBulk(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        try await store.applyBulk(batch)
        return bookings
    }

    func launch(url: AMQPURL, dataDirectory: String, port: Int) throws -> Process {
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
        // The benchmark is one caller asking as fast as it can.
        environment["CALLER_RATE"] = "off"
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return process
    }
}
