import Logging

/// The jobs of a ``ChannelSession``: runs of C calls, each with what its
/// success changes (``Then``) and what its failure undoes and answers
/// (``Recovery``), and the effects handed out once the calls before them
/// succeeded. A transition pushes a job; ``run(into:)`` hands out its
/// effects up to the next call; ``callReturned(_:)`` goes on from there.
extension ChannelSession {
    // MARK: Jobs: C calls and what follows them

    /// One item of a job: a call (with what to do on success and on
    /// failure) or an action to hand out once the calls before it succeeded.
    enum Item {
        case step(Step)
        case effect(Action)
    }

    struct Step {
        var call: CCall
        var then: Then
        var recovery: Recovery
    }

    /// What a successful call changes.
    enum Then {
        case nothing
        case published
        case opened(UInt16)
        /// A message of a batch was written: count it and write the next.
        case batchPublished(BatchCollector, [OutgoingMessage], next: Int)
        case replyConsumerStarted(OutgoingMessage, deadline: UInt64, Promise<AMQPMessage>)
        case declared(TopologyItem)
        case consumerStarted(id: Int)
        case answer(ControlAnswer)
    }

    /// The answer of a method on the control channel, from the call's outcome.
    enum ControlAnswer {
        case queueInfo(String, Promise<AMQPQueueInfo>)
        case count(Promise<UInt32>)
        case void(Promise<Void>)
        case get(String, Promise<AMQPDelivery?>)
    }

    /// What a failed call undoes and whom it answers.
    indirect enum Recovery {
        /// The connection cannot go on (a frame's or the set-up's call).
        case abort
        /// A caller's command: undo and answer (``CommandFailure``); the
        /// connection is given up only when the error says it is lost.
        case command(CommandFailure)
        /// A passive exchange declaration: 404 means missing, so reopen
        /// the control channel and declare it for real; else `otherwise`.
        case exchangeMissing(TopologyItem, then: Then, otherwise: Recovery)
        /// Re-declaring the topology on a new connection: a channel error
        /// (someone changed the object on the broker) is logged, the
        /// control channel reopened, and the rest goes on. The service's own
        /// declare at start-up reports the same error to its caller.
        case replayDeclare
    }

    enum CommandFailure {
        /// A publish: left in the tracker, which fails it with the connection.
        case nothing
        /// A batch: the messages after `after` were never sent.
        case batch(BatchCollector, after: Int, of: Int)
        /// Starting the reply consumer failed.
        case rpcPromise(Promise<AMQPMessage>)
        /// Publishing a registered RPC request failed.
        case rpc(correlationID: String)
        /// A declaration: the control channel is reopened before its next use.
        case declare(Promise<Void>)
        /// Starting a consumer: it is forgotten.
        case consume(id: Int, Promise<Void>)
        /// Cancelling a consumer: its stream ends anyway.
        case finish(Handler)
        /// A settlement: answer the caller.
        case answer((AMQPError) -> Void)
        /// A method on the control channel: it is gone (new generation next time).
        case control((AMQPError) -> Void)
    }

    /// Queues `items` to run before what is left of the current job.
    mutating func push(_ items: [Item]) {
        script.append(contentsOf: items.reversed())
    }

    /// Hands out effects until the next call (returned last) or the job's end.
    mutating func run(into out: inout [Action]) {
        while let item = script.popLast() {
            switch item {
            case .effect(let action):
                out.append(action)
            case .step(let step):
                current = step
                out.append(.call(step.call))
                return
            }
        }
    }

    /// The outcome of the call the last action list ended with.
    mutating func callReturned(_ result: Result<CReturn, AMQPError>) -> [Action] {
        guard let step = current else { preconditionFailure("no call outstanding") }
        current = nil
        var out: [Action] = []
        switch result {
        case .success(let value):
            succeeded(step.then, value, &out)
        case .failure(let error):
            recover(step.recovery, error, &out)
        }
        run(into: &out)
        return out
    }

    private mutating func succeeded(_ then: Then, _ value: CReturn, _ out: inout [Action]) {
        switch then {
        case .nothing:
            break
        case .published:
            out.append(.count(.published))
        case .opened(let channel):
            channels.opened(channel)
        case .batchPublished(let collector, let messages, let next):
            out.append(.count(.published))
            if next < messages.count { push([.step(batchStep(collector, messages, index: next))]) }
        case .replyConsumerStarted(let message, let deadline, let promise):
            if case .consumerTag(let tag) = value { rpcs.replyConsumerStarted(tag: tag) }
            push(rpcPublish(message, deadline: deadline, promise))
        case .declared(let item):
            if !topology.contains(item) { topology.append(item) }
        case .consumerStarted(let id):
            if case .consumerTag(let tag) = value { consumers.started(id: id, tag: tag) }
        case .answer(let answer):
            switch (answer, value) {
            case (.queueInfo(let name, let promise), .queueCounts(let messages, let consumers)):
                let info = AMQPQueueInfo(name: name, messageCount: Int(messages), consumerCount: Int(consumers))
                out.append(.resume(Resumption { promise.resume(returning: info) }))
            case (.count(let promise), .messageCount(let count)):
                out.append(.resume(Resumption { promise.resume(returning: count) }))
            case (.void(let promise), _):
                out.append(.resume(Resumption { promise.resume() }))
            case (.get(let queue, let promise), .got(let got)):
                out.append(.answerGet(promise, got.map { g in
                    InboundDelivery(channel: Self.controlChannel, generation: channels.generation(of: Self.controlChannel) ?? 0,
                                    queue: queue, consumerTag: "", deliveryTag: g.deliveryTag, redelivered: g.redelivered,
                                    exchange: g.exchange, routingKey: g.routingKey, properties: g.message.properties,
                                    body: g.message.body)
                }))
            default:
                preconditionFailure("call returned \(value) for \(answer)")
            }
        }
    }

    private mutating func recover(_ recovery: Recovery, _ error: AMQPError, _ out: inout [Action]) {
        switch recovery {
        case .abort:
            script.removeAll()
            out.append(.abort(error))
        case .exchangeMissing(let item, let then, let otherwise):
            guard error.code == .channelClosed && error.replyCode == 404 else {
                recover(otherwise, error, &out)
                return
            }
            channels.closed(Self.controlChannel)
            push(ensureControlChannel(otherwise)
                 + [.step(Step(call: .declare(item, channel: Self.controlChannel), then: then, recovery: otherwise))])
        case .replayDeclare:
            guard error.code == .channelClosed else {
                recover(.abort, error, &out)
                return
            }
            out.append(.log(.error, "re-declaring topology failed", ["error": "\(error)"]))
            push([.step(Step(call: .openChannel(Self.controlChannel), then: .opened(Self.controlChannel), recovery: .abort))])
        case .command(let failure):
            script.removeAll()
            switch failure {
            case .nothing:
                break
            case .batch(let collector, let index, let count):
                // This one is in the tracker (the reset settles it); the
                // ones never sent are settled here.
                if index + 1 < count {
                    out.append(.resume(Resumption { for rest in (index + 1)..<count { collector.settle(rest, error) } }))
                }
            case .rpcPromise(let promise):
                // Not registered yet (the reply consumer was starting), so
                // neither a reset nor a deadline would ever answer it.
                out.append(.resume(Resumption { promise.resume(throwing: error) }))
                // The broker closed the publish channel under the consume:
                // what waited on the channel fails and it is reopened, as
                // when the close arrives as a frame.
                if error.code == .channelClosed { channelClosedByBroker(Self.publishChannel, error, &out) }
            case .rpc(let correlationID):
                if error.code != .connectionLost, let promise = rpcs.resolve(correlationID) {
                    out.append(.resume(Resumption { promise.resume(throwing: error) }))
                }
            case .declare(let promise):
                if error.code == .channelClosed { channels.needsReopen(Self.controlChannel) }
                out.append(.resume(Resumption { promise.resume(throwing: error) }))
            case .consume(let id, let promise):
                _ = consumers.remove(id: id)
                out.append(.resume(Resumption { promise.resume(throwing: error) }))
            case .finish(let handler):
                out.append(.finish(handler, nil))
            case .answer(let fail):
                out.append(.resume(Resumption { fail(error) }))
            case .control(let fail):
                if error.code == .channelClosed { channels.closed(Self.controlChannel) }
                out.append(.resume(Resumption { fail(error) }))
            }
            if error.code == .connectionLost { out.append(.abort(error)) }
        }
    }

    // MARK: Jobs

    func publishStep(_ message: OutgoingMessage, sequence: UInt64, isRPC: Bool = false,
                             then: Then, recovery: Recovery) -> Step {
        var properties = message.properties
        if message.mandatory && !isRPC {
            // A basic.return carries no sequence number; this header lets us
            // match it to the publish it belongs to (the .NET client does
            // the same with x-dotnet-pub-seq-no). RPC requests are matched
            // by their correlation id instead.
            properties.headers[Self.publishSequenceHeader] = .int64(Int64(sequence))
        }
        return Step(call: .publish(channel: Self.publishChannel, exchange: message.exchange, routingKey: message.routingKey,
                                   mandatory: message.mandatory, properties: properties, body: message.body),
                    then: then, recovery: recovery)
    }

    /// Registers message `index` of a batch and returns its write.
    mutating func batchStep(_ collector: BatchCollector, _ messages: [OutgoingMessage], index: Int) -> Step {
        let seq = confirms.register(.batch(collector, index: index))
        return publishStep(messages[index], sequence: seq, then: .batchPublished(collector, messages, next: index + 1),
                           recovery: .command(.batch(collector, after: index, of: messages.count)))
    }

    mutating func rpcPublish(_ message: OutgoingMessage, deadline: UInt64, _ promise: Promise<AMQPMessage>) -> [Item] {
        var message = message
        let correlationID = rpcs.register(promise, correlationID: message.properties.correlationID, deadline: deadline)
        message.properties.correlationID = correlationID
        message.properties.replyTo = Self.replyQueue
        let seq = confirms.register(.rpc(correlationID: correlationID))
        return [.step(publishStep(message, sequence: seq, isRPC: true, then: .nothing,
                                  recovery: .command(.rpc(correlationID: correlationID))))]
    }

    func openPublishChannel(_ recovery: Recovery) -> [Item] {
        [.step(Step(call: .openChannel(Self.publishChannel), then: .nothing, recovery: recovery)),
         .step(Step(call: .confirmSelect(Self.publishChannel), then: .opened(Self.publishChannel), recovery: recovery))]
    }

    func ensureControlChannel(_ recovery: Recovery) -> [Item] {
        if channels.isOpen(Self.controlChannel) { return [] }
        return [.step(Step(call: .openChannel(Self.controlChannel), then: .opened(Self.controlChannel), recovery: recovery))]
    }

    /// Declares one item on the control channel. An exchange is first
    /// declared passively and only declared for real when that answers 404
    /// (it does not exist): a broker whose definitions already hold the
    /// shared exchanges may deny the service `configure` on them, and
    /// RabbitMQ checks no permission for a passive declare. The 404 closes
    /// the control channel; it is reopened (new generation, so settlements of
    /// `basic.get` deliveries from before fail as stale) before the real
    /// declare. Queues and bindings are declared as they are.
    func declareSteps(_ item: TopologyItem, then: Then, recovery: Recovery) -> [Item] {
        guard case .exchange(let exchange) = item else {
            return [.step(Step(call: .declare(item, channel: Self.controlChannel), then: then, recovery: recovery))]
        }
        return [.step(Step(call: .exchangeExists(exchange.name, channel: Self.controlChannel), then: then,
                           recovery: .exchangeMissing(item, then: then, otherwise: recovery)))]
    }

    func startConsumer(_ id: Int, recovery: Recovery) -> [Item] {
        guard let consumer = consumers[id] else { return [] }
        let channel = consumer.channel, spec = consumer.spec
        return [.step(Step(call: .openChannel(channel), then: .opened(channel), recovery: recovery)),
                .step(Step(call: .qos(channel, prefetch: spec.prefetch), then: .nothing, recovery: recovery)),
                .step(Step(call: .consume(channel, queue: spec.queue, noAck: false, exclusive: spec.exclusive, arguments: spec.arguments),
                           then: .consumerStarted(id: id), recovery: recovery))]
    }

    /// A synchronous method on the control channel, answered from its outcome.
    mutating func control(_ call: CCall, _ answer: ControlAnswer, fail: @escaping (AMQPError) -> Void) {
        let recovery = Recovery.command(.control(fail))
        push(ensureControlChannel(recovery) + [.step(Step(call: call, then: .answer(answer), recovery: recovery))])
    }
}

extension IOCommand {
    /// Answers a command that will never run.
    func fail(_ error: AMQPError) {
        switch self {
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
