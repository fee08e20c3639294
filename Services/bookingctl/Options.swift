import AMQPClient
import ArgumentParser
import Foundation
import Logging

/// Options every bookingctl command accepts.
struct GlobalOptions: ParsableArguments {
    @Option(name: .customLong("amqp-url"),
            help: "Broker URL (default: $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/%2f).")
    var amqpURL: String?

    @Option(name: .customLong("ca-file"),
            help: "CA bundle (PEM) the broker's certificate must chain to, for amqps:// (default: $AMQP_CA_FILE, else the system bundle).")
    var caFile: String?

    @Option(name: .customLong("cert-file"),
            help: "Client certificate (PEM) for amqps:// (default: $AMQP_CERT_FILE); needs --key-file.")
    var certFile: String?

    @Option(name: .customLong("key-file"),
            help: "Unencrypted PEM key of the client certificate (default: $AMQP_KEY_FILE).")
    var keyFile: String?

    @Option(name: .customLong("auth-mechanism"),
            help: "PLAIN (user and password of the URL) or EXTERNAL (the client certificate names the user) (default: $AMQP_AUTH_MECHANISM, else PLAIN).")
    var authMechanism: String?

    @Option(name: .customLong("tls-skip-hostname-check"),
            help: ArgumentHelp("Do not check that the broker's certificate names the host; its chain is still checked. The value is the reason, e.g. 'SSH tunnel on localhost' (default: $AMQP_TLS_SKIP_HOSTNAME_CHECK).",
                               valueName: "reason"))
    var skipHostnameCheckReason: String?

    @Flag(help: "Print machine-readable JSON instead of human text.")
    var json = false

    @Option(help: "Seconds to wait for the broker and for replies.")
    var timeout: Double = 10

    @Flag(help: "Log the AMQP layer's debug output to stderr.")
    var verbose = false

    /// A day at most: seconds become milliseconds in Int64 and in the
    /// AMQP expiration; NaN, infinity or 1e20 would trap there.
    static let longestWait: Double = 86_400

    func validate() throws {
        try Self.checkSeconds(timeout, "--timeout")
    }

    /// Rejects a seconds option that is not a finite number in (0, longestWait].
    static func checkSeconds(_ value: Double, _ option: String) throws {
        guard value.isFinite, value > 0, value <= longestWait else {
            throw ValidationError("\(option) must be a number of seconds above 0 and at most \(Int(longestWait)), not \(value)")
        }
    }

    /// The broker URL from --amqp-url, `AMQP_URL` or the contract default
    /// (the first node when several are given).
    func brokerURL() throws -> AMQPURL {
        try brokerURLs()[0]
    }

    /// Every node of --amqp-url or `AMQP_URL` (``AMQPURL/list(_:)``).
    func brokerURLs() throws -> [AMQPURL] {
        let text = amqpURL ?? ProcessInfo.processInfo.environment["AMQP_URL"].flatMap { $0.isEmpty ? nil : $0 }
        guard let text else { return [.default] }
        do {
            return try AMQPURL.list(text)
        } catch {
            throw ValidationError("--amqp-url: \(error.message)")
        }
    }

    /// A logger on stderr: silent unless --verbose (failures are reported once, by the command).
    func logger() -> Logger {
        var logger = Logger(label: "bookingctl") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .critical
        return logger
    }

    /// Connects to the broker, giving up after --timeout seconds.
    func connect() async throws -> AMQPConnection {
        let urls = try brokerURLs()
        var configuration = AMQPConfiguration(
            url: urls[0], connectionName: "bookingctl", initialConnectTimeoutSeconds: timeout,
            failoverURLs: Array(urls.dropFirst()))
        // A run ends at a lost connection rather than carry on over a new
        // one: the operators' lock and the held messages of a failed-message
        // walk went with the old one, so a parked publish going out after a
        // reconnect would send a message the run no longer holds (a
        // duplicate), and a broker that stays away would keep the run
        // waiting past --timeout.
        configuration.reconnectsAfterLoss = false
        try applyTLS(to: &configuration, environment: ProcessInfo.processInfo.environment)
        return try await AMQPConnection.connect(configuration: configuration, logger: logger())
    }

    /// The transport security of `configuration`: each option, else its
    /// environment variable (as the services read them).
    func applyTLS(to configuration: inout AMQPConfiguration, environment: [String: String]) throws {
        do throws(AMQPError) {
            try configuration.readTLSEnvironment(environment)
            if let caFile { configuration.tlsCACertificatePath = caFile }
            if let certFile { configuration.tlsClientCertificatePath = certFile }
            if let keyFile { configuration.tlsClientKeyPath = keyFile }
            if let authMechanism {
                guard let parsed = AMQPAuthMechanism(rawValue: authMechanism.uppercased()) else {
                    throw AMQPError(.invalidArgument, "--auth-mechanism: '\(authMechanism)' is not PLAIN or EXTERNAL")
                }
                configuration.authMechanism = parsed
            }
            if let skipHostnameCheckReason { configuration.tlsSkipHostnameCheckReason = skipHostnameCheckReason }
            try configuration.validateTLS(names: .custom(certificate: "--cert-file/AMQP_CERT_FILE", key: "--key-file/AMQP_KEY_FILE",
                                                         mechanism: "--auth-mechanism/AMQP_AUTH_MECHANISM",
                                                         skipHostname: "--tls-skip-hostname-check/AMQP_TLS_SKIP_HOSTNAME_CHECK"))
        } catch {
            throw ValidationError(error.message)
        }
    }
}
