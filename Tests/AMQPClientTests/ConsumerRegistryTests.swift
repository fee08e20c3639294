import Testing
@testable import AMQPClient

/// Handlers are plain strings so a wrong match shows in the failure.
private typealias Registry = ConsumerRegistry<String>

private func spec(_ queue: String) -> ConsumerSpec {
    ConsumerSpec(queue: queue, prefetch: 10, exclusive: false, arguments: [:])
}

@Suite("ConsumerRegistry")
struct ConsumerRegistryTests {
    @Test func consumersGetTheLowestFreeChannelFromTheFirstOne() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.add(id: 2, spec: spec("b"), handler: "B")
        r.add(id: 3, spec: spec("c"), handler: "C")
        #expect(r[1]?.channel == 3 && r[2]?.channel == 4 && r[3]?.channel == 5)
        #expect(r.ids == [1, 2, 3])
        #expect(r[1]?.tag == nil)
    }

    @Test func aDeliveryFindsTheConsumerOfItsTag() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.add(id: 2, spec: spec("b"), handler: "B")
        #expect(r.consumer(forTag: "t1") == nil)  // not started yet
        r.started(id: 1, tag: "t1")
        r.started(id: 2, tag: "t2")
        #expect(r.consumer(forTag: "t1")?.handler == "A")
        #expect(r.consumer(forTag: "t2")?.handler == "B")
        #expect(r.consumer(forTag: "t2")?.spec.queue == "b")
        #expect(r.consumer(forTag: "t3") == nil)
        // Starting an unknown id registers nothing.
        r.started(id: 9, tag: "t9")
        #expect(r.consumer(forTag: "t9") == nil)
    }

    @Test func aStoppedConsumersChannelLingersAndIsNotReused() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.add(id: 2, spec: spec("b"), handler: "B")
        r.started(id: 1, tag: "t1")
        let stopped = r.stop(id: 1)
        #expect(stopped?.handler == "A" && stopped?.tag == "t1" && stopped?.channel == 3)
        // A delivery that overtook the cancel is no longer claimed.
        #expect(r.consumer(forTag: "t1") == nil)
        #expect(r.stop(id: 1) == nil)
        r.add(id: 3, spec: spec("c"), handler: "C")
        #expect(r[3]?.channel == 5)  // 3 lingers, 4 is taken
        // After the connection ends the lingering channel is free again.
        r.connectionLost()
        r.add(id: 4, spec: spec("d"), handler: "D")
        #expect(r[4]?.channel == 3)
    }

    @Test func removeFreesTheChannelAtOnce() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        #expect(r.remove(id: 1)?.handler == "A")
        #expect(r.remove(id: 1) == nil)
        r.add(id: 2, spec: spec("b"), handler: "B")
        #expect(r[2]?.channel == 3)
    }

    @Test func aBrokerCancelRemovesOnlyThatConsumer() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.add(id: 2, spec: spec("b"), handler: "B")
        r.started(id: 1, tag: "t1")
        r.started(id: 2, tag: "t2")
        #expect(r.brokerCancelled(tag: "t2")?.handler == "B")
        #expect(r.brokerCancelled(tag: "t2") == nil)
        #expect(r[2] == nil && r.count == 1)
        #expect(r.consumer(forTag: "t1")?.handler == "A")
    }

    @Test func aClosedChannelNamesItsConsumerForRestart() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.add(id: 2, spec: spec("b"), handler: "B")
        r.started(id: 1, tag: "t1")
        r.started(id: 2, tag: "t2")
        #expect(r.channelClosed(4) == 2)
        #expect(r[2]?.tag == nil)
        #expect(r.consumer(forTag: "t2") == nil)
        #expect(r.consumer(forTag: "t1")?.handler == "A")
        #expect(r.channelClosed(99) == nil)
        r.started(id: 2, tag: "t2b")
        #expect(r.consumer(forTag: "t2b")?.handler == "B")
    }

    @Test func aLostConnectionForgetsTagsButKeepsConsumers() {
        var r = Registry(firstChannel: 3)
        r.add(id: 2, spec: spec("b"), handler: "B")
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.started(id: 1, tag: "t1")
        r.started(id: 2, tag: "t2")
        r.connectionLost()
        #expect(r.count == 2)
        #expect(r.ids == [1, 2])  // restarted in id order
        #expect(r[1]?.tag == nil && r[2]?.tag == nil)
        #expect(r.consumer(forTag: "t1") == nil && r.consumer(forTag: "t2") == nil)
        // Same channels on the next connection.
        #expect(r[2]?.channel == 3 && r[1]?.channel == 4)
    }

    @Test func removeAllHandsBackEveryConsumer() {
        var r = Registry(firstChannel: 3)
        r.add(id: 1, spec: spec("a"), handler: "A")
        r.add(id: 2, spec: spec("b"), handler: "B")
        r.started(id: 2, tag: "t2")
        #expect(r.removeAll().map(\.handler) == ["A", "B"])
        #expect(r.isEmpty)
        #expect(r.consumer(forTag: "t2") == nil)
    }
}
