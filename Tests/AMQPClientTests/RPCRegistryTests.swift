import Testing
@testable import AMQPClient

/// Waiters are plain strings so a wrong match shows in the failure.
private typealias Registry = RPCRegistry<String>

@Suite("RPCRegistry")
struct RPCRegistryTests {
    @Test func aReplyResolvesItsOwnWaiterOnce() {
        var r = Registry()
        let a = r.register("A", correlationID: nil, deadline: 100)
        let b = r.register("B", correlationID: nil, deadline: 100)
        let c = r.register("C", correlationID: nil, deadline: 100)
        #expect(Set([a, b, c]).count == 3)
        #expect(r.count == 3)

        #expect(r.resolve(b) == "B")
        #expect(r.resolve(b) == nil)  // a duplicate (late) reply finds nothing
        #expect(r.resolve(a) == "A")
        #expect(r.resolve("unknown") == nil)
        #expect(r.count == 1)
        #expect(r.resolve(c) == "C")
        #expect(r.isEmpty)
    }

    @Test func generatedCorrelationIDsAreUniqueAndACallersOwnIsKept() {
        var r = Registry()
        #expect(r.register("A", correlationID: nil, deadline: 1) == "rpc-1")
        #expect(r.register("B", correlationID: "mine", deadline: 1) == "mine")
        #expect(r.register("C", correlationID: nil, deadline: 1) == "rpc-3")
        #expect(r.resolve("mine") == "B")
        // Numbering goes on after replies: an old id is never handed out again.
        #expect(r.resolve("rpc-1") == "A")
        #expect(r.register("D", correlationID: nil, deadline: 1) == "rpc-4")
    }

    @Test func aMadeUpIDSkipsOneACallerChose() {
        var r = Registry()
        #expect(r.register("A", correlationID: "rpc-2", deadline: 1) == "rpc-2")
        #expect(r.isPending("rpc-2"))
        #expect(r.register("B", correlationID: nil, deadline: 1) == "rpc-3")
        #expect(r.resolve("rpc-2") == "A")
        #expect(r.resolve("rpc-3") == "B")
    }

    @Test func expiryTakesOnlyThoseAtOrPastTheirDeadline() {
        var r = Registry()
        let early = r.register("early", correlationID: nil, deadline: 10)
        let onTime = r.register("onTime", correlationID: nil, deadline: 20)
        let late = r.register("late", correlationID: nil, deadline: 30)
        #expect(r.nextDeadline == 10)
        #expect(r.expire(now: 9).isEmpty)
        #expect(r.expire(now: 10) == ["early"])
        #expect(r.resolve(early) == nil)
        #expect(r.nextDeadline == 20)
        #expect(Set(r.expire(now: 25)) == ["onTime"])
        #expect(r.resolve(onTime) == nil)
        #expect(r.count == 1)
        #expect(r.resolve(late) == "late")
        #expect(r.nextDeadline == nil)
        #expect(r.expire(now: .max).isEmpty)
    }

    @Test func aResolvedCallNeverExpires() {
        var r = Registry()
        let id = r.register("A", correlationID: nil, deadline: 10)
        #expect(r.resolve(id) == "A")
        #expect(r.expire(now: 100).isEmpty)
        #expect(r.nextDeadline == nil)
    }

    @Test func nextDeadlineIsNeverLaterThanTheEarliestPendingOne() {
        var r = Registry()
        _ = r.register("A", correlationID: nil, deadline: 50)
        _ = r.register("B", correlationID: nil, deadline: 20)
        _ = r.register("C", correlationID: nil, deadline: 40)
        #expect(r.nextDeadline == 20)
        #expect(r.expire(now: 20) == ["B"])
        #expect(r.nextDeadline == 40)
    }

    @Test func resetFailsEveryPendingCallAndForgetsTheReplyConsumer() {
        var r = Registry()
        r.replyConsumerStarted(tag: "amq.ctag-reply")
        #expect(r.isReplyConsumer("amq.ctag-reply"))
        #expect(!r.isReplyConsumer("amq.ctag-other"))
        let ids = (0..<5).map { r.register("w\($0)", correlationID: nil, deadline: 100) }
        #expect(Set(r.reset()) == Set((0..<5).map { "w\($0)" }))
        #expect(r.isEmpty)
        #expect(r.nextDeadline == nil)
        #expect(r.replyConsumerTag == nil)
        #expect(!r.isReplyConsumer("amq.ctag-reply"))
        // Nothing is answered twice: a reply arriving after the reset finds nothing.
        for id in ids { #expect(r.resolve(id) == nil) }
        #expect(r.reset().isEmpty)
    }

    @Test func noReplyConsumerMatchesNoTag() {
        let r = Registry()
        #expect(!r.isReplyConsumer(""))
        #expect(!r.isReplyConsumer("amq.ctag-1"))
    }
}
