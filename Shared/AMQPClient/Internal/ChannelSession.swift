import Logging

/// Everything one ``AMQPConnection`` knows about its broker session, as a
/// value type whose every transition returns the actions to perform.
///
/// Transitions: a command from a caller (``command(_:now:)``), a frame or
/// method from the broker (``frame(_:)``, publisher confirms included), the
/// outcome of a C call the session asked for (``callReturned(_:)``), a fresh
/// connection to set up (``setUp()``), a lost connection (``reset(_:)``),
/// time passing (``expire(now:)``) and the close (``closing(_:)``,
/// ``closed(_:)``). Each returns ``Action``s, performed in order by the
/// driver (``IOLoop``): make a C call, resume a caller, hand a delivery to a
/// consumer, end a consumer's stream, count, log, or give the connection up.
/// Registries change inside the transition that decides it; a change that
/// needs a C call to succeed first (a consumer tag, a declared item) is
/// made in ``callReturned(_:)`` when the call's outcome comes back.
///
/// A `.call` is always the last action of a list: the driver makes it at
/// once and hands the outcome back before anything else touches the
/// session, and the session goes on with the rest of the job (the next
/// call, or the answer to the caller) or, after a failure, with the job's
/// recovery. So several C calls in a row (open a channel, set its prefetch,
/// consume) stay one transition to the caller and are tested call by call.
///
/// ## Ownership and threading
/// A session is owned by exactly one ``IOLoop`` and touched only on its I/O
/// thread (the loop checks that on every access). It does no I/O and reads
/// no clock: time comes in as monotonic nanoseconds. Unit tests drive it
/// directly, playing the C library and the callers (`ChannelSessionTests`).
///
/// The bookkeeping is delegated to the small types it owns:
/// ``ConnectionStateMachine`` (connect, reconnect, close), ``ChannelTable``,
/// ``ConfirmTracker``, ``RPCRegistry`` and ``ConsumerRegistry``.
struct ChannelSession {
    /// A consumer's stream.
    typealias Handler = DeliveryStream.Continuation

    enum Action {
        /// Make this call on the C connection now, then hand the outcome to
        /// ``callReturned(_:)``. Always the last action of a list.
        case call(CCall)
        /// Answer a caller.
        case resume(Resumption)
        /// Hand a delivery to a consumer.
        case deliver(Handler, InboundDelivery)
        /// Answer a `basic.get` (the driver makes the ``AMQPDelivery``).
        case answerGet(Promise<AMQPDelivery?>, InboundDelivery?)
        /// End a consumer's stream, with an error if given.
        case finish(Handler, AMQPError?)
        case count(SessionMetric)
        case log(Logger.Level, Logger.Message, Logger.Metadata)
        /// The connection is unusable (or, while setting up, could not be
        /// set up): the driver drops it and calls ``reset(_:)``.
        case abort(AMQPError)
    }

    /// What waits for a publisher confirm.
    enum ConfirmWaiter {
        case publish(Promise<Void>)
        case rpc(correlationID: String)
        case batch(BatchCollector, index: Int)
    }

    /// Channel numbers: publishing and RPC replies share channel 1 (direct
    /// reply-to requires the request to be published on the channel that
    /// consumes the replies); declarations use channel 2 so a failed
    /// declaration cannot take publishes down with it; each consumer gets
    /// its own channel from 3 up, so its prefetch and errors stay its own.
    static var publishChannel: UInt16 { 1 }
    static var controlChannel: UInt16 { 2 }
    static var firstConsumerChannel: UInt16 { 3 }
    /// The header that ties a `basic.return` to its publish (see `publishSteps`).
    static var publishSequenceHeader: String { "x-publish-seq" }
    static var replyQueue: String { "amq.rabbitmq.reply-to" }

    /// The connection's life across reconnects; the driver runs its
    /// lifecycle transitions (connect, back-off) itself.
    var connection: ConnectionStateMachine
    var channels = ChannelTable()
    var confirms = ConfirmTracker<ConfirmWaiter>()
    var rpcs = RPCRegistry<Promise<AMQPMessage>>()
    var consumers = ConsumerRegistry<Handler>(firstChannel: Self.firstConsumerChannel)
    /// Declarations replayed after every reconnect, in order.
    var topology: [TopologyItem] = []
    /// Commands that arrived while disconnected and wait for the connection.
    private(set) var deferred: [IOCommand] = []
    private var closePromises: [Promise<Void>] = []

    // The job in progress (ChannelSessionJobs.swift): the rest of it, last
    // item first, and the call the driver is making. Not private only so
    // that file can reach them.
    var script: [Item] = []
    var current: Step?

    init(connection: ConnectionStateMachine) {
        self.connection = connection
    }

    /// Whether a job waits for a call's outcome (tests: false between transitions).
    var isIdle: Bool { current == nil && script.isEmpty }

    // MARK: Commands

    /// A command from a caller.
    mutating func command(_ command: IOCommand, now: UInt64) -> [Action] {
        precondition(isIdle, "a transition arrived while a call was outstanding")
        guard connection.isServicing else { return whileDisconnected(command, now: now) }
        var out: [Action] = []
        switch command {
        case .publish(let message, let promise):
            // Left in the tracker if the write fails: the reset fails it.
            let seq = confirms.register(.publish(promise))
            push([.step(publishStep(message, sequence: seq, then: .published, recovery: .command(.nothing)))])
        case .publishBatch(let messages, let done):
            // One command, so the messages reach the channel in this order;
            // each is registered just before its write (`batchStep`).
            let collector = BatchCollector(count: messages.count, done: done)
            if !messages.isEmpty { push([.step(batchStep(collector, messages, index: 0))]) }
        case .rpc(let message, let deadline, let promise):
            if let id = message.properties.correlationID, rpcs.isPending(id) {
                // Its reply could not be told from the other call's.
                let error = AMQPError(.invalidArgument, "an RPC with correlation id '\(id)' is already waiting for its reply")
                out.append(.resume(Resumption { promise.resume(throwing: error) }))
            } else if rpcs.replyConsumerTag == nil {
                push([.step(Step(call: .consume(Self.publishChannel, queue: Self.replyQueue, noAck: true, exclusive: false, arguments: [:]),
                                 then: .replyConsumerStarted(message, deadline: deadline, promise),
                                 recovery: .command(.rpcPromise(promise))))])
            } else {
                push(rpcPublish(message, deadline: deadline, promise))
            }
        case .declare(let items, let promise):
            let recovery = Recovery.command(.declare(promise))
            var job = ensureControlChannel(recovery)
            for item in items { job += declareSteps(item, then: .declared(item), recovery: recovery) }
            job.append(.effect(.resume(Resumption { promise.resume() })))
            push(job)
        case .consume(let id, let spec, let handler, let promise):
            consumers.add(id: id, spec: spec, handler: handler)
            var job = startConsumer(id, recovery: .command(.consume(id: id, promise)))
            job.append(.effect(.resume(Resumption { promise.resume() })))
            push(job)
        case .stopConsumer(let id):
            guard let consumer = consumers.stop(id: id) else { return [] }
            if let tag = consumer.tag {
                // basic.cancel stops new deliveries; the channel stays open
                // so deliveries already handed out can still be acked.
                push([.step(Step(call: .cancel(consumer.channel, consumerTag: tag), then: .nothing,
                                 recovery: .command(.finish(consumer.handler)))),
                      .effect(.finish(consumer.handler, nil))])
            } else {
                out.append(.finish(consumer.handler, nil))
            }
        case .settle(let channel, let generation, let settlement, let promise):
            guard channels.isCurrent(channel: channel, generation: generation) else {
                let error = AMQPError(.staleDelivery, "the channel that delivered this message is gone; the broker will redeliver it")
                return [.resume(Resumption { promise.resume(throwing: error) })]
            }
            let call: CCall = switch settlement {
            case .ack(let tag): .ack(channel: channel, deliveryTag: tag)
            case .nack(let tag, let requeue): .nack(channel: channel, deliveryTag: tag, requeue: requeue)
            case .reject(let tag, let requeue): .reject(channel: channel, deliveryTag: tag, requeue: requeue)
            }
            push([.step(Step(call: call, then: .nothing, recovery: .command(.answer { e in promise.resume(throwing: e) }))),
                  .effect(.resume(Resumption { promise.resume() }))])
        case .inspectQueue(let name, let promise):
            control(.inspectQueue(name, channel: Self.controlChannel), .queueInfo(name, promise)) { e in promise.resume(throwing: e) }
        case .deleteQueue(let name, let promise):
            control(.deleteQueue(name, channel: Self.controlChannel), .count(promise)) { e in promise.resume(throwing: e) }
        case .deleteExchange(let name, let promise):
            control(.deleteExchange(name, channel: Self.controlChannel), .void(promise)) { e in promise.resume(throwing: e) }
        case .purgeQueue(let name, let promise):
            control(.purgeQueue(name, channel: Self.controlChannel), .count(promise)) { e in promise.resume(throwing: e) }
        case .get(let queue, let promise):
            control(.get(queue, channel: Self.controlChannel), .get(queue, promise)) { e in promise.resume(throwing: e) }
        case .close(let promise):
            if let promise { closePromises.append(promise) }
            // drain: the driver keeps servicing and closes once drained;
            // closeNow/alreadyClosing: the driver finishes the close.
            _ = connection.closeRequested(now: now)
        }
        run(into: &out)
        return out
    }

    private mutating func whileDisconnected(_ command: IOCommand, now: UInt64) -> [Action] {
        switch command {
        case .settle(_, _, _, let promise):
            let error = AMQPError(.staleDelivery, "connection lost; the broker will redeliver this message")
            return [.resume(Resumption { promise.resume(throwing: error) })]
        case .stopConsumer(let id):
            guard let consumer = consumers.remove(id: id) else { return [] }
            return [.finish(consumer.handler, nil)]
        case .consume(let id, let spec, let handler, let promise):
            // Registered now, started with the others on reconnect.
            consumers.add(id: id, spec: spec, handler: handler)
            return [.resume(Resumption { promise.resume() })]
        case .close(let promise):
            if let promise { closePromises.append(promise) }
            _ = connection.closeRequested(now: now)  // the driver finishes the close
            return []
        default:
            if connection.state == .closed || connection.state == .closing {
                return [.resume(Resumption { command.fail(AMQPError(.closed, "connection is closed")) })]
            }
            deferred.append(command)
            return []
        }
    }

    /// The commands that waited for a connection, to be run now that it is up.
    mutating func takeDeferred() -> [IOCommand] {
        defer { deferred.removeAll() }
        return deferred
    }

    // MARK: Frames

    /// A frame or method from the broker. A failing call here gives the
    /// connection up (`.abort`).
    mutating func frame(_ event: InboundEvent) -> [Action] {
        precondition(isIdle, "a transition arrived while a call was outstanding")
        var out: [Action] = []
        switch event {
        case .ack(let deliveryTag, let multiple):
            confirmed(tag: deliveryTag, multiple: multiple, error: nil, &out)
        case .nack(let deliveryTag, let multiple):
            confirmed(tag: deliveryTag, multiple: multiple,
                      error: AMQPError(.nacked, "broker refused the message (basic.nack)"), &out)
        case .returned(let code, let text, let exchange, let routingKey, let content):
            let error = AMQPError(.unroutable, "no queue for exchange '\(exchange)' routing key '\(routingKey)': \(text)", replyCode: code)
            if let seq = content.properties.headers[Self.publishSequenceHeader]?.intValue {
                confirms.markReturned(UInt64(seq), error)
            } else if let id = content.properties.correlationID, let promise = rpcs.resolve(id) {
                // An RPC request (the broker rewrites its reply_to, so the
                // correlation id is what identifies it).
                out.append(.resume(Resumption { promise.resume(throwing: error) }))
            }
        case .delivery(let channel, let tag, let deliveryTag, let redelivered, let exchange, let routingKey, let content):
            if content.truncatedHeaders > 0 {
                // See CDecode: over-deep header values were cut to .void.
                out.append(.count(.truncatedHeaders(content.truncatedHeaders)))
                out.append(.log(.warning, "delivery headers nested too deep; deeper values decoded as void", [
                    "amqp.message_id": "\(content.properties.messageID ?? "-")", "amqp.routing_key": "\(routingKey)",
                    "amqp.truncated_values": "\(content.truncatedHeaders)", "amqp.max_depth": "\(CDecode.maxDepth)",
                ]))
            }
            if rpcs.isReplyConsumer(tag) {
                guard let id = content.properties.correlationID, let promise = rpcs.resolve(id) else {
                    out.append(.log(.debug, "dropping late or unknown RPC reply",
                                    ["amqp.correlation_id": "\(content.properties.correlationID ?? "-")"]))
                    break
                }
                let message = AMQPMessage(body: content.body, properties: content.properties, exchange: exchange, routingKey: routingKey)
                out.append(.resume(Resumption { promise.resume(returning: message) }))
            } else if let consumer = consumers.consumer(forTag: tag) {
                let queue = consumer.spec.queue
                out.append(.count(.delivered(queue: queue, routingKey: routingKey)))
                out.append(.deliver(consumer.handler, InboundDelivery(
                    channel: channel, generation: channels.generation(of: channel) ?? 0, queue: queue, consumerTag: tag,
                    deliveryTag: deliveryTag, redelivered: redelivered, exchange: exchange, routingKey: routingKey,
                    properties: content.properties, body: content.body)))
            } else {
                // A delivery that overtook our basic.cancel: hand it back at
                // once rather than leave it unacked on a lingering channel.
                push([.step(Step(call: .reject(channel: channel, deliveryTag: deliveryTag, requeue: true),
                                 then: .nothing, recovery: .abort))])
            }
        case .consumerCancelled(let tag):
            if let consumer = consumers.brokerCancelled(tag: tag) {
                out.append(.log(.error, "broker cancelled consumer (queue deleted?)", ["amqp.queue": "\(consumer.spec.queue)"]))
                out.append(.finish(consumer.handler, AMQPError(.channelClosed, "broker cancelled the consumer of queue '\(consumer.spec.queue)'")))
            }
        case .channelClosed(let channel, let code, let text):
            channelClosedByBroker(channel, AMQPError(.channelClosed, text, replyCode: code), &out)
        case .connectionClosed(let code, let text):
            out.append(.abort(AMQPError(.connectionLost, "broker closed the connection: \(text)", replyCode: code)))
        case .blocked:
            out.append(.log(.warning, "broker blocked publishing (resource alarm)", [:]))
        case .unblocked:
            out.append(.log(.notice, "broker unblocked publishing", [:]))
        case .ignored(let channel, let method):
            if let method {
                out.append(.log(.debug, "ignoring AMQP method", ["amqp.method": "\(method)", "amqp.channel": "\(channel)"]))
            }
        }
        run(into: &out)
        return out
    }

    private mutating func confirmed(tag: UInt64, multiple: Bool, error: AMQPError?, _ out: inout [Action]) {
        for entry in confirms.settle(deliveryTag: tag, multiple: multiple) {
            let failure = entry.returned ?? error
            switch entry.waiter {
            case .publish(let promise):
                if let failure {
                    out.append(.count(.publishFailed))
                    out.append(.resume(Resumption { promise.resume(throwing: failure) }))
                } else {
                    out.append(.resume(Resumption { promise.resume() }))
                }
            case .rpc(let correlationID):
                if let failure, let promise = rpcs.resolve(correlationID) {
                    out.append(.resume(Resumption { promise.resume(throwing: failure) }))
                }
            case .batch(let collector, let index):
                if failure != nil { out.append(.count(.publishFailed)) }
                out.append(.resume(Resumption { collector.settle(index, failure) }))
            }
        }
    }

    /// The broker closed one channel (an error on it): fail what depended
    /// on it and reopen it so the rest of the connection carries on.
    mutating func channelClosedByBroker(_ channel: UInt16, _ error: AMQPError, _ out: inout [Action]) {
        out.append(.log(.warning, "broker closed channel", ["amqp.channel": "\(channel)", "error": "\(error)"]))
        channels.closed(channel)
        if channel == Self.publishChannel {
            failConfirms(error, &out)
            failRPCs(error, &out)  // and forgets the reply consumer, which was on this channel
            push(openPublishChannel(.abort))
        } else if channel == Self.controlChannel {
            // Reopened before its next use.
        } else if let id = consumers.channelClosed(channel) {
            push(startConsumer(id, recovery: .abort))
        }
    }

    // MARK: Connection lifecycle

    /// A fresh connection: open the channels, declare the recorded topology
    /// again and restart the consumers. Ends without `.abort` when the
    /// connection is ready.
    mutating func setUp() -> [Action] {
        precondition(isIdle, "a transition arrived while a call was outstanding")
        var job = openPublishChannel(.abort)
        // A generation, so basic.get deliveries can be settled.
        job.append(.step(Step(call: .openChannel(Self.controlChannel), then: .opened(Self.controlChannel), recovery: .abort)))
        for item in topology { job += declareSteps(item, then: .nothing, recovery: .replayDeclare) }
        for id in consumers.ids { job += startConsumer(id, recovery: .abort) }
        push(job)
        var out: [Action] = []
        run(into: &out)
        return out
    }

    /// The connection is gone (lost, or never set up): unconfirmed publishes
    /// and pending RPCs fail (retryable), delivery tags go stale, consumers
    /// wait for a restart.
    mutating func reset(_ error: AMQPError) -> [Action] {
        script.removeAll()
        current = nil
        let lost = AMQPError(.connectionLost, error.message, replyCode: error.replyCode, libraryStatus: error.libraryStatus)
        var out: [Action] = []
        failConfirms(lost, &out)
        failRPCs(lost, &out)
        channels.removeAll()
        consumers.connectionLost()
        return out
    }

    /// Time passed: RPCs past their deadline fail, deferred ones included.
    mutating func expire(now: UInt64) -> [Action] {
        var out: [Action] = []
        if !rpcs.isEmpty {
            for promise in rpcs.expire(now: now) {
                out.append(.resume(Resumption { promise.resume(throwing: AMQPError(.timeout, "no reply within the timeout")) }))
            }
        }
        if !connection.isServicing {
            deferred.removeAll { command in
                guard case .rpc(_, let deadline, let promise) = command, deadline <= now else { return false }
                out.append(.resume(Resumption {
                    promise.resume(throwing: AMQPError(.timeout, "no reply within the timeout (broker unreachable)"))
                }))
                return true
            }
        }
        return out
    }

    /// The close begins: waiting commands fail, consumer streams end
    /// (normally, or with `end` when the connection was lost for good).
    mutating func closing(_ error: AMQPError, consumersEndWith end: AMQPError? = nil) -> [Action] {
        var out: [Action] = deferred.map { command in .resume(Resumption { command.fail(error) }) }
        deferred.removeAll()
        for consumer in consumers.removeAll() { out.append(.finish(consumer.handler, end)) }
        return out
    }

    /// A close asked for while the connection closes returns with the rest.
    mutating func answerWhenClosed(_ promise: Promise<Void>) {
        closePromises.append(promise)
    }

    /// The connection is closed: what still waits fails, close callers return.
    mutating func closed(_ error: AMQPError) -> [Action] {
        script.removeAll()
        current = nil
        var out: [Action] = []
        failConfirms(error, &out)
        failRPCs(error, &out)
        for promise in closePromises { out.append(.resume(Resumption { promise.resume() })) }
        closePromises.removeAll()
        return out
    }

    private mutating func failConfirms(_ error: AMQPError, _ out: inout [Action]) {
        for entry in confirms.reset() {
            switch entry.waiter {
            case .publish(let promise):
                out.append(.count(.publishFailed))
                out.append(.resume(Resumption { promise.resume(throwing: error) }))
            case .batch(let collector, let index):
                out.append(.count(.publishFailed))
                out.append(.resume(Resumption { collector.settle(index, error) }))
            case .rpc:
                break  // failRPCs answers those
            }
        }
    }

    private mutating func failRPCs(_ error: AMQPError, _ out: inout [Action]) {
        for promise in rpcs.reset() { out.append(.resume(Resumption { promise.resume(throwing: error) })) }
    }
}
