@testable import AMQPClient
import Testing

/// The I/O loop corks the socket only while several messages or acks go
/// out together; a command that may wait for the broker runs uncorked, or
/// its request would sit in the kernel until the cork's 200 ms timer.
@Suite("Corking the socket")
struct CorkPlanTests {
    @Test func aLoneMessageOrAckIsNotCorked() {
        // rabbitmq-c sends one message as one segment already (MSG_MORE).
        #expect(IOLoop.corkPlan([.publishes(1)]) == [false])
        #expect(IOLoop.corkPlan([.settle]) == [false])
        #expect(IOLoop.corkPlan([.publishes(0)]) == [false])
    }

    @Test func severalMessagesAndAcksTogetherAreCorked() {
        #expect(IOLoop.corkPlan([.publishes(5)]) == [true], "a batch")
        #expect(IOLoop.corkPlan([.settle, .publishes(1), .settle]) == [true, true, true])
        #expect(IOLoop.corkPlan([.settle, .settle]) == [true, true])
    }

    @Test func aCommandThatMayWaitRunsUncorkedAndSplitsTheRuns() {
        #expect(IOLoop.corkPlan([.publishes(2), .mayWait, .publishes(3)]) == [true, false, true])
        // Counted per run: a lone ack beside a command that may wait stays uncorked.
        #expect(IOLoop.corkPlan([.mayWait, .settle]) == [false, false])
        #expect(IOLoop.corkPlan([.publishes(1), .mayWait, .publishes(1)]) == [false, false, false])
        #expect(IOLoop.corkPlan([.mayWait, .settle, .settle, .mayWait]) == [false, true, true, false])
        #expect(IOLoop.corkPlan([.mayWait]) == [false])
    }
}
