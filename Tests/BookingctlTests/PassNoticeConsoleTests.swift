import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import PassSender
import Testing
import TestSupport

/// `bookingctl passes failed …` for notices (contract v1.1): their key
/// carries the kind, list and show name it, `--kind` narrows a retry, and
/// the retry message tells the pass sender which kind to send again.
@Suite("bookingctl passes failed: notices", .serialized)
struct PassNoticeConsoleTests {
    @Test func everyKindIsListedShownAndRetried() async throws {
        let w = try await FailedConsoleTests.World()
        try await w.admin.declare(PassQueues.ownQueues(delays: []))
        let passSender = try await w.connection("pass-sender")
        let now = ContractFormat.timestamp(Date())
        var published: [FailedPass] = []
        for kind in NoticeKind.allCases {
            let failed = FailedPass(bookingId: "b-9", version: 3, attendeeIndex: 0, name: "Ada", email: "ada@example.com",
                                    phone: "+491701234567", attempts: 5, firstFailureAt: now, lastFailureAt: now,
                                    lastErrorCode: 4001, lastErrorText: "mailbox full", room: "Berlin", date: "2026-11-24",
                                    start: "09:00", end: "10:00", title: "T", kind: kind)
            var properties = AMQPProperties.persistentJSON(type: Topology.passesFailedQueue, messageID: failed.passKey,
                                                           headers: FailedPassHeaders.headers(for: failed))
            properties.userID = "pass-sender"
            try await passSender.publish([UInt8](try ContractJSON.encode(failed)), routingKey: Topology.passesFailedQueue,
                                         properties: properties, mandatory: true)
            published.append(failed)
        }
        #expect(published.map(\.passKey) == ["b-9:3:0", "b-9:3:rescheduled:0", "b-9:3:cancelled:0", "b-9:3:removed:0"])
        let cli = w.cli

        let list = try await cli.run(["passes", "failed", "list", "--json"])
        #expect(list.status == 0, "\(list.stderr)")
        let listed = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])
        #expect(listed["byKind"] as? [String: Int] == ["pass": 1, "rescheduled": 1, "cancelled": 1, "removed": 1])
        #expect((listed["passes"] as? [[String: Any]])?.compactMap { $0["key"] as? String } == published.map(\.passKey))

        let show = try await cli.run(["passes", "failed", "show", "b-9:3:removed:0"])
        #expect(show.status == 0 && show.stdout.contains("kind        removed"), "\(show.stdout)\(show.stderr)")

        let bad = try await cli.run(["passes", "failed", "retry", "--all", "--kind", "reminder"])
        #expect(bad.status != 0 && bad.stderr.contains("--kind must be one of"), "\(bad.stderr)")

        let retried = try await cli.run(["passes", "failed", "retry", "--booking", "b-9", "--kind", "cancelled"])
        #expect(retried.status == 0 && retried.stdout.contains("b-9:3:cancelled:0"), "\(retried.stdout)\(retried.stderr)")
        let message = try #require(try await w.admin.get(queue: PassQueues.retry))
        let retry = try ContractJSON.decode(PassRetryMessage.self, from: message.body)
        #expect(retry.kind == .operator && retry.noticeKind == .cancelled && retry.passes.map(\.attendeeIndex) == [0])
        #expect(message.properties.headers["notice-kind"]?.stringValue == "cancelled")
        try await message.ack()
        #expect(try await w.admin.get(queue: PassQueues.retry) == nil, "only the cancelled notice")

        let rest = try await cli.run(["passes", "failed", "list", "--json"])
        let left = try #require(try JSONSerialization.jsonObject(with: Data(rest.stdout.utf8)) as? [String: Any])
        #expect(left["byKind"] as? [String: Int] == ["pass": 1, "rescheduled": 1, "removed": 1])
        await w.stop()
    }
}
