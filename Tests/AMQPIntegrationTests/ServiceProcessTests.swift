import AMQPClient
import BookingContracts
import Foundation
import Testing
import TestSupport

/// The service executables as users run them: started with only
/// environment settings, they declare their topology, and SIGTERM stops
/// them with exit status 0.
@Suite("Service processes")
struct ServiceProcessTests {
    static var binDirectory: URL {
        if let dir = ProcessInfo.processInfo.environment["SERVICE_BIN_DIR"] { return URL(fileURLWithPath: dir) }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug")
    }

    @Test(arguments: [
        ("booking-handler", "booking-handler.commands"),
        ("pass-sender", "pass-sender.events"),
        ("availability-projector", "availability-projector.events"),
    ])
    func serviceDeclaresTopologyAndStopsCleanlyOnSIGTERM(service: String, queue: String) async throws {
        let binary = Self.binDirectory.appendingPathComponent(service)
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build \(service) first (swift build)")
        let dataDir = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName(service))
        defer { try? FileManager.default.removeItem(at: dataDir) }

        // Start from a broker without the queue, so its appearance proves
        // the service declared it.
        let probe = try await AMQPConnection.connect(configuration: TestBroker.configuration("probe-\(service)"), logger: testLogger("probe"))
        try await probe.deleteQueue(queue)
        try await probe.deleteQueue(Topology.deadLetterQueue(for: queue))

        let process = Process()
        process.executableURL = binary
        var environment = ProcessInfo.processInfo.environment
        environment["AMQP_URL"] = try TestBroker.url().urlStringWithCredentials
        environment["DATA_DIR"] = dataDir.path
        let httpPort = try freeTCPPort()
        environment["HTTP_PORT"] = "\(httpPort)"
        environment["LOG_LEVEL"] = "warning"
        process.environment = environment
        // Never share our stdout/stderr with the child: a child left running
        // would keep the test runner's output pipe open.
        let log = dataDir.appendingPathComponent("service.log")
        try FileManager.default.createDirectory(at: dataDir, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let logHandle = try FileHandle(forWritingTo: log)
        process.standardOutput = logHandle
        process.standardError = logHandle
        defer {
            if process.isRunning { process.interrupt(); process.terminate() }
            try? logHandle.close()
        }
        let (exited, exitedSignal) = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { exitedSignal.yield($0.terminationStatus); exitedSignal.finish() }
        try process.run()

        let connection = probe
        // The service's own declaration creates the queue and its
        // dead-letter queue (declared last); wait for both.
        try await withTimeout(30, "\(service) declaring \(queue)") {
            while true {
                if (try? await connection.queueInfo(queue)) != nil,
                   (try? await connection.queueInfo(Topology.deadLetterQueue(for: queue))) != nil { return }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        await connection.close()

        // Operations endpoints over real HTTP.
        let base = "http://127.0.0.1:\(httpPort)"
        let ready = try await withTimeout(30, "\(service) ready") { () async throws -> (status: Int, body: String) in
            while true {
                if let r = try? await httpGet(base + "/readyz"), r.status == 200 { return r }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(ready.body.contains("\"ready\":true"))
        #expect(try await httpGet(base + "/healthz").status == 200)
        let metrics = try await httpGet(base + "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("amqp_published_total") || metrics.body.contains("amqp_reconnects_total"))

        process.terminate()  // SIGTERM
        let status = try await withTimeout(30, "\(service) stopping") {
            var iterator = exited.makeAsyncIterator()
            return await iterator.next() ?? -1
        }
        #expect(status == 0)
    }
}
