import AMQPClient
import ArgumentParser
import BookingContracts
import BookingHandler
import Foundation
import Logging
import TestSupport

/// Reading bookings (contract v1.1) against a large database: `booking.list`
/// of one room and one week one at a time, and `booking.get` at a fixed rate
/// while creates arrive at half the rate the set sustains pipelined — all
/// through a real release booking-handler process and the broker, beside a
/// raw echo round trip through a quorum queue from the same run.
struct ReadsBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reads", abstract: "booking.list / booking.get over a large database, with and without concurrent creates.")

    @Option(help: "Bookings in the database.")
    var bookings = 1_000_000
    @Option(help: "Rooms they are spread over.")
    var rooms = 500
    @Option(help: "Sequential booking.list queries (one room, one week).")
    var lists = 2_000
    @Option(help: "booking.get per second during the mixed measurement.")
    var getRate = 200
    @Option(help: "Seconds of the mixed measurement.")
    var seconds = 15

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        let client = try await broker.client("bench-reads")

        // Raw baseline: one-at-a-time echo through a quorum queue.
        let quorumQueue = "bench.reads.rpc"
        try await client.declare([.queue(QueueDeclaration(quorumQueue, type: .quorum))])
        let echo = Raw.EchoServer(url: broker.url, queue: quorumQueue)
        let rawSingle = Raw.rpc(url: broker.url, queue: quorumQueue, count: lists, inFlight: 1, body: Array(#"{"bookingId":"x"}"#.utf8))
        echo.stop()
        _ = try? await client.deleteQueue(quorumQueue)

        // The database, filled through the store (not the broker): 1,000,000
        // bookings through commands would take the run's whole budget.
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-reads-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let roomList = (0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }
        let roomsFile = work.appendingPathComponent("rooms.json")
        try ContractJSON.encode(roomList).write(to: roomsFile)
        let fillStart = monotonicNow()
        let ids = try await fill(path: work.appendingPathComponent("booking-handler.sqlite").path)
        let fillSeconds = Double(monotonicNow() - fillStart) / 1e9
        let size = ((try? FileManager.default.attributesOfItem(atPath: work.appendingPathComponent("booking-handler.sqlite").path)[.size]) as? Int) ?? 0
        print(String(format: "filled %d bookings over %d rooms in %.1f s (database %.0f MiB)", ids.count, rooms, fillSeconds,
                     Double(size) / 1_048_576))

        let handler = try BookingBenchmark().launchHandler(url: broker.url, dataDirectory: work.path, roomsFile: roomsFile.path)
        defer { if handler.isRunning { handler.terminate(); handler.waitUntilExit() } }
        while (try? await client.queueInfo(Topology.bookingQueriesQueue).consumerCount) != 1 {
            try await Task.sleep(for: .milliseconds(100))
        }

        // booking.list of one room and one week, one at a time.
        var listLatencies = Latencies()
        var listed = 0
        let firstDay = Date().addingTimeInterval(86_400)
        for i in 0..<lists {
            let room = "Room \(i * 7919 % rooms)"
            let from = firstDay.addingTimeInterval(Double(i * 13 % 300) * 86_400)
            let query = ListBookings(from: .instant(from), to: .instant(from.addingTimeInterval(7 * 86_400)), room: room, limit: 1000)
            let t0 = monotonicNow()
            let reply = try await ask(client, .list, query)
            listLatencies.add(monotonicNow() - t0)
            guard case .bookings(let page, _) = reply else { throw ValidationError("booking.list failed: \(reply)") }
            listed += page.count
        }
        print(String(format: "booking.list, one room, one week, one at a time: p50 %.2f ms, p99 %.2f ms (%.1f bookings per answer); "
                     + "raw quorum echo one at a time: p50 %.2f ms, p99 %.2f ms",
                     listLatencies.percentile(50), listLatencies.percentile(99), Double(listed) / Double(lists),
                     rawSingle.1.percentile(50), rawSingle.1.percentile(99)))

        // The create rate the set sustains pipelined (64 in flight, 5 s).
        let slots = SlotSequence(rooms: rooms, startDay: 400)
        let burst = try await BookingBenchmark().book(client, slots: slots, count: 10_000, inFlight: 64)
        let createRate = burst.rate
        print(String(format: "booking.create pipelined (64 in flight) on this database: %.0f cmd/s (p99 %.2f ms)",
                     createRate, burst.latencies.percentile(99)))

        // booking.get at getRate/s while creates arrive at half that rate.
        let mixedSlots = SlotSequence(rooms: rooms, startDay: 600)
        let createsPerSecond = max(1, Int(createRate / 2))
        async let creates = paced(rate: createsPerSecond, seconds: seconds) { _ in
            guard let command = mixedSlots.next(limit: Int.max) else { return 0 }
            let properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
            let t0 = monotonicNow()
            _ = try await client.call(command, exchange: Topology.commandsExchange, routingKey: "booking.create",
                                      properties: properties, timeout: .seconds(60))
            return monotonicNow() - t0
        }
        async let gets = paced(rate: getRate, seconds: seconds) { n in
            let t0 = monotonicNow()
            let reply = try await ask(client, .get, GetBooking(bookingId: ids[n * 104_729 % ids.count]))
            guard case .booking = reply else { throw ValidationError("booking.get failed: \(reply)") }
            return monotonicNow() - t0
        }
        let (createResult, getResult) = try await (creates, gets)
        print(String(format: "mixed %d s: booking.get %.0f/s achieved (target %d), p50 %.2f ms, p99 %.2f ms; "
                     + "booking.create %.0f/s achieved (target %d = half the pipelined rate), p50 %.2f ms, p99 %.2f ms",
                     seconds, getResult.rate, getRate, getResult.latencies.percentile(50), getResult.latencies.percentile(99),
                     createResult.rate, createsPerSecond, createResult.latencies.percentile(50), createResult.latencies.percentile(99)))
        print(String(format: "booking-handler RSS %.1f MiB", currentRSSMiB(pid: handler.processIdentifier) ?? .nan))
        handler.terminate()
        handler.waitUntilExit()

        // The availability query of the same run, same broker, same shape
        // (500 rooms, about six bookings a room-day for as many days), asked
        // the way other systems ask: through the booking.queries exchange.
        let availability = try await availabilityFigures(broker: broker, client: client, work: work)
        await client.close()

        func ms(_ l: Latencies, _ p: Double) -> String { String(format: "%.2f", l.percentile(p)) }
        print("")
        print("one at a time, same run                                    p50 ms   p99 ms")
        print("booking.list, one room, one week                         \(pad(ms(listLatencies, 50)))\(pad(ms(listLatencies, 99)))")
        print("availability.query, \(rooms) rooms, one day (RPC)            \(pad(ms(availability.rpc, 50)))\(pad(ms(availability.rpc, 99)))")
        print("GET /rooms?date= (HTTP)                                  \(pad(ms(availability.http, 50)))\(pad(ms(availability.http, 99)))")
        print("raw echo through a quorum queue                          \(pad(ms(rawSingle.1, 50)))\(pad(ms(rawSingle.1, 99)))")
        print(String(format: "mixed: booking.get %.0f/s p50 %.2f ms p99 %.2f ms while booking.create %.0f/s (half of %.0f/s pipelined)",
                     getResult.rate, getResult.latencies.percentile(50), getResult.latencies.percentile(99), createResult.rate,
                     createRate))
    }

    func pad(_ s: String) -> String { String(repeating: " ", count: max(0, 9 - s.count)) + s }

    /// Fills an availability read model of `rooms` rooms (0–12 bookings a
    /// room-day, six on average, for as many days as the handler's
    /// database holds), starts the release projector on it, and times
    /// `availability.query` over RPC and `GET /rooms?date=` one at a time.
    func availabilityFigures(broker: BenchmarkBroker, client: AMQPConnection, work: URL) async throws
        -> (rpc: Latencies, http: Latencies)
    {
        var projectorBench = ProjectorBenchmark()
        projectorBench.rooms = rooms
        projectorBench.days = max(1, bookings / rooms / 6)
        projectorBench.maxPerDay = 12
        let firstDate = localDate(daysFromNow: 1)
        let directory = work.appendingPathComponent("projector")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let filled = try await projectorBench.fill(path: directory.appendingPathComponent("availability-projector.sqlite").path,
                                                   firstDate: firstDate)
        let port = try freeTCPPort()
        let projector = try projectorBench.launch(url: broker.url, dataDirectory: directory.path, port: port)
        defer { if projector.isRunning { projector.terminate(); projector.waitUntilExit() } }
        while (try? RawHTTPClient(port: port).get("/readyz").status) != 200 {
            guard projector.isRunning else { throw ValidationError("availability-projector exited (\(projector.terminationStatus))") }
            try await Task.sleep(for: .milliseconds(50))
        }
        print(String(format: "availability read model: %d rooms × %d days, %d bookings", rooms, projectorBench.days, filled))
        var rpc = Latencies(), http = Latencies()
        let httpClient = try RawHTTPClient(port: port)
        for i in 0..<(lists + 200) {
            let day = LocalClockBench.date(firstDate, plus: i * 13 % projectorBench.days)
            var properties = AMQPProperties.persistentJSON(type: "availability.query", messageID: UUID().uuidString)
            properties.userID = client.user
            let t0 = monotonicNow()
            let reply = try await client.call(Array(#"{"date":"\#(day)"}"#.utf8), exchange: Topology.bookingQueriesExchange,
                                              routingKey: Topology.availabilityQueryKey, properties: properties, timeout: .seconds(60))
            let t1 = monotonicNow()
            guard let list = try? ContractJSON.decode(AvailabilityReply.self, from: reply.body), list.count == rooms else {
                throw ValidationError("availability.query failed: \(String(decoding: reply.body, as: UTF8.self).prefix(200))")
            }
            let t2 = monotonicNow()
            let answer = try httpClient.get("/rooms?date=\(day)")
            let t3 = monotonicNow()
            guard answer.status == 200 else { throw ValidationError("GET /rooms: \(answer.status)") }
            if i >= 200 {  // the first 200 warm up
                rpc.add(t1 - t0)
                http.add(t3 - t2)
            }
        }
        projector.terminate()
        projector.waitUntilExit()
        return (rpc, http)
    }

    func ask(_ client: AMQPConnection, _ type: BookingQueryType, _ body: some Encodable) async throws -> BookingQueryReply {
        var properties = AMQPProperties.persistentJSON(type: type.rawValue, messageID: UUID().uuidString)
        properties.userID = client.user
        let reply = try await client.call([UInt8](try ContractJSON.encode(body)), exchange: Topology.bookingQueriesExchange,
                                          routingKey: type.rawValue, properties: properties, timeout: .seconds(60))
        return try ContractJSON.decode(BookingQueryReply.self, from: reply.body)
    }

    /// Runs `body` `rate` times a second for `seconds`, each call its own
    /// task (open loop: a slow answer does not slow the arrivals).
    func paced(rate: Int, seconds: Int, _ body: @escaping @Sendable (Int) async throws -> UInt64) async throws
        -> (rate: Double, latencies: Latencies)
    {
        let start = monotonicNow()
        let total = rate * seconds
        let samples = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for n in 0..<total {
                let due = start + UInt64(Double(n) / Double(rate) * 1e9)
                let now = monotonicNow()
                if due > now { try await Task.sleep(nanoseconds: due - now) }
                group.addTask { try await body(n) }
            }
            var all: [UInt64] = []
            for try await s in group where s > 0 { all.append(s) }
            return all
        }
        var latencies = Latencies()
        latencies.add(contentsOf: samples)
        return (Double(samples.count) / (Double(monotonicNow() - start) / 1e9), latencies)
    }

    /// Rooms and `bookings` confirmed bookings of 2 h (07:00–19:00 Berlin,
    /// six a day per room from tomorrow on), written in transactions of
    /// 10,000 through the store's own save. Returns the ids.
    func fill(path: String) async throws -> [String] {
        let store = try SQLiteBookingStore(path: path)
        let processor = CommandProcessor(store: store)
        _ = try await processor.upsertRooms(fileContents: try ContractJSON.encode((0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }))
        var ids: [String] = []
        ids.reserveCapacity(bookings)
        let berlin = TimeZone(identifier: "Europe/Berlin")!
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = berlin
        let today = calendar.startOfDay(for: Date())
        let perDay = 6
        var n = 0
        while n < bookings {
            let chunk = min(10_000, bookings - n)
            var batch: [(EncodedBooking, Date, Date)] = []
            for i in n..<(n + chunk) {
                let room = i % rooms
                let slot = i / rooms
                let day = slot / perDay + 1, index = slot % perDay
                let date = calendar.date(byAdding: .day, value: day, to: today)!
                let startsAt = calendar.date(bySettingHour: 7 + index * 2, minute: 0, second: 0, of: date)!
                let endsAt = startsAt.addingTimeInterval(2 * 3600)
                let c = calendar.dateComponents([.year, .month, .day], from: date)
                let booking = Booking(
                    id: UUID().uuidString.lowercased(), room: "Room \(room)",
                    date: String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!),
                    start: String(format: "%02d:00", 7 + index * 2), end: String(format: "%02d:00", 9 + index * 2),
                    timeZone: "Europe/Berlin", startsAt: ContractFormat.timestamp(startsAt), endsAt: ContractFormat.timestamp(endsAt),
                    title: "Meeting \(i)", status: .confirmed,
                    attendees: [Attendee(name: "Ada Lovelace", email: "ada\(i % 97)@example.com", phone: "+491701234567")],
                    requestedBy: "partner-\(i % 5)", version: 1)
                batch.append((EncodedBooking(booking), startsAt, endsAt))
                ids.append(booking.id)
            }
            let rows = batch
            try await store.transaction { tx in
                for (encoded, startsAt, endsAt) in rows { try tx.save(encoded, startsAt: startsAt, endsAt: endsAt) }
            }
            n += chunk
        }
        return ids
    }
}
