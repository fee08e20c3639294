import AMQPClient
import AvailabilityProjector
import BookingContracts
import Foundation
import Testing
import TestSupport

/// Rebuild through `bookingctl projector rebuild` (the real binary) and the
/// page in a real headless browser.
@Suite("Projector rebuild and page", .serialized)
struct RebuildAndPageTests {
    static var binDirectory: URL {
        ProjectorHarness.repositoryRoot.appendingPathComponent(".build/debug")
    }

    /// Runs a program, output to files (never the test's stdout); returns status and stdout.
    static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                    timeout: Double = 60) async throws -> (status: Int32, out: String, err: String) {
        let dir = try TemporaryDirectory("proc")
        defer { dir.remove() }
        let out = dir.appending("out"), err = dir.appending("err")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        process.standardInput = FileHandle.nullDevice
        let box = ProcessBox(process)
        try process.run()
        do {
            try await withTimeout(timeout, "\(executable.split(separator: "/").last ?? "") exits") {
                while box.process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            }
        } catch {
            if process.isRunning { process.terminate() }
            throw error
        }
        return (process.terminationStatus, (try? String(contentsOf: out, encoding: .utf8)) ?? "",
                (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }

    static func bookingctl(_ h: ProjectorHarness, _ arguments: [String]) async throws -> (status: Int32, out: String, err: String) {
        let path = binDirectory.appendingPathComponent("bookingctl").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw HarnessError("\(path) is missing: swift build --build-tests builds it")
        }
        return try await run(path, arguments, environment: ["AMQP_URL": h.url.urlStringWithCredentials])
    }

    @Test func rebuildGivesTheSameAnswersWhileLiveCommandsContinue() async throws {
        let h = try await ProjectorHarness.start()
        let dates = (7...9).map { localDate(daysFromNow: $0) }
        try await h.waitForRooms("date=\(dates[0])", "rooms") { $0.count == 6 }
        let a = try await h.create(date: dates[0], start: "09:00", end: "10:00")
        _ = try await h.create(room: "Boardroom", date: dates[0], start: "10:00", end: "12:00")  // pending
        let c = try await h.create(room: "New York", date: dates[1], start: "07:00", end: "19:00")
        #expect(try await h.send(.cancelBooking, CancelBooking(bookingId: c.id)).isOK)
        #expect(try await h.send(.rescheduleBooking, RescheduleBooking(bookingId: a.id, date: .calendarDate(dates[2]),
                                                                       start: "11:00", end: "12:30")).isOK)
        let last = try await h.create(room: "Quiet Room", date: dates[1], start: "08:00", end: "08:15")
        try await h.waitForRooms("date=\(dates[1])&name=quiet", "last command visible") {
            room($0, "Quiet Room")?.avail == ["07:00 - 08:00", "08:15 - 19:00"]
        }
        _ = last
        var before: [AvailabilityReply] = []
        for date in dates { before.append(try await h.rooms("date=\(date)")) }

        // Rebuild while another command is on its way.
        async let live = h.create(room: "Hamburg", date: dates[2], start: "16:00", end: "17:00")
        let (status, out, err) = try await Self.bookingctl(h, ["projector", "rebuild", "--json", "--wait", "50"])
        #expect(status == 0, "bookingctl: \(err)")
        let reply = try ContractJSON.decode(ProjectorControl.Reply.self, from: Data(out.utf8))
        #expect(reply.ok)
        #expect(reply.rebuild?.rooms == 6)
        #expect(reply.rebuild?.bookings == 4 || reply.rebuild?.bookings == 5)  // the live one may be in the replay or not
        #expect(reply.rebuild?.changedDays == 0)
        _ = try await live
        let hamburg = try await h.waitForRooms("date=\(dates[2])&name=hamburg", "live booking after the rebuild") {
            room($0, "Hamburg")?.avail == ["07:00 - 16:00", "17:00 - 19:00"]
        }
        #expect(hamburg.count == 1)
        for (date, expected) in zip(dates, before) {
            var after = try await h.rooms("date=\(date)")
            if date == dates[2] {
                // The live booking is the only difference.
                after = after.map { $0.name == "Hamburg" ? RoomAvailability(name: $0.name, location: $0.location,
                    equipment: $0.equipment, size: $0.size, capacity: $0.capacity, images: $0.images,
                    avail: ["07:00 - 19:00"]) : $0 }
            }
            #expect(after == expected, "answers for \(date) changed through the rebuild")
        }
        // Human output names what happened.
        let human = try await Self.bookingctl(h, ["projector", "rebuild"])
        #expect(human.status == 0)
        #expect(human.out.contains("rebuilt the read model"))
        await h.stop()
    }

    /// Both replay forms: pages (the default) and one event per booking
    /// (`REPLAY_PAGE_SIZE=1`, what a handler before pages sends).
    @Test(arguments: [Rebuilder.defaultReplayPageSize, 1])
    func rebuildRecoversEventsTheProjectorNeverSaw(_ pageSize: Int) async throws {
        // The handler runs alone first: the projector's queue does not exist,
        // so these events never reach it.
        let h = try await ProjectorHarness.start(startProjector: false)
        let date = localDate(daysFromNow: 10)
        _ = try await h.create(date: date, start: "13:00", end: "15:00")
        try await h.startProjector(replayPageSize: pageSize)
        #expect(try await h.rooms("date=\(date)").isEmpty)  // not even the rooms
        let (status, out, err) = try await Self.bookingctl(h, ["projector", "rebuild", "--json"])
        #expect(status == 0, "bookingctl: \(err)")
        let reply = try ContractJSON.decode(ProjectorControl.Reply.self, from: Data(out.utf8))
        #expect(reply.rebuild?.bookings == 1)
        #expect(reply.rebuild?.changedDays == 1)
        let after = try await h.rooms("date=\(date)")
        #expect(after.count == 6)
        #expect(room(after, "Berlin")?.avail == ["07:00 - 13:00", "15:00 - 19:00"])
        await h.stop()
    }

    @Test func bookingctlRoomsAsksTheProjectorOverAMQP() async throws {
        let h = try await ProjectorHarness.start()
        let date = localDate(daysFromNow: 5)
        _ = try await h.create(date: date, start: "09:00", end: "10:30")
        try await h.waitForRooms("date=\(date)&name=berlin", "booking visible") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "10:30 - 19:00"]
        }
        // --json: the contract's reply, filtered as asked.
        let json = try await Self.bookingctl(h, ["rooms", "--date", date, "--equipment", "beamer", "--json"])
        #expect(json.status == 0, "\(json.err)")
        let rooms = try ContractJSON.decode(AvailabilityReply.self, from: Data(json.out.utf8))
        #expect(rooms.allSatisfy { $0.equipment.contains("beamer") } && !rooms.isEmpty)
        #expect(room(rooms, "Berlin")?.avail == ["07:00 - 09:00", "10:30 - 19:00"])
        // Human output: a table row per room with its free ranges.
        let table = try await Self.bookingctl(h, ["rooms", "--date", date, "--name", "berl"])
        #expect(table.status == 0)
        #expect(table.out.contains("Berlin") && table.out.contains("07:00 - 09:00, 10:30 - 19:00"), "\(table.out)")
        #expect(!table.out.contains("Boardroom"))
        // --days: one line per room and day; --json carries each room's days.
        let week = try await Self.bookingctl(h, ["rooms", "--date", date, "--days", "3", "--name", "berl"])
        #expect(week.status == 0, "\(week.err)")
        let lines = week.out.split(separator: "\n").map(String.init)
        let next = LocalClock.adding(days: 1, to: date)!, third = LocalClock.adding(days: 2, to: date)!
        #expect(lines.first?.hasPrefix("DATE") == true && lines.count == 4, "\(week.out)")
        #expect(lines.count == 4 && lines[1].hasPrefix(date) && lines[1].contains("Berlin")
                    && lines[1].hasSuffix("07:00 - 09:00, 10:30 - 19:00"), "\(week.out)")
        #expect(lines.count == 4 && lines[2].hasPrefix(next) && lines[3].hasPrefix(third) && lines[3].contains("Berlin"), "\(week.out)")
        let weekJSON = try await Self.bookingctl(h, ["rooms", "--date", date, "--days", "3", "--name", "berl", "--json"])
        let berlinDays = room(try ContractJSON.decode(AvailabilityReply.self, from: Data(weekJSON.out.utf8)), "Berlin")?.days
        #expect(berlinDays?.map(\.date) == [date, next, third], "\(weekJSON.out)")
        #expect(berlinDays?.first?.avail == ["07:00 - 09:00", "10:30 - 19:00"])
        let tooMany = try await Self.bookingctl(h, ["rooms", "--days", "32"])
        #expect(tooMany.status == 64 && tooMany.err.contains("--days"), "\(tooMany.err)")
        // A query the projector refuses: exit 1 with the contract's code.
        let bad = try await Self.bookingctl(h, ["rooms", "--date", date, "--free-from", "11:00", "--free-to", "10:00"])
        #expect(bad.status == 1 && bad.err.contains("error 1104"), "\(bad.err)")
        await h.stop()
    }

    @Test func bookingctlRebuildWithoutProjectorFails() async throws {
        let h = try await ProjectorHarness.start(startProjector: false)
        let (status, _, err) = try await Self.bookingctl(h, ["projector", "rebuild", "--wait", "5"])
        #expect(status == 68, "unroutable: no projector declared its control queue")
        #expect(err.contains("availability-projector.control"))
        let help = try await Self.bookingctl(h, ["projector", "rebuild", "--help"])
        #expect(help.out.contains("Example"))
        await h.stop()
    }

    @Test func pageDrawsTheBarsInAHeadlessBrowser() async throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let chromium else {
            Issue.record("Debian's chromium is not installed: run scripts/install-deps.sh")
            return
        }
        let h = try await ProjectorHarness.start()
        let date = localDate(daysFromNow: 2)
        try await h.waitForRooms("date=\(date)", "rooms") { $0.count == 6 }
        _ = try await h.create(date: date, start: "09:00", end: "10:30")
        let afternoon = try await h.create(date: date, start: "14:00", end: "15:00")
        _ = try await h.create(room: "Boardroom", date: date, start: "10:00", end: "11:30")  // requires approval: pending
        try await h.waitForRooms("date=\(date)", "bookings visible") {
            room($0, "Berlin")?.avail.count == 3 && room($0, "Boardroom")?.avail == ["08:00 - 10:00", "11:30 - 18:00"]
        }
        // v1.1: a booking in progress (checked in) is drawn apart from a
        // confirmed one. The event is the handler's (its own clock would
        // not start a booking two days ahead).
        var started = afternoon
        started.status = .inProgress
        started.version += 1
        try await h.publishEvent(.bookingStarted, BookingEvent(eventId: UUID().uuidString, occurredAt: ContractFormat.timestamp(Date()),
                                                               booking: started, previous: BookingSnapshot(afternoon)))
        try await withTimeout(60, "in-progress state on the day view") {
            while try await !httpGet(h.base + "/api/day?date=\(date)").1.contains(#""state":"inProgress""#) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("chromium")).path
        defer { try? FileManager.default.removeItem(atPath: profile) }
        let common = ["--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-dev-shm-usage",
                      "--user-data-dir=\(profile)", "--virtual-time-budget=5000"]
        let url = h.base + "/?date=\(date)"
        let dump = try await Self.run(chromium, common + ["--dump-dom", url], timeout: 60)
        #expect(dump.status == 0, "chromium: \(dump.err.suffix(2000))")
        let dom = dump.out
        #expect(dom.contains(#"data-loaded="true""#), "page did not finish drawing:\n\(dom.prefix(3000))")
        func segments(_ name: String) -> [String] {
            let pattern = #"data-room="\#(name)" data-from="([0-9:]+)" data-to="([0-9:]+)" data-state="([a-zA-Z]+)""#
            let regex = try! NSRegularExpression(pattern: pattern)
            return regex.matches(in: dom, range: NSRange(dom.startIndex..., in: dom)).map { m in
                (1...3).map { String(dom[Range(m.range(at: $0), in: dom)!]) }.joined(separator: " ")
            }
        }
        #expect(segments("Berlin") == ["07:00 09:00 free", "09:00 10:30 booked", "10:30 14:00 free",
                                        "14:00 15:00 inProgress", "15:00 19:00 free"])
        #expect(segments("Boardroom") == ["07:00 08:00 closed", "08:00 10:00 free", "10:00 11:30 pending",
                                           "11:30 18:00 free", "18:00 19:00 closed"])
        #expect(segments("Hamburg") == ["07:00 19:00 free"])
        #expect(dom.components(separatedBy: "class=\"row\"").count - 1 == 6)

        // The page follows changes: filter by name in the URL, and a booking made now shows.
        _ = try await h.create(room: "Hamburg", date: date, start: "12:00", end: "13:00")
        try await h.waitForRooms("date=\(date)&name=hamburg", "Hamburg booked") { room($0, "Hamburg")?.avail.count == 2 }
        let filtered = try await Self.run(chromium, common + ["--dump-dom", h.base + "/?date=\(date)&name=ham"], timeout: 60)
        #expect(filtered.out.components(separatedBy: "class=\"row\"").count - 1 == 1)
        #expect(filtered.out.contains(#"data-room="Hamburg" data-from="12:00" data-to="13:00" data-state="booked""#))

        // Screenshots (desktop and phone) as test artifacts.
        let artifacts = ProjectorHarness.repositoryRoot.appendingPathComponent("test-artifacts")
        try FileManager.default.createDirectory(at: artifacts, withIntermediateDirectories: true)
        for (file, size) in [("projector-page.png", "1280,900"), ("projector-page-phone.png", "390,844")] {
            let path = artifacts.appendingPathComponent(file).path
            try? FileManager.default.removeItem(atPath: path)
            let shot = try await Self.run(chromium, common + ["--hide-scrollbars", "--window-size=\(size)",
                                                              "--screenshot=\(path)", url], timeout: 60)
            #expect(shot.status == 0, "chromium: \(shot.err.suffix(2000))")
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: path)))?.count ?? 0
            #expect(bytes > 5_000, "\(file) missing or empty")
        }
        await h.stop()
    }
}

/// Lets the polling loop look at the process.
final class ProcessBox: @unchecked Sendable {  // only isRunning is read from the loop; Process is thread-safe for that
    let process: Process
    init(_ process: Process) { self.process = process }
}
