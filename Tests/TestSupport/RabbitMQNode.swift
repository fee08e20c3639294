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
    /// `tls`: the CA and server certificate its TLS listener uses (default:
    /// a throwaway CA of scripts/rabbitmq.sh for localhost and 127.0.0.1).
    public static func start(tls: (authority: TestCertificates.Pair, server: TestCertificates.Pair)? = nil) throws -> RabbitMQNode {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rmq-\(UUID().uuidString.prefix(8))").path
        if let tls {
            let tlsDirectory = dir + "/tls"
            try FileManager.default.createDirectory(atPath: tlsDirectory, withIntermediateDirectories: true)
            for (from, to) in [(tls.authority.certificate, "ca.pem"), (tls.server.certificate, "server.pem"), (tls.server.key, "server.key")] {
                try FileManager.default.copyItem(atPath: from, toPath: "\(tlsDirectory)/\(to)")
            }
        }
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

    /// The node's TLS listener (`amqps://guest:guest@localhost:PORT`), its
    /// CA file, and the CA's key when scripts/rabbitmq.sh made the CA.
    public var tls: (url: AMQPURL, caFile: String, caKeyFile: String) {
        get throws {
            let values = try Self.environment(of: directory)
            guard let url = values["AMQPS_URL"], let ca = values["AMQPS_CA_FILE"] else {
                throw NodeError("\(directory)/env has no AMQPS_URL")
            }
            return (try AMQPURL(url), ca, values["AMQPS_CA_KEY_FILE"] ?? directory + "/tls/ca.key")
        }
    }

    /// Makes the TLS listener present the certificate and key now in
    /// `tls/server.pem` and `tls/server.key` to new connections, as an
    /// operator rotating certificates does (RabbitMQ reads them through
    /// Erlang's PEM cache; open connections keep theirs).
    public func presentServerCertificate(_ pair: TestCertificates.Pair) throws {
        for (from, to) in [(pair.certificate, "server.pem"), (pair.key, "server.key")] {
            let target = "\(directory)/tls/\(to)"
            // Overwritten in place: the file keeps its owner (the broker's user).
            try Data(contentsOf: URL(fileURLWithPath: from)).write(to: URL(fileURLWithPath: target))
        }
        _ = try ctl(["eval", "ssl:clear_pem_cache()."])
    }

    /// `KEY=value` lines of DIR/env.
    static func environment(of directory: String) throws -> [String: String] {
        let text = try String(contentsOfFile: directory + "/env", encoding: .utf8)
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { values[parts[0]] = parts[1] }
        }
        return values
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
        guard let pid = pid else {
            throw NodeError("no running beam.smp named by a pid file in \(directory)/mnesia")
        }
        guard kill(pid, signal) == 0 else { throw NodeError("kill(\(pid), \(signal)) failed: errno \(errno)") }
    }

    /// The node's Erlang VM process (from its pid file, if that names a
    /// running `beam.smp`), or nil. Benchmarks read its CPU from `/proc`.
    public var pid: Int32? {
        let mnesia = URL(fileURLWithPath: directory).appendingPathComponent("mnesia")
        guard let pidFile = (try? FileManager.default.contentsOfDirectory(atPath: mnesia.path))?.first(where: { $0.hasSuffix(".pid") }),
              let text = try? String(contentsOf: mnesia.appendingPathComponent(pidFile), encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) else { return nil }
        // A pid from another namespace (a broker in a container) would name
        // some unrelated process here.
        guard let command = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
              command.split(separator: "\0").first?.hasSuffix("beam.smp") == true else { return nil }
        return pid
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
        try Command.run("/bin/bash", [path] + arguments)
    }
}

/// A failure of the test broker harness.
public struct NodeError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
