import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// Idempotency, poison messages, plain publishers, concurrent handlers.
@Suite("Booking handler delivery guarantees")
struct DeliveryGuaranteeTests {
    @Test func repeatedMessageIdGetsTheSameReplyAndNoSecondEffect() async throws {
        let h = try await HandlerHarness.start()
        _ = try await h.nextEvents(6)
        let first = try await h.send("booking.create", json: createJSON(), messageID: "dup-1")
        let second = try await h.send("booking.create", json: createJSON(), messageID: "dup-1")
        #expect(first.booking != nil)
        #expect(second == first, "same reply, same booking id")
        // The idempotency-key header works the same for clients without message_id.
        let viaHeader1 = try await h.send("booking.create", Array(createJSON(start: "11:00", end: "12:00").utf8),
                                          messageID: nil, headers: ["idempotency-key": "key-7"]).0
        let viaHeader2 = try await h.send("booking.create", Array(createJSON(start: "11:00", end: "12:00").utf8),
                                          messageID: nil, headers: ["idempotency-key": "key-7"]).0
        #expect(viaHeader1.booking != nil)
        #expect(viaHeader2 == viaHeader1)
        // Without any key a command is processed every time: the second is an overlap.
        let keyless1 = try await h.send("booking.create", json: createJSON(start: "13:00", end: "14:00"), messageID: nil)
        let keyless2 = try await h.send("booking.create", json: createJSON(start: "13:00", end: "14:00"), messageID: nil)
        #expect(keyless1.booking != nil)
        #expect(keyless2.error?.code == .overlap)

        #expect(try await h.app.store.counts().bookings == 3)
        // Exactly one created+confirmed pair per booking; the repeats published nothing.
        let events = try await h.nextEvents(6)
        #expect(events.filter { $0.type == "booking.created" }.count == 3)
        #expect(try await h.client.queueInfo(h.eventsQueue).messageCount == 0)
        await h.stop()
    }

    @Test func poisonIsAnsweredDeadLetteredWithAReasonAndTheHandlerCarriesOn() async throws {
        let h = try await HandlerHarness.start()
        let dead = Topology.deadLetterQueue(for: Topology.handlerCommandsQueue)
        let notJSON = try await h.send("booking.create", Array("{{{ not json".utf8), messageID: "p-1").0
        #expect(notJSON.error?.code == .invalidJSON)
        // The queue is bound only for known types, so an unknown one arrives
        // through a known routing key with an unknown `type` property.
        var properties = AMQPProperties.persistentJSON(type: "booking.teleport", messageID: "p-2")
        properties.correlationID = "p-2"
        let unknownMessage = try await h.client.call(Array("{}".utf8), exchange: Topology.commandsExchange,
                                                     routingKey: "booking.create", properties: properties, timeout: .seconds(60))
        let unknown = try ContractJSON.decode(CommandReply.self, from: unknownMessage.body)
        #expect(unknown.error?.code == .unknownCommand)
        let wrongShape = try await h.send("booking.create", Array("[1,2,3]".utf8), messageID: "p-3").0
        #expect(wrongShape.error?.code == .invalidJSON)
        var garbage = [UInt8](repeating: 0, count: 2 << 20)
        for i in garbage.indices { garbage[i] = UInt8(truncatingIfNeeded: i &* 7919) }
        let big = try await h.send("booking.create", garbage, messageID: "p-4").0
        #expect(big.error?.code == .invalidJSON)

        // Still consuming: a good command works.
        #expect(try await h.send("booking.create", json: createJSON()).booking != nil)

        let deadConsumer = try await h.client.consume(queue: dead, prefetch: 10)
        let deadLettered = try await withTimeout(60) { try await deadConsumer.take(4) }
        #expect(Set(deadLettered.compactMap(\.properties.messageID)) == ["p-1", "p-2", "p-3", "p-4"])
        for message in deadLettered {
            #expect(message.properties.headers["x-death-reason"]?.stringValue?.isEmpty == false)
            #expect(message.properties.headers["x-original-routing-key"]?.stringValue != nil)
        }
        let teleport = try #require(deadLettered.first { $0.properties.messageID == "p-2" })
        #expect(teleport.properties.headers["x-error-code"]?.intValue == 1001)
        #expect(deadLettered.first { $0.properties.messageID == "p-4" }?.body.count == 2 << 20)
        deadConsumer.stop()
        await h.stop()
    }

    @Test func aPlainPublishWithOnlyARoutingKeyWorks() async throws {
        // As `amqp-publish -e booking.commands -r booking.create -b '…'` would send it:
        // no type, no message_id, no reply_to.
        let h = try await HandlerHarness.start()
        _ = try await h.nextEvents(6)
        try await h.client.publish(Array(createJSON().utf8), exchange: Topology.commandsExchange, routingKey: "booking.create")
        let events = try await h.nextEvents(2)
        #expect(events.map(\.type) == ["booking.created", "booking.confirmed"])
        await h.stop()
    }

    @Test func twoHandlersOnOneDatabaseNeverDoubleBook() async throws {
        let a = try await HandlerHarness.start(name: "handler-a")
        let b = try await HandlerHarness.start(url: a.url, dataDirectory: a.dataDirectory, name: "handler-b")
        // 12 slots, each requested 8 times with overlapping variants, all at once.
        let slots = (0..<12).map { i in (String(format: "%02d:00", 7 + i), String(format: "%02d:00", 8 + i)) }
        let replies = try await withThrowingTaskGroup(of: CommandReply.self) { group in
            for (start, end) in slots {
                for variant in 0..<8 {
                    let client = variant % 2 == 0 ? a : b
                    let (s, e) = variant % 3 == 0 ? (start, end) : (start.replacingOccurrences(of: ":00", with: ":15"), end)
                    group.addTask { try await client.send("booking.create", json: createJSON(start: s, end: e)) }
                }
            }
            var all: [CommandReply] = []
            for try await reply in group { all.append(reply) }
            return all
        }
        let booked = replies.compactMap(\.booking)
        #expect(replies.count == 96)
        #expect(replies.allSatisfy { $0.booking != nil || $0.error?.code == .overlap })
        // No two accepted bookings overlap.
        let intervals = booked.map { (ContractFormat.parseTimestamp($0.startsAt)!, ContractFormat.parseTimestamp($0.endsAt)!) }
            .sorted { $0.0 < $1.0 }
        for (x, y) in zip(intervals, intervals.dropFirst()) {
            #expect(x.1 <= y.0, "overlapping bookings \(x) and \(y)")
        }
        #expect(booked.count == 12, "every hour got exactly one booking")
        await b.stop()
        await a.stop()
    }
}
