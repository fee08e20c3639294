import BookingContracts
import AMQPClient
import BookingHandler
import Foundation
import Logging
import ServiceLifecycle
import TestSupport

/// Runs the built `bookingctl` binary as users do and collects what it printed.
struct CLIRunner {
    struct Result {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    static var binary: URL {
        let dir = ProcessInfo.processInfo.environment["SERVICE_BIN_DIR"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent(".build/debug")
        return dir.appendingPathComponent("bookingctl")
    }

    let url: AMQPURL

    /// Runs `bookingctl ARGS --amqp-url URL` (the URL option is only added to
    /// commands that talk to the broker) with output captured in files —
    /// never our own stdout, which a stray child would hold open.
    /// `environment` is added to this process's (without `AMQP_URL`).
    func run(_ arguments: [String], broker: Bool = true, stdin: String? = nil,
             environment extra: [String: String] = [:]) async throws -> Result {
        let dir = try TemporaryDirectory("bookingctl")
        defer { dir.remove() }
        let out = dir.appending("out"), err = dir.appending("err")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        FileManager.default.createFile(atPath: err.path, contents: nil)
        let outHandle = try FileHandle(forWritingTo: out), errHandle = try FileHandle(forWritingTo: err)
        defer { try? outHandle.close(); try? errHandle.close() }

        let process = Process()
        process.executableURL = Self.binary
        process.arguments = arguments + (broker ? ["--amqp-url", url.urlStringWithCredentials] : [])
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "AMQP_URL")
        process.environment = environment.merging(extra) { $1 }
        process.standardOutput = outHandle
        process.standardError = errHandle
        if let stdin {
            let input = dir.appending("in")
            FileManager.default.createFile(atPath: input.path, contents: Data(stdin.utf8))
            process.standardInput = try FileHandle(forReadingFrom: input)
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        let (exited, signal) = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { signal.yield($0.terminationStatus); signal.finish() }
        try process.run()
        let status = try await withTimeout(60, "bookingctl \(arguments.joined(separator: " "))") {
            var iterator = exited.makeAsyncIterator()
            return await iterator.next() ?? -1
        }
        return Result(status: status,
                      stdout: String(decoding: try Data(contentsOf: out), as: UTF8.self),
                      stderr: String(decoding: try Data(contentsOf: err), as: UTF8.self))
    }
}

/// A booking handler in this process, in a vhost of its own, for bookingctl to talk to.
final class Handler: Sendable {
    let url: AMQPURL
    let dataDirectory: String
    private let ownsVhost: Bool
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    static let roomsFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("deploy/rooms.json").path

    /// `url`: an existing vhost (the caller removes it); default a fresh one.
    init(administrators: Set<String> = [], url: AMQPURL? = nil) async throws {
        ownsVhost = url == nil
        self.url = try url ?? TestBroker.isolatedURL("ctl")
        dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(uniqueName("ctl-data")).path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let logger = testLogger("handler")
        let connection = try await AMQPConnection.connect(
            configuration: AMQPConfiguration(url: self.url, connectionName: "handler"), logger: logger)
        let app = try await BookingHandlerApp.build(connection: connection, dataDirectory: dataDirectory,
                                                    roomsFile: Self.roomsFile, policy: CallerPolicy(administrators: administrators),
                                                    logger: logger)
        (group, running) = ServiceGroup.startInProcess(app.services, logger: logger)
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
        if ownsVhost { TestBroker.deleteVhost(url.vhost) }
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}
