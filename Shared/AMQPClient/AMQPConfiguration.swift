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
