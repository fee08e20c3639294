import AMQPClient
import Foundation

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

    /// The shared broker's directory (scripts/test.sh's or this process's own node).
    public static func directory() throws -> String {
        _ = try url()
        guard let directory = ProcessInfo.processInfo.environment["RABBITMQ_TEST_DIR"].flatMap({ $0.isEmpty ? nil : $0 })
            ?? ownedNode.withLock({ $0?.directory }) else {
            throw NodeError("no broker directory: the broker was not started by scripts/test.sh or the tests")
        }
        return directory
    }

    /// The key of the CA that signed the shared broker's certificate and
    /// that its TLS listener trusts for client certificates.
    public static func tlsAuthority() throws -> TestCertificates.Pair {
        let directory = try directory()
        return TestCertificates.Pair(certificate: directory + "/tls/ca.pem", key: directory + "/tls/ca.key")
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
