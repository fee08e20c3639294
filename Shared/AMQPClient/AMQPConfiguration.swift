/// How an ``AMQPConnection`` connects and recovers.
public struct AMQPConfiguration: Sendable {
    /// The broker (the first node tried).
    public var url: AMQPURL
    /// Further nodes of the same cluster, tried in turn after `url` when a
    /// connect fails or an established connection drops.
    public var failoverURLs: [AMQPURL]
    /// Shown in the management UI's connection list.
    public var connectionName: String
    /// Heartbeat interval asked of the broker, in seconds (0 disables).
    /// The I/O thread never waits longer than a quarter of it.
    public var heartbeatSeconds: Int
    /// How long the TCP/TLS connect and AMQP handshake may take.
    public var connectTimeoutSeconds: Int
    /// How long a synchronous AMQP method (declare, consume, ...) may take.
    public var rpcTimeoutSeconds: Int
    /// Back-off between reconnect attempts.
    public var reconnect: Backoff
    /// How long ``AMQPConnection/connect(configuration:logger:)`` keeps trying
    /// when the broker is unreachable at start (0: fail on the first refusal).
    /// Bad credentials and bad URLs fail at once regardless.
    public var initialConnectTimeoutSeconds: Double
    /// CA bundle for `amqps://`; `nil` uses the system bundle.
    public var tlsCACertificatePath: String?
    /// Whether `amqps://` verifies the broker's certificate and host name.
    public var tlsVerifyPeer: Bool
    /// Client certificate (PEM) presented when the broker asks for one;
    /// needs ``tlsClientKeyPath``.
    public var tlsClientCertificatePath: String?
    /// Unencrypted PEM key of ``tlsClientCertificatePath``.
    public var tlsClientKeyPath: String?
    /// Why the broker certificate's host name is not checked (its chain
    /// still is); `nil` checks it. A reason rather than a switch, so that
    /// the exception is logged with its cause at every connect.
    public var tlsSkipHostnameCheckReason: String?
    /// How the connection logs in.
    public var authMechanism: AMQPAuthMechanism
    /// Whether a connection that was established and then lost is made
    /// again (the default, for services). `false` closes it for good at
    /// the loss: what was in flight fails with `connectionLost`, everything
    /// after with `closed`, consumers end with the error. For a short run
    /// whose state would not survive a reconnect (an operator's lock on an
    /// exclusive queue, messages held unacked): parked work that went out
    /// on a new connection later would act on messages the run no longer
    /// holds. The initial connect still waits `initialConnectTimeoutSeconds`.
    public var reconnectsAfterLoss: Bool

    /// Sensible production defaults for `url`.
    public init(
        url: AMQPURL = .default, connectionName: String = "room-booking", heartbeatSeconds: Int = 10,
        connectTimeoutSeconds: Int = 10, rpcTimeoutSeconds: Int = 30, reconnect: Backoff = Backoff(),
        initialConnectTimeoutSeconds: Double = 0, tlsCACertificatePath: String? = nil, tlsVerifyPeer: Bool = true,
        failoverURLs: [AMQPURL] = []
    ) {
        self.url = url
        self.failoverURLs = failoverURLs
        self.connectionName = connectionName
        self.heartbeatSeconds = heartbeatSeconds
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.rpcTimeoutSeconds = rpcTimeoutSeconds
        self.reconnect = reconnect
        self.initialConnectTimeoutSeconds = initialConnectTimeoutSeconds
        self.tlsCACertificatePath = tlsCACertificatePath
        self.tlsVerifyPeer = tlsVerifyPeer
        self.tlsClientCertificatePath = nil
        self.tlsClientKeyPath = nil
        self.tlsSkipHostnameCheckReason = nil
        self.authMechanism = .plain
        self.reconnectsAfterLoss = true
    }
}

/// The SASL mechanism of the AMQP login.
public enum AMQPAuthMechanism: String, Sendable, Equatable {
    /// User name and password of the URL.
    case plain = "PLAIN"
    /// The client certificate names the user (RabbitMQ's
    /// `rabbitmq_auth_mechanism_ssl`, by default its common name); the URL's
    /// password is not sent. Needs `amqps://` and a client certificate.
    case external = "EXTERNAL"
}

extension AMQPConfiguration {
    /// The transport-security settings every program of the set reads from
    /// its environment, applied to this configuration:
    ///
    /// - `AMQP_CA_FILE`: CA bundle (PEM) the broker's certificate must chain to;
    /// - `AMQP_CERT_FILE`, `AMQP_KEY_FILE`: client certificate and its key
    ///   (both or neither);
    /// - `AMQP_AUTH_MECHANISM`: `PLAIN` (default) or `EXTERNAL`;
    /// - `AMQP_TLS_SKIP_HOSTNAME_CHECK`: the reason the broker certificate's
    ///   host name is not checked (a sentence, not `true`).
    ///
    /// Whether the files can be used is checked at each connect, where a
    /// bad file fails with its name and the reason.
    public mutating func applyTLSEnvironment(_ environment: [String: String]) throws(AMQPError) {
        try readTLSEnvironment(environment)
        try validateTLS(names: .environment)
    }

    /// ``applyTLSEnvironment(_:)`` without the check of the combination,
    /// for a program whose options may still complete it (then call
    /// ``validateTLS(names:)``).
    public mutating func readTLSEnvironment(_ environment: [String: String]) throws(AMQPError) {
        func value(_ name: String) -> String? {
            guard let v = environment[name]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        if let ca = value("AMQP_CA_FILE") { tlsCACertificatePath = ca }
        if let cert = value("AMQP_CERT_FILE") { tlsClientCertificatePath = cert }
        if let key = value("AMQP_KEY_FILE") { tlsClientKeyPath = key }
        if let mechanism = value("AMQP_AUTH_MECHANISM") {
            guard let parsed = AMQPAuthMechanism(rawValue: mechanism.uppercased()) else {
                throw AMQPError(.invalidArgument, "AMQP_AUTH_MECHANISM: '\(mechanism)' is not PLAIN or EXTERNAL")
            }
            authMechanism = parsed
        }
        if let reason = value("AMQP_TLS_SKIP_HOSTNAME_CHECK") { tlsSkipHostnameCheckReason = reason }
    }

    /// How ``validateTLS(names:)`` names the settings in its messages.
    public enum TLSSettingNames: Sendable {
        /// `AMQP_CERT_FILE`, ...
        case environment
        /// The given names, e.g. bookingctl's `--cert-file`.
        case custom(certificate: String, key: String, mechanism: String, skipHostname: String)

        var names: (certificate: String, key: String, mechanism: String, skipHostname: String) {
            switch self {
            case .environment: ("AMQP_CERT_FILE", "AMQP_KEY_FILE", "AMQP_AUTH_MECHANISM", "AMQP_TLS_SKIP_HOSTNAME_CHECK")
            case .custom(let c, let k, let m, let s): (c, k, m, s)
            }
        }
    }

    /// Refuses combinations that cannot work: a certificate without its key
    /// (or the reverse), EXTERNAL without a certificate, and a yes/no where
    /// the reason for skipping the host-name check belongs.
    public func validateTLS(names: TLSSettingNames = .environment) throws(AMQPError) {
        let n = names.names
        switch (tlsClientCertificatePath, tlsClientKeyPath) {
        case (.some, nil): throw AMQPError(.invalidArgument, "\(n.certificate) is set but \(n.key) is not: give the client certificate's key too")
        case (nil, .some): throw AMQPError(.invalidArgument, "\(n.key) is set but \(n.certificate) is not: give the client certificate too")
        default: break
        }
        if authMechanism == .external && tlsClientCertificatePath == nil {
            throw AMQPError(.invalidArgument, "\(n.mechanism) EXTERNAL logs in with a client certificate: set \(n.certificate) and \(n.key)")
        }
        if let reason = tlsSkipHostnameCheckReason,
           ["true", "false", "1", "0", "yes", "no", "on", "off"].contains(reason.lowercased()) {
            throw AMQPError(.invalidArgument, "\(n.skipHostname): give the reason the host name is not checked (e.g. 'broker reached through an SSH tunnel on localhost'), not '\(reason)'")
        }
    }
}

extension AMQPConfiguration {
    /// Every node to try, in order: `url`, then `failoverURLs`.
    public var endpoints: [AMQPURL] { [url] + failoverURLs }

    /// A configuration for the nodes of `urls` (the first is `url`); see
    /// ``AMQPURL/list(_:)``.
    public init(urls: [AMQPURL], connectionName: String = "room-booking") {
        self.init(url: urls.first ?? .default, connectionName: connectionName, failoverURLs: Array(urls.dropFirst()))
    }
}

/// Exponential back-off with full jitter, capped.
public struct Backoff: Sendable, Equatable {
    /// First delay, seconds.
    public var initial: Double
    /// Upper bound, seconds.
    public var maximum: Double
    /// Growth per attempt.
    public var multiplier: Double
    /// Fraction of the delay that is randomised (0 = none, 1 = full jitter).
    public var jitter: Double

    /// 100 ms doubling to 10 s, with 20 % jitter.
    public init(initial: Double = 0.1, maximum: Double = 10, multiplier: Double = 2, jitter: Double = 0.2) {
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// Delay before attempt `attempt` (0-based), with `random` in 0..<1.
    public func delay(attempt: Int, random: Double = Double.random(in: 0..<1)) -> Double {
        let exponential = initial * pow(multiplier, Double(min(attempt, 60)))
        let capped = min(maximum, exponential)
        return capped * (1 - jitter) + capped * jitter * random
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
