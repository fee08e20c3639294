import CRabbitMQ
import Testing
@testable import AMQPClient

/// `CConnection.event(of:)`: frames as rabbitmq-c hands them over (a
/// method id and its decoded struct, or a frame of another type) become
/// Swift values; what needs the connection (content, an answer) is left
/// to it.
@Suite("Inbound events from frames")
struct InboundEventTests {
    /// A method frame on `channel` whose decoded struct is `method`.
    private func event<M>(_ id: amqp_method_number_t, _ method: M, channel: UInt16 = 3) -> InboundEvent? {
        var method = method
        return withUnsafeMutablePointer(to: &method) { pointer in
            var frame = amqp_frame_t()
            frame.frame_type = UInt8(AMQP_FRAME_METHOD)
            frame.channel = channel
            frame.payload.method.id = id
            frame.payload.method.decoded = UnsafeMutableRawPointer(pointer)
            return CConnection.event(of: &frame)
        }
    }

    @Test func publisherConfirmsKeepTheirTagAndMultipleFlag() {
        var ack = amqp_basic_ack_t()
        ack.delivery_tag = 1 << 40
        ack.multiple = 1
        guard case .ack(let tag, let multiple)? = event(MethodID.basicAck, ack) else {
            Issue.record("basic.ack not decoded as .ack"); return
        }
        #expect(tag == 1 << 40 && multiple)

        var nack = amqp_basic_nack_t()
        nack.delivery_tag = 7
        nack.multiple = 0
        guard case .nack(let nackTag, let nackMultiple)? = event(MethodID.basicNack, nack) else {
            Issue.record("basic.nack not decoded as .nack"); return
        }
        #expect(nackTag == 7 && !nackMultiple)
    }

    @Test func aBrokerCancelNamesTheConsumerTagCopiedOut() {
        let arena = CArena()
        var cancel = amqp_basic_cancel_t()
        cancel.consumer_tag = arena.bytes("ctag-übung-42")
        guard case .consumerCancelled(let tag)? = event(MethodID.basicCancel, cancel) else {
            Issue.record("basic.cancel not decoded"); return
        }
        // A Swift copy: still right after the C memory is gone.
        arena.reset()
        #expect(tag == "ctag-übung-42")
    }

    @Test func blockedAndUnblocked() {
        let none: UInt8 = 0
        guard case .blocked? = event(MethodID.connectionBlocked, none) else { Issue.record("connection.blocked"); return }
        guard case .unblocked? = event(MethodID.connectionUnblocked, none) else { Issue.record("connection.unblocked"); return }
    }

    @Test func methodsThatNeedTheConnectionAreLeftToIt() {
        let none: UInt8 = 0
        for id in [MethodID.basicReturn, MethodID.basicDeliver, MethodID.channelClose, MethodID.connectionClose] {
            #expect(event(id, none) == nil, "method \(String(id, radix: 16))")
        }
    }

    @Test func otherMethodsAndOtherFramesAreIgnoredWithWhatTheyWere() {
        let none: UInt8 = 0
        guard case .ignored(let channel, let method)? = event(MethodID.basicCancelOK, none, channel: 9) else {
            Issue.record("basic.cancel-ok not ignored"); return
        }
        #expect(channel == 9 && method == MethodID.basicCancelOK)

        var heartbeat = amqp_frame_t()
        heartbeat.frame_type = UInt8(AMQP_FRAME_HEARTBEAT)
        heartbeat.channel = 0
        guard case .ignored(0, nil)? = CConnection.event(of: &heartbeat) else {
            Issue.record("a heartbeat frame not ignored as a non-method frame"); return
        }
    }
}
