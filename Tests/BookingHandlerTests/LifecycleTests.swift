import BookingContracts
import Foundation
import Synchronization
import Testing
@testable import BookingHandler

/// The lifecycle rules of contract v1.1 without I/O: check-in window,
/// release time, the next timed transition, ending a booking early.
@Suite("Lifecycle rules")
struct LifecycleRuleTests {
    static func room(release: Int? = nil) -> Room {
        Room(name: "Berlin", capacity: 8, autoReleaseMinutes: release)
    }

    /// 09:00–10:00 Berlin on 2026-11-23 (08:00–09:00Z).
    static let booking = Booking(id: "b-1", room: "Berlin", date: "2026-11-23", start: "09:00", end: "10:00",
                                 timeZone: "Europe/Berlin", startsAt: "2026-11-23T08:00:00Z", endsAt: "2026-11-23T09:00:00Z",
                                 title: "T", status: .confirmed, attendees: [], version: 1)

    @Test func checkinOpensFifteenMinutesBeforeTheStartAndClosesAtTheEnd() {
        let room = Self.room()
        #expect(BookingRules.checkinRefusal(Self.booking, room: room, now: utc("2026-11-23T07:44:59Z"))?.code == .checkinNotPossible)
        #expect(BookingRules.checkinRefusal(Self.booking, room: room, now: utc("2026-11-23T07:45:00Z")) == nil, "exactly 15 minutes before")
        #expect(BookingRules.checkinRefusal(Self.booking, room: room, now: utc("2026-11-23T08:59:59Z")) == nil)
        let atEnd = BookingRules.checkinRefusal(Self.booking, room: room, now: utc("2026-11-23T09:00:00Z"))
        #expect(atEnd?.code == .checkinNotPossible)
        #expect(atEnd?.text.contains("ended") == true)
    }

    @Test func checkinClosesAtTheReleaseToTheSecond() {
        let room = Self.room(release: 10)
        #expect(BookingRules.checkinRefusal(Self.booking, room: room, now: utc("2026-11-23T08:09:59Z")) == nil)
        let released = BookingRules.checkinRefusal(Self.booking, room: room, now: utc("2026-11-23T08:10:00Z"))
        #expect(released?.code == .checkinNotPossible)
        #expect(released?.text.contains("released") == true)
    }

    @Test func releaseIsNeverAfterTheEnd() {
        let start = utc("2026-11-23T08:00:00Z"), end = utc("2026-11-23T08:15:00Z")
        #expect(BookingRules.releaseTime(startsAt: start, endsAt: end, room: Self.room(release: 10)) == utc("2026-11-23T08:10:00Z"))
        #expect(BookingRules.releaseTime(startsAt: start, endsAt: end, room: Self.room(release: 60)) == end)
        #expect(BookingRules.releaseTime(startsAt: start, endsAt: end, room: Self.room()) == nil)
    }

    @Test func nextTransitionByStatusAndRoom() {
        let start = utc("2026-11-23T08:00:00Z"), end = utc("2026-11-23T09:00:00Z")
        func next(_ status: BookingStatus, _ room: Room?) -> String? {
            BookingRules.nextTransition(status: status, startsAt: start, endsAt: end, room: room)
                .map { "\($0.transition.rawValue)@\(ContractFormat.timestamp($0.due))" }
        }
        #expect(next(.pending, Self.room()) == "expire@2026-11-23T08:00:00Z")
        #expect(next(.pending, Self.room(release: 10)) == "expire@2026-11-23T08:00:00Z")
        #expect(next(.confirmed, Self.room()) == "start@2026-11-23T08:00:00Z")
        #expect(next(.confirmed, nil) == "start@2026-11-23T08:00:00Z")
        #expect(next(.confirmed, Self.room(release: 10)) == "release@2026-11-23T08:10:00Z")
        #expect(next(.inProgress, Self.room(release: 10)) == "complete@2026-11-23T09:00:00Z")
        for final in [BookingStatus.completed, .cancelled, .rejected] {
            #expect(next(final, Self.room()) == nil)
            #expect(BookingRules.earliestDue(status: final, startsAt: start, endsAt: end) == nil)
        }
        #expect(BookingRules.earliestDue(status: .confirmed, startsAt: start, endsAt: end) == start,
                "the stored due time never comes after any policy's")
    }

    @Test func cancellingInProgressEndsAtTheNextQuarterHour() throws {
        var running = Self.booking
        running.status = .inProgress
        let zone = try #require(TimeZone(identifier: "Europe/Berlin"))
        let cut = BookingRules.cutShort(running, now: utc("2026-11-23T08:20:01Z"), zone: zone)
        #expect(cut.endsAt == "2026-11-23T08:30:00Z")
        #expect(cut.end == "09:30", "local time in the room's zone")
        #expect(cut.start == "09:00" && cut.startsAt == running.startsAt)
        #expect(BookingRules.cutShort(running, now: utc("2026-11-23T08:30:00Z"), zone: zone).end == "09:30",
                "on a step: that step")
        #expect(BookingRules.cutShort(running, now: utc("2026-11-23T08:50:00Z"), zone: zone).end == "10:00",
                "the next step is the end: unchanged")
        #expect(BookingRules.cutShort(running, now: utc("2026-11-23T07:50:00Z"), zone: zone) == running,
                "checked in early, cancelled before the start: it never used the room")
    }
}

/// The timers on each store (a real SQLite file, the run's PostgreSQL) with an injected clock: due order,
/// at-most-once with two processes, release at the minute, policy changes.
@Suite("Booking timers")
struct TimerTests {
    let clock = TestClock(utc("2026-11-22T10:00:00Z"))

    func set(_ text: String) { clock.set(utc(text)) }

    func processor(_ fixture: StoreFixture, policy: CallerPolicy = CallerPolicy()) async throws -> CommandProcessor {
        let clock = self.clock
        return CommandProcessor(store: try await fixture.open(), policy: policy, now: { clock.now })
    }

    /// A processor on `fixture` with ``rooms`` registered.
    func roomsProcessor(_ fixture: StoreFixture, policy: CallerPolicy = CallerPolicy()) async throws -> CommandProcessor {
        let processor = try await processor(fixture, policy: policy)
        _ = try await processor.upsertRooms(fileContents: Data(Self.rooms.utf8))
        return processor
    }

    static let rooms = #"""
        [{"name": "Berlin", "capacity": 8},
         {"name": "Quiet", "capacity": 4, "autoReleaseMinutes": 10},
         {"name": "Board", "capacity": 4, "requiresApproval": true},
         {"name": "Hamburg", "capacity": 8}]
        """#

    func run(_ processor: CommandProcessor, _ type: CommandType, _ json: String, user: String? = nil) async throws -> CommandReply {
        let command = IncomingCommand(body: Array(json.utf8), typeProperty: type.rawValue, routingKey: type.rawValue,
                                      messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: user)
        guard case .handled(let reply, _, _, _) = try await processor.process(command) else { throw CancellationError() }
        return reply
    }

    func book(_ processor: CommandProcessor, _ room: String, _ start: String = "09:00", _ end: String = "10:00",
              date: String = "2026-11-23") async throws -> Booking {
        let reply = try await run(processor, .createBooking, #"""
            {"room":"\#(room)","date":"\#(date)","start":"\#(start)","end":"\#(end)","title":"T",
             "attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}
            """#)
        return try #require(reply.bookingValue, "\(reply)")
    }

    /// Applies everything due now; the steps that applied something.
    func drain(_ processor: CommandProcessor) async throws -> [String] {
        var applied: [String] = []
        while let step = try await processor.applyDueTimer() {
            if case .applied(let id, let transition, let version) = step { applied.append("\(id):\(transition.rawValue):\(version)") }
        }
        return applied
    }

    /// Every booking event in the outbox, in commit order, as `type id version`.
    func events(_ store: any BookingStore) throws -> [String] {
        // This process's events reach its relay in memory, in commit order.
        try store.takeCommitted(limit: 100_000).filter { $0.routingKey.hasPrefix("booking.") }.map { event in
            let body = try ContractJSON.decode(BookingEvent.self, from: event.body)
            return "\(event.routingKey) \(body.booking.id) v\(body.booking.version)\(body.released == true ? " released" : "")"
        }
    }

    @Test(arguments: StoreKind.allCases)
    func eachTransitionAtItsDueSecondAndNotBefore(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let processor = try await roomsProcessor(fixture)
        let berlin = try await book(processor, "Berlin")
        let quiet = try await book(processor, "Quiet")
        let board = try await book(processor, "Board")

        set("2026-11-23T07:59:59Z")
        #expect(try await drain(processor).isEmpty, "nothing before the start")
        set("2026-11-23T08:00:00Z")
        #expect(Set(try await drain(processor)) == ["\(berlin.id):start:2", "\(board.id):expire:2"])
        set("2026-11-23T08:09:59Z")
        #expect(try await drain(processor).isEmpty, "the release waits for its minute")
        set("2026-11-23T08:10:00Z")
        #expect(try await drain(processor) == ["\(quiet.id):release:2"])
        set("2026-11-23T09:00:00Z")
        #expect(try await drain(processor) == ["\(berlin.id):complete:3"])
        set("2026-11-24T09:00:00Z")
        #expect(try await drain(processor).isEmpty, "final statuses have no timers")

        let store = processor.store
        let reads = try await [berlin.id, quiet.id, board.id].asyncMap { try await store.booking(id: $0) }
        #expect(reads.map { $0?.status } == [.completed, .cancelled, .rejected])
        #expect(reads[1]?.cancelReason == "released: nobody checked in")
        #expect(reads[2]?.cancelReason == "expired")
        let published = try events(store)
        #expect(published.contains("booking.started \(berlin.id) v2"))
        #expect(published.contains("booking.completed \(berlin.id) v3"))
        #expect(published.contains("booking.cancelled \(quiet.id) v2 released"))
        #expect(published.contains("booking.rejected \(board.id) v2"))
    }

    @Test(arguments: StoreKind.allCases)
    func afterDowntimeMissedTransitionsComeInDueOrder(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let processor = try await roomsProcessor(fixture)
        let early = try await book(processor, "Berlin", "08:00", "09:00")
        let late = try await book(processor, "Berlin", "09:15", "11:00")
        let quiet = try await book(processor, "Quiet", "08:30", "09:30")
        let short = try await book(processor, "Hamburg", "08:30", "08:45")
        set("2026-11-23T12:00:00Z")  // the handler was down all morning
        #expect(try await drain(processor) == [
            "\(early.id):start:2",     // 07:00Z
            "\(short.id):start:2",     // 07:30Z (the release room's booking starts too, but is due at 07:40)
            "\(quiet.id):release:2",   // 07:40Z
            "\(short.id):complete:3",  // 07:45Z
            "\(early.id):complete:3",  // 08:00Z
            "\(late.id):start:2",      // 08:15Z
            "\(late.id):complete:3",   // 10:00Z
        ])
    }

    @Test(arguments: StoreKind.allCases)
    func twoProcessesApplyEachTransitionOnce(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let first = try await roomsProcessor(fixture)
        var ids: [String] = []
        for hour in 7..<19 { ids.append(try await book(first, "Berlin", String(format: "%02d:00", hour), String(format: "%02d:45", hour)).id) }
        for hour in 7..<19 { ids.append(try await book(first, "Quiet", String(format: "%02d:00", hour), String(format: "%02d:45", hour)).id) }
        let second = try await processor(fixture)  // its own connections to the same database, as another process has
        set("2026-11-24T00:00:00Z")
        async let a = drain(first)
        async let b = drain(second)
        let applied = try await a + b
        #expect(applied.count == 12 * 2 + 12, "Berlin: start and complete; Quiet: release")
        #expect(Set(applied).count == applied.count, "no transition applied twice")
        // Publish as the two relays would: each process's events from its
        // memory, and from the table those the second queued behind the
        // first's unpublished ones of the same booking (order per booking).
        var published: [String] = []
        var versions: [String: [Int]] = [:]
        while true {
            let batch = (first.store.takeCommitted(limit: 100_000) + second.store.takeCommitted(limit: 100_000)
                         + (try await second.store.claimOutbox(limit: 100_000, lease: 60))).sorted { $0.id < $1.id }
            if batch.isEmpty { break }
            try await first.store.markPublished(batch.map(\.id))
            for event in batch where event.routingKey.hasPrefix("booking.") {
                let body = try ContractJSON.decode(BookingEvent.self, from: event.body)
                versions[body.booking.id, default: []].append(body.booking.version)
                if event.routingKey != "booking.created" && event.routingKey != "booking.confirmed" {
                    published.append("\(event.routingKey) \(body.booking.id) v\(body.booking.version)")
                }
            }
        }
        #expect(published.count == 36)
        #expect(Set(published).count == 36)
        #expect(versions.values.allSatisfy { $0 == $0.sorted() }, "each booking's events in version order")
    }

    @Test(arguments: StoreKind.allCases)
    func checkinThenTheEndCompletesIt(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let processor = try await roomsProcessor(fixture, policy: CallerPolicy(administrators: ["desk"]))
        let quiet = try await book(processor, "Quiet")
        set("2026-11-23T07:44:00Z")
        #expect(try await run(processor, .checkinBooking, #"{"bookingId":"\#(quiet.id)"}"#).errorValue?.code == .checkinNotPossible)
        set("2026-11-23T08:05:00Z")
        let started = try await run(processor, .checkinBooking, #"{"bookingId":"\#(quiet.id)"}"#)
        #expect(started.bookingValue?.status == .inProgress)
        #expect(started.bookingValue?.version == 2)
        #expect(try await run(processor, .checkinBooking, #"{"bookingId":"\#(quiet.id)"}"#).errorValue?.code == .statusChangeNotAllowed)
        set("2026-11-23T08:30:00Z")
        #expect(try await drain(processor).isEmpty, "checked in: no release")
        set("2026-11-23T09:00:00Z")
        #expect(try await drain(processor) == ["\(quiet.id):complete:3"])
        #expect(try await run(processor, .cancelBooking, #"{"bookingId":"\#(quiet.id)"}"#).errorValue?.code == .statusChangeNotAllowed,
                "completed is final")
    }

    @Test(arguments: StoreKind.allCases)
    func cancellingInProgressFreesTheRestOfTheSlot(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let processor = try await roomsProcessor(fixture)
        let berlin = try await book(processor, "Berlin", "09:00", "11:00")
        set("2026-11-23T08:00:00Z")
        _ = try await drain(processor)
        set("2026-11-23T08:20:00Z")
        let cancelled = try #require(try await run(processor, .cancelBooking, #"{"bookingId":"\#(berlin.id)"}"#).bookingValue)
        #expect(cancelled.status == .cancelled)
        #expect(cancelled.end == "09:30")
        #expect(cancelled.endsAt == "2026-11-23T08:30:00Z")
        let next = try await run(processor, .createBooking, #"""
            {"room":"Berlin","date":"2026-11-23","start":"09:30","end":"11:00","title":"T",
             "attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}
            """#)
        #expect(next.bookingValue?.status == .confirmed, "the rest of the slot is free")
    }

    @Test(arguments: StoreKind.allCases)
    func droppingCheckinRequirementStartsWaitingBookings(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let processor = try await roomsProcessor(fixture)
        let quiet = try await book(processor, "Quiet")
        set("2026-11-23T08:02:00Z")
        #expect(try await drain(processor).isEmpty, "waiting for a check-in until 08:10")
        _ = try await run(processor, .registerRoom, #"{"name":"Quiet","capacity":4}"#)
        #expect(try await drain(processor) == ["\(quiet.id):start:2"], "no check-in needed any more: started at once")
    }

    @Test(arguments: StoreKind.allCases)
    func confirmAfterTheStartIsTooLateAndExpiryRejects(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let processor = try await roomsProcessor(fixture, policy: CallerPolicy(administrators: ["desk"]))
        let board = try await book(processor, "Board")
        set("2026-11-23T08:00:01Z")
        #expect(try await run(processor, .confirmBooking, #"{"bookingId":"\#(board.id)"}"#, user: "desk").errorValue?.code
            == .tooLateToChange)
        #expect(try await drain(processor) == ["\(board.id):expire:2"])
    }
}

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let value: Mutex<Date>
    init(_ start: Date) { value = Mutex(start) }
    var now: Date { value.withLock { $0 } }
    func set(_ date: Date) { value.withLock { $0 = date } }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
