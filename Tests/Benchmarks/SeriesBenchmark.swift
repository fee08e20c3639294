import AMQPClient
import ArgumentParser
import BookingContracts
import Foundation
import Logging
import TestSupport

/// Recurring bookings (contract v1.1): a weekly series of 52 occurrences
/// booked end to end (command published → reply received) one at a time,
/// beside a single `booking.create` from the same run, through a release
/// booking-handler process on a database holding other bookings; with the
/// handler's CPU time per command from `/proc`.
struct SeriesBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "series", abstract: "A 52-week series end to end beside a single create, over a database of other bookings.")

    @Option(help: "Other bookings in the database.")
    var bookings = 100_000
    @Option(help: "Rooms.")
    var rooms = 200
    @Option(help: "Series to book, one at a time.")
    var series = 100
    @Option(help: "Occurrences per series (weekly).")
    var occurrences = 52
    @Option(help: "Single creates, one at a time.")
    var singles = 300

    func run() async throws {
        let broker = try BenchmarkBroker.start()
        defer { broker.stop() }
        var logger = Logger(label: "benchmarks")
        logger.logLevel = .warning
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("bench-series-\(getpid())")
        try? FileManager.default.removeItem(at: work)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }

        // Other bookings: six 2-hour bookings a day per room, from tomorrow.
        var filler = ReadsBenchmark()
        filler.bookings = bookings
        filler.rooms = rooms
        let filled = try await filler.fill(path: work.appendingPathComponent("booking-handler.sqlite").path)
        let busyDays = bookings / rooms / 6 + 1
        print("filled \(filled.count) bookings over \(rooms) rooms (days 1–\(busyDays))")
        let roomsFile = work.appendingPathComponent("rooms.json")
        try ContractJSON.encode((0..<rooms).map { RegisterRoom(name: "Room \($0)", capacity: 10) }).write(to: roomsFile)
        let handler = try BookingBenchmark().launchHandler(url: broker.url, dataDirectory: work.path, roomsFile: roomsFile.path)
        defer { if handler.isRunning { handler.terminate(); handler.waitUntilExit() } }
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: broker.url, connectionName: "bench-series"),
                                                      logger: logger)
        while (try? await client.queueInfo(Topology.handlerCommandsQueue).consumerCount) != 1 {
            try await Task.sleep(for: .milliseconds(100))
        }

        let attendees = [AttendeeInput(name: "Ada Lovelace", email: "ada@example.com", phone: "0170 1234567"),
                         AttendeeInput(name: "Grace Hopper", email: "grace@example.com", phone: "+1 212 555 0100")]
        func send(_ create: CreateBooking) async throws -> (UInt64, CommandReply) {
            let properties = AMQPProperties.persistentJSON(type: "booking.create", messageID: UUID().uuidString)
            let body = [UInt8](try ContractJSON.encode(create))
            let t0 = monotonicNow()
            let reply = try await client.call(body, exchange: Topology.commandsExchange, routingKey: "booking.create",
                                              properties: properties, timeout: .seconds(60))
            return (monotonicNow() - t0, try ContractJSON.decode(CommandReply.self, from: reply.body))
        }

        // Warm-up: the first command per room decodes it into the cache.
        for room in 0..<rooms {
            _ = try await send(CreateBooking(room: "Room \(room)", date: .calendarDate(localDate(daysFromNow: busyDays + 1)),
                                             start: "07:00", end: "07:15", title: "warm-up", attendees: attendees))
        }

        // Singles and series alternate, so both see the same broker and disk.
        var single = Latencies(), weekly = Latencies()
        var singleCPU: UInt64 = 0, seriesCPU: UInt64 = 0
        var replyBytes = 0
        let rounds = max(series, singles)
        for i in 0..<rounds {
            if i < singles {
                let date = localDate(daysFromNow: busyDays + 2 + i / (rooms * 11))
                let slot = i / rooms % 11
                let create = CreateBooking(room: "Room \(i % rooms)", date: .calendarDate(date), start: String(format: "%02d:00", 8 + slot),
                                           end: String(format: "%02d:30", 8 + slot), title: "single", attendees: attendees)
                let cpu0 = cpuNanos(pid: handler.processIdentifier)
                let (t, reply) = try await send(create)
                singleCPU += cpuNanos(pid: handler.processIdentifier) - cpu0
                guard case .booking = reply else { throw ValidationError("single create failed: \(reply)") }
                single.add(t)
            }
            if i < series {
                // Each series its own room and hour, from a day after the singles.
                let date = localDate(daysFromNow: busyDays + 10 + i / (rooms * 11))
                let slot = i / rooms % 11
                let create = CreateBooking(room: "Room \(i % rooms)", date: .calendarDate(date), start: String(format: "%02d:30", 8 + slot),
                                           end: String(format: "%02d:00", 9 + slot), title: "weekly", attendees: attendees,
                                           recurrence: Recurrence(.weekly, count: occurrences))
                let cpu0 = cpuNanos(pid: handler.processIdentifier)
                let (t, reply) = try await send(create)
                seriesCPU += cpuNanos(pid: handler.processIdentifier) - cpu0
                guard case .series(let s) = reply, s.bookings.count == occurrences else { throw ValidationError("series failed: \(reply)") }
                replyBytes = (try? ContractJSON.encode(reply).count) ?? 0
                weekly.add(t)
            }
        }
        func ms(_ l: Latencies, _ p: Double) -> String { String(format: "%8.2f", l.percentile(p)) }
        print("")
        print("one at a time, same run, \(bookings) other bookings       p50 ms   p99 ms   handler CPU ms per command")
        print("booking.create, one booking                           \(ms(single, 50)) \(ms(single, 99))   "
              + String(format: "%.2f", Double(singleCPU) / Double(max(1, singles)) / 1e6))
        print("booking.create, weekly series of \(occurrences)                  \(ms(weekly, 50)) \(ms(weekly, 99))   "
              + String(format: "%.2f", Double(seriesCPU) / Double(max(1, series)) / 1e6))
        print(String(format: "series reply %d bytes; per occurrence %.2f ms (p50) against %.2f ms for a single create",
                     replyBytes, weekly.percentile(50) / Double(occurrences), single.percentile(50)))
        handler.terminate()
        handler.waitUntilExit()
        await client.close()
    }
}

