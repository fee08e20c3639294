import AMQPClient
import BookingContracts
import BrokerObjects
import Foundation
import GRDB
import ServiceSupport
import Testing
import TestSupport

/// Contract v1.2, "Promotion", where only several processes can show it:
/// two booking-handler processes on one database (PostgreSQL, and one
/// SQLite file), fifty waiters for one slot sent at once over both, then
/// cancels of whoever holds the slot racing with new waiters. After every
/// round exactly one blocking booking exists — buffers included: half the
/// waiters want the hour after the slot, which only the room's buffer
/// makes a conflict, so PostgreSQL's exclusion constraint cannot catch
/// what the lock misses — and it is the earliest waiter left.
@Suite("Waitlist promotion across two handler processes", .serialized)
struct WaitlistRaceTests {
    enum Engine: String, CaseIterable, CustomTestStringConvertible {
        case postgres, sqlite
        var testDescription: String { rawValue }
    }

    @Test(arguments: Engine.allCases)
    func fiftyWaitersAndRacingCancelsNeverConflictAndKeepOrder(_ engine: Engine) async throws {
        let databaseURL = engine == .postgres ? try TestPostgres.url(schemaPrefix: "waitrace") : nil
        // PostgreSQL: a data directory each (as on two hosts); SQLite: one
        // directory, one file, for both.
        let pair = try await HandlerPair.start("waitrace", databaseURL: databaseURL)
        defer { pair.kill() }
        let (send, collect, base) = (pair.send, pair.collect, pair.base)
        /// The room's blocking bookings: id, start and end (UNIX seconds), by start.
        func blocking() throws -> [(id: String, start: Int64, end: Int64)] {
            let sql = """
                SELECT id, startsAt, endsAt FROM booking
                WHERE room = 'Queue' AND status IN ('pending', 'confirmed', 'inProgress', 'held') ORDER BY startsAt, id
                """
            switch engine {
            case .postgres:
                let schema = try #require(URLComponents(string: databaseURL!)?.queryItems?.first { $0.name == "schema" }?.value)
                let out = try TestPostgres.control("psql", ["-At", "-F", " ", "-c", "SET search_path TO \(schema)", "-c", sql])
                var rows: [(id: String, start: Int64, end: Int64)] = []
                for line in out.split(separator: "\n") {
                    let fields = line.split(separator: " ").map(String.init)
                    guard fields.count == 3, let start = Int64(fields[1]), let end = Int64(fields[2]) else { continue }
                    rows.append((fields[0], start, end))
                }
                return rows
            case .sqlite:
                let queue = try DatabaseQueue(path: base.appendingPathComponent("booking-handler.sqlite").path)
                return try queue.read { db in
                    try Row.fetchAll(db, sql: sql).map { ($0[0], $0[1], $0[2]) }
                }
            }
        }
        /// Pairs of blocking bookings closer than the 15-minute buffer.
        func conflicts() throws -> [String] {
            let rows = try blocking()
            var found: [String] = []
            for (i, a) in rows.enumerated() {
                for b in rows[(i + 1)...] where a.start < b.end + 900 && b.start < a.end + 900 {
                    found.append("\(a.id)/\(b.id)")
                }
            }
            return found
        }

        try await send("room.register", #"{"name": "Queue", "capacity": 4, "opens": "07:00", "closes": "19:00", "bufferMinutes": 15}"#)
        #expect(try await collect(1).first?.roomValue?.bufferMinutes == 15)
        let date = TestDates.berlinDate(daysFromNow: 2)
        func create(_ start: String, _ end: String, waitlist: Bool, on date: String = date) -> String {
            String(createJSON(room: "Queue", date: date, start: start, end: end).dropLast()) + (waitlist ? #","ifTaken":"waitlist"}"# : "}")
        }
        try await send("booking.create", create("09:00", "10:00", waitlist: false))
        let holder = try #require(try await collect(1).first?.bookingValue)

        for i in 0..<50 {
            try await send("booking.create", i % 2 == 0 ? create("09:00", "10:00", waitlist: true) : create("10:00", "11:00", waitlist: true))
        }
        let waiters = try await collect(50).compactMap(\.bookingValue)
        #expect(waiters.count == 50 && waiters.allSatisfy { $0.status == .waitlisted })
        let positions = waiters.compactMap { $0.waitlist?.position }
        #expect(positions.sorted() == Array(1...50), "each waiter saw every earlier one: one queue across both processes")
        let order = waiters.sorted { ($0.waitlist?.position ?? 0) < ($1.waitlist?.position ?? 0) }.map(\.id)

        var current = holder.id
        var promoted: [String] = []
        var violations: [String] = []
        for round in 0..<20 {
            // A cancel of the current holder and a new waiter, at once: the
            // two processes race for the same room.
            try await send("booking.cancel", #"{"bookingId": "\#(current)"}"#)
            try await send("booking.create", create(round % 2 == 0 ? "09:00" : "10:00", round % 2 == 0 ? "10:00" : "11:00", waitlist: true))
            let answers = try await collect(2)
            #expect(answers.allSatisfy { $0.isOK }, "\(answers.compactMap(\.errorValue))")
            let now = try blocking()
            if now.count != 1 { violations.append("round \(round): \(now.count) blocking bookings") }
            guard let next = now.first else { break }
            promoted.append(next.id)
            current = next.id
        }

        // Safety: on each of twenty more days, two waiters that conflict
        // with each other only through the buffer (09:00–10:00 and
        // 10:00–11:00), each blocked by its own holder (08:00–09:00 and
        // 11:00–12:00, again only through the buffer); both holders
        // cancelled at once, one through each process. Whoever commits
        // first promotes its waiter; the other must then see it.
        let days = (3..<23).map { TestDates.berlinDate(daysFromNow: $0) }
        var holders: [(String, String)] = []
        for day in days {
            try await send("booking.create", create("08:00", "09:00", waitlist: false, on: day))
            try await send("booking.create", create("11:00", "12:00", waitlist: false, on: day))
            let pair = try await collect(2).compactMap(\.bookingValue).sorted { $0.start < $1.start }.map(\.id)
            try #require(pair.count == 2)
            holders.append((pair[0], pair[1]))
            try await send("booking.create", create("09:00", "10:00", waitlist: true, on: day))
            try await send("booking.create", create("10:00", "11:00", waitlist: true, on: day))
            #expect(try await collect(2).allSatisfy { $0.bookingValue?.status == .waitlisted })
        }
        for (first, second) in holders {
            try await send("booking.cancel", #"{"bookingId": "\#(first)"}"#)
            try await send("booking.cancel", #"{"bookingId": "\#(second)"}"#)
        }
        #expect(try await collect(2 * holders.count).allSatisfy { $0.isOK })
        let clashes = try conflicts()
        let promotedPairs = try blocking().count - 1  // the last holder of the first part is still there
        violations += clashes.map { "buffer conflict \($0)" }
        print("waitlist race (\(engine.rawValue)): \(holders.count) double cancels, \(promotedPairs) promotions, buffer conflicts: \(clashes.count)")
        #expect(promotedPairs == holders.count, "one waiter promoted per day, never both, never none")
        print("waitlist race (\(engine.rawValue)): 50 waiters, \(promoted.count) promotions through two handlers; violations: \(violations)")
        #expect(violations.isEmpty, "never two blocking bookings in conflict")
        #expect(promoted == Array(order.prefix(promoted.count)), "never a waiter passed over by a later one")
        #expect(promoted.count == 20)
        await pair.stop()
    }
}
