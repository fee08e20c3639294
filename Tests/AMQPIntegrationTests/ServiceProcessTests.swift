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

    /// Start-up runs inside the service group: a SIGTERM while the service
    /// still waits for an unreachable broker (`AMQP_CONNECT_TIMEOUT` 120 s)
    /// cancels the wait, and the process exits 0 at once — long before the
    /// connect would have given up.
    @Test(arguments: ["booking-handler", "pass-sender", "availability-projector"])
    func aSIGTERMWhileWaitingForTheBrokerExitsZeroAtOnce(service: String) async throws {
        let binary = ServiceProcess.binary(service)
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build \(service) first (swift build)")
        let dataDir = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName(service))
        try FileManager.default.createDirectory(at: dataDir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dataDir) }
        let log = dataDir.appendingPathComponent("service.log")
        // Nothing listens there: the port was free a moment ago.
        let process = try ServiceProcess.launch(binary, environment: [
            "AMQP_URL": "amqp://guest:guest@127.0.0.1:\(try freeTCPPort())/%2f", "AMQP_CONNECT_TIMEOUT": "120",
            "DATA_DIR": dataDir.path, "HTTP_PORT": "0", "LOG_LEVEL": "info",
        ], log: log)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let (exited, exitedSignal) = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { exitedSignal.yield($0.terminationStatus); exitedSignal.finish() }
        try await withTimeout(60, "\(service) retrying its connect") {
            while !((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("AMQP connect failed; retrying") {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let signalled = ContinuousClock.now
        process.terminate()  // SIGTERM
        let status = try await withTimeout(30, "\(service) stopping during start-up") {
            var iterator = exited.makeAsyncIterator()
            return await iterator.next() ?? -1
        }
        let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(output)")
        #expect(output.contains("stopped during start-up"))
        #expect(!output.contains("\(service) failed"), "a stop during start-up is not a failure")
        print("\(service): exited \(status) \(ContinuousClock.now - signalled) after SIGTERM during start-up")
    }

    /// A bad setting of the service's own (not only a common one) ends the
    /// process with status 2 and names the variable, before anything connects.
    @Test(arguments: [
        ("booking-handler", "INBOX_RETENTION_DAYS", "-3"),
        ("pass-sender", "PASS_CONCURRENCY", "0"),
        ("pass-sender", "PASS_GATEWAY_CONCURRENCY", "257"),
        ("availability-projector", "PROJECTOR_INSTANCE", "Not Valid!"),
    ])
    func aBadSettingExitsTwoNamingIt(service: String, name: String, value: String) async throws {
        let binary = ServiceProcess.binary(service)
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build \(service) first (swift build)")
        let dataDir = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName(service))
        defer { try? FileManager.default.removeItem(at: dataDir) }
        let (status, output) = try Command.exitStatus(binary.path, [], environment: [
            "AMQP_URL": "amqp://guest:guest@127.0.0.1:1/%2f", "DATA_DIR": dataDir.path, name: value,
        ])
        #expect(status == 2, "\(output)")
        #expect(output.contains("\(service): configuration error") && output.contains(name), "\(output)")
    }
}
