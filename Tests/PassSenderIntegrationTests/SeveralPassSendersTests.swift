import AMQPClient
import BookingContracts
import Foundation
import Logging
import PassSender
import PostgresSupport
import ServiceSupport
import Testing
import TestSupport

/// Two `pass-sender` processes on one PostgreSQL ledger (`DATABASE_URL`),
/// every booking event delivered twice (so both instances see the same
/// booking at once), and `kill -9` of one of them while gateway calls are
/// held: every attendee gets exactly one pass. The survivor waits for the
/// live instance's claims and takes over the dead one's when their lease
/// runs out (PASS_GATEWAY_TIMEOUT 1 s: lease 32 s).
@Suite("Several pass senders on one ledger", .serialized)
struct SeveralPassSendersTests {
    @Test func twoInstancesDuplicateEventsAndAKillSendEveryPassOnce() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashTests.binary.path), "build pass-sender first")
        let url = try TestBroker.isolatedURL("pass-pair")
        let databaseURL = try TestPostgres.url(schemaPrefix: "passpair")
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("pass-pair")).path
        let directories = ["a", "b"].map { root + "/" + $0 }
        for d in directories { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        let log = URL(fileURLWithPath: root).appendingPathComponent("pass-senders.log")

        let (gateway, blocking) = try await CrashTests.gatewayHolding(after: 60)
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "pair-client"),
                                                      logger: testLogger("pass-pair"))
        try await client.declare(PassQueues.declarations(delays: [RetryDelay(milliseconds: 100)]))
        let bookings = (0..<40).map { _ in makeBooking(attendees: 5) }
        for b in bookings {
            // Twice: the handler's relay may publish an event again.
            try await publishEvent(.bookingConfirmed, b, on: client)
            try await publishEvent(.bookingConfirmed, b, on: client)
        }
        let expected = Set(bookings.flatMap { b in b.attendees.indices.map { PassKey(bookingId: b.id, version: 1, index: $0) } })

        func launch(_ directory: String) throws -> Process {
            try CrashTests.launch(url: url, dataDirectory: directory, gateway: gateway.url, log: log,
                                  extra: ["DATABASE_URL": databaseURL, "PASS_GATEWAY_TIMEOUT": "1s"])
        }
        let a = try launch(directories[0])
        let b = try launch(directories[1])
        defer { for p in [a, b] where p.isRunning { p.terminate() } }
        try await gateway.state.wait("gateway calls held", timeout: 120) { $0.blocked >= 4 }
        kill(a.processIdentifier, SIGKILL)
        a.waitUntilExit()
        let killed = ContinuousClock.now
        let sentAtKill = gateway.state.current.sent.count
        #expect(sentAtKill >= 60 && sentAtKill < expected.count, "the kill must land mid-stream")
        blocking.withLock { $0 = false }
        gateway.release()

        try await gateway.state.wait("every pass sent", timeout: 180) { Set($0.sent).isSuperset(of: expected) }
        let recovered = ContinuousClock.now - killed
        b.terminate()
        b.waitUntilExit()
        #expect(b.terminationStatus == 0)

        let counts = gateway.sentCounts
        let twice = counts.filter { $0.value > 1 }.map(\.key.description).sorted()
        let lost = expected.subtracting(counts.keys)
        #expect(twice.isEmpty, "sent twice: \(twice)")
        #expect(lost.isEmpty && Set(counts.keys) == expected, "none forgotten, nothing extra")
        let ledger = PassLedger(database: try await PostgresLedgerDatabase.open(
            settings: PostgresSettings(url: databaseURL), logger: Logger(label: "pass-pair"), waitSeconds: 0))
        #expect(try await ledger.statusCounts() == [.delivered: expected.count])
        #expect(try await ledger.unpublished().isEmpty)
        await ledger.close()
        let left = try await client.get(queue: Topology.passSenderEventsQueue)
        #expect(left == nil, "every delivery acknowledged")
        try? await left?.nack(requeue: true)
        print("several pass senders: \(expected.count) passes, 2 instances, every event twice; killed one after \(sentAtKill) passes;"
              + " lost \(lost.count), sent twice \(twice.count); all sent \(recovered) after the kill;"
              + " \(gateway.state.current.calls) gateway calls")

        await client.close()
        await gateway.stop()
        TestBroker.deleteVhost(url.vhost)
        try? FileManager.default.removeItem(atPath: root)
    }
}
