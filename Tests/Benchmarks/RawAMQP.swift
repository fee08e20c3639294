import AMQPClient
import CRabbitMQ
import Foundation
import Synchronization

/// The baseline: thin loops straight over rabbitmq-c, no Swift layer, one
/// thread each. What the Swift layer is compared against in the same run.
enum Raw {
    static let ackMethod: amqp_method_number_t = 0x003C_0050
    static let deliverMethod: amqp_method_number_t = 0x003C_003C

    /// Connects, logs in and opens channel 1.
    static func connect(_ url: AMQPURL) -> amqp_connection_state_t {
        let conn = amqp_new_connection()!
        let socket = amqp_tcp_socket_new(conn)
        precondition(amqp_socket_open(socket, url.host, Int32(url.port)) == 0, "raw connect failed")
        let reply = crabbitmq_login_plain(conn, url.vhost, 0, 131_072, 0, url.user, url.password)
        precondition(reply.reply_type == AMQP_RESPONSE_NORMAL, "raw login failed")
        amqp_channel_open(conn, 1)
        precondition(amqp_get_rpc_reply(conn).reply_type == AMQP_RESPONSE_NORMAL)
        return conn
    }

    static func close(_ conn: amqp_connection_state_t) {
        amqp_channel_close(conn, 1, 200)
        amqp_connection_close(conn, 200)
        amqp_destroy_connection(conn)
    }

    static func bytes(_ s: String) -> amqp_bytes_t { amqp_cstring_bytes(strdup(s)) }

    static func persistentProperties() -> amqp_basic_properties_t {
        var p = amqp_basic_properties_t()
        p._flags = UInt32(AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG)
        p.delivery_mode = 2
        p.content_type = bytes("application/json")
        return p
    }

    /// Publishes `count` persistent messages with confirms, at most `window`
    /// unconfirmed; returns messages per second.
    static func publishConfirmed(url: AMQPURL, queue: String, count: Int, window: Int, body: [UInt8]) -> Double {
        let conn = connect(url)
        defer { close(conn) }
        amqp_confirm_select(conn, 1)
        var props = persistentProperties()
        let rk = bytes(queue)
        var sent = 0, confirmed = 0
        let start = monotonicNow()
        body.withUnsafeBytes { raw in
            let b = crabbitmq_bytes(raw.baseAddress, raw.count)
            while confirmed < count {
                while sent < count && sent - confirmed < window {
                    precondition(amqp_basic_publish(conn, 1, crabbitmq_bytes(nil, 0), rk, 0, 0, &props, b) == 0)
                    sent += 1
                }
                var frame = amqp_frame_t()
                precondition(amqp_simple_wait_frame(conn, &frame) == 0)
                if frame.frame_type == UInt8(AMQP_FRAME_METHOD) && crabbitmq_frame_method_id(&frame) == ackMethod {
                    let ack = crabbitmq_frame_method_decoded(&frame).assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
                    confirmed = ack.multiple != 0 ? Int(ack.delivery_tag) : confirmed + 1
                }
                amqp_maybe_release_buffers(conn)
            }
        }
        return Double(count) / (Double(monotonicNow() - start) / 1e9)
    }

    /// A consumer of `queue` on a thread of its own (prefetch 256, manual
    /// acks), calling `handle` with the connection and each message until
    /// stopped. `handle` settles the message.
    class ConsumerThread: @unchecked Sendable {  // `stopping` is the only shared state, guarded by the lock
        private let lock = NSLock()
        private var stopping = false
        private let done = DispatchSemaphore(value: 0)

        init(url: AMQPURL, queue: String, handle: @escaping @Sendable (amqp_connection_state_t, amqp_envelope_t) -> Void) {
            let thread = Thread { [self] in serve(url: url, queue: queue, handle: handle) }
            thread.start()
        }

        func stop() {
            lock.withLock { stopping = true }
            done.wait()
        }

        private func serve(url: AMQPURL, queue: String, handle: (amqp_connection_state_t, amqp_envelope_t) -> Void) {
            let conn = connect(url)
            amqp_basic_qos(conn, 1, 0, 256, 0)
            amqp_basic_consume(conn, 1, bytes(queue), crabbitmq_bytes(nil, 0), 0, 0, 0, crabbitmq_empty_table())
            precondition(amqp_get_rpc_reply(conn).reply_type == AMQP_RESPONSE_NORMAL)
            while !lock.withLock({ stopping }) {
                var envelope = amqp_envelope_t()
                var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
                amqp_maybe_release_buffers(conn)
                guard amqp_consume_message(conn, &envelope, &timeout, 0).reply_type == AMQP_RESPONSE_NORMAL else { continue }
                handle(conn, envelope)
                amqp_destroy_envelope(&envelope)
            }
            close(conn)
            done.signal()
        }
    }

    /// An RPC server on its own thread: consumes `queue`, replies to
    /// `reply_to` with the request body and its `correlation_id`, acks.
    final class EchoServer: ConsumerThread, @unchecked Sendable {
        init(url: AMQPURL, queue: String) {
            super.init(url: url, queue: queue) { conn, envelope in
                var props = amqp_basic_properties_t()
                props._flags = UInt32(AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG)
                props.correlation_id = envelope.message.properties.correlation_id
                props.content_type = envelope.message.properties.content_type
                amqp_basic_publish(conn, 1, crabbitmq_bytes(nil, 0), envelope.message.properties.reply_to, 0, 0,
                                   &props, envelope.message.body)
                amqp_basic_ack(conn, 1, envelope.delivery_tag, 0)
            }
        }
    }

    /// A consumer that does nothing but ack, each message on its own: it
    /// stands in for a service that consumes the echo's events, so the
    /// broker carries them into a queue and out again as it does for the
    /// real set.
    final class DrainConsumer: ConsumerThread, @unchecked Sendable {
        private final class Count: Sendable { let value = Mutex(0) }
        private let acked = Count()

        init(url: AMQPURL, queue: String) {
            let acked = self.acked
            super.init(url: url, queue: queue) { conn, envelope in
                amqp_basic_ack(conn, 1, envelope.delivery_tag, 0)
                acked.value.withLock { $0 += 1 }
            }
        }

        /// Waits until it has acked `count` messages in all (or `timeout`
        /// seconds passed: false), so a CPU reading taken after it includes
        /// the deliveries still under way when the last reply came.
        func waitUntilAcked(_ count: Int, timeout: Double = 30) -> Bool {
            let deadline = monotonicNow() + UInt64(timeout * 1e9)
            while acked.value.withLock({ $0 }) < count {
                if monotonicNow() > deadline { return false }
                usleep(1_000)
            }
            return true
        }
    }

    /// The broker's share of a booking without any handler work: consumes
    /// `queue` (prefetch 64) and, per request, publishes what booking-handler
    /// publishes — a persistent reply to `reply_to` and two persistent events
    /// to `eventsExchange` — all with confirms, acking each request only once
    /// its three messages are confirmed. Fully pipelined on one thread. The
    /// ceiling the handler could reach on this broker and machine.
    final class HandlerShapedServer: @unchecked Sendable {  // `stopping` is the only shared state, guarded by the lock
        private let lock = NSLock()
        private var stopping = false
        private let done = DispatchSemaphore(value: 0)

        init(url: AMQPURL, queue: String, eventsExchange: String) {
            let thread = Thread { [self] in serve(url: url, queue: queue, eventsExchange: eventsExchange) }
            thread.start()
        }

        func stop() {
            lock.withLock { stopping = true }
            done.wait()
        }

        private func serve(url: AMQPURL, queue: String, eventsExchange: String) {
            let conn = connect(url)
            amqp_confirm_select(conn, 1)
            amqp_basic_qos(conn, 1, 0, 64, 0)
            amqp_basic_consume(conn, 1, bytes(queue), crabbitmq_bytes(nil, 0), 0, 0, 0, crabbitmq_empty_table())
            precondition(amqp_get_rpc_reply(conn).reply_type == AMQP_RESPONSE_NORMAL)
            let exchange = bytes(eventsExchange)
            let created = bytes("booking.created"), confirmed = bytes("booking.confirmed")
            var published: UInt64 = 0
            var confirmedUpTo: UInt64 = 0
            var confirmedSingles = Set<UInt64>()
            var waiting: [(tag: UInt64, lastSeq: UInt64)] = []  // in delivery order
            while !lock.withLock({ stopping }) {
                var frame = amqp_frame_t()
                var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
                amqp_maybe_release_buffers(conn)
                guard amqp_simple_wait_frame_noblock(conn, &frame, &timeout) == 0,
                      frame.frame_type == UInt8(AMQP_FRAME_METHOD) else { continue }
                switch crabbitmq_frame_method_id(&frame) {
                case deliverMethod:
                    let tag = crabbitmq_frame_method_decoded(&frame).assumingMemoryBound(to: amqp_basic_deliver_t.self).pointee.delivery_tag
                    var message = amqp_message_t()
                    guard amqp_read_message(conn, 1, &message, 0).reply_type == AMQP_RESPONSE_NORMAL else { continue }
                    var props = persistentProperties()
                    props._flags |= UInt32(AMQP_BASIC_CORRELATION_ID_FLAG)
                    props.correlation_id = message.properties.correlation_id
                    amqp_basic_publish(conn, 1, crabbitmq_bytes(nil, 0), message.properties.reply_to, 0, 0, &props, message.body)
                    var eventProps = persistentProperties()
                    amqp_basic_publish(conn, 1, exchange, created, 0, 0, &eventProps, message.body)
                    amqp_basic_publish(conn, 1, exchange, confirmed, 0, 0, &eventProps, message.body)
                    published += 3
                    waiting.append((tag, published))
                    amqp_destroy_message(&message)
                case ackMethod:
                    let ack = crabbitmq_frame_method_decoded(&frame).assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
                    if ack.multiple != 0 {
                        confirmedUpTo = max(confirmedUpTo, ack.delivery_tag)
                    } else {
                        confirmedSingles.insert(ack.delivery_tag)
                    }
                    while confirmedSingles.remove(confirmedUpTo + 1) != nil { confirmedUpTo += 1 }
                    var lastTag: UInt64?
                    while let first = waiting.first, first.lastSeq <= confirmedUpTo {
                        lastTag = first.tag
                        waiting.removeFirst()
                    }
                    if let lastTag { amqp_basic_ack(conn, 1, lastTag, 1) }
                default:
                    continue
                }
            }
            close(conn)
            done.signal()
        }
    }

    /// RPC client over direct reply-to with confirms on (as the Swift layer
    /// does), keeping `inFlight` requests outstanding. Returns (calls/s, latencies).
    static func rpc(url: AMQPURL, queue: String, count: Int, inFlight: Int, body: [UInt8]) -> (Double, Latencies) {
        rpc(url: url, exchange: "", routingKey: queue, count: count, inFlight: inFlight, body: { _ in body })
    }

    /// The same loop for any request: `body(i)` is request i, published to
    /// `exchange` with `routingKey`, with `type` and a unique `message_id`
    /// when `type` is set (a command, as `booking.create`); `onReply` sees
    /// each reply's body and arrival time (`monotonicNow`).
    ///
    /// With `rate`, the loop is open: request i is due `i / rate` seconds
    /// after the start whatever the replies do (`inFlight` is ignored), and
    /// its latency counts from when it was due, so a set that falls behind
    /// shows it (no coordinated omission).
    static func rpc(url: AMQPURL, exchange: String, routingKey: String, type: String? = nil, count: Int, inFlight: Int,
                    rate: Double? = nil,
                    body: (Int) -> [UInt8], onReply: ((UnsafeRawBufferPointer, UInt64) -> Void)? = nil) -> (Double, Latencies) {
        let conn = connect(url)
        defer { close(conn) }
        amqp_confirm_select(conn, 1)
        amqp_basic_consume(conn, 1, bytes("amq.rabbitmq.reply-to"), crabbitmq_bytes(nil, 0), 0, 1, 0, crabbitmq_empty_table())
        precondition(amqp_get_rpc_reply(conn).reply_type == AMQP_RESPONSE_NORMAL)
        var props = persistentProperties()
        props._flags |= UInt32(AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG)
        props.reply_to = bytes("amq.rabbitmq.reply-to")
        if let type {
            props._flags |= UInt32(AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG)
            props.type = bytes(type)
        }
        let rk = bytes(routingKey), ex = bytes(exchange)
        let run = "\(getpid())-\(monotonicNow())"
        var sentAt = [UInt64](repeating: 0, count: count)
        var latencies = Latencies()
        var sent = 0, received = 0
        let start = monotonicNow()
        func due(_ i: Int) -> UInt64 { start + UInt64(Double(i) * 1e9 / (rate ?? 1)) }
        func send(_ i: Int) {
            var id = "\(i)"
            var messageID = "bench-\(run)-\(i)"
            let request = body(i)
            id.withUTF8 { idBytes in
                messageID.withUTF8 { messageIDBytes in
                    props.correlation_id = crabbitmq_bytes(idBytes.baseAddress, idBytes.count)
                    props.message_id = crabbitmq_bytes(messageIDBytes.baseAddress, messageIDBytes.count)
                    sentAt[i] = rate == nil ? monotonicNow() : due(i)
                    request.withUnsafeBytes { raw in
                        precondition(amqp_basic_publish(conn, 1, ex, rk, 0, 0, &props,
                                                        crabbitmq_bytes(raw.baseAddress, raw.count)) == 0)
                    }
                }
            }
        }
        if rate == nil { while sent < min(inFlight, count) { send(sent); sent += 1 } }
        while received < count {
            var frame = amqp_frame_t()
            if rate != nil {
                while sent < count && due(sent) <= monotonicNow() { send(sent); sent += 1 }
                let wait = sent < count ? due(sent) - min(due(sent), monotonicNow()) : 100_000_000
                var timeout = timeval(tv_sec: Int(wait / 1_000_000_000), tv_usec: Int(wait % 1_000_000_000 / 1000))
                let status = amqp_simple_wait_frame_noblock(conn, &frame, &timeout)
                if status == AMQP_STATUS_TIMEOUT.rawValue { continue }
                precondition(status == 0)
            } else {
                precondition(amqp_simple_wait_frame(conn, &frame) == 0)
            }
            if frame.frame_type == UInt8(AMQP_FRAME_METHOD) && crabbitmq_frame_method_id(&frame) == deliverMethod {
                var message = amqp_message_t()
                precondition(amqp_read_message(conn, 1, &message, 0).reply_type == AMQP_RESPONSE_NORMAL)
                let id = Int(String(decoding: UnsafeRawBufferPointer(start: message.properties.correlation_id.bytes,
                                                                    count: message.properties.correlation_id.len), as: UTF8.self))!
                let arrived = monotonicNow()
                latencies.add(arrived - sentAt[id])
                onReply?(UnsafeRawBufferPointer(start: message.body.bytes, count: message.body.len), arrived)
                amqp_destroy_message(&message)
                received += 1
                if rate == nil && sent < count { send(sent); sent += 1 }
            }
            amqp_maybe_release_buffers(conn)
        }
        return (Double(count) / (Double(monotonicNow() - start) / 1e9), latencies)
    }
}
