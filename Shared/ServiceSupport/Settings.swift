import AMQPClient
import Foundation
import Logging
import ServiceSettings
#if canImport(Glibc)
import Glibc
#endif

/// The settings every service reads from its environment (the operations
/// contract in docs; every variable in docs/configuration.md), with the
/// documented defaults.
public struct CommonSettings: Sendable {
    /// `AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`: one
    /// broker, or the nodes of a cluster tried in turn (``AMQPURL/list(_:)``).
    public var amqpURLs: [AMQPURL]
    /// The first node of `AMQP_URL`.
    public var amqpURL: AMQPURL { amqpURLs[0] }
    /// `DATA_DIR`, default `./.data`.
    public var dataDirectory: String
    /// `HTTP_PORT`, default per service.
    public var httpPort: Int
    /// `HTTP_BIND`: the address the operations server (and the projector's
    /// API and page) listens on, default `127.0.0.1`. Loopback unless an
    /// operator says otherwise: `/metrics` and `/readyz` are not for
    /// strangers, and a container must say `0.0.0.0` on purpose.
    public var httpBind: String
    /// `LOG_LEVEL`, default `info`.
    public var logLevel: Logger.Level
    /// `LOG_FORMAT`: `text` (default) or `json`.
    public var logFormat: LogFormat
    /// `AMQP_HEARTBEAT` seconds, default 10.
    public var heartbeatSeconds: Int
    /// `AMQP_CONNECT_TIMEOUT`: seconds to wait for the broker at start-up, default 60.
    public var initialConnectTimeoutSeconds: Double
    /// `AMQP_CA_FILE`: CA bundle for `amqps://`; default the system bundle.
    public var tlsCAFile: String?
    /// `AMQP_CERT_FILE`, `AMQP_KEY_FILE`, `AMQP_AUTH_MECHANISM`,
    /// `AMQP_TLS_SKIP_HOSTNAME_CHECK` (with `AMQP_CA_FILE`): the transport
    /// security of the AMQP connection, as
    /// ``AMQPConfiguration/applyTLSEnvironment(_:)`` reads them.
    public var amqpTLS: AMQPConfiguration

    /// Reads the settings from `environment`.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment, defaultHTTPPort: Int) throws {
        func value(_ name: String) -> String? {
            guard let v = environment[name]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        if let text = value("AMQP_URL") {
            do {
                amqpURLs = try AMQPURL.list(text)
            } catch {
                throw SettingsError("AMQP_URL: \(error.message)")
            }
        } else {
            amqpURLs = [.default]
        }
        dataDirectory = value("DATA_DIR") ?? "./.data"
        httpPort = try Self.integer(value("HTTP_PORT"), name: "HTTP_PORT", default: defaultHTTPPort, range: 0...65535)
        httpBind = try Self.bindAddress(value("HTTP_BIND"), name: "HTTP_BIND")
        let level = value("LOG_LEVEL")?.lowercased() ?? "info"
        guard let parsedLevel = Logger.Level(rawValue: level == "warn" ? "warning" : level) else {
            throw SettingsError("LOG_LEVEL: '\(level)' is not one of trace, debug, info, notice, warning, error, critical")
        }
        logLevel = parsedLevel
        let format = value("LOG_FORMAT")?.lowercased() ?? "text"
        guard let parsedFormat = LogFormat(rawValue: format) else {
            throw SettingsError("LOG_FORMAT: '\(format)' is not 'text' or 'json'")
        }
        logFormat = parsedFormat
        heartbeatSeconds = try Self.integer(value("AMQP_HEARTBEAT"), name: "AMQP_HEARTBEAT", default: 10, range: 0...600)
        initialConnectTimeoutSeconds = Double(try Self.integer(value("AMQP_CONNECT_TIMEOUT"), name: "AMQP_CONNECT_TIMEOUT",
                                                               default: 60, range: 0...3600))
        tlsCAFile = value("AMQP_CA_FILE")
        if let tlsCAFile, !FileManager.default.isReadableFile(atPath: tlsCAFile) {
            throw SettingsError("AMQP_CA_FILE: cannot read \(tlsCAFile)")
        }
        amqpTLS = AMQPConfiguration()
        do {
            try amqpTLS.applyTLSEnvironment(environment)
        } catch {
            throw SettingsError(error.message)
        }
    }

    /// A comma-separated list of broker user names (`ADMIN_USERS`, …):
    /// blanks around names and empty items are dropped.
    public static func userList(_ text: String?) -> Set<String> {
        Set((text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
    }

    /// A boolean setting: `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`
    /// (any case); unset or empty is `value`.
    public static func boolean(_ text: String?, name: String, default value: Bool) throws -> Bool {
        guard let text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return value }
        switch text.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default: throw SettingsError("\(name): '\(text)' is not true or false")
        }
    }

    /// The loopback address every HTTP server binds unless told otherwise.
    public static let defaultBindAddress = "127.0.0.1"

    /// An address to listen on: an IPv4 or IPv6 literal (`0.0.0.0` and `::`
    /// mean every interface); unset is ``defaultBindAddress``.
    public static func bindAddress(_ text: String?, name: String) throws -> String {
        guard let text else { return defaultBindAddress }
        var v4 = in_addr(), v6 = in6_addr()
        guard inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1 else {
            throw SettingsError("\(name): '\(text.prefix(100))' is not an IPv4 or IPv6 address (e.g. 127.0.0.1, 0.0.0.0, ::1)")
        }
        return text
    }

    public static func integer(_ text: String?, name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        try SettingValue.integer(text, name: name, default: value, range: range)
    }

    /// The AMQP configuration these settings describe.
    public func amqpConfiguration(connectionName: String) -> AMQPConfiguration {
        var configuration = AMQPConfiguration(
            url: amqpURL, connectionName: connectionName, heartbeatSeconds: heartbeatSeconds,
            initialConnectTimeoutSeconds: initialConnectTimeoutSeconds, tlsCACertificatePath: tlsCAFile,
            failoverURLs: Array(amqpURLs.dropFirst()))
        configuration.tlsClientCertificatePath = amqpTLS.tlsClientCertificatePath
        configuration.tlsClientKeyPath = amqpTLS.tlsClientKeyPath
        configuration.tlsSkipHostnameCheckReason = amqpTLS.tlsSkipHostnameCheckReason
        configuration.authMechanism = amqpTLS.authMechanism
        return configuration
    }

    /// Creates `DATA_DIR` if needed and returns its absolute path.
    public func ensureDataDirectory() throws -> String {
        let url = URL(fileURLWithPath: dataDirectory).standardizedFileURL
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw SettingsError("DATA_DIR: cannot create \(url.path): \(error.localizedDescription)")
        }
        return url.path
    }
}
