import AMQPClient
import BookingContracts
import BrokerObjects
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
/// runs out (PASS_GATEWAY_TIMEOUT 1 s, PASS_CLAIM_LEASE 8 s: the shortest
/// accepted is 7 s).
@Suite("Several pass senders on one ledger", .serialized)
struct SeveralPassSendersTests {
    /// Declares the pass sender's queues in `url`'s vhost and publishes
    /// `booking.confirmed` of 40 bookings × 5 attendees, each twice (the
    /// handler's relay may publish an event again), so both instances see
    /// the same booking at once. Returns the client and every pass owed.
    static func confirmTwice(url: AMQPURL, name: String) async throws -> (AMQPConnection, Set<PassKey>) {
        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "\(name)-client"),
                                                      logger: testLogger(name))
        try await client.declare(PassQueues.declarations(delays: [RetryDelay(milliseconds: 100)]))
        let bookings = (0..<40).map { _ in makeBooking(attendees: 5) }
        for b in bookings {
            try await publishEvent(.bookingConfirmed, b, on: client)
            try await publishEvent(.bookingConfirmed, b, on: client)
        }
        return (client, Set(bookings.flatMap { b in b.attendees.indices.map { PassKey(bookingId: b.id, version: 1, index: $0) } }))
    }

    @Test func twoInstancesDuplicateEventsAndAKillSendEveryPassOnce() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: CrashTests.binary.path), "build pass-sender first")
        let url = try TestBroker.isolatedURL("pass-pair")
        let databaseURL = try TestPostgres.url(schemaPrefix: "passpair")
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("pass-pair")).path
        let directories = ["a", "b"].map { root + "/" + $0 }
        for d in directories { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        let log = URL(fileURLWithPath: root).appendingPathComponent("pass-senders.log")

        let (gateway, blocking) = try await CrashTests.gatewayHolding(after: 60)
        let (client, expected) = try await Self.confirmTwice(url: url, name: "pass-pair")

        func launch(_ directory: String) throws -> Process {
            try CrashTests.launch(url: url, dataDirectory: directory, gateway: gateway.url, log: log,
                                  extra: ["DATABASE_URL": databaseURL, "PASS_GATEWAY_TIMEOUT": "1s", "PASS_CLAIM_LEASE": "8s",
                                          "PASS_OUTBOX_SWEEP": "2s"])
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
        let ledger = PassLedger(database: try await PostgresLedgerDatabase.open(
            settings: PostgresSettings(url: databaseURL), logger: Logger(label: "pass-pair"), waitSeconds: 0))
        // What the killed instance committed but never published goes out
        // with its booking's next message or, failing one, the sweep.
        try await withTimeout(60, "every outbox row published") {
            while !(try await ledger.unpublished().isEmpty) { try await Task.sleep(for: .milliseconds(100)) }
        }
        b.terminate()
        b.waitUntilExit()
        #expect(b.terminationStatus == 0)

        let counts = gateway.sentCounts
        let twice = counts.filter { $0.value > 1 }.map(\.key.description).sorted()
        let lost = expected.subtracting(counts.keys)
        #expect(twice.isEmpty, "sent twice: \(twice)")
        #expect(lost.isEmpty && Set(counts.keys) == expected, "none forgotten, nothing extra")
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

    /// The same pair with one instance in a network namespace of its own
    /// (broker, PostgreSQL and gateway reached over a veth link, as from
    /// another host), partitioned for 20 s while gateway calls of both are
    /// in flight: the gateway has sent those calls' passes and answers only
    /// after the cut, so the instance inside never hears of them. That is
    /// the documented crash window: those passes, and only those, may go
    /// out a second time (when the other instance takes the booking over);
    /// no pass is lost, none goes out three times. PostgreSQL fails fast
    /// (3 s statement bound, 2 s keepalive): the cut-off instance's ledger
    /// work ends and its message is requeued while the link is still down.
    @Test func aPassSenderInItsOwnNetworkNamespacePartitionedSendsTwiceOnlyWhatWasInFlight() async throws {
        try #require(getuid() == 0, "network namespaces need root (CI runs as root)")
        try #require(FileManager.default.isExecutableFile(atPath: CrashTests.binary.path), "build pass-sender first")
        let url = try TestBroker.isolatedURL("pass-netns")
        defer { TestBroker.deleteVhost(url.vhost) }
        let databaseURL = try TestPostgres.url(schemaPrefix: "passnetns")
        let postgresPort = try #require(URLComponents(string: try TestPostgres.databaseURL())?.port)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("pass-netns")).path
        let directories = ["host", "netns"].map { root + "/" + $0 }
        for d in directories { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        let log = URL(fileURLWithPath: root).appendingPathComponent("pass-senders.log")
        print("pass sender partition: logs in \(log.path)")

        // After 40 passes every call sends its passes and holds its answer.
        let holding = LockedBox(true)
        let holder = LockedBox<FaultGateway?>(nil)
        let gateway = try await FaultGateway.start(requestRule: { _, _ in
            let sent = holder.withLock { $0 }?.state.current.sent.count ?? 0
            return holding.withLock { $0 } && sent >= 40 ? .sendThenHold : .proceed
        })
        holder.withLock { $0 = gateway }
        let gatewayPort = try #require(URLComponents(string: gateway.url)?.port)
        let namespace = try NetworkNamespace(ports: [url.port, postgresPort, gatewayPort])
        defer { namespace.remove() }
        let insideHost = "\(namespace.hostAddress):\(gatewayPort)"

        let (client, expected) = try await Self.confirmTwice(url: url, name: "pass-netns")

        // Heartbeat 2 s: the broker drops the one inside about 4 s into the
        // cut and hands its unacknowledged events to the other.
        // Lease 32 s (the default for a 1 s timeout), longer than the cut:
        // the inside's claims outlast the partition.
        // PostgreSQL fails fast: a statement without an answer ends after
        // 3 s + 2 s grace, a silent peer is dead after 2 + 3 × 1 s of
        // keepalive, unacknowledged data after as long (TCP_USER_TIMEOUT).
        // Sweep 2 s: what a commit left unpublished (a COMMIT that reached
        // PostgreSQL only when the link came back, after its caller had
        // given up) is published without waiting for a booking message.
        let common = ["PASS_GATEWAY_TIMEOUT": "1s", "PASS_CLAIM_LEASE": "32s", "AMQP_HEARTBEAT": "2", "PASS_OUTBOX_SWEEP": "2s",
                      "DATABASE_STATEMENT_TIMEOUT": "3", "DATABASE_KEEPALIVE": "2", "DATABASE_CONNECT_TIMEOUT": "3"]
        let postgresBound = Duration.seconds(5)
        let outside = try CrashTests.launch(url: url, dataDirectory: directories[0], gateway: gateway.url, log: log,
                                            extra: common.merging(["DATABASE_URL": databaseURL]) { a, _ in a })
        var inside = common
        inside["AMQP_URL"] = namespace.rewrite(url.urlStringWithCredentials)
        inside["DATABASE_URL"] = namespace.rewrite(databaseURL) + "&sslmode=disable"
        inside["PASS_GATEWAY_URL"] = gateway.url.replacingOccurrences(of: "127.0.0.1", with: namespace.hostAddress)
        var environment = ["DATA_DIR": directories[1], "PASS_CONCURRENCY": "4", "PASS_RETRY_DELAYS": "100ms",
                           "HTTP_PORT": "0", "LOG_LEVEL": "info"]
        environment.merge(inside) { _, new in new }
        let insideLog = URL(fileURLWithPath: root).appendingPathComponent("pass-sender-netns.log")
        let partitioned = try ServiceProcess.launch(CrashTests.binary, environment: environment, log: insideLog,
                                                    wrapper: namespace.wrap(CrashTests.binary.path))
        let processes = [outside, partitioned]
        defer { for p in processes where p.isRunning { p.terminate() } }

        // Both instances inside a held call: the cut lands mid-stream for each.
        try await gateway.state.wait("calls of both instances held", timeout: 120) { s in
            s.held.contains { $0.host == insideHost } && s.held.contains { $0.host != insideHost }
        }
        let logBeforeCut = (try? Data(contentsOf: insideLog).count) ?? 0
        try namespace.setLink(up: false)
        let cut = ContinuousClock.now
        let atCut = gateway.state.current
        let sentAtCut = atCut.sent.count
        #expect(sentAtCut < expected.count, "the cut must land mid-stream")
        holding.withLock { $0 = false }
        gateway.release()
        // The inside's held calls time out (1 s), and what it then writes
        // to the ledger goes to a PostgreSQL it cannot reach: that work
        // must end, and its message go back for the other instance, within
        // the PostgreSQL bound — while the link is still down (before the
        // settings, postgres-nio waited through the whole cut and after).
        let postgresGaveUp: Duration? = try? await withTimeout(15, "the inside's ledger work ends during the cut") {
            while true {
                let text = String(decoding: ((try? Data(contentsOf: insideLog)) ?? Data()).dropFirst(logBeforeCut), as: UTF8.self)
                if text.contains("message could not be finished; requeueing") { return ContinuousClock.now - cut }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(postgresGaveUp != nil, "the partitioned instance's PostgreSQL work did not end within 15 s of the cut (bound \(postgresBound) after its 1 s gateway timeout); log: \(insideLog.path)")
        // The rest of the fault's length, not a wait for an event.
        try await Task.sleep(until: cut + .seconds(20), clock: .continuous)
        try namespace.setLink(up: true)
        try await gateway.state.wait("every pass sent", timeout: 180) { Set($0.sent).isSuperset(of: expected) }

        // Every pass sent and recorded: the passes whose answer was lost are
        // out already, but wait in the ledger for their retry.
        let ledger = PassLedger(database: try await PostgresLedgerDatabase.open(
            settings: PostgresSettings(url: databaseURL), logger: Logger(label: "pass-netns"), waitSeconds: 0))
        try await withTimeout(180, "every pass recorded as delivered") {
            while try await ledger.statusCounts() != [.delivered: expected.count] {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        try await withTimeout(60, "every outbox row published") {
            while !(try await ledger.unpublished().isEmpty) { try await Task.sleep(for: .milliseconds(100)) }
        }
        let recovered = ContinuousClock.now - cut
        for p in processes {
            p.terminate()
            p.waitUntilExit()
            #expect(p.terminationStatus == 0, "a graceful stop after the partition")
        }

        // In flight at the cut: the calls held then (the inside never hears
        // their answers; the outside's may have waited past its 1 s gateway
        // timeout for the inside's first held call, and count as unanswered
        // too), and the inside's calls that reach the gateway after the cut:
        // one that left just before it may arrive only once the link is back
        // (TCP sends it again), its answer lost to a caller that gave up. The
        // gateway cannot tell those from the inside's later calls, so all
        // count. What may not repeat: a pass sent before the cut, or in a
        // call of the outside answered in time.
        let afterCut = gateway.state.current
        let lateInside = (atCut.requests.count..<afterCut.requests.count).filter { afterCut.hosts[$0] == insideHost }
        let inFlightInside = Set(atCut.held.filter { $0.host == insideHost }.flatMap(\.keys))
            .union(lateInside.flatMap { afterCut.requests[$0] })
        let inFlight = inFlightInside.union(atCut.held.flatMap(\.keys))

        let counts = gateway.sentCounts
        let twice = Set(counts.filter { $0.value == 2 }.keys)
        let more = counts.filter { $0.value > 2 }.map(\.key.description)
        let lost = expected.subtracting(counts.keys)
        #expect(more.isEmpty, "sent three times or more: \(more)")
        #expect(twice.isSubset(of: inFlight),
                "sent twice though not in flight at the cut: \(twice.subtracting(inFlight).map(\.description).sorted())")
        #expect(lost.isEmpty && Set(counts.keys) == expected, "none forgotten, nothing extra")
        let statuses = try await ledger.statusCounts()
        #expect(statuses == [.delivered: expected.count])
        #expect(try await ledger.unpublished().isEmpty)
        await ledger.close()
        let left = try await client.get(queue: Topology.passSenderEventsQueue)
        #expect(left == nil, "every delivery acknowledged")
        try? await left?.nack(requeue: true)
        let failed = !(more.isEmpty && twice.isSubset(of: inFlight) && lost.isEmpty && postgresGaveUp != nil
                       && statuses == [.delivered: expected.count] && left == nil)
        if failed { print("pass sender partition: ledger \(statuses); logs kept in \(root)") }
        print("pass sender partition: \(expected.count) passes, 2 instances (one in its own network namespace), every event twice;"
              + " cut its link for 20 s after \(sentAtCut) passes with \(inFlight.count) in flight (\(inFlightInside.count) of its own);"
              + " lost \(lost.count), sent twice \(twice.count) (all in flight at the cut), more than twice \(more.count);"
              + " all sent and recorded \(recovered) after the cut; \(gateway.state.current.calls) gateway calls;"
              + " the inside's ledger work ended \(postgresGaveUp.map { "\($0)" } ?? "never") after the cut")

        await client.close()
        await gateway.stop()
        // Kept when a check failed: the instances' log is in it.
        if !failed { try? FileManager.default.removeItem(atPath: root) }
    }
}
