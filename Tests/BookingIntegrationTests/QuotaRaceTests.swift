import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import ServiceSupport
import Testing
import TestSupport

/// Contract v1.2, `maxActiveBookings`, where only several processes can
/// show it: two booking-handler processes on one PostgreSQL database, and
/// twenty creates of one requester sent at once, spread over both. The
/// count and the insert it allows must run in one transaction under the
/// write lock, or two processes each see room for one more.
@Suite("The quota across two handlers on PostgreSQL", .serialized)
struct QuotaRaceTests {
    @Test func twentyConcurrentCreatesThroughTwoHandlersNeverExceedTheQuota() async throws {
        let databaseURL = try TestPostgres.url(schemaPrefix: "quota")
        let pair = try await HandlerPair.start("quota", databaseURL: databaseURL)
        defer { pair.kill() }
        let (send, collect) = (pair.send, pair.collect)
        let quota = 4
        try await send("room.register", #"{"name": "Quota", "capacity": 4, "opens": "07:00", "closes": "19:00", "maxActiveBookings": \#(quota)}"#)
        #expect(try await collect(1).first?.roomValue?.maxActiveBookings == quota)

        // Twenty creates of one requester, on distinct half hours of one
        // day (no overlaps between them: only the quota can refuse).
        let date = TestDates.berlinDate(daysFromNow: 3)
        for i in 0..<20 {
            let start = 7 * 60 + 30 * i
            func time(_ m: Int) -> String { String(format: "%02d:%02d", m / 60, m % 60) }
            try await send("booking.create", createJSON(room: "Quota", date: date, start: time(start), end: time(start + 30)))
        }
        let all = try await collect(20)
        let booked = all.compactMap(\.bookingValue)
        let refused = all.compactMap(\.errorValue)
        print("quota race: \(booked.count) booked, \(refused.count) refused (1113) of 20 through two handlers")
        #expect(booked.count == quota, "exactly the quota, never more")
        #expect(refused.count == 20 - quota)
        for error in refused { #expect(error.code == .quotaExceeded && error.limit == quota, "\(error)") }
        // The database agrees (not only the replies).
        let schema = try #require(URLComponents(string: databaseURL)?.queryItems?.first { $0.name == "schema" }?.value)
        let active = try TestPostgres.control("psql", ["-At", "-c", "SET search_path TO \(schema)",
                                                         "-c", "SELECT count(*) FROM booking WHERE room = 'Quota' AND status IN ('pending', 'confirmed', 'inProgress')"])
        #expect(active.split(separator: "\n").last == "\(quota)")
        await pair.stop()
    }
}
