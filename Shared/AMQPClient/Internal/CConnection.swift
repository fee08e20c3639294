import CAMQPWriteBuffer
import CRabbitMQ
import Foundation

/// AMQP method ids. rabbitmq-c defines them as cast macros, which Swift does
/// not import.
enum MethodID {
    static let connectionClose: amqp_method_number_t = 0x000A_0032
    static let connectionCloseOK: amqp_method_number_t = 0x000A_0033
    static let connectionBlocked: amqp_method_number_t = 0x000A_003C
    static let connectionUnblocked: amqp_method_number_t = 0x000A_003D
    static let channelClose: amqp_method_number_t = 0x0014_0028
    static let channelCloseOK: amqp_method_number_t = 0x0014_0029
    static let basicCancel: amqp_method_number_t = 0x003C_001E
    static let basicCancelOK: amqp_method_number_t = 0x003C_001F
    static let basicReturn: amqp_method_number_t = 0x003C_0032
    static let basicDeliver: amqp_method_number_t = 0x003C_003C
    static let basicAck: amqp_method_number_t = 0x003C_0050
    static let basicNack: amqp_method_number_t = 0x003C_0078
}

/// What the broker sent, as Swift values: ``CConnection`` decodes each
/// frame before handing it on, so no rabbitmq-c frame or method struct
/// (`amqp_frame_t`, `amqp_basic_*_t`) leaves it. Their memory belongs to
/// rabbitmq-c's pools and is reused by the next read, so a copy is the only
/// safe thing to pass around.
enum InboundEvent {
    /// `basic.ack` of publishes on a confirm-mode channel.
    case ack(deliveryTag: UInt64, multiple: Bool)
    /// `basic.nack`: the broker refused those publishes.
    case nack(deliveryTag: UInt64, multiple: Bool)
    /// `basic.return` of a mandatory publish that matched no queue, with its content.
    case returned(replyCode: UInt16, replyText: String, exchange: String, routingKey: String, content: InboundContent)
    /// `basic.deliver`, with its content.
    case delivery(channel: UInt16, consumerTag: String, deliveryTag: UInt64, redelivered: Bool,
                  exchange: String, routingKey: String, content: InboundContent)
    /// `basic.cancel` from the broker (its queue was deleted).
    case consumerCancelled(consumerTag: String)
    /// `channel.close` from the broker; `channel.close-ok` was already sent.
    case channelClosed(channel: UInt16, replyCode: UInt16, replyText: String)
    /// `connection.close` from the broker; `connection.close-ok` was already sent.
    case connectionClosed(replyCode: UInt16, replyText: String)
    /// `connection.blocked` (a resource alarm) and its end.
    case blocked
    case unblocked
    /// A frame the loop has no use for: a method it does not handle, or a
    /// non-method frame (`method` is then nil).
    case ignored(channel: UInt16, method: UInt32?)
}

/// The header and body frames that follow a `basic.deliver` or `basic.return`.
struct InboundContent {
    var properties: AMQPProperties
    var body: [UInt8]
    /// Header values nested deeper than ``CDecode/maxDepth``, decoded as `.void`.
    var truncatedHeaders: Int
}

/// What one wait for the broker produced.
enum FrameWait {
    case event(InboundEvent)
    case timeout
    case failed(AMQPError)
}

/// Owns one rabbitmq-c connection (`amqp_connection_state_t`, its socket and
/// memory pools) and is the only Swift code that calls `amqp_*` functions.
///
/// Ownership: the handle is created by `open`, freed in `deinit` by
/// `amqp_destroy_connection` (which also closes the socket).
///
/// Threading: rabbitmq-c connections are not thread-safe. An instance is
/// created, used and released by exactly one thread, the I/O thread of an
/// ``AMQPConnection`` (see `IOLoop`), and is never handed to another. That
/// is why it is not `Sendable`.
final class CConnection {
    private let state: amqp_connection_state_t
    /// Scratch memory for C arguments; reset after each batch of calls.
    let arena = CArena()
    /// The write buffer under the socket (``holdWrites()``); owned by
    /// `state`, freed with it. Nil if it could not be allocated or the
    /// library is not a version whose socket layout it knows (0.8 to 0.15):
    /// then every frame is written as it comes, as rabbitmq-c does by itself.
    private var writeBuffer: OpaquePointer?

    private init(state: amqp_connection_state_t) {
        self.state = state
    }

    deinit {
        amqp_destroy_connection(state)
    }

    /// Opens a socket to `url` (one of the configuration's endpoints),
    /// performs the AMQP handshake and login. Blocks for at most the
    /// configured connect timeout (twice: TCP/TLS, then handshake).
    static func open(_ config: AMQPConfiguration, url: AMQPURL) throws(AMQPError) -> CConnection {
        guard let state = amqp_new_connection() else { throw AMQPError(.protocolError, "out of memory") }
        let conn = CConnection(state: state)
        let socket: OpaquePointer?
        if url.tls {
            socket = amqp_ssl_socket_new(state)
            if let socket { try TLSSetup.configure(socket, config) }
        } else {
            try TLSSetup.checkPlain(config, url: url)
            socket = amqp_tcp_socket_new(state)
        }
        guard let socket else { throw AMQPError(.protocolError, "cannot create socket") }
        // After the TLS settings: the library's setters refuse a socket whose
        // table is not their own.
        conn.writeBuffer = crabbitmq_write_buffer_install(socket)

        var timeout = timeval(tv_sec: config.connectTimeoutSeconds, tv_usec: 0)
        errno = 0
        let status = amqp_socket_open_noblock(socket, url.host, Int32(url.port), &timeout)
        if status != AMQP_STATUS_OK.rawValue {
            if url.tls, let error = TLSSetup.openFailure(status: status, url: url, config: config) { throw error }
            let code = errno
            let cause = code != 0 && code != EINPROGRESS ? " (\(String(cString: strerror(code))))" : ""
            throw AMQPError(.connectionFailed, "cannot connect to \(url.host):\(url.port): \(errorString(status))\(cause)",
                            libraryStatus: status)
        }
        _ = amqp_set_handshake_timeout(state, &timeout)
        var rpcTimeout = timeval(tv_sec: config.rpcTimeoutSeconds, tv_usec: 0)
        _ = amqp_set_rpc_timeout(state, &rpcTimeout)

        var properties = conn.arena.table([
            "connection_name": .string(config.connectionName),
            "product": "room-booking AMQPClient (rabbitmq-c)",
            "capabilities": .table([
                "authentication_failure_close": true,
                "connection.blocked": true,
                "consumer_cancel_notify": true,
                "publisher_confirms": true,
            ]),
        ])
        let reply = switch config.authMechanism {
        case .plain:
            crabbitmq_login_plain_with_properties(
                state, url.vhost, 0, Int32(AMQPLimits.frameMax), Int32(config.heartbeatSeconds), &properties, url.user, url.password)
        case .external:
            crabbitmq_login_external_with_properties(
                state, url.vhost, 0, Int32(AMQPLimits.frameMax), Int32(config.heartbeatSeconds), &properties, url.user)
        }
        conn.arena.reset()
        if reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION, url.tls, let error = TLSSetup.loginFailure(url: url, config: config) {
            throw error
        }
        let who = switch config.authMechanism {
        case .plain: "user '\(url.user)'"
        case .external: "the client certificate \(config.tlsClientCertificatePath ?? "")"
            + (config.tlsClientCertificatePath.flatMap(TLSSetup.commonName).map { " (common name '\($0)')" } ?? "")
            + " with EXTERNAL"
        }
        switch reply.reply_type {
        case AMQP_RESPONSE_NORMAL:
            return conn
        case AMQP_RESPONSE_SERVER_EXCEPTION where reply.reply.id == MethodID.connectionClose:
            let close = reply.reply.decoded.assumingMemoryBound(to: amqp_connection_close_t.self).pointee
            let text = close.reply_text.string
            switch close.reply_code {
            case 403: throw AMQPError(.accessRefused, "broker refused login for \(who): \(text)", replyCode: 403)
            case 530: throw AMQPError(.vhostNotAllowed, "vhost '\(url.vhost)' not allowed for \(who): \(text)", replyCode: 530)
            default: throw AMQPError(.connectionFailed, "broker closed the connection during login: \(text)", replyCode: close.reply_code)
            }
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
            let code = reply.library_error
            if code == AMQP_STATUS_CONNECTION_CLOSED.rawValue || code == AMQP_STATUS_SOCKET_ERROR.rawValue {
                // Brokers without authentication_failure_close just drop the socket.
                throw AMQPError(.accessRefused, "broker closed the connection during login (wrong user/password or vhost?): \(errorString(code))",
                                libraryStatus: code)
            }
            if code == AMQP_STATUS_BROKER_UNSUPPORTED_SASL_METHOD.rawValue, config.authMechanism == .external {
                throw AMQPError(.accessRefused, "the broker at \(url.host):\(url.port) does not offer EXTERNAL on this connection: it needs the rabbitmq_auth_mechanism_ssl plugin, EXTERNAL in auth_mechanisms, and a client certificate it verified",
                                libraryStatus: code)
            }
            throw AMQPError(.connectionFailed, "AMQP handshake with \(url.host):\(url.port) failed: \(errorString(code))",
                            libraryStatus: code)
        default:
            throw AMQPError(.connectionFailed, "AMQP handshake with \(url.host):\(url.port) failed")
        }
    }

    static func errorString(_ status: Int32) -> String {
        String(cString: amqp_error_string2(status))
    }

    // MARK: Socket and frames

    var socketFD: Int32 { amqp_get_sockfd(state) }

    /// From now on, frames are copied into the write buffer instead of
    /// written one system call each, until ``flushWrites()``.
    ///
    /// rabbitmq-c 0.11 writes every frame with a `send` of its own: a publish
    /// is three, an ack one, so a booking's reply, events and ack were about
    /// sixteen system calls in the handler. The I/O loop holds only around
    /// writes that wait for nothing (publishes, acks) and flushes before any
    /// synchronous call and before it polls, so no request sits in the buffer
    /// while its answer is awaited (docs/performance.md, "Tenth round").
    func holdWrites() {
        if let writeBuffer { crabbitmq_write_buffer_hold(writeBuffer) }
    }

    /// Writes what the buffer holds, in one `send` while the socket takes it
    /// all, and stops holding. While the socket is full it waits as long as
    /// the broker shows a sign of life at least every two heartbeats — it
    /// takes bytes, or sends some — as rabbitmq-c's own publish does: a
    /// memory or disk alarm makes RabbitMQ stop reading a publishing
    /// connection (and stop checking its heartbeats) for as long as it
    /// lasts, and that is a wait, not a dead broker. Without heartbeats it
    /// waits without limit, as the library does too. A failure leaves the
    /// connection unusable (part of a frame may be out), so it is reported
    /// as lost.
    func flushWrites() throws(AMQPError) {
        guard let writeBuffer else { return }
        let heartbeat = Int(self.heartbeat)
        let status = crabbitmq_write_buffer_flush(writeBuffer, heartbeat > 0 ? Int32(clamping: heartbeat * 2000) : -1)
        if status != AMQP_STATUS_OK.rawValue {
            throw AMQPError(.connectionLost, "writing to the broker failed: \(Self.errorString(status))", libraryStatus: status)
        }
    }

    /// Negotiated heartbeat in seconds (0 = off).
    var heartbeat: Int32 { amqp_get_heartbeat(state) }

    /// Frames already read from the socket (queued by a synchronous RPC, or
    /// bytes in rabbitmq-c's buffer) that `poll` on the socket would not see.
    var hasBufferedInput: Bool {
        amqp_frames_enqueued(state) != 0 || amqp_data_in_buffer(state) != 0
    }

    /// Waits for the next non-heartbeat frame and decodes it (reading the
    /// content frames of a delivery or return, and answering a broker's
    /// `channel.close`/`connection.close` so the protocol stays in step).
    ///
    /// A timeout of 1 µs rather than 0 matters: with 0 rabbitmq-c takes the
    /// "immediate" path and never reports a missed heartbeat, while any real
    /// deadline lets it compare against the receive-heartbeat deadline and
    /// return `AMQP_STATUS_HEARTBEAT_TIMEOUT`. Heartbeats we owe the broker
    /// are sent from inside this call too.
    func nextEvent(microseconds: Int) -> FrameWait {
        var frame = amqp_frame_t()
        var tv = timeval(tv_sec: microseconds / 1_000_000, tv_usec: Int(max(1, microseconds % 1_000_000)))
        let status = amqp_simple_wait_frame_noblock(state, &frame, &tv)
        if status == AMQP_STATUS_OK.rawValue {
            do { return .event(try decode(&frame)) } catch { return .failed(error) }
        }
        if status == AMQP_STATUS_TIMEOUT.rawValue { return .timeout }
        if status == AMQP_STATUS_HEARTBEAT_TIMEOUT.rawValue {
            return .failed(AMQPError(.connectionLost, "missed heartbeats from the broker", libraryStatus: status))
        }
        return .failed(AMQPError(.connectionLost, "connection lost: \(Self.errorString(status))", libraryStatus: status))
    }

    /// Copies one method frame into an ``InboundEvent``. Every field is
    /// copied out before `readMessage`, which reuses the frame's memory.
    private func decode(_ frame: inout amqp_frame_t) throws(AMQPError) -> InboundEvent {
        if let event = Self.event(of: &frame) { return event }
        let channel = frame.channel
        let id = crabbitmq_frame_method_id(&frame)
        let decoded = crabbitmq_frame_method_decoded(&frame)!
        switch id {
        case MethodID.basicReturn:
            let ret = decoded.assumingMemoryBound(to: amqp_basic_return_t.self).pointee
            let code = ret.reply_code, text = ret.reply_text.string
            let exchange = ret.exchange.string, routingKey = ret.routing_key.string
            let content = try readMessage(channel: channel)
            return .returned(replyCode: code, replyText: text, exchange: exchange, routingKey: routingKey, content: content)
        case MethodID.basicDeliver:
            let d = decoded.assumingMemoryBound(to: amqp_basic_deliver_t.self).pointee
            let tag = d.consumer_tag.string, deliveryTag = d.delivery_tag, redelivered = d.redelivered != 0
            let exchange = d.exchange.string, routingKey = d.routing_key.string
            let content = try readMessage(channel: channel)
            return .delivery(channel: channel, consumerTag: tag, deliveryTag: deliveryTag, redelivered: redelivered,
                             exchange: exchange, routingKey: routingKey, content: content)
        case MethodID.channelClose:
            let close = decoded.assumingMemoryBound(to: amqp_channel_close_t.self).pointee
            let code = close.reply_code, text = close.reply_text.string
            sendChannelCloseOK(channel: channel)
            return .channelClosed(channel: channel, replyCode: code, replyText: text)
        case MethodID.connectionClose:
            let close = decoded.assumingMemoryBound(to: amqp_connection_close_t.self).pointee
            let code = close.reply_code, text = close.reply_text.string
            sendConnectionCloseOK()
            return .connectionClosed(replyCode: code, replyText: text)
        default:
            return .ignored(channel: channel, method: id)
        }
    }

    /// The event of a frame that needs nothing more of the connection: no
    /// content frames to read, no answer to send. Nil for the methods that
    /// do (`basic.return`, `basic.deliver`, `channel.close`,
    /// `connection.close`), which ``decode(_:)`` handles. Pure, so unit
    /// tests decode frames they build (`InboundEventTests`).
    static func event(of frame: inout amqp_frame_t) -> InboundEvent? {
        let channel = frame.channel
        guard frame.frame_type == UInt8(AMQP_FRAME_METHOD) else { return .ignored(channel: channel, method: nil) }
        let id = crabbitmq_frame_method_id(&frame)
        guard let decoded = crabbitmq_frame_method_decoded(&frame) else { return .ignored(channel: channel, method: id) }
        switch id {
        case MethodID.basicAck:
            let ack = decoded.assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
            return .ack(deliveryTag: ack.delivery_tag, multiple: ack.multiple != 0)
        case MethodID.basicNack:
            let nack = decoded.assumingMemoryBound(to: amqp_basic_nack_t.self).pointee
            return .nack(deliveryTag: nack.delivery_tag, multiple: nack.multiple != 0)
        case MethodID.basicCancel:
            let cancel = decoded.assumingMemoryBound(to: amqp_basic_cancel_t.self).pointee
            return .consumerCancelled(consumerTag: cancel.consumer_tag.string)
        case MethodID.connectionBlocked:
            return .blocked
        case MethodID.connectionUnblocked:
            return .unblocked
        case MethodID.basicReturn, MethodID.basicDeliver, MethodID.channelClose, MethodID.connectionClose:
            return nil
        default:
            return .ignored(channel: channel, method: id)
        }
    }

    /// Reads the header and body frames following a `basic.deliver`/`basic.return`/`basic.get-ok`.
    private func readMessage(channel: amqp_channel_t) throws(AMQPError) -> InboundContent {
        var message = amqp_message_t()
        let reply = amqp_read_message(state, channel, &message, 0)
        guard reply.reply_type == AMQP_RESPONSE_NORMAL else {
            throw AMQPError(.connectionLost, "failed reading message content: \(describe(reply))",
                            libraryStatus: Self.libraryStatus(reply))
        }
        defer { amqp_destroy_message(&message) }
        var truncated = 0
        let properties = CDecode.properties(message.properties, truncated: &truncated)
        return InboundContent(properties: properties, body: message.body.array, truncatedHeaders: truncated)
    }

    /// Gives rabbitmq-c's pools back once no frame references them.
    func releaseBuffers() {
        amqp_maybe_release_buffers(state)
        arena.reset()
    }

    // MARK: Methods without a reply

    func publish(channel: amqp_channel_t, exchange: String, routingKey: String, mandatory: Bool,
                 properties: AMQPProperties, body: [UInt8]) throws(AMQPError) {
        var props = arena.properties(properties)
        let ex = arena.bytes(exchange)
        let rk = arena.bytes(routingKey)
        let status = body.withUnsafeBytes { raw in
            amqp_basic_publish(state, channel, ex, rk, mandatory ? 1 : 0, 0, &props,
                               crabbitmq_bytes(raw.baseAddress, raw.count))
        }
        if status != AMQP_STATUS_OK.rawValue {
            throw AMQPError(.connectionLost, "publish failed: \(Self.errorString(status))", libraryStatus: status)
        }
    }

    func ack(channel: amqp_channel_t, deliveryTag: UInt64, multiple: Bool) throws(AMQPError) {
        try check(amqp_basic_ack(state, channel, deliveryTag, multiple ? 1 : 0), "basic.ack")
    }

    func nack(channel: amqp_channel_t, deliveryTag: UInt64, multiple: Bool, requeue: Bool) throws(AMQPError) {
        try check(amqp_basic_nack(state, channel, deliveryTag, multiple ? 1 : 0, requeue ? 1 : 0), "basic.nack")
    }

    func reject(channel: amqp_channel_t, deliveryTag: UInt64, requeue: Bool) throws(AMQPError) {
        try check(amqp_basic_reject(state, channel, deliveryTag, requeue ? 1 : 0), "basic.reject")
    }

    func sendChannelCloseOK(channel: amqp_channel_t) {
        var ok = amqp_channel_close_ok_t(dummy: 0)
        _ = amqp_send_method(state, channel, MethodID.channelCloseOK, &ok)
    }

    func sendConnectionCloseOK() {
        var ok = amqp_connection_close_ok_t(dummy: 0)
        _ = amqp_send_method(state, 0, MethodID.connectionCloseOK, &ok)
    }

    private func check(_ status: Int32, _ what: String) throws(AMQPError) {
        if status != AMQP_STATUS_OK.rawValue {
            throw AMQPError(.connectionLost, "\(what) failed: \(Self.errorString(status))", libraryStatus: status)
        }
    }

    // MARK: Synchronous methods (block until the broker answers)
    //
    // rabbitmq-c's amqp_simple_rpc queues any unrelated frame that arrives
    // while it waits (confirms, deliveries on other channels), so these are
    // safe to call from the I/O loop; the loop drains the queue afterwards.

    func openChannel(_ channel: amqp_channel_t) throws(AMQPError) {
        _ = amqp_channel_open(state, channel)
        try rpcResult(channel: channel, "channel.open")
    }

    func closeConnection() {
        _ = amqp_connection_close(state, 200)
    }

    func confirmSelect(_ channel: amqp_channel_t) throws(AMQPError) {
        _ = amqp_confirm_select(state, channel)
        try rpcResult(channel: channel, "confirm.select")
    }

    func qos(_ channel: amqp_channel_t, prefetch: UInt16) throws(AMQPError) {
        _ = amqp_basic_qos(state, channel, 0, prefetch, 0)
        try rpcResult(channel: channel, "basic.qos")
    }

    func declare(_ item: TopologyItem, channel: amqp_channel_t) throws(AMQPError) {
        defer { arena.reset() }
        switch item {
        case .exchange(let e):
            _ = amqp_exchange_declare(state, channel, arena.bytes(e.name), arena.bytes(e.kind.rawValue), 0,
                                      e.durable ? 1 : 0, e.autoDelete ? 1 : 0, e.isInternal ? 1 : 0, arena.table(e.arguments))
            try rpcResult(channel: channel, "exchange.declare \(e.name)")
        case .queue(let q):
            _ = amqp_queue_declare(state, channel, arena.bytes(q.name), 0, q.durable ? 1 : 0, q.exclusive ? 1 : 0,
                                   q.autoDelete ? 1 : 0, arena.table(q.arguments))
            try rpcResult(channel: channel, "queue.declare \(q.name)")
        case .binding(let b):
            _ = amqp_queue_bind(state, channel, arena.bytes(b.queue), arena.bytes(b.exchange),
                                arena.bytes(b.routingKey), arena.table(b.arguments))
            try rpcResult(channel: channel, "queue.bind \(b.queue) -> \(b.exchange) [\(b.routingKey)]")
        }
    }

    /// `exchange.declare` passive: succeeds when the exchange exists (its
    /// kind and flags are not compared), else a channel error 404. RabbitMQ
    /// checks no permission for it, so a user without `configure` on a
    /// shared exchange can still make sure it is there.
    func exchangeExists(_ name: String, channel: amqp_channel_t) throws(AMQPError) {
        defer { arena.reset() }
        _ = amqp_exchange_declare(state, channel, arena.bytes(name), crabbitmq_bytes(nil, 0), 1, 0, 0, 0,
                                  crabbitmq_empty_table())
        try rpcResult(channel: channel, "exchange.declare passive \(name)")
    }

    /// `queue.declare` passive: (ready messages, consumers), or a channel error 404.
    func inspectQueue(_ name: String, channel: amqp_channel_t) throws(AMQPError) -> (messages: UInt32, consumers: UInt32) {
        defer { arena.reset() }
        let ok = amqp_queue_declare(state, channel, arena.bytes(name), 1, 0, 0, 0, crabbitmq_empty_table())
        try rpcResult(channel: channel, "queue.declare passive \(name)")
        guard let ok else { throw AMQPError(.protocolError, "queue.declare-ok missing") }
        return (ok.pointee.message_count, ok.pointee.consumer_count)
    }

    func deleteQueue(_ name: String, channel: amqp_channel_t) throws(AMQPError) -> UInt32 {
        defer { arena.reset() }
        let ok = amqp_queue_delete(state, channel, arena.bytes(name), 0, 0)
        try rpcResult(channel: channel, "queue.delete \(name)")
        return ok?.pointee.message_count ?? 0
    }

    func deleteExchange(_ name: String, channel: amqp_channel_t) throws(AMQPError) {
        defer { arena.reset() }
        amqp_exchange_delete(state, channel, arena.bytes(name), 0)
        try rpcResult(channel: channel, "exchange.delete \(name)")
    }

    func purgeQueue(_ name: String, channel: amqp_channel_t) throws(AMQPError) -> UInt32 {
        defer { arena.reset() }
        let ok = amqp_queue_purge(state, channel, arena.bytes(name))
        try rpcResult(channel: channel, "queue.purge \(name)")
        return ok?.pointee.message_count ?? 0
    }

    /// Starts a consumer and returns the broker-assigned consumer tag.
    func consume(_ channel: amqp_channel_t, queue: String, noAck: Bool, exclusive: Bool,
                 arguments: AMQPTable) throws(AMQPError) -> String {
        defer { arena.reset() }
        let ok = amqp_basic_consume(state, channel, arena.bytes(queue), crabbitmq_bytes(nil, 0), 0,
                                    noAck ? 1 : 0, exclusive ? 1 : 0, arena.table(arguments))
        try rpcResult(channel: channel, "basic.consume \(queue)")
        guard let ok else { throw AMQPError(.protocolError, "basic.consume-ok missing") }
        return ok.pointee.consumer_tag.string
    }

    func cancel(_ channel: amqp_channel_t, consumerTag: String) throws(AMQPError) {
        defer { arena.reset() }
        _ = amqp_basic_cancel(state, channel, arena.bytes(consumerTag))
        try rpcResult(channel: channel, "basic.cancel")
    }

    /// `basic.get` with manual ack: one message or nil when the queue is empty.
    func get(_ channel: amqp_channel_t, queue: String) throws(AMQPError) -> (tag: UInt64, redelivered: Bool, exchange: String, routingKey: String, remaining: UInt32, message: AMQPMessage)? {
        defer { arena.reset() }
        let reply = amqp_basic_get(state, channel, arena.bytes(queue), 0)
        try rpcReply(reply, channel: channel, "basic.get \(queue)")
        if reply.reply.id != 0x003C_0047 { return nil }  // basic.get-empty
        let ok = reply.reply.decoded.assumingMemoryBound(to: amqp_basic_get_ok_t.self).pointee
        let tag = ok.delivery_tag, redelivered = ok.redelivered != 0
        let exchange = ok.exchange.string, routingKey = ok.routing_key.string, remaining = ok.message_count
        let content = try readMessage(channel: channel)
        return (tag, redelivered, exchange, routingKey, remaining,
                AMQPMessage(body: content.body, properties: content.properties, exchange: exchange, routingKey: routingKey))
    }

    private func rpcResult(channel: amqp_channel_t, _ what: String) throws(AMQPError) {
        try rpcReply(amqp_get_rpc_reply(state), channel: channel, what)
    }

    /// Turns an RPC reply into an error, answering broker-initiated closes
    /// so the protocol stays in step.
    private func rpcReply(_ reply: amqp_rpc_reply_t, channel: amqp_channel_t, _ what: String) throws(AMQPError) {
        switch reply.reply_type {
        case AMQP_RESPONSE_NORMAL:
            return
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            if reply.reply.id == MethodID.channelClose {
                let close = reply.reply.decoded.assumingMemoryBound(to: amqp_channel_close_t.self).pointee
                sendChannelCloseOK(channel: channel)
                throw AMQPError(.channelClosed, "\(what): \(close.reply_text.string)", replyCode: close.reply_code)
            }
            if reply.reply.id == MethodID.connectionClose {
                let close = reply.reply.decoded.assumingMemoryBound(to: amqp_connection_close_t.self).pointee
                sendConnectionCloseOK()
                throw AMQPError(.connectionLost, "\(what): broker closed the connection: \(close.reply_text.string)", replyCode: close.reply_code)
            }
            throw AMQPError(.protocolError, "\(what): unexpected server method \(reply.reply.id)")
        default:
            throw AMQPError(.connectionLost, "\(what): \(describe(reply))", libraryStatus: Self.libraryStatus(reply))
        }
    }

    /// The library's status code, if the reply is a library exception.
    private static func libraryStatus(_ reply: amqp_rpc_reply_t) -> Int32? {
        reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? reply.library_error : nil
    }

    private func describe(_ reply: amqp_rpc_reply_t) -> String {
        switch reply.reply_type {
        case AMQP_RESPONSE_NONE: return "missing RPC reply"
        case AMQP_RESPONSE_LIBRARY_EXCEPTION: return Self.errorString(reply.library_error)
        default: return "server exception"
        }
    }
}
