import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import ServiceSupport
import Testing
import TestSupport

/// `kill -9` of the real `pass-sender` binary while gateway calls are in
/// flight, then a restart: no attendee gets a second pass, none is forgotten.
@Suite("Pass sender crash recovery", .serialized)
struct CrashTests {
    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    static var binary: URL { ServiceProcess.binary("pass-sender") }

    /// The restart waits for the dead process's claims to run out: a lease
    /// of 11 s (the shortest for a 3 s gateway timeout) instead of the
    /// default 50 s. A held call that times out before the kill is retried
    /// and held again: the gateway sent nothing, so nothing goes out twice.
    static func launch(url: AMQPURL, dataDirectory: String, gateway: String, log: URL, notify: Bool = false,
                       extra: [String: String] = [:]) throws -> Process {
        var environment = ["AMQP_URL": url.urlStringWithCredentials, "DATA_DIR": dataDirectory, "PASS_GATEWAY_URL": gateway,
                           "PASS_CONCURRENCY": "4", "PASS_RETRY_DELAYS": "100ms", "HTTP_PORT": "0", "LOG_LEVEL": "warning",
                           "PASS_GATEWAY_TIMEOUT": "3s", "PASS_CLAIM_LEASE": "11s"]
        if notify { environment["PASS_NOTIFY_URL"] = gateway }
        return try ServiceProcess.launch(binary, environment: environment.merging(extra) { _, new in new }, log: log)
    }

    /// A gateway that sends normally until `passes` passes went out, then
    /// holds every further request (never sending it) until `blocking` is
    /// set false and the gateway released.
    static func gatewayHolding(after passes: Int) async throws -> (FaultGateway, LockedBox<Bool>) {
        let blocking = LockedBox(true)
        let holder = LockedBox<FaultGateway?>(nil)
        let gateway = try await FaultGateway.start(requestRule: { _, _ in
            let sent = holder.withLock { $0 }?.state.current.sent.count ?? 0
            return blocking.withLock { $0 } && sent >= passes ? .block : .proceed
        })
        holder.withLock { $0 = gateway }
        return (gateway, blocking)
    }

    @Test func killDashNineMidBatchSendsNoPassTwiceAndForgetsNone() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build pass-sender first")
        let url = try TestBroker.isolatedURL("pass-crash")
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("pass-crash")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let log = URL(fileURLWithPath: dataDirectory).appendingPathComponent("pass-sender.log")

        let (gateway, blocking) = try await Self.gatewayHolding(after: 60)

        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "crash-client"),
                                                      logger: testLogger("pass-crash"))
        try await client.declare(PassQueues.declarations(delays: [RetryDelay(milliseconds: 100)]))
        // 40 bookings × 5 attendees, published before the pass sender starts.
        let bookings = (0..<40).map { _ in makeBooking(attendees: 5) }
        for b in bookings { try await publishEvent(.bookingConfirmed, b, on: client) }
        let expected = Set(bookings.flatMap { b in b.attendees.indices.map { PassKey(bookingId: b.id, version: 1, index: $0) } })

        var process = try Self.launch(url: url, dataDirectory: dataDirectory, gateway: gateway.url, log: log)
        defer { if process.isRunning { process.terminate() } }
        // All four workers are inside a gateway call the gateway holds: every
        // answer they got before has been recorded in the ledger.
        try await gateway.state.wait("four gateway calls held") { $0.blocked >= 4 }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
        let sentAtKill = gateway.state.current.sent.count
        #expect(sentAtKill >= 60 && sentAtKill < expected.count, "the kill must land mid-stream")
        blocking.withLock { $0 = false }
        gateway.release()

        process = try Self.launch(url: url, dataDirectory: dataDirectory, gateway: gateway.url, log: log)
        try await gateway.state.wait("every pass sent", timeout: 120) { Set($0.sent).isSuperset(of: expected) }
        process.terminate()  // SIGTERM: graceful
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)

        let counts = gateway.sentCounts
        let twice = counts.filter { $0.value > 1 }.map(\.key.description).sorted()
        #expect(twice.isEmpty, "sent twice: \(twice)")
        #expect(Set(counts.keys) == expected, "none forgotten, nothing extra")
        // Everything was acknowledged: the events queue is empty.
        let left = try await client.get(queue: Topology.passSenderEventsQueue)
        #expect(left == nil)
        try? await left?.nack(requeue: true)
        let ledger = try PassLedger(path: dataDirectory + "/pass-sender.sqlite")
        #expect(try await ledger.statusCounts() == [.delivered: expected.count])
        #expect(try await ledger.unpublished().isEmpty)
        print("pass crash test: killed after \(sentAtKill) of \(expected.count) passes; \(gateway.state.current.calls) gateway calls in all")

        await client.close()
        await gateway.stop()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }

    /// The same for notices: `kill -9` while `/notify` calls are held, a
    /// restart, and every `cancelled` notice reaches its recipient exactly
    /// once (the held calls sent nothing, so nothing is sent twice).
    @Test func killDashNineMidNoticesSendsNoNoticeTwiceAndForgetsNone() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.binary.path), "build pass-sender first")
        let url = try TestBroker.isolatedURL("notice-crash")
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("notice-crash")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let log = URL(fileURLWithPath: dataDirectory).appendingPathComponent("pass-sender.log")
        let blocking = LockedBox(true)
        let holder = LockedBox<FaultGateway?>(nil)
        let gateway = try await FaultGateway.start(notices: true, noticeRequestRule: {
            let told = holder.withLock { $0 }?.state.current.noticesSent.count ?? 0
            return blocking.withLock { $0 } && told >= 30 ? .block : .proceed
        })
        holder.withLock { $0 = gateway }
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "crash-client"),
                                                      logger: testLogger("notice-crash"))
        try await client.declare(PassQueues.declarations(delays: [RetryDelay(milliseconds: 100)]))
        let bookings = (0..<40).map { _ in makeBooking(attendees: 3) }
        for b in bookings { try await publishEvent(.bookingConfirmed, b, on: client) }
        var process = try Self.launch(url: url, dataDirectory: dataDirectory, gateway: gateway.url, log: log, notify: true)
        defer { if process.isRunning { process.terminate() } }
        try await gateway.state.wait("every pass sent", timeout: 120) { $0.sent.count >= 120 }
        var expected = Set<NoticeKey>()
        for b in bookings {
            var cancelled = b
            cancelled.version = 2
            cancelled.status = .cancelled
            try await publishEvent(.bookingCancelled, cancelled, previous: BookingSnapshot(b), on: client)
            for a in b.attendees { expected.insert(NoticeKey(bookingId: b.id, version: 2, kind: .cancelled, email: a.email)) }
        }
        try await gateway.state.wait("four notify calls held") { $0.blocked >= 4 }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let toldAtKill = gateway.state.current.noticesSent.count
        #expect(toldAtKill >= 30 && toldAtKill < expected.count, "the kill must land mid-stream")
        blocking.withLock { $0 = false }
        gateway.release()

        process = try Self.launch(url: url, dataDirectory: dataDirectory, gateway: gateway.url, log: log, notify: true)
        let wanted = expected
        try await gateway.state.wait("every notice sent", timeout: 120) { Set($0.noticesSent).isSuperset(of: wanted) }
        process.terminate()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let counts = Dictionary(grouping: gateway.state.current.noticesSent, by: { $0 }).mapValues(\.count)
        let twice = counts.filter { $0.value > 1 }.map(\.key.description).sorted()
        #expect(twice.isEmpty, "told twice: \(twice)")
        #expect(Set(counts.keys) == expected, "none forgotten, nothing extra")
        #expect(gateway.sentCounts.values.allSatisfy { $0 == 1 }, "no pass twice either")
        let ledger = try PassLedger(path: dataDirectory + "/pass-sender.sqlite")
        #expect(try await ledger.statusCounts() == [.delivered: 240])
        print("notice crash test: killed after \(toldAtKill) of \(expected.count) notices")

        await client.close()
        await gateway.stop()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}
