import Synchronization
import Testing
@testable import AMQPClient

/// What the callers of a session were told, in order (promises answer here).
private final class Answers: Sendable {
    private let log = Mutex<[String]>([])

    func record(_ line: String) { log.withLock { $0.append(line) } }
    var lines: [String] { log.withLock { $0 } }

    func void(_ name: String) -> Promise<Void> {
        Promise { result in
            switch result {
            case .success: self.record("\(name): ok")
            case .failure(let e): self.record("\(name): \(e.code)")
            }
        }
    }

    func message(_ name: String) -> Promise<AMQPMessage> {
        Promise { result in
            switch result {
            case .success(let m): self.record("\(name): reply \(String(decoding: m.body, as: UTF8.self))")
            case .failure(let e): self.record("\(name): \(e.code)")
            }
        }
    }

    func info(_ name: String) -> Promise<AMQPQueueInfo> {
        Promise { result in
            switch result {
            case .success(let i): self.record("\(name): \(i.messageCount) messages")
            case .failure(let e): self.record("\(name): \(e.code)")
            }
        }
    }
}

/// Plays the I/O loop: performs a session's actions, answering each call
/// with `answer` (success by default, consumer tags `ctag-1`, `ctag-2`, …).
private struct Driver {
    var session = ChannelSession(connection: ConnectionStateMachine(
        backoff: Backoff(initial: 1, maximum: 8, multiplier: 2, jitter: 0), now: 0, initialConnectTimeoutSeconds: 30))
    var calls: [CCall] = []
    var deliveries: [InboundDelivery] = []
    var finished: [AMQPError?] = []
    var metrics: [SessionMetric] = []
    var aborted: AMQPError?
    var answer: (CCall) -> Result<CReturn, AMQPError>? = { _ in nil }
    private var tags = 0

    mutating func perform(_ first: [ChannelSession.Action]) {
        var actions = first
        while true {
            var next: CCall?
            for (index, action) in actions.enumerated() {
                switch action {
                case .call(let call):
                    #expect(index == actions.count - 1, "a call is the last action")
                    next = call
                case .resume(let r): r.perform()
                case .deliver(_, let d): deliveries.append(d)
                case .answerGet: break
                case .finish(_, let e): finished.append(e)
                case .count(let m): metrics.append(m)
                case .log: break
                case .abort(let e): aborted = e
                }
            }
            guard let call = next else { return }
            calls.append(call)
            actions = session.callReturned(answer(call) ?? defaultAnswer(call))
        }
    }

    private mutating func defaultAnswer(_ call: CCall) -> Result<CReturn, AMQPError> {
        switch call {
        case .consume:
            tags += 1
            return .success(.consumerTag("ctag-\(tags)"))
        case .inspectQueue: return .success(.queueCounts(messages: 7, consumers: 1))
        case .deleteQueue, .purgeQueue: return .success(.messageCount(3))
        case .get: return .success(.got(nil))
        default: return .success(.done)
        }
    }

    /// A fresh connection, set up and announced.
    mutating func connect() {
        perform(session.setUp())
        #expect(aborted == nil)
        _ = session.connection.connectSucceeded()
    }

    mutating func command(_ command: IOCommand) { perform(session.command(command, now: 1)) }
    mutating func frame(_ event: InboundEvent) { perform(session.frame(event)) }

    /// Takes the calls made so far.
    mutating func takeCalls() -> [CCall] {
        defer { calls.removeAll() }
        return calls
    }
}

private func message(_ key: String, mandatory: Bool = false) -> OutgoingMessage {
    OutgoingMessage(body: Array(key.utf8), routingKey: key, mandatory: mandatory)
}

private func content(_ body: String = "", correlationID: String? = nil, headers: AMQPTable = [:]) -> InboundContent {
    var p = AMQPProperties()
    p.correlationID = correlationID
    p.headers = headers
    return InboundContent(properties: p, body: Array(body.utf8), truncatedHeaders: 0)
}

private func spec(_ queue: String) -> ConsumerSpec {
    ConsumerSpec(queue: queue, prefetch: 5, exclusive: false, arguments: [:])
}

@Suite("ChannelSession")
struct ChannelSessionTests {
    @Test func setUpOpensThePublishChannelInConfirmModeAndTheControlChannel() {
        var d = Driver()
        d.connect()
        #expect(d.takeCalls() == [.openChannel(1), .confirmSelect(1), .openChannel(2)])
        #expect(d.session.channels.isOpen(1) && d.session.channels.isOpen(2))
        #expect(d.session.isIdle)
    }

    @Test func aPublishIsAnsweredByItsConfirmAndMultipleAcksSettleEveryEarlierOne() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        for name in ["a", "b", "c"] { d.command(.publish(message(name), answers.void(name))) }
        #expect(d.takeCalls().count == 3)
        #expect(d.metrics == [.published, .published, .published])
        #expect(answers.lines.isEmpty)  // written, not yet confirmed
        d.frame(.ack(deliveryTag: 2, multiple: true))
        #expect(answers.lines == ["a: ok", "b: ok"])
        d.frame(.nack(deliveryTag: 3, multiple: false))
        #expect(answers.lines.last == "c: nacked")
        #expect(d.metrics.last == .publishFailed)
    }

    @Test func aReturnedMandatoryPublishFailsAsUnroutableWhenItsAckComes() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        d.command(.publish(message("nowhere", mandatory: true), answers.void("p")))
        guard case .publish(_, _, _, true, let properties, _)? = d.takeCalls().first else {
            Issue.record("no mandatory publish"); return
        }
        #expect(properties.headers[ChannelSession.publishSequenceHeader] == .int64(1))
        d.frame(.returned(replyCode: 312, replyText: "NO_ROUTE", exchange: "", routingKey: "nowhere",
                          content: content(headers: [ChannelSession.publishSequenceHeader: .int64(1)])))
        #expect(answers.lines.isEmpty)
        d.frame(.ack(deliveryTag: 1, multiple: false))
        #expect(answers.lines == ["p: unroutable"])
    }

    @Test func aBatchWriteThatLosesTheConnectionSettlesEveryMessageOnce() {
        let results = Mutex<[[AMQPError?]]>([])
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        var writes = 0
        d.answer = { call in
            guard case .publish = call else { return nil }
            writes += 1
            return writes == 2 ? .failure(AMQPError(.connectionLost, "socket closed")) : nil
        }
        d.command(.publishBatch([message("1"), message("2"), message("3")]) { r in results.withLock { $0.append(r) } })
        #expect(d.takeCalls().count == 2)  // the third was never written
        #expect(d.aborted?.code == .connectionLost)
        #expect(d.session.isIdle)
        // The loop drops the connection: the two registered ones fail with it.
        d.perform(d.session.reset(d.aborted!))
        let all = results.withLock { $0 }
        #expect(all.count == 1)
        #expect(all.first?.map { $0?.code } == [.connectionLost, .connectionLost, .connectionLost])
    }

    @Test func theFirstRPCStartsTheReplyConsumerAndRepliesFindTheirCaller() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        d.command(.rpc(message("q"), deadline: 100, answers.message("first")))
        let calls = d.takeCalls()
        #expect(calls.count == 2)
        #expect(calls.first == .consume(1, queue: "amq.rabbitmq.reply-to", noAck: true, exclusive: false, arguments: [:]))
        guard case .publish(1, _, "q", false, let properties, _)? = calls.last else {
            Issue.record("no request published"); return
        }
        #expect(properties.replyTo == "amq.rabbitmq.reply-to")
        let id = properties.correlationID
        #expect(id != nil)
        d.command(.rpc(message("q"), deadline: 100, answers.message("second")))
        #expect(d.takeCalls().count == 1)  // the reply consumer is running
        d.frame(.delivery(channel: 1, consumerTag: "ctag-1", deliveryTag: 1, redelivered: false, exchange: "",
                          routingKey: "r", content: content("pong", correlationID: id)))
        #expect(answers.lines == ["first: reply pong"])
        #expect(d.deliveries.isEmpty)  // a reply is not a consumer's delivery
        d.perform(d.session.expire(now: 100))
        #expect(answers.lines.last == "second: timeout")
    }

    /// The first RPC's reply consumer fails to start: the call is not yet
    /// registered, so only the failure itself can answer it.
    @Test func anRPCWhoseReplyConsumerFailsToStartIsAnswered() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        d.answer = { call in
            if case .consume = call { return .failure(AMQPError(.connectionLost, "socket closed")) }
            return nil
        }
        d.command(.rpc(message("q"), deadline: 100, answers.message("rpc")))
        #expect(answers.lines == ["rpc: connectionLost"])
        #expect(d.aborted?.code == .connectionLost)
    }

    /// The broker closed the publish channel (an earlier publish's 404) and
    /// the close reached the reply consumer's start: the publish waiting
    /// for its confirm fails and the channel is reopened, as when the close
    /// arrives as a frame.
    @Test func aChannelCloseThatReachesTheReplyConsumersStartFailsThePublishChannel() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        d.command(.publish(message("a"), answers.void("publish")))
        _ = d.takeCalls()
        d.answer = { call in
            if case .consume = call { return .failure(AMQPError(.channelClosed, "NOT_FOUND - no exchange", replyCode: 404)) }
            return nil
        }
        d.command(.rpc(message("q"), deadline: 100, answers.message("rpc")))
        #expect(Set(answers.lines) == ["rpc: channelClosed", "publish: channelClosed"])
        #expect(d.takeCalls().suffix(2) == [.openChannel(1), .confirmSelect(1)])
        #expect(d.aborted == nil)
    }

    @Test func anRPCWithTheCorrelationIDOfOneWaitingIsRefused() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        var properties = AMQPProperties()
        properties.correlationID = "same"
        let request = OutgoingMessage(body: [], routingKey: "q", properties: properties)
        d.command(.rpc(request, deadline: 100, answers.message("first")))
        d.command(.rpc(request, deadline: 100, answers.message("second")))
        #expect(answers.lines == ["second: invalidArgument"])
        d.frame(.delivery(channel: 1, consumerTag: "ctag-1", deliveryTag: 1, redelivered: false, exchange: "",
                          routingKey: "r", content: content("pong", correlationID: "same")))
        #expect(answers.lines == ["second: invalidArgument", "first: reply pong"])
    }

    @Test func anExchangeIsDeclaredPassivelyFirstAndForRealOnlyWhenMissing() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        let exchange = TopologyItem.exchange(ExchangeDeclaration("booking.events", kind: .topic))
        let queue = TopologyItem.queue(QueueDeclaration("work", type: .quorum))
        d.answer = { call in
            if case .exchangeExists = call { return .failure(AMQPError(.channelClosed, "NOT_FOUND", replyCode: 404)) }
            return nil
        }
        d.command(.declare([exchange, queue], answers.void("declare")))
        #expect(d.takeCalls() == [.exchangeExists("booking.events", channel: 2), .openChannel(2),
                                  .declare(exchange, channel: 2), .declare(queue, channel: 2)])
        #expect(answers.lines == ["declare: ok"])
        #expect(d.session.topology == [exchange, queue])

        // A new connection declares it again, now passively only.
        d.answer = { _ in nil }
        d.perform(d.session.reset(AMQPError(.connectionLost, "gone")))
        d.perform(d.session.setUp())
        #expect(d.takeCalls() == [.openChannel(1), .confirmSelect(1), .openChannel(2),
                                  .exchangeExists("booking.events", channel: 2), .declare(queue, channel: 2)])
    }

    @Test func aFailedDeclarationAnswersItsCallerAndReopensTheControlChannelBeforeItsNextUse() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        let queue = TopologyItem.queue(QueueDeclaration("work", type: .quorum))
        d.answer = { call in
            if case .declare = call { return .failure(AMQPError(.channelClosed, "PRECONDITION_FAILED", replyCode: 406)) }
            return nil
        }
        d.command(.declare([queue], answers.void("declare")))
        #expect(answers.lines == ["declare: channelClosed"])
        #expect(d.aborted == nil)  // only the channel is gone
        #expect(d.session.topology.isEmpty)
        d.answer = { _ in nil }
        _ = d.takeCalls()
        d.command(.inspectQueue("work", answers.info("inspect")))
        #expect(d.takeCalls() == [.openChannel(2), .inspectQueue("work", channel: 2)])
        #expect(answers.lines.last == "inspect: 7 messages")
    }

    @Test func aConsumerGetsItsOwnChannelAndItsDeliveriesCarryTheChannelsGeneration() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        let (_, handler) = DeliveryStream.makeStream()
        d.command(.consume(id: 1, spec("work"), handler, answers.void("consume")))
        #expect(d.takeCalls() == [.openChannel(3), .qos(3, prefetch: 5),
                                  .consume(3, queue: "work", noAck: false, exclusive: false, arguments: [:])])
        #expect(answers.lines == ["consume: ok"])
        d.frame(.delivery(channel: 3, consumerTag: "ctag-1", deliveryTag: 9, redelivered: false, exchange: "x",
                          routingKey: "booking.created", content: content("{}")))
        let delivery = d.deliveries.first
        #expect(delivery?.queue == "work" && delivery?.deliveryTag == 9)
        #expect(delivery?.generation == d.session.channels.generation(of: 3))
        #expect(d.metrics.last == .delivered(queue: "work", routingKey: "booking.created"))

        // Settled on the live channel: an ack. After a reconnect: stale.
        d.command(.settle(channel: 3, generation: delivery!.generation, .ack(9), answers.void("ack")))
        #expect(d.takeCalls() == [.ack(channel: 3, deliveryTag: 9)])
        #expect(answers.lines.last == "ack: ok")
        d.perform(d.session.reset(AMQPError(.connectionLost, "gone")))
        d.perform(d.session.setUp())
        #expect(d.takeCalls().suffix(3) == [.openChannel(3), .qos(3, prefetch: 5),
                                            .consume(3, queue: "work", noAck: false, exclusive: false, arguments: [:])])
        d.command(.settle(channel: 3, generation: delivery!.generation, .ack(9), answers.void("late ack")))
        #expect(d.takeCalls().isEmpty)
        #expect(answers.lines.last == "late ack: staleDelivery")
    }

    @Test func aDeliveryForNoConsumerIsHandedBackAndAFailedRejectLosesTheConnection() {
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        d.frame(.delivery(channel: 4, consumerTag: "gone", deliveryTag: 2, redelivered: false, exchange: "",
                          routingKey: "k", content: content()))
        #expect(d.takeCalls() == [.reject(channel: 4, deliveryTag: 2, requeue: true)])
        #expect(d.aborted == nil)
        d.answer = { _ in .failure(AMQPError(.connectionLost, "write failed")) }
        d.frame(.delivery(channel: 4, consumerTag: "gone", deliveryTag: 3, redelivered: false, exchange: "",
                          routingKey: "k", content: content()))
        #expect(d.aborted?.code == .connectionLost)
    }

    @Test func theBrokerClosingThePublishChannelFailsWhatWaitedOnItAndReopensIt() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        d.command(.publish(message("a"), answers.void("publish")))
        d.command(.rpc(message("q"), deadline: 100, answers.message("rpc")))
        _ = d.takeCalls()
        d.frame(.channelClosed(channel: 1, replyCode: 404, replyText: "NOT_FOUND - no exchange"))
        #expect(Set(answers.lines) == ["publish: channelClosed", "rpc: channelClosed"])
        #expect(d.takeCalls() == [.openChannel(1), .confirmSelect(1)])
        #expect(d.session.rpcs.replyConsumerTag == nil)
        // Numbering restarts with the new channel.
        d.command(.publish(message("b"), answers.void("again")))
        d.frame(.ack(deliveryTag: 1, multiple: false))
        #expect(answers.lines.last == "again: ok")
    }

    @Test func aConsumersChannelClosedByTheBrokerIsReopenedAndTheConsumerRestarted() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        let (_, handler) = DeliveryStream.makeStream()
        d.command(.consume(id: 1, spec("work"), handler, answers.void("consume")))
        _ = d.takeCalls()
        let before = d.session.channels.generation(of: 3)
        d.frame(.channelClosed(channel: 3, replyCode: 406, replyText: "PRECONDITION_FAILED - unknown delivery tag"))
        #expect(d.takeCalls() == [.openChannel(3), .qos(3, prefetch: 5),
                                  .consume(3, queue: "work", noAck: false, exclusive: false, arguments: [:])])
        #expect(d.session.channels.generation(of: 3) != before)
        #expect(d.session.consumers.consumer(forTag: "ctag-2") != nil)
    }

    @Test func aConsumerCancelledByTheBrokerEndsItsStreamWithAnError() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        let (_, handler) = DeliveryStream.makeStream()
        d.command(.consume(id: 1, spec("work"), handler, answers.void("consume")))
        d.frame(.consumerCancelled(consumerTag: "ctag-1"))
        #expect(d.finished.count == 1 && d.finished.first??.code == .channelClosed)
        #expect(d.session.consumers.isEmpty)
    }

    @Test func stoppingAConsumerCancelsItAndEndsItsStream() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        let (_, handler) = DeliveryStream.makeStream()
        d.command(.consume(id: 1, spec("work"), handler, answers.void("consume")))
        _ = d.takeCalls()
        d.command(.stopConsumer(id: 1))
        #expect(d.takeCalls() == [.cancel(3, consumerTag: "ctag-1")])
        #expect(d.finished.count == 1 && d.finished.first! == nil)
    }

    @Test func theBrokerClosingTheConnectionGivesItUp() {
        var d = Driver()
        d.connect()
        d.frame(.connectionClosed(replyCode: 320, replyText: "CONNECTION_FORCED"))
        #expect(d.aborted?.code == .connectionLost && d.aborted?.replyCode == 320)
    }

    @Test func aFailedSetUpAbortsAndLeavesTheSessionIdle() {
        var d = Driver()
        d.answer = { call in
            if case .confirmSelect = call { return .failure(AMQPError(.connectionLost, "reset by peer")) }
            return nil
        }
        d.perform(d.session.setUp())
        #expect(d.takeCalls() == [.openChannel(1), .confirmSelect(1)])
        #expect(d.aborted?.code == .connectionLost)
        #expect(d.session.isIdle)
    }

    @Test func whileDisconnectedCommandsWaitConsumersRegisterAndSettlementsAreStale() {
        let answers = Answers()
        var d = Driver()  // still connecting
        d.command(.publish(message("a"), answers.void("publish")))
        d.command(.rpc(message("q"), deadline: 50, answers.message("rpc")))
        let (_, handler) = DeliveryStream.makeStream()
        d.command(.consume(id: 1, spec("work"), handler, answers.void("consume")))
        d.command(.settle(channel: 3, generation: 1, .ack(1), answers.void("ack")))
        #expect(d.takeCalls().isEmpty)
        #expect(answers.lines == ["consume: ok", "ack: staleDelivery"])
        #expect(d.session.deferred.count == 2)
        d.perform(d.session.expire(now: 50))
        #expect(answers.lines.last == "rpc: timeout")
        #expect(d.session.deferred.count == 1)

        // Connected: the consumer starts with the set-up, the publish runs.
        d.connect()
        #expect(d.takeCalls().suffix(3) == [.openChannel(3), .qos(3, prefetch: 5),
                                            .consume(3, queue: "work", noAck: false, exclusive: false, arguments: [:])])
        for command in d.session.takeDeferred() { d.command(command) }
        #expect(d.takeCalls().count == 1)
        d.frame(.ack(deliveryTag: 1, multiple: false))
        #expect(answers.lines.last == "publish: ok")
    }

    @Test func closingFailsWhatWaitsAndAnswersTheCloseCallersLast() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        d.command(.publish(message("a"), answers.void("publish")))
        d.command(.close(answers.void("close")))
        #expect(d.session.connection.isDraining)
        let error = AMQPError(.closed, "connection is closed")
        d.perform(d.session.closing(error))
        d.perform(d.session.closed(error))
        #expect(answers.lines == ["publish: closed", "close: ok"])
        #expect(d.session.confirms.isEmpty)
    }

    @Test func aControlMethodsChannelErrorClosesTheControlChannel() {
        let answers = Answers()
        var d = Driver()
        d.connect()
        _ = d.takeCalls()
        d.answer = { call in
            if case .inspectQueue = call { return .failure(AMQPError(.channelClosed, "NOT_FOUND", replyCode: 404)) }
            return nil
        }
        d.command(.inspectQueue("missing", answers.info("inspect")))
        #expect(answers.lines == ["inspect: channelClosed"])
        #expect(!d.session.channels.isOpen(2) && d.session.channels.generation(of: 2) == nil)
        #expect(d.aborted == nil)
    }
}
