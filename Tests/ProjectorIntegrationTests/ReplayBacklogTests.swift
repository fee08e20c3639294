import AMQPClient
import BookingContracts
import BookingHandler
import Foundation
import Testing
import TestSupport

/// A replay runs at the speed its reader takes it (``ReplayPacer``): with
/// nobody consuming, the replay queue stops growing just above
/// ``ReplayPacer/maxBacklog`` and the replay waits; once the reader
/// comes, every room and booking arrives, once, and the end marker after
/// them — with the real handler, its store and the real broker.
@Suite("Replay paced by the reader's backlog", .serialized)
struct ReplayBacklogTests {
    static let bookings = ReplayPacer.maxBacklog + 4_000

    @Test func aReplayNobodyTakesStopsAtTheBacklogBoundAndFinishesWhenTaken() async throws {
        let h = try await ProjectorHarness.start(startProjector: false)
        let rooms = try await Self.seed(h.handlerDirectory)
        let queue = ProjectorControl.replayQueue + ".backlog"
        try await h.client.declare([.queue(QueueDeclaration(queue, type: .classic))])
        let user = h.client.user
        let replay = Task {
            try await h.send(.replayBookings, ReplayBookings(queue: queue, replayId: "backlog"), userID: user)
        }

        // The queue fills to the bound (a page may land on top of it)…
        let ceiling = ReplayPacer.maxBacklog + 1_000
        let reached = try await withTimeout(120, "the replay queue reaching the backlog bound") {
            while true {
                let count = try await h.client.queueInfo(queue).messageCount
                if count > ReplayPacer.maxBacklog { return count }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(reached <= ceiling, "\(reached) messages waiting")
        // …and stays there while nobody reads: the replay waits instead of
        // publishing the other 4,000 bookings. (Nothing announces "still
        // waiting", so this watches for two seconds.)
        let watchUntil = ContinuousClock.now + .seconds(2)
        var highest = reached
        while ContinuousClock.now < watchUntil {
            highest = max(highest, try await h.client.queueInfo(queue).messageCount)
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(highest <= ceiling, "the replay queue grew to \(highest) with nobody reading it")
        #expect(highest < rooms + Self.bookings + 1, "the whole replay was published without a reader")

        // A reader takes it: everything arrives once, the marker last.
        let consumer = try await h.client.consume(queue: queue, prefetch: 1_000)
        let (seen, roomMessages, duplicates, summary) = try await withTimeout(120, "the whole replay") {
            var seen = Set<String>()
            var roomMessages = 0, duplicates = 0
            for try await delivery in consumer {
                try await delivery.ack()
                if delivery.properties.type == ReplayStream.endType {
                    return (seen, roomMessages, duplicates, try ContractJSON.decode(ReplaySummary.self, from: delivery.body) as ReplaySummary?)
                }
                if delivery.properties.type == EventType.roomRegistered.rawValue {
                    roomMessages += 1
                } else if !seen.insert(try ContractJSON.decode(BookingEvent.self, from: delivery.body).booking.id).inserted {
                    duplicates += 1
                }
            }
            return (seen, roomMessages, duplicates, nil)
        }
        consumer.stop()
        #expect(summary == ReplaySummary(replayId: "backlog", queue: queue, rooms: rooms, bookings: Self.bookings, closures: 0))
        #expect(seen.count == Self.bookings && duplicates == 0 && roomMessages == rooms)
        #expect(try await replay.value == .replay(ReplaySummary(replayId: "backlog", queue: queue, rooms: rooms, bookings: Self.bookings, closures: 0)))
        await h.stop()
    }

    /// The same replay in pages of 500 bookings: the queue stops at the same
    /// backlog counted in bookings (20 pages), every booking arrives once
    /// in id order and exactly as stored, each page within its size, and
    /// the end marker counts bookings, not pages.
    @Test func pagesStopAtTheSameBacklogInBookingsAndCarryEveryBookingOnce() async throws {
        let h = try await ProjectorHarness.start(startProjector: false)
        let rooms = try await Self.seed(h.handlerDirectory)
        let queue = ProjectorControl.replayQueue + ".pages"
        try await h.client.declare([.queue(QueueDeclaration(queue, type: .classic))])
        let user = h.client.user
        let perPage = 500
        let replay = Task {
            try await h.send(.replayBookings, ReplayBookings(queue: queue, replayId: "pages", bookingsPerMessage: perPage),
                             userID: user)
        }
        let bound = ReplayPacer.maxBacklog / perPage
        // Rooms are single messages: the bound is reached by pages on top of them.
        let reached = try await withTimeout(120, "the replay queue reaching the backlog bound") {
            while true {
                let count = try await h.client.queueInfo(queue).messageCount
                if count > bound { return count }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let watchUntil = ContinuousClock.now + .seconds(2)
        var highest = reached
        while ContinuousClock.now < watchUntil {
            highest = max(highest, try await h.client.queueInfo(queue).messageCount)
            try await Task.sleep(for: .milliseconds(100))
        }
        let everything = rooms + (Self.bookings + perPage - 1) / perPage
        #expect(highest < everything, "the whole replay (\(everything) messages) was published without a reader")
        #expect(highest <= rooms + bound + 1, "the replay queue grew to \(highest) messages with nobody reading it")

        let store = try SQLiteBookingStore(path: h.handlerDirectory + "/booking-handler.sqlite")
        let consumer = try await h.client.consume(queue: queue, prefetch: 50)
        let (ids, pages, oversized, mismatched, summary) = try await withTimeout(120, "the whole replay") {
            var ids: [String] = []
            var pages = 0, oversized = 0, mismatched = 0
            for try await delivery in consumer {
                try await delivery.ack()
                switch delivery.properties.type {
                case ReplayStream.endType?:
                    return (ids, pages, oversized, mismatched, try ContractJSON.decode(ReplaySummary.self, from: delivery.body) as ReplaySummary?)
                case ReplayStream.pageType?:
                    #expect(delivery.properties.headers[ReplayStream.replayIdHeader] == .string("pages"))
                    let page = try ContractJSON.decode(ReplayPage.self, from: delivery.body)
                    pages += 1
                    if page.bookings.count > perPage { oversized += 1 }
                    for booking in page.bookings {
                        if try await store.booking(id: booking.id) != booking { mismatched += 1 }
                    }
                    ids += page.bookings.map(\.id)
                case EventType.roomRegistered.rawValue?:
                    break
                default:
                    Issue.record("unexpected \(delivery.properties.type ?? "untyped") in a paged replay")
                }
            }
            return (ids, pages, oversized, mismatched, nil)
        }
        consumer.stop()
        await store.close()
        #expect(summary == ReplaySummary(replayId: "pages", queue: queue, rooms: rooms, bookings: Self.bookings, closures: 0))
        #expect(ids.count == Self.bookings && Set(ids).count == Self.bookings, "\(ids.count) bookings, \(Set(ids).count) distinct")
        #expect(ids == ids.sorted(), "pages come in booking id order")
        #expect(pages == (Self.bookings + perPage - 1) / perPage && oversized == 0)
        #expect(mismatched == 0, "a replayed booking differs from the stored one")
        #expect(try await replay.value == .replay(ReplaySummary(replayId: "pages", queue: queue, rooms: rooms, bookings: Self.bookings, closures: 0)))
        await h.stop()
    }

    /// ``bookings`` confirmed bookings written through the handler's store
    /// (the path its commands take), beside the running handler; the rooms.
    static func seed(_ directory: String) async throws -> Int {
        let store = try SQLiteBookingStore(path: directory + "/booking-handler.sqlite")
        let rooms = try await store.replayRooms().map(\.room.name).sorted()
        let zone = "Europe/Berlin"
        let perDay = rooms.count * 10
        try await store.transaction { tx in
            for i in 0..<bookings {
                let date = localDate(daysFromNow: 30 + i / perDay)
                let hour = 8 + i % 10
                let start = String(format: "%02d:00", hour), end = String(format: "%02d:45", hour)
                let startsAt = ContractFormat.instant(date: date, time: start, timeZone: zone)!
                let endsAt = ContractFormat.instant(date: date, time: end, timeZone: zone)!
                let booking = Booking(
                    id: String(format: "backlog-%05d", i), room: rooms[i / 10 % rooms.count], date: date, start: start, end: end,
                    timeZone: zone, startsAt: ContractFormat.timestamp(startsAt), endsAt: ContractFormat.timestamp(endsAt),
                    title: "Backlog \(i)", status: .confirmed,
                    attendees: [Attendee(name: "Ada Lovelace", email: "ada@example.com", phone: "+491701234567")],
                    requestedBy: "guest", version: 2)
                try tx.save(EncodedBooking(booking), startsAt: startsAt, endsAt: endsAt)
            }
        }
        return rooms.count
    }
}
