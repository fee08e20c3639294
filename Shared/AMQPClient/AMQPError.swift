/// The one error type of the AMQP layer.
///
/// `description` never contains credentials: URLs are printed redacted and
/// broker reply texts (which RabbitMQ keeps free of secrets) are passed on.
public struct AMQPError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, coarse enough to switch on.
    public enum Code: String, Sendable, Equatable {
        /// `AMQP_URL` could not be parsed.
        case invalidURL
        /// TCP/TLS connection could not be established (refused, DNS, timeout).
        case connectionFailed
        /// TLS could not be set up: a CA, client certificate or key file
        /// cannot be used, the broker's certificate does not verify or does
        /// not name the host, or the broker refused the client certificate.
        /// The message names the file or host and the reason. Not waited
        /// out at start-up: it does not fix itself.
        case tlsFailed
        /// The broker refused the credentials (AMQP 403 ACCESS_REFUSED).
        case accessRefused
        /// The vhost does not exist or the user may not use it (AMQP 530).
        case vhostNotAllowed
        /// The connection dropped (broker restart, TCP reset, missed heartbeats)
        /// before the operation completed. Safe to retry.
        case connectionLost
        /// The broker closed the channel because of this operation
        /// (e.g. 404 NOT_FOUND exchange, 406 PRECONDITION_FAILED declaration).
        case channelClosed
        /// The broker answered a publish with `basic.nack`.
        case nacked
        /// A `mandatory` publish matched no queue and came back as `basic.return`.
        case unroutable
        /// An RPC call got no reply in time.
        case timeout
        /// An ack/nack/reject for a delivery whose channel no longer exists
        /// (the connection was recovered since). The broker redelivers it.
        case staleDelivery
        /// The connection was closed by the application.
        case closed
        /// The call's arguments cannot be sent (e.g. a name or property
        /// longer than AMQP's 255-byte short string). Nothing was sent.
        case invalidArgument
        /// A protocol or library failure that fits no other code.
        case protocolError
    }

    /// The category of the failure.
    public var code: Code
    /// Human-readable detail, free of secrets.
    public var message: String
    /// AMQP reply code from the broker, when it sent one (e.g. 404, 406, 403, 312).
    public var replyCode: UInt16?
    /// rabbitmq-c's own status code (an `amqp_status_enum` value, negative,
    /// e.g. -9 `AMQP_STATUS_SOCKET_ERROR`, -16 `AMQP_STATUS_HEARTBEAT_TIMEOUT`)
    /// when the library reported the failure; `nil` when the broker or this
    /// layer did. `code` is coarse on purpose; this keeps the exact library
    /// condition for logs and bug reports, as librdkafka's code is kept on
    /// a Kafka error.
    public var libraryStatus: Int32?

    /// Whether trying the same operation again later can succeed.
    public var isRetryable: Bool {
        switch code {
        case .connectionFailed, .connectionLost, .nacked, .timeout, .staleDelivery: return true
        case .channelClosed: return replyCode == 320 || replyCode == 541  // forced close / internal error
        case .invalidURL, .tlsFailed, .accessRefused, .vhostNotAllowed, .unroutable, .closed, .invalidArgument, .protocolError: return false
        }
    }

    /// Creates an error.
    public init(_ code: Code, _ message: String, replyCode: UInt16? = nil, libraryStatus: Int32? = nil) {
        self.code = code
        self.message = message
        self.replyCode = replyCode
        self.libraryStatus = libraryStatus
    }

    public var description: String {
        if let replyCode { return "AMQP \(code.rawValue) (\(replyCode)): \(message)" }
        return "AMQP \(code.rawValue): \(message)"
    }
}
