import Foundation
import Logging
import Metrics
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

typealias Promise<T> = CheckedContinuation<T, any Error>

/// What a consumer asked for; kept (in ``ConsumerRegistry``) so it can be
/// re-established after a reconnect.
struct ConsumerSpec: Sendable {
    var queue: String
    var prefetch: UInt16
    var exclusive: Bool
    var arguments: AMQPTable
}

typealias DeliveryStream = AsyncThrowingStream<AMQPDelivery, any Error>

/// Work handed to the I/O thread. Every case that expects an answer carries
/// the continuation the I/O thread resumes.
enum IOCommand: Sendable {
    case publish(OutgoingMessage, Promise<Void>)
    /// The callback runs once, on the I/O thread (or the sender's, if the
    /// loop is gone), with one entry per message: nil when confirmed.
    case publishBatch([OutgoingMessage], @Sendable ([AMQPError?]) -> Void)
    case rpc(OutgoingMessage, deadline: UInt64, Promise<AMQPMessage>)
    case declare([TopologyItem], Promise<Void>)
    case consume(id: Int, ConsumerSpec, DeliveryStream.Continuation, Promise<Void>)
    case stopConsumer(id: Int)
    case settle(channel: UInt16, generation: UInt64, Settlement, Promise<Void>)
    case inspectQueue(String, Promise<AMQPQueueInfo>)
    case deleteQueue(String, Promise<UInt32>)
    case deleteExchange(String, Promise<Void>)
    case purgeQueue(String, Promise<UInt32>)
    case get(String, Promise<AMQPDelivery?>)
    case close(Promise<Void>?)
}

extension IOCommand {
    /// Whether the command only writes frames and waits for no answer
    /// (publishes, acks): those run with writes held (`IOLoop.runHoldingWrites`).
    /// Anything else may make a synchronous call (declare, consume, the first
    /// RPC's reply consumer, queue inspection, close).
    var onlyWrites: Bool {
        switch self {
        case .publish, .publishBatch, .settle: true
        case .rpc, .declare, .consume, .stopConsumer, .inspectQueue, .deleteQueue, .deleteExchange, .purgeQueue, .get,
             .close: false
        }
    }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// The I/O thread of one ``AMQPConnection``: it alone owns the rabbitmq-c
/// connection (a `CConnection`) and every channel on it.
///
/// ## Threading rules
/// - Exactly one OS thread (`amqp-io-<name>`) runs `threadMain`. All
///   loop-owned state (`io`, a ``LoopState``) is read and written by it
///   alone, and it is the only caller of `amqp_*` functions for this
///   connection. rabbitmq-c is not thread-safe, so this is what makes the
///   C library safe to use from async Swift. This is checked, not only
///   documented: every access to `io` asserts (debug builds, so tests) that
///   it runs on the thread that claimed `confinement`.
/// - Other threads talk to it only through `mailbox` (a `Mutex`) plus the
///   `wakeup` eventfd, via `submit`/`send`. Results come back by resuming
///   continuations from the I/O thread.
/// - The loop never waits longer than a quarter of the negotiated heartbeat
///   before calling into rabbitmq-c, which is when the library sends the
///   heartbeats we owe and notices the ones the broker missed.
/// - Blocking C calls (connect, synchronous AMQP methods) run on this
///   dedicated thread, never on Swift's cooperative pool.
///
/// `@unchecked Sendable`: the shared part is the `Mutex` and the eventfd;
/// everything else is confined to the I/O thread as described above.
///
/// The bookkeeping lives in small pure value types, each unit-tested on its
/// own: ``ConnectionStateMachine`` (connect, reconnect, start-up, close),
/// ``ChannelTable`` (open channels and their generations),
/// ``ConfirmTracker`` (publisher confirms), ``RPCRegistry`` (RPC calls
/// waiting for replies) and ``ConsumerRegistry`` (consumers, their tags and
/// channels). The loop does the I/O and performs the actions they return.
final class IOLoop: @unchecked Sendable {
    struct Mailbox {
        var commands: [IOCommand] = []
        /// The I/O thread is (about to be) blocked in `poll`: signal the eventfd.
        var sleeping = false
        /// No more commands are accepted (close requested or thread gone).
        var closed = false
        var connected = false
        var reconnects = 0
        /// The endpoint of the current (or last) connection.
        var endpoint: AMQPURL?
    }

    let mailbox = Mutex(Mailbox())
    let wakeup = Wakeup()
    let configuration: AMQPConfiguration
    let logger: Logger

    /// Claimed by the I/O thread when it starts; checks every access to `io`.
    let confinement: ThreadConfinement

    /// Channel numbers: publishing and RPC replies share channel 1 (direct
    /// reply-to requires the request to be published on the channel that
    /// consumes the replies); declarations use channel 2 so a failed
    /// declaration cannot take publishes down with it; each consumer gets
    /// its own channel from 3 up, so its prefetch and errors stay its own.
    private static let publishChannel: UInt16 = 1
    private static let controlChannel: UInt16 = 2
    private static let firstConsumerChannel: UInt16 = 3

    private enum Waiter {
        case publish(Promise<Void>)
        case rpc(correlationID: String)
        case batch(BatchCollector, index: Int)
    }

    /// Collects the outcomes of one `publishBatch`, answering when the last
    /// message is settled. Lives on the I/O thread only.
    private final class BatchCollector {
        var results: [AMQPError?]
        var remaining: Int
        let done: @Sendable ([AMQPError?]) -> Void

        init(count: Int, done: @escaping @Sendable ([AMQPError?]) -> Void) {
            results = Array(repeating: nil, count: count)
            remaining = count
            self.done = done
            if count == 0 { done([]) }
        }

        func settle(_ index: Int, _ error: AMQPError?) {
            results[index] = error
            remaining -= 1
            if remaining == 0 { done(results) }
        }
    }

    /// Everything only the I/O thread may touch, in one place so that one
    /// accessor (`io`) can check the confinement of all of it.
    private struct LoopState {
        var conn: CConnection?
        var machine: ConnectionStateMachine
        /// The caller of `connect`, until the machine says how to answer it.
        var startup: Promise<Void>?
        var closePromises: [Promise<Void>] = []
        var channels = ChannelTable()
        var confirms = ConfirmTracker<Waiter>()
        var rpcs = RPCRegistry<Promise<AMQPMessage>>()
        var consumers = ConsumerRegistry<DeliveryStream.Continuation>(firstChannel: IOLoop.firstConsumerChannel)
        /// Declarations replayed after every reconnect, in order.
        var topology: [TopologyItem] = []
        /// Commands that arrived while disconnected and wait for the connection.
        var deferred: [IOCommand] = []
        /// `amqp_messages_consumed_total` per queue and type, looked up once:
        /// the metrics registry takes a lock, and this runs for every delivery.
        var consumedCounters: [String: Counter] = [:]
        /// When the loop last called into rabbitmq-c (heartbeat servicing).
        var lastLibraryCall: UInt64 = 0
    }

    // MARK: I/O thread only

    private var _io: LoopState
    /// The loop-owned state; touching it off the I/O thread traps in debug builds.
    private var io: LoopState {
        _read {
            confinement.assertOwnerThread()
            yield _io
        }
        _modify {
            confinement.assertOwnerThread()
            yield &_io
        }
    }

    private let reconnectCounter: Counter
    private let publishedCounter: Counter
    private let publishFailedCounter: Counter
    private let deliveredCounter: Counter
    /// Header values of deliveries cut to `.void` for nesting deeper than
    /// ``CDecode/maxDepth``.
    private let truncatedHeadersCounter: Counter

    init(configuration: AMQPConfiguration, logger: Logger) {
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "amqp.connection"] = .string(configuration.connectionName)
        self.logger = logger
        self.confinement = ThreadConfinement("IOLoop state of \(configuration.connectionName)")
        self._io = LoopState(machine: ConnectionStateMachine(
            backoff: configuration.reconnect, now: monotonicNanos(),
            initialConnectTimeoutSeconds: configuration.initialConnectTimeoutSeconds,
            endpointCount: configuration.endpoints.count))
        let dims = [("connection", configuration.connectionName)]
        reconnectCounter = Counter(label: "amqp_reconnects_total", dimensions: dims)
        publishedCounter = Counter(label: "amqp_published_total", dimensions: dims)
        publishFailedCounter = Counter(label: "amqp_publish_failures_total", dimensions: dims)
        deliveredCounter = Counter(label: "amqp_deliveries_total", dimensions: dims)
        truncatedHeadersCounter = Counter(label: "amqp_header_values_truncated_total", dimensions: dims)
    }

    /// Starts the I/O thread; `startup` is resumed once the first connection
    /// is up (or has definitely failed).
    func start(startup: Promise<Void>) {
        _io.startup = startup  // unchecked: happens-before the thread starts
        let thread = Thread { [self] in threadMain() }
        thread.name = "amqp-io-\(configuration.connectionName)"
        thread.start()
    }

    // MARK: Submitting work (any thread)

    /// Hands a command to the I/O thread and waits for its answer.
    func submit<T>(_ make: (Promise<T>) -> IOCommand) async throws(AMQPError) -> T {
        do {
            return try await withCheckedThrowingContinuation { (promise: Promise<T>) in
                send(make(promise))
            }
        } catch let error as AMQPError {
            throw error
        } catch {
            throw AMQPError(.protocolError, "\(error)")
        }
    }

    /// Enqueues a command; answers it with `.closed` if the loop is gone.
    func send(_ command: IOCommand) {
        let (accepted, wake) = mailbox.withLock { box -> (Bool, Bool) in
            if box.closed {
                if case .close = command {} else { return (false, false) }
            }
            box.commands.append(command)
            let wake = box.sleeping
            box.sleeping = false
            return (true, wake)
        }
        if !accepted {
            Self.fail(command, AMQPError(.closed, "connection is closed"))
            return
        }
        if wake { wakeup.signal() }
    }

    var isConnected: Bool { mailbox.withLock { $0.connected } }
    var reconnectCount: Int { mailbox.withLock { $0.reconnects } }
    var connectedEndpoint: AMQPURL? { mailbox.withLock { $0.endpoint } }

    // MARK: Thread main

    private func threadMain() {
        confinement.claim()
        while true {
            switch io.machine.state {
            case .connecting:
                attemptConnect()
            case .connected, .draining:
                serviceConnection()
            case .waitingToReconnect(_, let until):
                waitWhileDisconnected(until: until)
            case .closing:
                finishClose()
            case .closed:
                finishClose()
                return
            }
        }
    }

    private func attemptConnect() {
        let url = configuration.endpoints[io.machine.endpoint]
        do {
            let c = try CConnection.open(configuration, url: url)
            io.conn = c
            try setUpChannels(c)
            let action = io.machine.connectSucceeded()
            mailbox.withLock {
                $0.connected = true
                $0.endpoint = url
                if action == .announceReconnect { $0.reconnects += 1 }
            }
            switch action {
            case .completeStartup:
                logger.info("AMQP connected", metadata: ["amqp.url": "\(url)", "amqp.heartbeat": "\(c.heartbeat)",
                                                         "amqp.auth_mechanism": "\(configuration.authMechanism.rawValue)"])
                io.startup?.resume()
                io.startup = nil
            case .announceReconnect:
                reconnectCounter.increment()
                logger.notice("AMQP reconnected; topology and consumers restored",
                              metadata: ["amqp.url": "\(url)", "amqp.consumers": "\(io.consumers.count)"])
            }
            if url.tls, configuration.tlsVerifyPeer, let reason = configuration.tlsSkipHostnameCheckReason {
                logger.warning("AMQP TLS: the broker certificate's host name is not checked (its chain is)",
                               metadata: ["amqp.url": "\(url)", "reason": "\(reason)"])
            }
            let waiting = io.deferred
            io.deferred.removeAll()
            for command in waiting { handle(command) }
        } catch {
            io.conn = nil
            resetChannelState(error: AMQPError(.connectionLost, "connection lost: \(error.message)",
                                               libraryStatus: error.libraryStatus))
            switch io.machine.connectFailed(error, now: monotonicNanos()) {
            case .failStartup:
                logger.error("AMQP connection failed", metadata: ["amqp.url": "\(url)", "error": "\(error)"])
                mailbox.withLock { $0.closed = true }
                io.startup?.resume(throwing: error)
                io.startup = nil
            case .retry(let at):
                // Signed: an immediate retry's time is already past.
                let delay = (Double(at) - Double(monotonicNanos())) / 1e9
                logger.warning("AMQP connect failed; retrying",
                               metadata: ["amqp.url": "\(url)", "error": "\(error)",
                                          "retry.in_seconds": "\(String(format: "%.2f", max(0, delay)))"])
            }
        }
    }

    /// Opens the channels and replays topology and consumers on a fresh connection.
    private func setUpChannels(_ c: CConnection) throws(AMQPError) {
        try c.openChannel(Self.publishChannel)
        try c.confirmSelect(Self.publishChannel)
        io.channels.opened(Self.publishChannel)
        try c.openChannel(Self.controlChannel)
        io.channels.opened(Self.controlChannel)  // a generation, so basic.get deliveries can be settled
        for item in io.topology {
            do {
                try declare(item, c)
            } catch where error.code == .channelClosed {
                // Someone changed the object on the broker; keep going with
                // the rest and say so loudly. The service's own declare at
                // start-up reports the same error to its caller.
                logger.error("re-declaring topology failed", metadata: ["error": "\(error)"])
                try c.openChannel(Self.controlChannel)
                io.channels.opened(Self.controlChannel)
            }
        }
        for id in io.consumers.ids {
            try startConsumer(id, on: c)
        }
    }

    private func startConsumer(_ id: Int, on c: CConnection) throws(AMQPError) {
        guard let consumer = io.consumers[id] else { return }
        try c.openChannel(consumer.channel)
        io.channels.opened(consumer.channel)
        try c.qos(consumer.channel, prefetch: consumer.spec.prefetch)
        let tag = try c.consume(consumer.channel, queue: consumer.spec.queue, noAck: false,
                                exclusive: consumer.spec.exclusive, arguments: consumer.spec.arguments)
        io.consumers.started(id: id, tag: tag)
    }

    // MARK: Connected

    private func serviceConnection() {
        guard let c = io.conn else { return }
        do {
            runHoldingWrites(takeCommands(), c)
            guard io.machine.isServicing else { return }

            // Frames rabbitmq-c already holds (queued during a synchronous
            // call, or read ahead into its buffer) are invisible to poll().
            var budget = 512
            while c.hasBufferedInput && budget > 0 {
                guard try readOneFrame(c) else { break }
                budget -= 1
            }

            expireRPCs()
            if io.machine.isDraining {
                let confirmsOutstanding = !io.confirms.isEmpty
                switch io.machine.drainCheck(now: monotonicNanos(), confirmsOutstanding: confirmsOutstanding) {
                case .closeNow: return  // threadMain finishes the close
                case .keepServicing: break
                }
            }

            let timeoutMs = pollTimeoutMilliseconds(c)
            var socketReadable = true  // when commands are waiting we skip poll and just look
            if mailbox.withLock({ box in
                if box.commands.isEmpty { box.sleeping = true; return true }
                return false
            }) {
                var fds = [pollfd(fd: c.socketFD, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: wakeup.fd, events: Int16(POLLIN), revents: 0)]
                let ready = poll(&fds, 2, timeoutMs)
                mailbox.withLock { $0.sleeping = false }
                if fds[1].revents != 0 { wakeup.drain() }
                socketReadable = ready == 0 || fds[0].revents != 0  // timeout: service heartbeats
            }

            // Call into the library when the socket has data, and otherwise
            // at least every quarter heartbeat: that is when it sends the
            // heartbeats we owe and detects the ones the broker missed.
            let now = monotonicNanos()
            if socketReadable || now &- io.lastLibraryCall >= heartbeatServiceInterval(c) {
                io.lastLibraryCall = now
                budget = 512
                while budget > 0 {
                    guard try readOneFrame(c) else { break }
                    budget -= 1
                }
            }
            if !c.hasBufferedInput { c.releaseBuffers() }
        } catch {
            connectionLost(error)
        }
    }

    /// Runs `commands`, holding the frames of each run of commands that
    /// only write (``IOCommand/onlyWrites``, ``CConnection/holdWrites()``)
    /// and writing them at once when the run ends: before a command that may
    /// wait for the broker — its request must not sit in the buffer while
    /// the answer is awaited — and before the loop polls.
    private func runHoldingWrites(_ commands: [IOCommand], _ c: CConnection) {
        var holding = false
        for command in commands {
            let hold = command.onlyWrites
            if hold != holding, io.machine.isServicing, io.conn === c {
                if hold { c.holdWrites() } else { flush(c) }
                holding = hold
            }
            handle(command)
        }
        if holding, io.conn === c { flush(c) }
    }

    /// Writes what `c` holds; a failure loses the connection (the commands
    /// whose frames were held fail with it, as if their own write had).
    private func flush(_ c: CConnection) {
        do throws(AMQPError) {
            try c.flushWrites()
        } catch {
            connectionLost(error)
        }
    }

    private func heartbeatServiceInterval(_ c: CConnection) -> UInt64 {
        let heartbeat = UInt64(max(0, c.heartbeat))
        return heartbeat > 0 ? heartbeat * 250_000_000 : 1_000_000_000
    }

    private func pollTimeoutMilliseconds(_ c: CConnection) -> Int32 {
        let heartbeat = Int(c.heartbeat)
        var ms = heartbeat > 0 ? max(50, heartbeat * 1000 / 4) : 1000
        if let deadline = io.rpcs.nextDeadline {
            let now = monotonicNanos()
            ms = min(ms, Int(max(0, Int64(bitPattern: deadline &- now)) / 1_000_000) + 1)
        }
        if io.machine.isDraining { ms = min(ms, 50) }
        return Int32(max(0, ms))
    }

    private func takeCommands() -> [IOCommand] {
        mailbox.withLock { box in
            var commands: [IOCommand] = []
            swap(&commands, &box.commands)
            return commands
        }
    }

    /// Reads and routes one frame; false when none was ready.
    private func readOneFrame(_ c: CConnection) throws(AMQPError) -> Bool {
        switch c.nextEvent(microseconds: 1) {
        case .timeout:
            return false
        case .failed(let error):
            throw error
        case .event(let event):
            try route(event, c)
            return true
        }
    }

    private func route(_ event: InboundEvent, _ c: CConnection) throws(AMQPError) {
        switch event {
        case .ack(let deliveryTag, let multiple):
            confirmed(tag: deliveryTag, multiple: multiple, error: nil)
        case .nack(let deliveryTag, let multiple):
            confirmed(tag: deliveryTag, multiple: multiple,
                      error: AMQPError(.nacked, "broker refused the message (basic.nack)"))
        case .returned(let code, let text, let exchange, let routingKey, let content):
            let error = AMQPError(.unroutable, "no queue for exchange '\(exchange)' routing key '\(routingKey)': \(text)", replyCode: code)
            if let seq = content.properties.headers[Self.publishSequenceHeader]?.intValue {
                io.confirms.markReturned(UInt64(seq), error)
            } else if let id = content.properties.correlationID, let promise = io.rpcs.resolve(id) {
                // An RPC request (the broker rewrites its reply_to, so the
                // correlation id is what identifies it).
                promise.resume(throwing: error)
            }
        case .delivery(let channel, let tag, let deliveryTag, let redelivered, let exchange, let routingKey, let content):
            if content.truncatedHeaders > 0 {
                // See CDecode: over-deep header values were cut to .void.
                truncatedHeadersCounter.increment(by: content.truncatedHeaders)
                logger.warning("delivery headers nested too deep; deeper values decoded as void", metadata: [
                    "amqp.message_id": "\(content.properties.messageID ?? "-")", "amqp.routing_key": "\(routingKey)",
                    "amqp.truncated_values": "\(content.truncatedHeaders)", "amqp.max_depth": "\(CDecode.maxDepth)",
                ])
            }
            if !io.rpcs.isReplyConsumer(tag) && io.consumers.consumer(forTag: tag) == nil {
                // A delivery that overtook our basic.cancel: hand it back at
                // once rather than leave it unacked on a lingering channel.
                try c.reject(channel: channel, deliveryTag: deliveryTag, requeue: true)
                return
            }
            deliver(channel: channel, consumerTag: tag, deliveryTag: deliveryTag, redelivered: redelivered,
                    exchange: exchange, routingKey: routingKey, properties: content.properties, body: content.body)
        case .consumerCancelled(let tag):
            brokerCancelledConsumer(tag: tag)
        case .channelClosed(let channel, let code, let text):
            try channelClosedByBroker(channel, AMQPError(.channelClosed, text, replyCode: code), c)
        case .connectionClosed(let code, let text):
            throw AMQPError(.connectionLost, "broker closed the connection: \(text)", replyCode: code)
        case .blocked:
            logger.warning("broker blocked publishing (resource alarm)")
        case .unblocked:
            logger.notice("broker unblocked publishing")
        case .ignored(let channel, let method):
            if let method {
                logger.debug("ignoring AMQP method", metadata: ["amqp.method": "\(method)", "amqp.channel": "\(channel)"])
            }
        }
    }

    static let publishSequenceHeader = "x-publish-seq"

    private func confirmed(tag: UInt64, multiple: Bool, error: AMQPError?) {
        for entry in io.confirms.settle(deliveryTag: tag, multiple: multiple) {
            let failure = entry.returned ?? error
            switch entry.waiter {
            case .publish(let promise):
                if let failure {
                    publishFailedCounter.increment()
                    promise.resume(throwing: failure)
                } else {
                    promise.resume()
                }
            case .rpc(let correlationID):
                if let failure, let promise = io.rpcs.resolve(correlationID) {
                    promise.resume(throwing: failure)
                }
            case .batch(let collector, let index):
                if failure != nil { publishFailedCounter.increment() }
                collector.settle(index, failure)
            }
        }
    }

    private func consumedCounter(queue: String, routingKey: String) -> Counter {
        let type = MessageMetrics.typeLabel(routingKey)
        let key = queue + "\u{0}" + type
        if let counter = io.consumedCounters[key] { return counter }
        let counter = Counter(label: "amqp_messages_consumed_total", dimensions: [("queue", queue), ("type", type)])
        io.consumedCounters[key] = counter
        return counter
    }

    private func deliver(channel: UInt16, consumerTag: String, deliveryTag: UInt64, redelivered: Bool,
                         exchange: String, routingKey: String, properties: AMQPProperties, body: [UInt8]) {
        if io.rpcs.isReplyConsumer(consumerTag) {
            guard let id = properties.correlationID, let promise = io.rpcs.resolve(id) else {
                logger.debug("dropping late or unknown RPC reply", metadata: ["amqp.correlation_id": "\(properties.correlationID ?? "-")"])
                return
            }
            promise.resume(returning: AMQPMessage(body: body, properties: properties, exchange: exchange, routingKey: routingKey))
            return
        }
        guard let consumer = io.consumers.consumer(forTag: consumerTag) else { return }
        deliveredCounter.increment()
        let queue = consumer.spec.queue
        consumedCounter(queue: queue, routingKey: routingKey).increment()
        let settler = DeliverySettler(loop: self, channel: channel, generation: io.channels.generation(of: channel) ?? 0,
                                      queue: queue, routingKey: routingKey)
        consumer.handler.yield(AMQPDelivery(
            body: body, properties: properties, exchange: exchange, routingKey: routingKey,
            redelivered: redelivered, deliveryTag: deliveryTag, consumerTag: consumerTag,
            receivedAt: .now, settler: settler))
    }

    private func brokerCancelledConsumer(tag: String) {
        guard let consumer = io.consumers.brokerCancelled(tag: tag) else { return }
        logger.error("broker cancelled consumer (queue deleted?)", metadata: ["amqp.queue": "\(consumer.spec.queue)"])
        consumer.handler.finish(throwing: AMQPError(.channelClosed, "broker cancelled the consumer of queue '\(consumer.spec.queue)'"))
    }

    /// The broker closed one channel (an error on it): fail what depended
    /// on it and reopen it so the rest of the connection carries on.
    private func channelClosedByBroker(_ channel: UInt16, _ error: AMQPError, _ c: CConnection) throws(AMQPError) {
        logger.warning("broker closed channel", metadata: ["amqp.channel": "\(channel)", "error": "\(error)"])
        io.channels.closed(channel)
        if channel == Self.publishChannel {
            failConfirms(error)
            failRPCs(error)  // and forgets the reply consumer, which was on this channel
            try c.openChannel(Self.publishChannel)
            try c.confirmSelect(Self.publishChannel)
            io.channels.opened(Self.publishChannel)
        } else if channel == Self.controlChannel {
            // Reopened before its next use.
        } else if let id = io.consumers.channelClosed(channel) {
            try startConsumer(id, on: c)
        }
    }

    /// Declares one topology item on the control channel. An exchange is
    /// first declared passively and only declared for real when that answers
    /// 404 (it does not exist): a broker whose definitions already hold the
    /// shared exchanges may deny the service `configure` on them, and
    /// RabbitMQ checks no permission for a passive declare. The 404 closes
    /// the control channel; it is reopened (new generation, so settlements of
    /// `basic.get` deliveries from before fail as stale) before the real
    /// declare. Queues and bindings are declared as they are.
    private func declare(_ item: TopologyItem, _ c: CConnection) throws(AMQPError) {
        guard case .exchange(let exchange) = item else {
            try c.declare(item, channel: Self.controlChannel)
            return
        }
        do {
            try c.exchangeExists(exchange.name, channel: Self.controlChannel)
            return
        } catch where error.code == .channelClosed && error.replyCode == 404 {
            io.channels.closed(Self.controlChannel)
            try ensureControlChannel(c)
        }
        try c.declare(item, channel: Self.controlChannel)
    }

    private func ensureControlChannel(_ c: CConnection) throws(AMQPError) {
        if !io.channels.isOpen(Self.controlChannel) {
            try c.openChannel(Self.controlChannel)
            io.channels.opened(Self.controlChannel)
        }
    }

    private func expireRPCs() {
        guard !io.rpcs.isEmpty else { return }
        for promise in io.rpcs.expire(now: monotonicNanos()) {
            promise.resume(throwing: AMQPError(.timeout, "no reply within the timeout"))
        }
    }

    // MARK: Commands

    private func handle(_ command: IOCommand) {
        guard io.machine.isServicing, let c = io.conn else {
            handleWhileDisconnected(command)
            return
        }
        do {
            try execute(command, c)
        } catch where error.code == .connectionLost {
            // The command's own promise was answered (or deferred) in
            // execute; the loop notices the dead connection right after.
            connectionLost(error)
        } catch {
            // Answered in execute.
        }
    }

    private func execute(_ command: IOCommand, _ c: CConnection) throws(AMQPError) {
        switch command {
        case .publish(let message, let promise):
            let seq = io.confirms.register(.publish(promise))
            do {
                try publish(message, sequence: seq, c)
                publishedCounter.increment()
            } catch {
                // Left in the tracker: connectionLost fails it with the others.
                throw error
            }
        case .publishBatch(let messages, let done):
            // One command, so the messages reach the channel in this order.
            let collector = BatchCollector(count: messages.count, done: done)
            for (index, message) in messages.enumerated() {
                let seq = io.confirms.register(.batch(collector, index: index))
                do {
                    try publish(message, sequence: seq, c)
                } catch {
                    // This one is in the tracker (connectionLost settles it);
                    // the ones never sent are settled here.
                    for rest in (index + 1)..<messages.count { collector.settle(rest, error) }
                    throw error
                }
                publishedCounter.increment()
            }
        case .rpc(var message, let deadline, let promise):
            do {
                if io.rpcs.replyConsumerTag == nil {
                    let tag = try c.consume(Self.publishChannel, queue: "amq.rabbitmq.reply-to",
                                            noAck: true, exclusive: false, arguments: [:])
                    io.rpcs.replyConsumerStarted(tag: tag)
                }
                let correlationID = io.rpcs.register(promise, correlationID: message.properties.correlationID,
                                                     deadline: deadline)
                message.properties.correlationID = correlationID
                message.properties.replyTo = "amq.rabbitmq.reply-to"
                let seq = io.confirms.register(.rpc(correlationID: correlationID))
                try publish(message, sequence: seq, isRPC: true, c)
            } catch {
                if error.code != .connectionLost { promise.resume(throwing: error) }
                throw error
            }
        case .declare(let items, let promise):
            do {
                try ensureControlChannel(c)
                for item in items {
                    try declare(item, c)
                    if !io.topology.contains(item) { io.topology.append(item) }
                }
                promise.resume()
            } catch {
                if error.code == .channelClosed { io.channels.needsReopen(Self.controlChannel) }
                promise.resume(throwing: error)
                throw error
            }
        case .consume(let id, let spec, let continuation, let promise):
            io.consumers.add(id: id, spec: spec, handler: continuation)
            do {
                try startConsumer(id, on: c)
                promise.resume()
            } catch {
                _ = io.consumers.remove(id: id)
                promise.resume(throwing: error)
                throw error
            }
        case .stopConsumer(let id):
            guard let consumer = io.consumers.stop(id: id) else { return }
            if let tag = consumer.tag {
                // basic.cancel stops new deliveries; the channel stays open
                // so deliveries already handed out can still be acked.
                do { try c.cancel(consumer.channel, consumerTag: tag) } catch {
                    consumer.handler.finish()
                    throw error
                }
            }
            consumer.handler.finish()
        case .settle(let channel, let generation, let settlement, let promise):
            guard io.channels.isCurrent(channel: channel, generation: generation) else {
                promise.resume(throwing: AMQPError(.staleDelivery, "the channel that delivered this message is gone; the broker will redeliver it"))
                return
            }
            do {
                switch settlement {
                case .ack(let tag): try c.ack(channel: channel, deliveryTag: tag, multiple: false)
                case .nack(let tag, let requeue): try c.nack(channel: channel, deliveryTag: tag, multiple: false, requeue: requeue)
                case .reject(let tag, let requeue): try c.reject(channel: channel, deliveryTag: tag, requeue: requeue)
                }
                promise.resume()
            } catch {
                promise.resume(throwing: error)
                throw error
            }
        case .inspectQueue(let name, let promise):
            try control(promise, c) { () throws(AMQPError) in
                let r = try c.inspectQueue(name, channel: Self.controlChannel)
                return AMQPQueueInfo(name: name, messageCount: Int(r.messages), consumerCount: Int(r.consumers))
            }
        case .deleteQueue(let name, let promise):
            try control(promise, c) { () throws(AMQPError) in try c.deleteQueue(name, channel: Self.controlChannel) }
        case .deleteExchange(let name, let promise):
            try control(promise, c) { () throws(AMQPError) in try c.deleteExchange(name, channel: Self.controlChannel) }
        case .purgeQueue(let name, let promise):
            try control(promise, c) { () throws(AMQPError) in try c.purgeQueue(name, channel: Self.controlChannel) }
        case .get(let queue, let promise):
            try control(promise, c) { () throws(AMQPError) -> AMQPDelivery? in
                guard let r = try c.get(Self.controlChannel, queue: queue) else { return nil }
                let settler = DeliverySettler(loop: self, channel: Self.controlChannel,
                                              generation: io.channels.generation(of: Self.controlChannel) ?? 0,
                                              queue: queue, routingKey: r.routingKey)
                return AMQPDelivery(body: r.message.body, properties: r.message.properties, exchange: r.exchange,
                                    routingKey: r.routingKey, redelivered: r.redelivered, deliveryTag: r.tag,
                                    consumerTag: "", receivedAt: .now, settler: settler)
            }
        case .close(let promise):
            if let promise { io.closePromises.append(promise) }
            switch io.machine.closeRequested(now: monotonicNanos()) {
            case .drain, .alreadyClosing: break  // serviceConnection closes once drained
            case .closeNow: break  // threadMain finishes the close
            }
        }
    }

    /// Runs a synchronous method on the control channel and answers `promise`.
    private func control<T>(_ promise: Promise<T>, _ c: CConnection, _ body: () throws(AMQPError) -> T) throws(AMQPError) {
        do {
            try ensureControlChannel(c)
            promise.resume(returning: try body())
        } catch {
            if error.code == .channelClosed { io.channels.closed(Self.controlChannel) }
            promise.resume(throwing: error)
            throw error
        }
    }

    private func publish(_ message: OutgoingMessage, sequence: UInt64, isRPC: Bool = false, _ c: CConnection) throws(AMQPError) {
        var properties = message.properties
        if message.mandatory && !isRPC {
            // A basic.return carries no sequence number; this header lets us
            // match it to the publish it belongs to (the .NET client does
            // the same with x-dotnet-pub-seq-no). RPC requests are matched
            // by their correlation id instead.
            properties.headers[Self.publishSequenceHeader] = .int64(Int64(sequence))
        }
        try c.publish(channel: Self.publishChannel, exchange: message.exchange, routingKey: message.routingKey,
                      mandatory: message.mandatory, properties: properties, body: message.body)
    }

    // MARK: Disconnected

    private func handleWhileDisconnected(_ command: IOCommand) {
        switch command {
        case .settle(_, _, _, let promise):
            promise.resume(throwing: AMQPError(.staleDelivery, "connection lost; the broker will redeliver this message"))
        case .stopConsumer(let id):
            io.consumers.remove(id: id)?.handler.finish()
        case .consume(let id, let spec, let continuation, let promise):
            // Registered now, started with the others on reconnect.
            io.consumers.add(id: id, spec: spec, handler: continuation)
            promise.resume()
        case .close(let promise):
            if let promise { io.closePromises.append(promise) }
            switch io.machine.closeRequested(now: monotonicNanos()) {
            case .closeNow, .alreadyClosing: break  // threadMain finishes the close
            case .drain: break  // not while disconnected; serviceConnection would drain
            }
        default:
            if io.machine.state == .closed || io.machine.state == .closing {
                Self.fail(command, AMQPError(.closed, "connection is closed"))
            } else {
                io.deferred.append(command)
            }
        }
    }

    private func waitWhileDisconnected(until: UInt64) {
        for command in takeCommands() { handleWhileDisconnected(command) }
        expireRPCs()
        let now = monotonicNanos()
        io.deferred.removeAll { command in
            guard case .rpc(_, let deadline, let promise) = command, deadline <= now else { return false }
            promise.resume(throwing: AMQPError(.timeout, "no reply within the timeout (broker unreachable)"))
            return true
        }
        if case .closing = io.machine.state { return }
        if io.machine.reconnectDue(now: monotonicNanos()) { return }
        let ms = Int32(min(1000, max(0, (Int64(bitPattern: until &- monotonicNanos())) / 1_000_000 + 1)))
        if mailbox.withLock({ box in
            if box.commands.isEmpty { box.sleeping = true; return true }
            return false
        }) {
            var fds = [pollfd(fd: wakeup.fd, events: Int16(POLLIN), revents: 0)]
            _ = poll(&fds, 1, ms)
            mailbox.withLock { $0.sleeping = false }
            if fds[0].revents != 0 { wakeup.drain() }
        }
        // The next round (threadMain) checks whether the reconnect is due.
    }

    private func connectionLost(_ error: AMQPError) {
        switch io.machine.connectionLost(now: monotonicNanos()) {
        case .ignore:
            return
        case .reconnect:
            logger.warning("AMQP connection lost; reconnecting", metadata: ["error": "\(error)"])
        case .finishClosing:
            logger.warning("AMQP connection lost while closing", metadata: ["error": "\(error)"])
        }
        io.conn = nil  // destroys the rabbitmq-c connection and its socket
        mailbox.withLock { $0.connected = false }
        resetChannelState(error: error)
    }

    /// Forgets per-connection state: unconfirmed publishes and pending RPCs
    /// fail (retryable), delivery tags go stale, consumers wait for restart.
    private func resetChannelState(error: AMQPError) {
        let lost = AMQPError(.connectionLost, error.message, replyCode: error.replyCode, libraryStatus: error.libraryStatus)
        failConfirms(lost)
        failRPCs(lost)
        io.channels.removeAll()
        io.consumers.connectionLost()
    }

    private func failConfirms(_ error: AMQPError) {
        for entry in io.confirms.reset() {
            switch entry.waiter {
            case .publish(let promise):
                publishFailedCounter.increment()
                promise.resume(throwing: error)
            case .batch(let collector, let index):
                publishFailedCounter.increment()
                collector.settle(index, error)
            case .rpc:
                break  // failRPCs answers those
            }
        }
    }

    private func failRPCs(_ error: AMQPError) {
        for promise in io.rpcs.reset() { promise.resume(throwing: error) }
    }

    // MARK: Closing

    private func finishClose() {
        let closedError = AMQPError(.closed, "connection is closed")
        mailbox.withLock { $0.closed = true; $0.connected = false }
        for command in takeCommands() { Self.fail(command, closedError) }
        let deferred = io.deferred
        io.deferred.removeAll()
        for command in deferred { Self.fail(command, closedError) }
        for consumer in io.consumers.removeAll() { consumer.handler.finish() }
        if let c = io.conn {
            if !io.confirms.isEmpty {
                logger.warning("closing with unconfirmed publishes", metadata: ["amqp.unconfirmed": "\(io.confirms.pendingCount)"])
            }
            c.closeConnection()
        }
        io.conn = nil
        failConfirms(closedError)
        failRPCs(closedError)
        let closed = io.machine.closed()
        if closed.failStartup {
            io.startup?.resume(throwing: closedError)
            io.startup = nil
        }
        if closed.announceClosed {
            logger.info("AMQP connection closed")
        }
        let closePromises = io.closePromises
        io.closePromises.removeAll()
        for promise in closePromises { promise.resume() }
    }

    /// Answers a command that will never run.
    static func fail(_ command: IOCommand, _ error: AMQPError) {
        switch command {
        case .publish(_, let p), .declare(_, let p), .settle(_, _, _, let p), .consume(_, _, _, let p): p.resume(throwing: error)
        case .publishBatch(let messages, let done): done(Array(repeating: error, count: messages.count))
        case .rpc(_, _, let p): p.resume(throwing: error)
        case .inspectQueue(_, let p): p.resume(throwing: error)
        case .deleteQueue(_, let p), .purgeQueue(_, let p): p.resume(throwing: error)
        case .deleteExchange(_, let p): p.resume(throwing: error)
        case .get(_, let p): p.resume(throwing: error)
        case .close(let p): p?.resume()
        case .stopConsumer: break
        }
    }
}
