import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// `deploy/grafana/room-booking.json` against the metric names a running
/// set really exposes: the three service executables on one vhost, driven
/// through what each panel shows (commands of every result, a caller over
/// its rate, an event routed into the query queue, an outside queue that
/// refuses `booking.public`, a pass that fails until it lands in
/// `passes.failed`, notices, queries over AMQP and HTTP), then every
/// service's `/metrics` checked by `scripts/check_dashboard.py`. The
/// broker's own names (`rabbitmq_*`) are checked against the compose
/// broker's `rabbitmq_prometheus` by `scripts/container-test.sh`.
@Suite("Grafana dashboard against a running set", .serialized)
struct DashboardTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let dashboard = root.appendingPathComponent("deploy/grafana/room-booking.json").path
    static let checker = root.appendingPathComponent("scripts/check_dashboard.py").path

    /// Names a panel may show that only a rare event creates (a lost
    /// connection, a failed publish, a booking's start time passing, an
    /// event for a stale version, a notice without a notify gateway). They
    /// are checked against the source instead: each must be a metric the
    /// code declares.
    static let rare = ["amqp_reconnects_total", "amqp_publish_failures_total", "booking_timer_transitions_total",
                       "pass_messages_dropped_total", "notices_spooled_total"]

    /// A service process with its ops port.
    struct Running {
        let process: Process
        let base: String

        func metrics() async throws -> String { try await httpGet(base + "/metrics").body }

        func stop() {
            if process.isRunning { process.terminate(); process.waitUntilExit() }
        }
    }

    static func launch(_ name: String, _ environment: [String: String], in dir: TemporaryDirectory) async throws -> Running {
        let port = try freeTCPPort()
        var environment = environment
        environment["HTTP_PORT"] = "\(port)"
        environment["LOG_LEVEL"] = environment["LOG_LEVEL"] ?? "warning"
        environment["DATA_DIR"] = dir.appending(name).path
        let process = try ServiceProcess.launch(ServiceProcess.binary(name), environment: environment,
                                                log: dir.appending(name + ".log"))
        let running = Running(process: process, base: "http://127.0.0.1:\(port)")
        try await withTimeout(60, "\(name) ready") {
            while (try? await httpGet(running.base + "/readyz"))?.status != 200 { try await Task.sleep(for: .milliseconds(100)) }
        }
        return running
    }

    /// Scrapes until every name in `names` has a sample (the relay and the
    /// retries count a little after the replies).
    static func scrape(_ service: Running, until names: [String]) async throws -> String {
        @Sendable func missing(_ body: String) -> [String] {
            names.filter { name in !body.split(separator: "\n").contains { $0.hasPrefix(name) } }
        }
        do {
            return try await withTimeout(60, "metrics \(names)") {
                while true {
                    let body = try await service.metrics()
                    if missing(body).isEmpty { return body }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        } catch {
            let body = (try? await service.metrics()) ?? ""
            Issue.record("\(service.base): never exposed \(missing(body)); it has:\n\(body.split(separator: "\n").filter { !$0.hasPrefix("#") }.joined(separator: "\n"))")
            throw error
        }
    }

    @Test func everyPanelQueriesMetricsTheRunningSetExposes() async throws {
        let url = try TestBroker.isolatedURL("dashboard")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dir = try TemporaryDirectory("dashboard")
        defer { dir.remove() }
        // The second attendee's pass always fails: two attempts, then passes.failed.
        let gateway = try await FaultGateway.start(passRule: { key, _ in key.index == 1 }, notices: true)
        let amqp = url.urlStringWithCredentials
        // The projector first: it learns the rooms from the handler's
        // room.registered events at its start.
        let projector = try await Self.launch("availability-projector", ["AMQP_URL": amqp], in: dir)
        defer { projector.stop() }
        let handler = try await Self.launch("booking-handler", [
            "AMQP_URL": amqp, "ROOMS_FILE": Self.root.appendingPathComponent("deploy/rooms.json").path, "CALLER_RATE": "1,3",
        ], in: dir)
        defer { handler.stop() }
        let passes = try await Self.launch("pass-sender", [
            "AMQP_URL": amqp, "PASS_GATEWAY_URL": gateway.url, "PASS_NOTIFY_URL": gateway.url, "PASS_MAX_ATTEMPTS": "2",
            "PASS_RETRY_DELAYS": "100ms",
        ], in: dir)
        defer { passes.stop() }

        let client = try await AMQPConnection.connect(configuration: AMQPConfiguration(url: url, connectionName: "dashboard"),
                                                      logger: testLogger("dashboard"))
        // An outside queue that refuses every booking.public copy.
        try await client.declare([
            .queue(QueueDeclaration("outside.refuses", type: .classic, durable: false, maxLength: 0,
                                    arguments: ["x-overflow": .string("reject-publish")])),
            .binding(QueueBinding(queue: "outside.refuses", exchange: Topology.publicExchange, routingKey: "#")),
        ])
        func command(_ type: String, _ json: String) async throws -> CommandReply {
            let reply = try await client.call(Array(json.utf8), exchange: Topology.commandsExchange, routingKey: type,
                                              properties: .persistentJSON(type: type, messageID: UUID().uuidString),
                                              timeout: .seconds(30))
            return try ContractJSON.decode(CommandReply.self, from: reply.body)
        }
        let date = localDate(daysFromNow: 3)
        let attendees = #"[{"name": "Ada", "email": "ada@example.com", "phone": "0170 1234567"}, {"name": "Bob", "email": "bob@example.com", "phone": "0170 7654321"}]"#
        let booked = try #require(try await command("booking.create", #"{"room": "Berlin", "date": "\#(date)", "start": "09:00", "end": "10:00", "title": "Dashboard", "attendees": \#(attendees)}"#).bookingValue)
        // A read and a cancel (a notice to every attendee): the burst of
        // three is used up (commands and booking queries share a bucket).
        _ = try await client.call(Array(#"{"bookingId": "\#(booked.id)"}"#.utf8), routingKey: Topology.bookingQueriesQueue,
                                  properties: .persistentJSON(type: "booking.get", messageID: UUID().uuidString),
                                  timeout: .seconds(30))
        // The second attendee's pass goes to passes.failed; then the cancel.
        _ = try await Self.scrape(passes, until: ["passes_failed_total"])
        #expect(try await command("booking.cancel", #"{"bookingId": "\#(booked.id)"}"#).isOK)
        // Over the rate (1/s): 1010.
        var limited = false
        for _ in 0..<6 where !limited {
            let reply = try await command("booking.create", #"{"room": "Berlin", "date": "\#(date)", "start": "11:00", "end": "12:00", "title": "Late", "attendees": \#(attendees)}"#)
            limited = reply.errorValue?.code == .rateLimited
        }
        #expect(limited, "the burst of three is exceeded")
        // An event routed into the query queue, as an outside binding would.
        try await client.publish(Array("{}".utf8), routingKey: Topology.bookingQueriesQueue,
                                 properties: .persistentJSON(type: "booking.created", messageID: UUID().uuidString))
        // The projector over AMQP and HTTP.
        _ = try await client.call(Array(#"{"date": "\#(date)"}"#.utf8), routingKey: Topology.availabilityQueriesQueue,
                                  properties: .persistentJSON(messageID: UUID().uuidString), timeout: .seconds(30))
        _ = try await httpGet(projector.base + "/rooms?date=\(date)")

        let scraped = [
            ("handler", try await Self.scrape(handler, until: ["booking_events_published_total", "public_copies_refused_total",
                                                               "foreign_messages_ignored_total", "booking_queries_total"])),
            ("passes", try await Self.scrape(passes, until: ["passes_failed_total", "notices_delivered_total",
                                                             "passes_retried_total", "passes_delivered_total"])),
            ("projector", try await Self.scrape(projector, until: ["projector_availability_changed_total",
                                                                   "projector_queries_total"])),
        ]
        var files: [String] = []
        for (name, body) in scraped {
            let file = dir.appending(name + ".metrics")
            try Data(body.utf8).write(to: file)
            files.append(file.path)
        }
        // Names only a rare event creates are checked against the source.
        for name in Self.rare {
            let declared = try Command.exitStatus("/usr/bin/env", ["grep", "-rqF", "\"\(name)\"", Self.root.appendingPathComponent("Services").path,
                                                                    Self.root.appendingPathComponent("Shared").path]).0 == 0
            #expect(declared, "\(name) is declared by the code")
        }
        let withRare = dir.appending("rare.metrics")
        try Data(Self.rare.map { "\($0) 0\n" }.joined().utf8).write(to: withRare)

        let (status, output) = try Command.exitStatus("/usr/bin/env", ["python3", Self.checker, Self.dashboard, "--except", "rabbitmq_"]
                                                                       + files + [withRare.path])
        #expect(status == 0, "\(output)")
        #expect(output.contains("0 missing"), "\(output)")
        // The checker fails on a name no service exposes.
        let broken = dir.appending("broken.json")
        let text = try String(contentsOfFile: Self.dashboard, encoding: .utf8)
            .replacingOccurrences(of: "booking_outbox_backlog", with: "booking_outbox_backlogg")
        try Data(text.utf8).write(to: broken)
        let (brokenStatus, brokenOutput) = try Command.exitStatus("/usr/bin/env", ["python3", Self.checker, broken.path,
                                                                                   "--except", "rabbitmq_"] + files + [withRare.path])
        #expect(brokenStatus == 1 && brokenOutput.contains("MISSING  booking_outbox_backlogg"), "\(brokenOutput)")
        await client.close()
    }
}
