import Foundation
import Logging
import Metrics
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

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

/// The I/O thread of one ``AMQPConnection``: a thin driver of a
/// ``ChannelSession``. It owns the thread, the rabbitmq-c connection (a
/// ``CConnection``), the poll on its socket and on the wake-up eventfd, the
/// connect/back-off cycle and the write buffer; every decision about
/// channels, confirms, RPCs, consumers and callers is the session's, made
/// in transitions that return the actions this loop performs.
///
/// ## Ownership and threading
/// - Exactly one OS thread (`amqp-io-<name>`) runs `threadMain`. All
///   loop-owned state (`io`: the C connection and the session) is read and
///   written by it alone, and it is the only caller of `amqp_*` functions
///   for this connection. rabbitmq-c is not thread-safe, so this is what
///   makes the C library safe to use from async Swift. This is checked, not
///   only documented: every access to `io` asserts (debug builds, so tests)
///   that it runs on the thread that claimed `confinement`.
/// - Other threads talk to it only through `mailbox` (a `Mutex`) plus the
///   `wakeup` eventfd, via `submit`/`send`. Results come back by resuming
///   continuations from the I/O thread (the session's `.resume` actions).
/// - The loop never waits longer than a quarter of the negotiated heartbeat
///   before calling into rabbitmq-c, which is when the library sends the
///   heartbeats we owe and notices the ones the broker missed.
/// - Blocking C calls (connect, synchronous AMQP methods) run on this
///   dedicated thread, never on Swift's cooperative pool.
/// - The session never sees the C connection: it asks for calls
///   (``CCall``) and gets their outcomes back, so it is unit-tested
///   without a socket.
///
/// `@unchecked Sendable`: the shared part is the `Mutex` and the eventfd;
/// everything else is confined to the I/O thread as described above.
final class IOLoop: @unchecked Sendable {
    typealias Session = ChannelSession

    struct Mailbox {
        var commands: [IOCommand] = []
        /// The I/O thread is (about to be) blocked in `poll`: signal the eventfd.
        var sleeping = false
        /// No more commands are accepted (close requested or thread gone).
        var closed = false
        /// The I/O thread has returned: nothing will ever take a command,
        /// so not even `close` is queued (a second close would wait forever).
        var threadGone = false
        var connected = false
        var reconnects = 0
        /// Called once each, off the lock, when `connected` turns false.
        var lossWatchers: [@Sendable () -> Void] = []
        /// The endpoint of the current (or last) connection.
        var endpoint: AMQPURL?
    }

    let mailbox = Mutex(Mailbox())
    let wakeup = Wakeup()
    let configuration: AMQPConfiguration
    let logger: Logger

    /// Claimed by the I/O thread when it starts; checks every access to `io`.
    let confinement: ThreadConfinement

    /// Everything only the I/O thread may touch, in one place so that one
    /// accessor (`io`) can check the confinement of all of it.
    private struct LoopState {
        var conn: CConnection?
        var session: Session
        /// The caller of `connect`, until the machine says how to answer it.
        var startup: Promise<Void>?
        /// `amqp_messages_consumed_total` per queue and type, looked up once:
        /// the metrics registry takes a lock, and this runs for every delivery.
        var consumedCounters: [String: Counter] = [:]
        /// When the loop last called into rabbitmq-c (heartbeat servicing).
        var lastLibraryCall: UInt64 = 0
        /// Set when a connection that does not reconnect was lost: the
        /// close that follows fails what is left, and ends the consumers,
        /// with this cause rather than as an orderly close.
        var lostForGood: AMQPError?
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
        self._io = LoopState(session: Session(connection: ConnectionStateMachine(
            backoff: configuration.reconnect, now: monotonicNanos(),
            initialConnectTimeoutSeconds: configuration.initialConnectTimeoutSeconds,
            endpointCount: configuration.endpoints.count, reconnectsAfterLoss: configuration.reconnectsAfterLoss)))
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
    func submit<T: Sendable>(_ make: (Promise<T>) -> IOCommand) async throws(AMQPError) -> T {
        do {
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                send(make(Promise(continuation)))
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
            if box.threadGone { return (false, false) }
            if box.closed {
                if case .close = command {} else { return (false, false) }
            }
            box.commands.append(command)
            let wake = box.sleeping
            box.sleeping = false
            return (true, wake)
        }
        if !accepted {
            command.fail(AMQPError(.closed, "connection is closed"))
            return
        }
        if wake { wakeup.signal() }
    }

    var isConnected: Bool { mailbox.withLock { $0.connected } }

    /// Calls `body` once the connection is not established: at once (on
    /// the caller's thread) if it is not now, else on the I/O thread when
    /// it is lost or closed.
    func whenDisconnected(_ body: @escaping @Sendable () -> Void) {
        let now = mailbox.withLock { box -> Bool in
            guard box.connected && !box.closed else { return true }
            box.lossWatchers.append(body)
            return false
        }
        if now { body() }
    }

    /// Sets `connected` false (and `closed` when `closing`) and calls the
    /// loss watchers.
    private func markDisconnected(closing: Bool) {
        let watchers = mailbox.withLock { box -> [@Sendable () -> Void] in
            box.connected = false
            if closing { box.closed = true }
            defer { box.lossWatchers = [] }
            return box.lossWatchers
        }
        for watcher in watchers { watcher() }
    }
    var reconnectCount: Int { mailbox.withLock { $0.reconnects } }
    var connectedEndpoint: AMQPURL? { mailbox.withLock { $0.endpoint } }

    // MARK: Thread main

    private func threadMain() {
        confinement.claim()
        while true {
            switch io.session.connection.state {
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
                // A close queued since the last take is answered here; later
                // ones are refused by `send`.
                let late = mailbox.withLock { box -> [IOCommand] in
                    box.threadGone = true
                    var commands: [IOCommand] = []
                    swap(&commands, &box.commands)
                    return commands
                }
                for command in late { command.fail(AMQPError(.closed, "connection is closed")) }
                return
            }
        }
    }

    private func attemptConnect() {
        let url = configuration.endpoints[io.session.connection.endpoint]
        do throws(AMQPError) {
            let c = try CConnection.open(configuration, url: url)
            io.conn = c
            if let error = perform(io.session.setUp(), c) { throw error }
            let action = io.session.connection.connectSucceeded()
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
                              metadata: ["amqp.url": "\(url)", "amqp.consumers": "\(io.session.consumers.count)"])
            }
            if url.tls, configuration.tlsVerifyPeer, let reason = configuration.tlsSkipHostnameCheckReason {
                logger.warning("AMQP TLS: the broker certificate's host name is not checked (its chain is)",
                               metadata: ["amqp.url": "\(url)", "reason": "\(reason)"])
            }
            for command in io.session.takeDeferred() { handle(command) }
        } catch {
            io.conn = nil
            _ = perform(io.session.reset(AMQPError(.connectionLost, "connection lost: \(error.message)",
                                                   libraryStatus: error.libraryStatus)), nil)
            switch io.session.connection.connectFailed(error, now: monotonicNanos()) {
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

    // MARK: Performing the session's actions

    /// Performs `actions` in order, making each call the session asks for on
    /// `c` and handing its outcome back, until the session has nothing more
    /// to do. Returns the error of an `.abort` (the caller decides what a
    /// dead connection means where it is: a failed set-up or a lost
    /// connection). Without a connection (`c` nil) there is no call to make.
    private func perform(_ first: [Session.Action], _ c: CConnection?) -> AMQPError? {
        var actions = first
        while true {
            var next: CCall?
            for action in actions {
                switch action {
                case .call(let call):
                    next = call
                case .resume(let resumption):
                    resumption.perform()
                case .deliver(let handler, let delivery):
                    handler.yield(makeDelivery(delivery))
                case .answerGet(let promise, let delivery):
                    promise.resume(returning: delivery.map(makeDelivery))
                case .finish(let handler, let error):
                    if let error { handler.finish(throwing: error) } else { handler.finish() }
                case .count(let metric):
                    count(metric)
                case .log(let level, let message, let metadata):
                    logger.log(level: level, message, metadata: metadata)
                case .abort(let error):
                    return error
                }
            }
            guard let call = next else { return nil }
            guard let c else { preconditionFailure("the session asked for a call without a connection") }
            do throws(AMQPError) {
                actions = io.session.callReturned(.success(try c.perform(call)))
            } catch {
                actions = io.session.callReturned(.failure(error))
            }
        }
    }

    private func makeDelivery(_ d: InboundDelivery) -> AMQPDelivery {
        let settler = DeliverySettler(loop: self, channel: d.channel, generation: d.generation,
                                      queue: d.queue, routingKey: d.routingKey)
        return AMQPDelivery(body: d.body, properties: d.properties, exchange: d.exchange, routingKey: d.routingKey,
                            redelivered: d.redelivered, deliveryTag: d.deliveryTag, consumerTag: d.consumerTag,
                            receivedAt: .now, settler: settler)
    }

    private func count(_ metric: SessionMetric) {
        switch metric {
        case .published:
            publishedCounter.increment()
        case .publishFailed:
            publishFailedCounter.increment()
        case .delivered(let queue, let routingKey):
            deliveredCounter.increment()
            let type = MessageMetrics.typeLabel(routingKey)
            let key = queue + "\u{0}" + type
            if let counter = io.consumedCounters[key] {
                counter.increment()
            } else {
                let counter = Counter(label: "amqp_messages_consumed_total", dimensions: [("queue", queue), ("type", type)])
                io.consumedCounters[key] = counter
                counter.increment()
            }
        case .truncatedHeaders(let n):
            truncatedHeadersCounter.increment(by: n)
        }
    }

    // MARK: Connected

    private func serviceConnection() {
        guard let c = io.conn else { return }
        do throws(AMQPError) {
            runHoldingWrites(takeCommands(), c)
            guard io.session.connection.isServicing else { return }

            // Frames rabbitmq-c already holds (queued during a synchronous
            // call, or read ahead into its buffer) are invisible to poll().
            var budget = 512
            while c.hasBufferedInput && budget > 0 {
                guard try readOneFrame(c) else { break }
                budget -= 1
            }

            if let error = perform(io.session.expire(now: monotonicNanos()), c) { throw error }
            if io.session.connection.isDraining {
                let confirmsOutstanding = !io.session.confirms.isEmpty
                switch io.session.connection.drainCheck(now: monotonicNanos(), confirmsOutstanding: confirmsOutstanding) {
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
            if hold != holding, io.session.connection.isServicing, io.conn === c {
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
        if let deadline = io.session.rpcs.nextDeadline {
            let now = monotonicNanos()
            ms = min(ms, Int(max(0, Int64(bitPattern: deadline &- now)) / 1_000_000) + 1)
        }
        if io.session.connection.isDraining { ms = min(ms, 50) }
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
            if let error = perform(io.session.frame(event), c) { throw error }
            return true
        }
    }


    /// Runs a command: the session decides, the loop performs.
    private func handle(_ command: IOCommand) {
        let c = io.conn
        let actions = io.session.command(command, now: monotonicNanos())
        if let error = perform(actions, c) {
            // The command's caller was answered (or its publish stays in the
            // tracker); the connection is gone.
            connectionLost(error)
        }
    }

    // MARK: Disconnected

    private func waitWhileDisconnected(until: UInt64) {
        for command in takeCommands() { handle(command) }
        _ = perform(io.session.expire(now: monotonicNanos()), nil)
        if case .closing = io.session.connection.state { return }
        if io.session.connection.reconnectDue(now: monotonicNanos()) { return }
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
        switch io.session.connection.connectionLost(now: monotonicNanos()) {
        case .ignore:
            return
        case .reconnect:
            logger.warning("AMQP connection lost; reconnecting", metadata: ["error": "\(error)"])
        case .finishClosing:
            logger.warning("AMQP connection lost while closing", metadata: ["error": "\(error)"])
        case .closeForGood:
            logger.warning("AMQP connection lost; not reconnecting (reconnectsAfterLoss is off)", metadata: ["error": "\(error)"])
            io.lostForGood = AMQPError(.connectionLost, "connection lost (not reconnected): \(error.message)",
                                       replyCode: error.replyCode, libraryStatus: error.libraryStatus)
        }
        io.conn = nil  // destroys the rabbitmq-c connection and its socket
        markDisconnected(closing: false)
        _ = perform(io.session.reset(error), nil)
    }

    // MARK: Closing

    private func finishClose() {
        let closedError = io.lostForGood.map { AMQPError(.closed, "connection is closed: \($0.message)") }
            ?? AMQPError(.closed, "connection is closed")
        markDisconnected(closing: true)
        for command in takeCommands() {
            if case .close(let promise?) = command {
                io.session.answerWhenClosed(promise)  // not before the close is done
            } else {
                command.fail(closedError)
            }
        }
        _ = perform(io.session.closing(closedError, consumersEndWith: io.lostForGood), nil)
        if let c = io.conn {
            if !io.session.confirms.isEmpty {
                logger.warning("closing with unconfirmed publishes", metadata: ["amqp.unconfirmed": "\(io.session.confirms.pendingCount)"])
            }
            c.closeConnection()
        }
        io.conn = nil
        let closing = io.session.closed(closedError)
        let closed = io.session.connection.closed()
        if closed.failStartup {
            io.startup?.resume(throwing: closedError)
            io.startup = nil
        }
        if closed.announceClosed {
            logger.info("AMQP connection closed")
        }
        _ = perform(closing, nil)  // close callers last, as before
    }
}
