import AMQPClient
import Foundation
import Testing
import TestSupport

/// The booking-handler process as deployed: after bookingctl books through
/// it, /metrics counts the message per queue and type, its settlement, the
/// command outcome and the event published.
@Suite("metrics of a running handler")
struct MetricsTests {
    @Test func metricsCountMessagesByQueueTypeAndOutcome() async throws {
        let url = try TestBroker.isolatedURL("ctl-metrics")
        defer { TestBroker.deleteVhost(url.vhost) }
        let dataDir = try TemporaryDirectory("metrics")
        defer { dataDir.remove() }
        let port = try freeTCPPort()

        let process = try ServiceProcess.launch(
            CLIRunner.binary.deletingLastPathComponent().appendingPathComponent("booking-handler"),
            environment: ["AMQP_URL": url.urlStringWithCredentials, "DATA_DIR": dataDir.path, "HTTP_PORT": "\(port)",
                          "ROOMS_FILE": Handler.roomsFile, "LOG_LEVEL": "warning"],
            log: dataDir.appending("handler.log"))
        defer { if process.isRunning { process.terminate(); process.waitUntilExit() } }
        let base = "http://127.0.0.1:\(port)"
        try await withTimeout(60, "handler ready") {
            while (try? await httpGet(base + "/readyz"))?.status != 200 { try await Task.sleep(for: .milliseconds(100)) }
        }

        let cli = CLIRunner(url: url)
        let ok = try await cli.run(["book", "--room", "Berlin", "--date", localDate(daysFromNow: 2), "--start", "09:00",
                                    "--end", "09:30", "--title", "Metrics", "--attendee", BookingctlTests.ada])
        #expect(ok.status == 0, "\(ok.stderr)")
        let clash = try await cli.run(["book", "--room", "Berlin", "--date", localDate(daysFromNow: 2), "--start", "09:00",
                                       "--end", "09:30", "--title", "Clash", "--attendee", BookingctlTests.ada])
        #expect(clash.status == 1)

        // The outbox relay publishes the events shortly after the ack; wait
        // for its counter rather than for a fixed time.
        let metrics = try await withTimeout(60, "metrics after two commands") { () async throws -> String in
            while true {
                let body = try await httpGet(base + "/metrics").body
                if body.contains("booking_events_published_total") { return body }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        func value(_ name: String, _ labels: [String]) -> Double? {
            metrics.split(separator: "\n").first { line in
                line.hasPrefix(name + "{") && labels.allSatisfy { line.contains($0) }
            }.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        let queue = #"queue="booking-handler.commands""#, type = #"type="booking.create""#
        #expect(value("amqp_messages_consumed_total", [queue, type]) == 2, "\(metrics)")
        #expect(value("amqp_messages_settled_total", [queue, type, #"outcome="acked""#]) == 2)
        #expect(value("booking_commands_total", [type, #"outcome="ok""#]) == 1)
        #expect(value("booking_commands_total", [type, #"outcome="rejected""#]) == 1)
        #expect(metrics.contains("booking_command_duration_seconds"))
        #expect(metrics.contains("booking_outbox_backlog"))
        // Where the two commands' time went: every stage timed once per
        // command (the rejected one too: it was stored, replied and acked).
        for stage in ["dispatch", "process", "store", "store_queued", "store_transaction", "reply", "ack"] {
            let label = "stage=\"\(stage)\""
            #expect(value("booking_command_stage_seconds_count", [label]) == 2, "\(stage): \(metrics)")
            #expect((value("booking_command_stage_seconds_sum", [label]) ?? 0) > 0, "\(stage)")
        }
    }
}
