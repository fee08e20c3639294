import AMQPClient
import AvailabilityProjector
import BookingContracts
import Foundation
import Testing
import TestSupport

/// A rebuild has no time limit as a whole, fails when its replay stalls,
/// and can be cancelled — with the real handler's replay, the real broker
/// and (for cancel and progress) the real bookingctl binary.
@Suite("Projector rebuild: no time limit, stall bound, cancel", .serialized)
struct RebuildBoundsTests {
    /// The handler replays at 2 items a second, in steps of one second's
    /// worth (two rooms, then two more, …, then pages of two bookings):
    /// 6 s in all, no gap much over 1 s. With a 2.5 s stall bound the
    /// rebuild as a whole lasts longer than the bound and still succeeds,
    /// because the replay keeps delivering (a fixed limit of the same
    /// length would cut it off, as would the bound if the six rooms went
    /// out at once and the bookings 3 s later).
    @Test func aSlowReplayThatKeepsDeliveringIsNotCutOff() async throws {
        let bound = Duration.milliseconds(2_500)
        let h = try await ProjectorHarness.start(replayRate: 2, rebuildStallTimeout: bound)
        let date = localDate(daysFromNow: 12)
        try await h.waitForRooms("date=\(date)", "rooms") { $0.count == 6 }
        for (start, end) in [("07:00", "08:00"), ("08:00", "09:00"), ("09:00", "10:00"), ("11:00", "12:00"),
                             ("13:00", "14:00"), ("15:00", "16:00")] {
            _ = try await h.create(date: date, start: start, end: end)
        }
        let before = try await h.waitForRooms("date=\(date)", "six bookings projected") {
            room($0, "Berlin")?.avail == ["10:00 - 11:00", "12:00 - 13:00", "14:00 - 15:00", "16:00 - 19:00"]
        }
        let app = try #require(h.projector.withLock { $0 })
        let result = try await app.rebuilder.rebuild()
        #expect(result.rooms == 6 && result.bookings == 6)
        #expect(result.seconds > Rebuilder.seconds(bound), "the rebuild outlasted the stall bound: \(result.seconds) s")
        #expect(try await h.rooms("date=\(date)") == before)
        #expect(app.rebuilder.status().running == false)
        await h.stop()
    }

    /// The broker closes the projector's connection while the handler
    /// replays (as it does to a connection whose heartbeats it missed on a
    /// loaded machine): the replay goes on into the durable replay queue,
    /// the unacked part comes again after the reconnect, the control request
    /// comes back unacked and joins the running rebuild, and the caller gets
    /// the rebuild's success with every room and booking — not 9001 for the
    /// lost answer of `booking.replay`, nor "already running" for its own
    /// request redelivered.
    @Test func aRebuildOutlivesTheProjectorsConnection() async throws {
        let h = try await ProjectorHarness.start(replayRate: 4)
        let date = localDate(daysFromNow: 15)
        try await h.waitForRooms("date=\(date)", "rooms") { $0.count == 6 }
        for (start, end) in [("07:00", "08:00"), ("08:00", "09:00"), ("10:00", "11:00"), ("12:00", "13:00")] {
            _ = try await h.create(date: date, start: start, end: end)
        }
        let before = try await h.waitForRooms("date=\(date)", "four bookings projected") {
            room($0, "Berlin")?.avail == ["09:00 - 10:00", "11:00 - 12:00", "13:00 - 19:00"]
        }
        let app = try #require(h.projector.withLock { $0 })
        let client = h.client
        let call = Task {
            try await client.call(Array("{}".utf8), exchange: "", routingKey: ProjectorControl.queue,
                                  properties: AMQPProperties(contentType: "application/json", type: ProjectorControl.rebuildType),
                                  timeout: .seconds(90))
        }
        try await withTimeout(30, "the replay delivering") {
            while app.rebuilder.status().rooms == 0 { try await Task.sleep(for: .milliseconds(20)) }
        }
        let rows = try TestBroker.ctl(["list_connections", "-s", "pid", "vhost", "client_properties"])
        var closed = 0
        for row in rows.split(separator: "\n") {
            let columns = row.split(separator: "\t").map(String.init)
            guard columns.count == 3, columns[1] == h.url.vhost,
                  columns[2].contains(#"{"connection_name","projector"}"#) else { continue }
            _ = try TestBroker.ctl(["close_connection", columns[0], "test: the projector's connection lost mid-replay"])
            closed += 1
        }
        #expect(closed == 1, "\(rows)")
        let reply = try ContractJSON.decode(ProjectorControl.Reply.self, from: Data(try await call.value.body))
        #expect(reply.error == nil, "\(String(describing: reply.error))")
        #expect(reply.rebuild?.rooms == 6 && reply.rebuild?.bookings == 4)
        #expect(try await h.rooms("date=\(date)") == before)
        #expect(!app.rebuilder.status().running)
        await h.stop()
    }

    /// No handler answers: the replay never starts, and the rebuild fails
    /// with 9001 once the bound passes instead of waiting for ever; the live
    /// model and its answers stay, the new tables are gone.
    @Test func aReplayThatDeliversNothingFailsAtTheBoundAndKeepsTheLiveModel() async throws {
        let h = try await ProjectorHarness.start(rebuildStallTimeout: .seconds(2))
        let date = localDate(daysFromNow: 13)
        _ = try await h.create(date: date, start: "09:00", end: "11:00")
        let before = try await h.waitForRooms("date=\(date)", "booking projected") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "11:00 - 19:00"]
        }
        await h.stopHandler()
        let app = try #require(h.projector.withLock { $0 })
        let error = await #expect(throws: ReplyError.self) { try await app.rebuilder.rebuild() }
        #expect(error?.code == ProjectorControl.rebuildFailed)
        #expect(error?.text.contains("REBUILD_STALL_TIMEOUT") == true, "\(error?.text ?? "")")
        #expect(app.store.rebuildProgress == nil, "the new tables are dropped")
        #expect(!app.rebuilder.status().running)
        #expect(try await h.rooms("date=\(date)") == before)
        await h.stop()
    }

    /// `bookingctl projector rebuild` reports progress (lines, as its
    /// stderr is no terminal) while the handler replays slowly;
    /// `bookingctl projector cancel` ends the rebuild: the waiting
    /// bookingctl exits 1 with 9002, the live model answers as before, the
    /// new tables are gone and no rebuild runs.
    @Test func bookingctlShowsProgressAndACancelLeavesTheLiveModelAsItWas() async throws {
        let h = try await ProjectorHarness.start(replayRate: 1)
        let date = localDate(daysFromNow: 14)
        _ = try await h.create(date: date, start: "09:00", end: "10:00")
        let before = try await h.waitForRooms("date=\(date)", "booking projected") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "10:00 - 19:00"]
        }
        let app = try #require(h.projector.withLock { $0 })
        let dir = try TemporaryDirectory("rebuild-cancel")
        defer { dir.remove() }
        let (rebuild, err) = try Self.launchRebuild(h, dir)
        defer { if rebuild.isRunning { rebuild.terminate() } }
        try await Self.waitForRoomsProgress(err)
        #expect(app.rebuilder.status().running)
        let (status, cancelOut, cancelErr) = try await RebuildAndPageTests.bookingctl(h, ["projector", "cancel"])
        #expect(status == 0, "\(cancelErr)")
        #expect(cancelOut.hasPrefix("cancelled: rebuild-"), "\(cancelOut)")
        try await Self.waitForExit(rebuild)
        let errText = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        #expect(rebuild.terminationStatus == 1, "\(errText)")
        #expect(errText.contains("rebuild failed (9002)"), "\(errText)")
        #expect(app.store.rebuildProgress == nil, "the new tables are dropped")
        #expect(!app.rebuilder.status().running)
        #expect(try await h.rooms("date=\(date)") == before)
        // Cancelling again finds nothing to cancel.
        let (again, againOut, _) = try await RebuildAndPageTests.bookingctl(h, ["projector", "cancel"])
        #expect(again == 0 && againOut.contains("no rebuild is running"), "\(againOut)")
        await h.stop()
    }

    /// Ctrl-C in `bookingctl projector rebuild` cancels the rebuild the
    /// same way: it says so, the projector answers 9002, bookingctl exits 1,
    /// the live model stays.
    @Test func ctrlCInBookingctlCancelsTheRebuild() async throws {
        let h = try await ProjectorHarness.start(replayRate: 1)
        let date = localDate(daysFromNow: 15)
        _ = try await h.create(date: date, start: "09:00", end: "10:00")
        let before = try await h.waitForRooms("date=\(date)", "booking projected") {
            room($0, "Berlin")?.avail == ["07:00 - 09:00", "10:00 - 19:00"]
        }
        let app = try #require(h.projector.withLock { $0 })
        let dir = try TemporaryDirectory("rebuild-sigint")
        defer { dir.remove() }
        let (rebuild, err) = try Self.launchRebuild(h, dir)
        defer { if rebuild.isRunning { rebuild.terminate() } }
        try await Self.waitForRoomsProgress(err)
        kill(rebuild.processIdentifier, SIGINT)
        try await Self.waitForExit(rebuild)
        let errText = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        #expect(rebuild.terminationStatus == 1, "\(errText)")
        #expect(errText.contains("cancelling the rebuild") && errText.contains("rebuild failed (9002)"), "\(errText)")
        #expect(app.store.rebuildProgress == nil && !app.rebuilder.status().running)
        #expect(try await h.rooms("date=\(date)") == before)
        await h.stop()
    }

    /// `bookingctl projector rebuild --progress-every 1` against `h`, its
    /// stderr in a file of `dir`.
    static func launchRebuild(_ h: ProjectorHarness, _ dir: TemporaryDirectory) throws -> (Process, URL) {
        let err = dir.appending("err"), out = dir.appending("out")
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        let rebuild = Process()
        rebuild.executableURL = RebuildAndPageTests.binDirectory.appendingPathComponent("bookingctl")
        rebuild.arguments = ["projector", "rebuild", "--progress-every", "1"]
        rebuild.environment = ProcessInfo.processInfo.environment.merging(["AMQP_URL": h.url.urlStringWithCredentials]) { $1 }
        rebuild.standardOutput = try FileHandle(forWritingTo: out)
        rebuild.standardError = try FileHandle(forWritingTo: err)
        rebuild.standardInput = FileHandle.nullDevice
        try rebuild.run()
        return (rebuild, err)
    }

    /// The rooms arrived (one page; then the handler waits 6 s at 1/s) and
    /// bookingctl printed a progress line about them.
    static func waitForRoomsProgress(_ err: URL) async throws {
        try await withTimeout(60, "progress reported") {
            while !((try? String(contentsOf: err, encoding: .utf8)) ?? "").contains("6 of ~6 rooms") {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    static func waitForExit(_ process: Process) async throws {
        let box = ProcessBox(process)
        try await withTimeout(60, "bookingctl projector rebuild exits") {
            while box.process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        }
    }
}
