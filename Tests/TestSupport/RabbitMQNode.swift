import AMQPClient
import Foundation

/// A private RabbitMQ node for tests, run by `scripts/rabbitmq.sh` (Debian's
/// `rabbitmq-server` on a free loopback port in a temp directory).
///
/// Used by tests that must stop and start the broker, and as the shared
/// broker when `AMQP_URL` is not set.
public final class RabbitMQNode: Sendable {
    /// The node's AMQP URL.
    public let url: AMQPURL
    /// The node's directory (data, logs, `env`).
    public let directory: String

    /// Starts a new node and waits until it accepts connections (~15 s).
    public static func start() throws -> RabbitMQNode {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rmq-\(UUID().uuidString.prefix(8))").path
        let output = try script(["start", "--dir", dir])
        guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("AMQP_URL=") }) else {
            throw NodeError("rabbitmq.sh start printed no AMQP_URL:\n\(output)")
        }
        return RabbitMQNode(url: try AMQPURL(String(line.dropFirst("AMQP_URL=".count))), directory: dir)
    }

    private init(url: AMQPURL, directory: String) {
        self.url = url
        self.directory = directory
    }

    /// Stops the RabbitMQ application (all connections drop), node stays up.
    public func stopApp() throws { _ = try Self.script(["ctl", "--dir", directory, "stop_app"]) }
    /// Starts the application again and waits until it accepts connections.
    public func startApp() throws { _ = try Self.script(["ctl", "--dir", directory, "start_app"]) }
    /// Closes every client connection, as a TCP reset would.
    public func closeAllConnections() throws {
        _ = try Self.script(["ctl", "--dir", directory, "close_all_connections", "test: forced close"])
    }
    /// Runs any `rabbitmqctl` command against this node and returns its output.
    public func ctl(_ arguments: [String]) throws -> String {
        try Self.script(["ctl", "--dir", directory] + arguments)
    }
    /// Freezes the broker process (SIGSTOP): it stops answering, heartbeats
    /// included, while its sockets stay open — a hung broker or a network
    /// black hole, as clients see it.
    public func freeze() throws { try signalBroker(SIGSTOP) }
    /// Lets a frozen broker run again (SIGCONT).
    public func thaw() throws { try signalBroker(SIGCONT) }

    private func signalBroker(_ signal: Int32) throws {
        let mnesia = URL(fileURLWithPath: directory).appendingPathComponent("mnesia")
        let pidFile = try FileManager.default.contentsOfDirectory(atPath: mnesia.path).first { $0.hasSuffix(".pid") }
        guard let pidFile, let text = try? String(contentsOf: mnesia.appendingPathComponent(pidFile), encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw NodeError("no pid file for the node in \(mnesia.path)")
        }
        guard kill(pid, signal) == 0 else { throw NodeError("kill(\(pid), \(signal)) failed: errno \(errno)") }
    }

    /// Stops the node and removes its directory.
    public func stop() {
        _ = try? Self.script(["stop", "--dir", directory])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `scripts/rabbitmq.sh` of this repository (or `RABBITMQ_TEST_SCRIPT`).
    static var scriptPath: String {
        if let path = ProcessInfo.processInfo.environment["RABBITMQ_TEST_SCRIPT"] { return path }
        // Tests/TestSupport/RabbitMQNode.swift → repository root
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent("scripts/rabbitmq.sh").path
    }

    @discardableResult
    static func script(_ arguments: [String]) throws -> String {
        try runScript(scriptPath, arguments)
    }

    /// Runs a bash script of the repository; its output (stdout and
    /// stderr), or a ``NodeError`` with that output when it fails.
    @discardableResult
    static func runScript(_ path: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [path] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let output = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            let name = URL(fileURLWithPath: path).lastPathComponent
            throw NodeError("\(name) \(arguments.joined(separator: " ")) failed (\(process.terminationStatus)):\n\(output)")
        }
        return output
    }
}

/// A failure of the test broker harness.
public struct NodeError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// The broker most tests share: `AMQP_URL` when set (scripts/test.sh sets
/// it), otherwise a private node started on first use and stopped when the
/// test process exits.
public enum TestBroker {
    private static let shared: Result<AMQPURL, any Error> = {
        if let env = ProcessInfo.processInfo.environment["AMQP_URL"], !env.isEmpty {
            return Result { try AMQPURL(env) }
        }
        return Result {
            let node = try RabbitMQNode.start()
            ownedNode.withLock { $0 = node }
            atexit { TestBroker.ownedNode.withLock { $0?.stop() } }
            return node.url
        }
    }()
    static let ownedNode = LockedBox<RabbitMQNode?>(nil)

    /// The shared broker's URL.
    public static func url() throws -> AMQPURL {
        try shared.get()
    }

    /// A fresh virtual host on the shared broker (guest has full rights),
    /// so a test can use the contract's fixed queue names without meeting
    /// other tests' consumers. Needs a broker this process can administer:
    /// the one scripts/test.sh started (`RABBITMQ_TEST_DIR`) or its own.
    public static func isolatedURL(_ prefix: String = "t") throws -> AMQPURL {
        var url = try url()
        let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ownedNode.withLock { $0?.directory }
        guard let directory else {
            throw NodeError("isolated vhosts need a broker started by scripts/test.sh (RABBITMQ_TEST_DIR) or by the tests themselves; unset AMQP_URL")
        }
        let vhost = uniqueName(prefix)
        _ = try RabbitMQNode.script(["ctl", "--dir", directory, "add_vhost", vhost])
        _ = try RabbitMQNode.script(["ctl", "--dir", directory, "set_permissions", "-p", vhost, url.user, ".*", ".*", ".*"])
        url.vhost = vhost
        return url
    }

    /// The shared broker's TLS listener (`amqps://`, scripts/rabbitmq.sh
    /// gives every node one) and the CA file that signed its certificate.
    public static func tls() throws -> (url: AMQPURL, caFile: String) {
        _ = try url()
        let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ownedNode.withLock { $0?.directory }
        guard let directory,
              let env = try? String(contentsOfFile: directory + "/env", encoding: .utf8) else {
            throw NodeError("the TLS listener needs a broker started by scripts/test.sh or the tests")
        }
        var values: [String: String] = [:]
        for line in env.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { values[parts[0]] = parts[1] }
        }
        guard let tlsURL = values["AMQPS_URL"], let ca = values["AMQPS_CA_FILE"] else {
            throw NodeError("\(directory)/env has no AMQPS_URL (node started by an older rabbitmq.sh?)")
        }
        return (try AMQPURL(tlsURL), ca)
    }

    /// The shared broker's management API base URL (scripts/rabbitmq.sh
    /// enables the management plugin on loopback; guest is an administrator).
    public static func managementURL() throws -> String {
        _ = try url()
        let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ownedNode.withLock { $0?.directory }
        guard let directory, let env = try? String(contentsOfFile: directory + "/env", encoding: .utf8),
              let line = env.split(separator: "\n").first(where: { $0.hasPrefix("MANAGEMENT_URL=") }) else {
            throw NodeError("no MANAGEMENT_URL: the management API needs a broker started by scripts/rabbitmq.sh")
        }
        return String(line.dropFirst("MANAGEMENT_URL=".count))
    }

    /// Deletes a vhost made by ``isolatedURL(_:)`` (best effort), so a
    /// long-lived development broker does not pile up test vhosts.
    public static func deleteVhost(_ vhost: String) {
        let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ownedNode.withLock { $0?.directory }
        guard let directory, vhost != "/" else { return }
        _ = try? RabbitMQNode.script(["ctl", "--dir", directory, "delete_vhost", vhost])
    }

    /// Runs `rabbitmqctl` against the shared broker (one this process can
    /// administer: scripts/test.sh's or its own) and returns its output.
    @discardableResult
    public static func ctl(_ arguments: [String]) throws -> String {
        _ = try url()
        let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ownedNode.withLock { $0?.directory }
        guard let directory else { throw NodeError("rabbitmqctl needs a broker started by scripts/test.sh or the tests") }
        return try RabbitMQNode.script(["ctl", "--dir", directory] + arguments)
    }

    /// Adds a broker user with full rights on `url`'s vhost and returns a URL for it.
    public static func addUser(_ user: String, to url: AMQPURL) throws -> AMQPURL {
        let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ownedNode.withLock { $0?.directory }
        guard let directory else { throw NodeError("adding users needs a broker started by scripts/test.sh or the tests") }
        let password = "pw-\(UUID().uuidString.prefix(8))"
        _ = try? RabbitMQNode.script(["ctl", "--dir", directory, "add_user", user, password])
        _ = try RabbitMQNode.script(["ctl", "--dir", directory, "change_password", user, password])
        _ = try RabbitMQNode.script(["ctl", "--dir", directory, "set_permissions", "-p", url.vhost, user, ".*", ".*", ".*"])
        var userURL = url
        userURL.user = user
        userURL.password = password
        return userURL
    }

    /// A configuration for the shared broker with a test-friendly name.
    public static func configuration(_ name: String = "test", heartbeat: Int = 10) throws -> AMQPConfiguration {
        AMQPConfiguration(url: try url(), connectionName: name, heartbeatSeconds: heartbeat)
    }
}

/// A tiny lock-protected box for test bookkeeping.
public final class LockedBox<Value>: @unchecked Sendable {  // all access goes through `lock`
    private let lock = NSLock()
    private var value: Value
    public init(_ value: Value) { self.value = value }
    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
