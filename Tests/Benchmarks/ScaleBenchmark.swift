import AMQPClient
import ArgumentParser
import BookingContracts
import BookingHandler
import Foundation
import Logging
import TestSupport

/// A large office's history in the handler's store, and what it costs:
/// seeds `--bookings` bookings (``ScaleSeed``: 2,000 rooms, two years,
/// statuses, series and attendees) into SQLite or PostgreSQL through the
/// store's own write path, then measures against it and, in the same run
/// with the same commands, against an empty store (rooms only): creates one
/// at a time and pipelined with the handler's CPU per booking,
/// `booking.list` of one room and week and of one requester and month,
/// `availability.query` of 50 rooms and of all, the handler's and the
/// projector's start-up and RSS, bytes on disk per booking, and a projector
/// rebuild from the handler's replay. Release services beside this
/// executable (debug ones in CI's small run).
struct ScaleBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract: "1,000,000 bookings in either store: create, list, availability, start-up, RSS, disk, rebuild against the empty store.")

    enum StoreKind: String, ExpressibleByArgument, CaseIterable, Codable {
        case sqlite, postgres, both
    }

    @Option(help: "Bookings to seed.")
    var bookings = 1_000_000
    @Option(help: "Rooms (50 to a building).")
    var rooms = 2_000
    @Option(help: "Store: sqlite, postgres or both (PostgreSQL: the tests' private server, or POSTGRES_TEST_DIR's).")
    var store: StoreKind = .both
    @Option(help: "Creates one at a time per phase.")
    var single = 1_000
    @Option(help: "Creates pipelined per phase.")
    var pipelined = 5_000
    @Option(help: "Requests in flight for the pipelined creates.")
    var inFlight = 64
    @Option(help: "Queries one at a time per kind and phase (after 50 to warm up).")
    var queries = 500
    @Option(help: "Write the figures as JSON to this file.")
    var json: String?

    enum SeedPath: String, ExpressibleByArgument {
        case copy, store
    }

    @Option(help: "How PostgreSQL is seeded: copy (COPY of the rows the store writes, checked against the store's path first) or store (its own transactions; SQLite always is).")
    var postgresSeed: SeedPath = .copy
    @Option(help: "Bookings seeded both ways to check that the PostgreSQL copy path writes the store's rows (0: no check).")
    var checkBulk = 3_000
    @Flag(help: "Also rebuild the seeded store with one replayed event per booking (REPLAY_PAGE_SIZE=1), the baseline of the replay pages.")
    var rebuildBaseline = false

    func run() async throws {
        // The services it starts measure capacity, not the per-caller limit
        // (CALLER_RATE, 100/s by default), which one client would hit.
        setenv("CALLER_RATE", "off", 1)
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        let client = try await broker.client("bench-scale")
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-scale-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let roomsFile = work.appendingPathComponent("rooms.json")
        try ContractJSON.encode(ScaleSeed.roomList(rooms)).write(to: roomsFile)
        let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "?"
        print("broker: \(broker.url); \(bookings) bookings over \(rooms) rooms; load average at start \(load)")

        var report = Report(date: ContractFormat.timestamp(Date()), bookings: bookings, rooms: rooms, loadAverage: load, stores: [])
        let kinds: [StoreKind] = store == .both ? [.sqlite, .postgres] : [store]
        if kinds.contains(.postgres), postgresSeed == .copy, checkBulk > 0 {
            try await checkBulkPath(ownUser: client.user, work: work, roomsFile: roomsFile)
        }
        for kind in kinds {
            var figures = StoreFigures(store: kind.rawValue)
            for seeded in [false, true] {
                let phase = try await measure(kind, seeded: seeded, broker: broker, client: client, work: work, roomsFile: roomsFile)
                if seeded { figures.seeded = phase } else { figures.empty = phase }
                print(phase.summary(store: kind.rawValue))
            }
            report.stores.append(figures)
        }
        _ = await BookingBenchmark.purgeDownstream(client)
        await client.close()
        report.print()
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
            try encoder.encode(report).write(to: URL(fileURLWithPath: json))
            print("figures written to \(json)")
        }
        if let failure = report.stores.flatMap({ [$0.empty, $0.seeded] }).compactMap({ $0?.failure }).first {
            throw ValidationError(failure)
        }
    }

    // MARK: One phase

    /// One store, empty (rooms only) or seeded: start the handler, create,
    /// list; start a projector, rebuild, query; restart it on its model.
    func measure(_ kind: StoreKind, seeded: Bool, broker: BenchmarkBroker, client: AMQPConnection, work: URL,
                 roomsFile: URL) async throws -> PhaseFigures {
        let name = "\(kind.rawValue)-\(seeded ? "seeded" : "empty")"
        let directory = work.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var environment = ["HTTP_PORT": "0"]
        var schema: String?
        if kind == .postgres {
            let s = "scale_\(getpid())_\(seeded ? "seeded" : "empty")"
            schema = s
            environment["DATABASE_URL"] = try TestPostgres.databaseURL() + "?schema=\(s)"
        }
        var phase = PhaseFigures(seeded: seeded)
        _ = try? await client.purgeQueue(Topology.handlerCommandsQueue)
        _ = await BookingBenchmark.purgeDownstream(client)

        // The store: rooms, and the history when seeded.
        let seed = ScaleSeed(bookings: seeded ? bookings : 0, rooms: rooms, ownUser: client.user)
        let sizeBefore: Int64
        do {
            let store: any BookingStore = try await openStore(kind, directory: directory, url: environment["DATABASE_URL"])
            _ = try await CommandProcessor(store: store).upsertRooms(fileContents: try Data(contentsOf: roomsFile))
            sizeBefore = try diskBytes(kind, directory: directory, schema: schema)
            let start = monotonicNow()
            var lastReport = start
            let progress: (Int) -> Void = { done in
                let now = monotonicNow()
                if now - lastReport > 10_000_000_000 {
                    lastReport = now
                    print(String(format: "  seeding %@: %d bookings, %.0f/s", kind.rawValue as NSString, done, Double(done) / (Double(now - start) / 1e9)))
                }
            }
            let written: Int
            if let schema, seeded, postgresSeed == .copy {
                await store.close()
                written = try await seed.copy(into: schema, directory: directory, progress: progress)
            } else {
                written = try await seed.write(into: store, progress: progress)
                await store.close()
            }
            if written > 0 {
                let seconds = Double(monotonicNow() - start) / 1e9
                phase.seedSeconds = seconds
                phase.seedRate = Double(written) / seconds
                print(String(format: "seeded %d bookings into %@ in %.1f s (%.0f/s)", written, kind.rawValue as NSString, seconds, Double(written) / seconds))
            }
        }
        if let schema, seeded {
            // A store that grew over two years has statistics and a
            // visibility map; one filled a moment ago has neither until
            // autovacuum comes round.
            _ = try TestPostgres.control("psql", ["-q", "-c", "VACUUM ANALYZE \(schema).booking", "-c", "VACUUM ANALYZE \(schema).booking_version",
                                                  "-c", "VACUUM ANALYZE \(schema).series"])
        }
        let sizeAfter = try diskBytes(kind, directory: directory, schema: schema)
        phase.storeBytes = sizeAfter
        if seeded, bookings > 0 { phase.bytesPerBooking = Double(sizeAfter - sizeBefore) / Double(bookings) }

        // The handler: start-up, creates, lists.
        let launched = monotonicNow()
        let handler = try BookingBenchmark().launchHandler(url: broker.url, dataDirectory: directory.path, roomsFile: roomsFile.path,
                                                           environment: environment)
        defer { if handler.isRunning { handler.terminate(); handler.waitUntilExit() } }
        while true {
            let commands = try await consumers(client, Topology.handlerCommandsQueue)
            let queries = try await consumers(client, Topology.bookingQueriesQueue)
            if commands == 1 && queries == 1 { break }
            guard handler.isRunning else { throw ValidationError("booking-handler exited (\(handler.terminationStatus))") }
            try await Task.sleep(for: .milliseconds(10))
        }
        phase.handlerStartSeconds = Double(monotonicNow() - launched) / 1e9
        let pid = handler.processIdentifier
        let slots = ScaleSlots(rooms: rooms)
        // Warm-up, not counted: the first creates after a start read the
        // store's pages into a cold process (30 samples at 200,000 bookings
        // gave a p50 of 10.9 ms with them and 2.4 ms without); the goal is
        // the steady state, for the empty and the seeded store alike.
        _ = try await book(client, slots: slots, count: Self.createWarmUp, inFlight: 1)
        var cpu = cpuNanos(pid: pid), pg = kind == .postgres ? StoresBenchmark().postgresCPUNanos() : 0
        let one = try await book(client, slots: slots, count: single, inFlight: 1)
        phase.createSingle = Timing(one.latencies, failures: one.failures, rate: one.rate,
                                    handlerCPU: Double(cpuNanos(pid: pid) - cpu) / Double(max(1, single)) / 1000,
                                    databaseCPU: kind == .postgres ? Double(StoresBenchmark().postgresCPUNanos() &- pg) / Double(max(1, single)) / 1000 : nil)
        cpu = cpuNanos(pid: pid)
        pg = kind == .postgres ? StoresBenchmark().postgresCPUNanos() : 0
        let many = try await book(client, slots: slots, count: pipelined, inFlight: inFlight)
        phase.createPipelined = Timing(many.latencies, failures: many.failures, rate: many.rate,
                                       handlerCPU: Double(cpuNanos(pid: pid) - cpu) / Double(max(1, pipelined)) / 1000,
                                       databaseCPU: kind == .postgres ? Double(StoresBenchmark().postgresCPUNanos() &- pg) / Double(max(1, pipelined)) / 1000 : nil)

        let days = ScaleSeed.days()
        let queryDate = days.first(where: { $0.offset >= 7 })!.date
        var rng = SplitMix(seed: 7)
        var listed = 0
        phase.listRoomWeek = try await timed(queries) { _ in
            let day = days[Int(rng.next() % UInt64(days.count))].date
            let from = ContractFormat.instant(date: day, time: "00:00", timeZone: ScaleSeed.zone)!
            let query = ListBookings(from: .instant(from), to: .instant(from.addingTimeInterval(7 * 86_400)),
                                     room: ScaleSeed.roomName(Int(rng.next() % UInt64(rooms))), limit: 200)
            guard case .bookings(let page, _) = try await ask(client, .list, query) else { throw ValidationError("booking.list failed") }
            listed += page.count
        }
        phase.listRoomWeekRows = Double(listed) / Double(queries + 50)
        listed = 0
        phase.listRequesterMonth = try await timed(queries) { _ in
            let day = days[Int(rng.next() % UInt64(days.count))].date
            let from = ContractFormat.instant(date: day, time: "00:00", timeZone: ScaleSeed.zone)!
            let query = ListBookings(from: .instant(from), to: .instant(from.addingTimeInterval(30 * 86_400)),
                                     requestedBy: client.user, limit: 200)
            guard case .bookings(let page, _) = try await ask(client, .list, query) else { throw ValidationError("booking.list failed") }
            listed += page.count
        }
        phase.listRequesterMonthRows = Double(listed) / Double(queries + 50)
        phase.handlerRSSMiB = currentRSSMiB(pid: pid)
        phase.handlerPeakRSSMiB = peakRSSOf(pid: pid)

        // The projector: start-up on an empty model, rebuild, queries, then
        // start-up on the rebuilt model.
        let projectorDirectory = directory.appendingPathComponent("projector")
        try FileManager.default.createDirectory(at: projectorDirectory, withIntermediateDirectories: true)
        _ = await BookingBenchmark.purgeDownstream(client)
        // A control request or replay a stopped run left behind would start
        // a rebuild of its own.
        for queue in [ProjectorControl.queue, ProjectorControl.replayQueue] { _ = try? await client.purgeQueue(queue) }
        let (projector, emptyStart, projectorPort) = try await startProjector(broker: broker, directory: projectorDirectory)
        phase.projectorEmptyStartSeconds = emptyStart
        do {
            defer { if projector.isRunning { projector.terminate(); projector.waitUntilExit() } }
            let changedBefore = try await changesPublished(port: projectorPort)
            let asked = monotonicNow()
            switch try await rebuild(client, cpuOf: [pid, projector.processIdentifier, broker.node?.pid]) {
            case .success(let (bookings, seconds, finish, cpu, changedDays)):
                phase.rebuildBookings = bookings
                phase.rebuildSeconds = seconds
                phase.rebuildFinishSeconds = finish
                phase.rebuildChangedDays = changedDays
                // The rebuild's availability.changed go out after its answer;
                // the queries below wait for them (bounded: a batch the
                // broker never confirmed is not published again).
                let deadline = monotonicNow() + 1_800_000_000_000
                while try await changesPublished(port: projectorPort) < changedBefore + Double(changedDays) {
                    guard monotonicNow() < deadline else {
                        phase.failure = "the rebuild's \(changedDays) availability.changed were not all published within 30 minutes"
                        break
                    }
                    try await Task.sleep(for: .milliseconds(20))
                }
                phase.rebuildAnnouncedSeconds = Double(monotonicNow() - asked) / 1e9
                phase.rebuildRate = Double(bookings) / seconds
                phase.rebuildCPUMicros = cpu
            case .failure(let failure):
                // The other figures of the phase still count: note it, go on.
                phase.failure = failure.description
                print(failure)
            }
            var filtered = 0, all = 0
            phase.availabilityFiltered = try await timed(queries) { _ in
                filtered = try await availability(client, #"{"date":"\#(queryDate)","name":"Room 07-"}"#)
            }
            phase.availabilityAll = try await timed(queries) { _ in
                all = try await availability(client, #"{"date":"\#(queryDate)"}"#)
            }
            phase.availabilityFilteredRooms = filtered
            phase.availabilityAllRooms = all
            // availability.suggest: a week from the query date, an hour, six people.
            let week = LocalClockBench.date(queryDate, plus: 7)
            phase.availabilitySuggest = try await timed(queries) { _ in
                try await suggest(client, #"{"from":"\#(queryDate)","to":"\#(week)","durationMinutes":60,"minCapacity":6}"#)
            }
            projector.terminate()
            projector.waitUntilExit()
        }
        let (restarted, fullStart, _) = try await startProjector(broker: broker, directory: projectorDirectory)
        phase.projectorStartSeconds = fullStart
        // One query so that the figure includes what a first answer loads.
        _ = try await availability(client, #"{"date":"\#(queryDate)"}"#)
        phase.projectorRSSMiB = currentRSSMiB(pid: restarted.processIdentifier)
        phase.projectorPeakRSSMiB = peakRSSOf(pid: restarted.processIdentifier)
        phase.projectorStoreBytes = directorySize(projectorDirectory)
        restarted.terminate()
        restarted.waitUntilExit()
        if rebuildBaseline && seeded {
            // The same rebuild as one event per booking (what a handler
            // before replay pages sends), against the same handler.
            let (single, _, _) = try await startProjector(broker: broker, directory: projectorDirectory,
                                                       environment: ["REPLAY_PAGE_SIZE": "1"])
            defer { single.terminate(); single.waitUntilExit() }
            switch try await rebuild(client, cpuOf: [pid, single.processIdentifier, broker.node?.pid]) {
            case .success(let (bookings, seconds, _, cpu, _)):
                phase.rebuildSingleEventsRate = Double(bookings) / seconds
                phase.rebuildSingleEventsCPUMicros = cpu
            case .failure(let failure):
                phase.failure = "one event per booking: " + failure.description
                print(phase.failure!)
            }
        }
        handler.terminate()
        handler.waitUntilExit()

        // What the handler's own commands left: bounded by retention.
        let store = try await openStore(kind, directory: directory, url: environment["DATABASE_URL"])
        let counts = try await store.counts()
        await store.close()
        phase.inboxRows = counts.inbox
        phase.outboxPending = counts.outboxPending
        phase.bookingsInStore = counts.bookings
        let failures = phase.createSingle.failures + phase.createPipelined.failures
        if failures > 0 { phase.failure = "\(failures) creates failed (\(kind.rawValue), \(seeded ? "seeded" : "empty"))" }
        if phase.availabilityFilteredRooms != 50 {
            phase.failure = "the filtered availability.query answered \(phase.availabilityFilteredRooms) rooms, not 50"
        }
        if let schema {
            _ = try? TestPostgres.control("psql", ["-q", "-c", "DROP SCHEMA \(schema) CASCADE"])
        }
        try? FileManager.default.removeItem(at: directory)
        return phase
    }

    /// Seeds `checkBulk` bookings into one schema through the store and into
    /// another with ``ScaleSeed/copy(into:directory:batch:progress:)``, and
    /// fails unless `booking`, `booking_version` (with `seq`) and `series`
    /// hold the same rows in both.
    func checkBulkPath(ownUser: String, work: URL, roomsFile: URL) async throws {
        // 50 rooms, so that each gets enough bookings for series too.
        let seed = ScaleSeed(bookings: checkBulk, rooms: min(rooms, 50), ownUser: ownUser)
        let schemas = ["scale_\(getpid())_check_store", "scale_\(getpid())_check_copy"]
        defer { for schema in schemas { _ = try? TestPostgres.control("psql", ["-q", "-c", "DROP SCHEMA IF EXISTS \(schema) CASCADE"]) } }
        for (index, schema) in schemas.enumerated() {
            let store = try await openStore(.postgres, directory: work, url: try TestPostgres.databaseURL() + "?schema=\(schema)")
            _ = try await CommandProcessor(store: store).upsertRooms(fileContents: try Data(contentsOf: roomsFile))
            if index == 0 { _ = try await seed.write(into: store) }
            await store.close()
            if index == 1 { _ = try await seed.copy(into: schema, directory: work) }
        }
        let (a, b) = (schemas[0], schemas[1])
        var parts: [String] = []
        for table in ["booking", "booking_version", "series"] {
            parts.append("(SELECT count(*) FROM (SELECT * FROM \(a).\(table) EXCEPT ALL SELECT * FROM \(b).\(table)) x)")
            parts.append("(SELECT count(*) FROM (SELECT * FROM \(b).\(table) EXCEPT ALL SELECT * FROM \(a).\(table)) x)")
        }
        let out = try TestPostgres.control("psql", ["-tA", "-c", "SELECT " + parts.joined(separator: " || ',' || ")
                                                    + " || ';' || (SELECT count(*) FROM \(b).booking) || ',' || (SELECT count(*) FROM \(b).series)"])
        let answer = out.trimmingCharacters(in: .whitespacesAndNewlines)
        let halves = answer.split(separator: ";").map { $0.split(separator: ",").map { Int($0) ?? -1 } }
        guard halves.count == 2, halves[0].count == 6, halves[0].allSatisfy({ $0 == 0 }), halves[1].count == 2,
              halves[1][0] == checkBulk, halves[1][1] > 0 else {
            throw ValidationError("the PostgreSQL copy path differs from the store's rows (differences per table and side; rows): \(answer)")
        }
        print("PostgreSQL copy path checked: \(checkBulk) bookings seeded both ways, the same rows in booking, booking_version and series (\(answer))")
    }

    func openStore(_ kind: StoreKind, directory: URL, url: String?) async throws -> any BookingStore {
        if kind == .postgres, let url {
            var logger = Logger(label: "bench-scale")
            logger.logLevel = .warning
            // Read as the handler reads its environment.
            guard let settings = try HandlerSettings(environment: ["DATABASE_URL": url]).database else {
                throw ValidationError("not a PostgreSQL URL")
            }
            return try await PostgresBookingStore.open(settings: settings, logger: logger)
        }
        return try SQLiteBookingStore(path: directory.appendingPathComponent("booking-handler.sqlite").path)
    }

    /// The store's bytes: the SQLite files, or every relation of the schema
    /// with its indexes and TOAST.
    func diskBytes(_ kind: StoreKind, directory: URL, schema: String?) throws -> Int64 {
        guard kind == .postgres, let schema else { return directorySize(directory) }
        let out = try TestPostgres.control("psql", ["-tA", "-c", """
            SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = '\(schema)' AND c.relkind = 'r'
            """])
        return Int64(out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    func directorySize(_ directory: URL) -> Int64 {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.reduce(Int64(0)) { sum, name in
            let path = directory.appendingPathComponent(name).path
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { return sum }
            return sum + (((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? Int64) ?? 0)
        }
    }

    func consumers(_ client: AMQPConnection, _ queue: String) async throws -> Int {
        (try? await client.queueInfo(queue).consumerCount) ?? -1
    }

    /// A release projector on `directory`; seconds until `/readyz` answers 200.
    /// Creates one at a time before the measured ones, in each phase.
    static let createWarmUp = 50

    /// Asks the running projector for a rebuild and waits for its answer:
    /// the bookings it rebuilt and the seconds the caller waited.
    func rebuild(_ client: AMQPConnection, cpuOf pids: [Int32?] = []) async throws
        -> Result<(bookings: Int, seconds: Double, finishSeconds: Double?, cpuMicros: [Double?], changedDays: Int), ValidationError> {
        let before = pids.map { $0.map { cpuNanos(pid: $0) } }
        var properties = AMQPProperties.persistentJSON(type: ProjectorControl.rebuildType, messageID: UUID().uuidString)
        properties.deliveryMode = .transient
        let t0 = monotonicNow()
        let answer = try await client.call(Array("{}".utf8), exchange: "", routingKey: ProjectorControl.queue,
                                           properties: properties, timeout: .seconds(7_200))
        let seconds = Double(monotonicNow() - t0) / 1e9
        let reply = try ContractJSON.decode(ProjectorControl.Reply.self, from: answer.body)
        guard let result = reply.rebuild else {
            return .failure(ValidationError("rebuild failed after \(Int(seconds)) s: \(String(decoding: answer.body, as: UTF8.self).prefix(300))"))
        }
        let cpu = zip(pids, before).map { pid, start -> Double? in
            guard let pid, let start, result.bookings > 0 else { return nil }
            return Double(cpuNanos(pid: pid) &- start) / Double(result.bookings) / 1000
        }
        return .success((result.bookings, seconds, result.finishSeconds, cpu, result.changedDays))
    }

    func startProjector(broker: BenchmarkBroker, directory: URL, environment: [String: String] = [:]) async throws
        -> (Process, Double, port: Int) {
        let port = try freeTCPPort()
        let t0 = monotonicNow()
        let projector = try ProjectorBenchmark().launch(url: broker.url, dataDirectory: directory.path, port: port,
                                                        environment: environment)
        while (try? RawHTTPClient(port: port).get("/readyz").status) != 200 {
            guard projector.isRunning else { throw ValidationError("availability-projector exited (\(projector.terminationStatus))") }
            try await Task.sleep(for: .milliseconds(10))
        }
        return (projector, Double(monotonicNow() - t0) / 1e9, port)
    }

    /// The projector's `projector_availability_changed_total`.
    func changesPublished(port: Int) async throws -> Double {
        let body = try await metricsText("http://127.0.0.1:\(port)/metrics")
        for line in body.split(separator: "\n") where line.hasPrefix("projector_availability_changed_total ") {
            return line.split(separator: " ").last.flatMap { Double($0) } ?? 0
        }
        return 0
    }

    /// `availability.suggest` over RPC as other systems ask it; the suggestions answered.
    @discardableResult
    func suggest(_ client: AMQPConnection, _ body: String) async throws -> Int {
        var properties = AMQPProperties.persistentJSON(type: SuggestContract.suggestKey, messageID: UUID().uuidString)
        properties.userID = client.user
        let reply = try await client.call(Array(body.utf8), exchange: Topology.bookingQueriesExchange,
                                          routingKey: SuggestContract.suggestKey, properties: properties, timeout: .seconds(60))
        guard case .success(let suggestions)? = try? SuggestReply.decode(body: reply.body) else {
            throw ValidationError("availability.suggest failed: \(String(decoding: reply.body, as: UTF8.self).prefix(200))")
        }
        return suggestions.count
    }

    /// `availability.query` over RPC as other systems ask it; the rooms answered.
    func availability(_ client: AMQPConnection, _ body: String) async throws -> Int {
        var properties = AMQPProperties.persistentJSON(type: "availability.query", messageID: UUID().uuidString)
        properties.userID = client.user
        let reply = try await client.call(Array(body.utf8), exchange: Topology.bookingQueriesExchange,
                                          routingKey: Topology.availabilityQueryKey, properties: properties, timeout: .seconds(60))
        guard let list = try? ContractJSON.decode(AvailabilityReply.self, from: reply.body) else {
            throw ValidationError("availability.query failed: \(String(decoding: reply.body, as: UTF8.self).prefix(200))")
        }
        return list.count
    }

    func ask(_ client: AMQPConnection, _ type: BookingQueryType, _ body: some Encodable) async throws -> BookingQueryReply {
        try await ReadsBenchmark().ask(client, type, body)
    }

    /// `count` calls of `body` one at a time after 50 to warm up.
    func timed(_ count: Int, _ body: (Int) async throws -> Void) async throws -> Timing {
        var latencies = Latencies()
        for i in 0..<(count + 50) {
            let t0 = monotonicNow()
            try await body(i)
            if i >= 50 { latencies.add(monotonicNow() - t0) }
        }
        return Timing(latencies)
    }

    /// Creates from `slots`, `inFlight` at a time (``BookingBenchmark/book``'s loop over ``ScaleSlots``).
    func book(_ client: AMQPConnection, slots: ScaleSlots, count: Int, inFlight: Int) async throws -> BookingBenchmark.Result {
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
                                                          properties: properties, timeout: .seconds(120))
                        samples.append(monotonicNow() - t0)
                        if !(try ContractJSON.decode(CommandReply.self, from: reply.body)).isOK {
                            failures += 1
                            if failures == 1 { print("create failed: \(String(decoding: reply.body, as: UTF8.self).prefix(300))") }
                        }
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
        return BookingBenchmark.Result(rate: Double(latencies.samples.count) / (Double(monotonicNow() - start) / 1e9),
                                       latencies: latencies, failures: perWorker.map(\.1).reduce(0, +))
    }

    // MARK: Figures

    struct Timing: Codable {
        var count = 0
        var p50Ms = Double.nan
        var p99Ms = Double.nan
        var failures = 0
        var rate: Double?
        /// Handler user + system CPU per booking, µs.
        var handlerCPUMicros: Double?
        /// Every `postgres` process's CPU per booking, µs.
        var databaseCPUMicros: Double?

        init() {}

        init(_ latencies: Latencies, failures: Int = 0, rate: Double? = nil, handlerCPU: Double? = nil, databaseCPU: Double? = nil) {
            count = latencies.samples.count
            p50Ms = latencies.percentile(50)
            p99Ms = latencies.percentile(99)
            self.failures = failures
            self.rate = rate
            handlerCPUMicros = handlerCPU
            databaseCPUMicros = databaseCPU
        }
    }

    struct PhaseFigures: Codable {
        var seeded: Bool
        var seedSeconds: Double?
        var seedRate: Double?
        var storeBytes: Int64 = 0
        var bytesPerBooking: Double?
        var bookingsInStore = 0
        var handlerStartSeconds = 0.0
        var createSingle = Timing()
        var createPipelined = Timing()
        var listRoomWeek = Timing()
        var listRoomWeekRows = 0.0
        var listRequesterMonth = Timing()
        var listRequesterMonthRows = 0.0
        var availabilityFiltered = Timing()
        var availabilityFilteredRooms = 0
        var availabilityAll = Timing()
        var availabilityAllRooms = 0
        /// Not in the projector yet.
        var availabilitySuggest: Timing?
        var projectorEmptyStartSeconds = 0.0
        var projectorStartSeconds = 0.0
        var rebuildBookings = 0
        var rebuildSeconds = 0.0
        var rebuildRate = 0.0
        /// With `--rebuild-baseline`: the same rebuild as one event per booking.
        var rebuildSingleEventsRate: Double?
        /// Of `rebuildSeconds`, the projector's last step (room-days and swap).
        var rebuildFinishSeconds: Double?
        /// Room-days the rebuild changed (all booked ones, from an empty model).
        var rebuildChangedDays = 0
        /// From the request until the projector had published the rebuild's
        /// `availability.changed` (two messages per changed room-day).
        var rebuildAnnouncedSeconds: Double?
        /// CPU per rebuilt booking, µs: handler, projector, broker (nil when not measured).
        var rebuildCPUMicros: [Double?] = []
        var rebuildSingleEventsCPUMicros: [Double?] = []
        var handlerRSSMiB: Double?
        var handlerPeakRSSMiB: Double?
        var projectorRSSMiB: Double?
        var projectorPeakRSSMiB: Double?
        var projectorStoreBytes: Int64 = 0
        var inboxRows = 0
        var outboxPending = 0
        var failure: String?

        init(seeded: Bool) { self.seeded = seeded }

        func summary(store: String) -> String {
            String(format: "%@ %@: create one at a time p50 %.2f ms, pipelined %.0f/s; list p99 %.2f / %.2f ms; availability p99 %.2f / %.2f ms; "
                   + "rebuild %d in %.1f s; start-up %.2f / %.2f s",
                   store as NSString, (seeded ? "seeded" : "empty") as NSString, createSingle.p50Ms, createPipelined.rate ?? 0, listRoomWeek.p99Ms,
                   listRequesterMonth.p99Ms, availabilityFiltered.p99Ms, availabilityAll.p99Ms, rebuildBookings, rebuildSeconds,
                   handlerStartSeconds, projectorStartSeconds)
        }
    }

    struct StoreFigures: Codable {
        var store: String
        var empty: PhaseFigures?
        var seeded: PhaseFigures?
    }

    struct Report: Codable {
        var date: String
        var bookings: Int
        var rooms: Int
        var loadAverage: String
        var stores: [StoreFigures]

        func print() {
            func f(_ v: Double?, _ format: String = "%.2f") -> String {
                guard let v, v.isFinite else { return "-" }
                return String(format: format, v)
            }
            func mib(_ bytes: Int64) -> String { String(format: "%.1f MiB", Double(bytes) / 1_048_576) }
            let columns = stores.flatMap { s in [("\(s.store), empty", s.empty), ("\(s.store), \(bookings)", s.seeded)] }
            let rows: [(String, (PhaseFigures) -> String)] = [
                ("seed (bookings/s)", { f($0.seedRate, "%.0f") }),
                ("booking.create one at a time p50 / p99 ms", { f($0.createSingle.p50Ms) + " / " + f($0.createSingle.p99Ms) }),
                ("  handler CPU per booking µs", { f($0.createSingle.handlerCPUMicros, "%.0f") }),
                ("  PostgreSQL CPU per booking µs", { f($0.createSingle.databaseCPUMicros, "%.0f") }),
                ("booking.create \(64) in flight /s", { f($0.createPipelined.rate, "%.0f") }),
                ("  p50 / p99 ms", { f($0.createPipelined.p50Ms) + " / " + f($0.createPipelined.p99Ms) }),
                ("  handler CPU per booking µs", { f($0.createPipelined.handlerCPUMicros, "%.0f") }),
                ("  PostgreSQL CPU per booking µs", { f($0.createPipelined.databaseCPUMicros, "%.0f") }),
                ("booking.list room+week p50 / p99 ms", { f($0.listRoomWeek.p50Ms) + " / " + f($0.listRoomWeek.p99Ms) }),
                ("  bookings per answer", { f($0.listRoomWeekRows, "%.1f") }),
                ("booking.list requester+month p50 / p99 ms", { f($0.listRequesterMonth.p50Ms) + " / " + f($0.listRequesterMonth.p99Ms) }),
                ("  bookings per answer", { f($0.listRequesterMonthRows, "%.1f") }),
                ("availability.query 50 rooms p50 / p99 ms", { f($0.availabilityFiltered.p50Ms) + " / " + f($0.availabilityFiltered.p99Ms) }),
                ("availability.query all rooms p50 / p99 ms", { f($0.availabilityAll.p50Ms) + " / " + f($0.availabilityAll.p99Ms) }),
                ("availability.suggest 7 days p50 / p99 ms", { $0.availabilitySuggest.map { f($0.p50Ms) + " / " + f($0.p99Ms) } ?? "n/a" }),
                ("handler start-up s", { f($0.handlerStartSeconds) }),
                ("projector start-up, empty / rebuilt model s", { f($0.projectorEmptyStartSeconds) + " / " + f($0.projectorStartSeconds) }),
                ("handler RSS (peak) MiB", { f($0.handlerRSSMiB, "%.0f") + " (" + f($0.handlerPeakRSSMiB, "%.0f") + ")" }),
                ("projector RSS (peak) MiB", { f($0.projectorRSSMiB, "%.0f") + " (" + f($0.projectorPeakRSSMiB, "%.0f") + ")" }),
                ("handler store on disk", { mib($0.storeBytes) }),
                ("  bytes per booking", { f($0.bytesPerBooking, "%.0f") }),
                ("projector store on disk", { mib($0.projectorStoreBytes) }),
                ("rebuild bookings/s", { f($0.rebuildRate, "%.0f") + " (" + String($0.rebuildBookings) + " in " + f($0.rebuildSeconds, "%.1f") + " s)" }),
                ("  of which room-days and swap s", { f($0.rebuildFinishSeconds, "%.1f") }),
                ("  availability.changed all published after s", { f($0.rebuildAnnouncedSeconds, "%.1f") + " (" + String($0.rebuildChangedDays) + " days)" }),
                ("  CPU µs per booking handler/projector/broker", { $0.rebuildCPUMicros.map { f($0, "%.0f") }.joined(separator: "/") }),
                ("  one event per booking (baseline) /s", { f($0.rebuildSingleEventsRate, "%.0f") }),
                ("  CPU µs per booking handler/projector/broker", { $0.rebuildSingleEventsCPUMicros.map { f($0, "%.0f") }.joined(separator: "/") }),
                ("inbox rows / outbox pending after", { "\($0.inboxRows) / \($0.outboxPending)" }),
            ]
            func pad(_ s: String, _ w: Int) -> String { s + String(repeating: " ", count: max(0, w - s.count)) }
            Swift.print("")
            Swift.print("benchmarks scale, \(date), load average at start \(loadAverage); one at a time unless said")
            Swift.print(pad("measurement", 46) + columns.map { pad($0.0, 26) }.joined())
            for (label, value) in rows {
                Swift.print(pad(label, 46) + columns.map { pad($0.1.map(value) ?? "-", 26) }.joined())
            }
            for s in stores {
                if let e = s.empty, let f = s.seeded, e.createSingle.p50Ms > 0 {
                    Swift.print(String(format: "%@: create p50 at %d / empty: %.2f (one at a time), %.2f (pipelined)", s.store as NSString, bookings,
                                       f.createSingle.p50Ms / e.createSingle.p50Ms, f.createPipelined.p50Ms / e.createPipelined.p50Ms))
                }
            }
        }
    }
}
