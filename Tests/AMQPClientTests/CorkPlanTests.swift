@testable import AMQPClient
import Testing

/// The I/O loop corks the socket only while frames that wait for nothing
/// go out together; a command that may wait for the broker runs uncorked,
/// or its request would sit in the kernel until the cork's 200 ms timer.
@Suite("Corking the socket")
struct CorkPlanTests {
    @Test func aLonePublishIsCorkedALoneAckIsNot() {
        #expect(IOLoop.corkPlan([.publishes]) == [true], "three frames: method, header, body")
        #expect(IOLoop.corkPlan([.settle]) == [false], "one frame: nothing to gather")
    }

    @Test func publishesAndAcksTogetherAreCorked() {
        #expect(IOLoop.corkPlan([.settle, .publishes, .settle]) == [true, true, true])
        #expect(IOLoop.corkPlan([.settle, .settle]) == [true, true])
    }

    @Test func aCommandThatMayWaitRunsUncorkedEvenBetweenPublishes() {
        #expect(IOLoop.corkPlan([.publishes, .mayWait, .publishes]) == [true, false, true])
        #expect(IOLoop.corkPlan([.mayWait, .settle]) == [false, true])
        #expect(IOLoop.corkPlan([.mayWait]) == [false])
    }
}
