import BookingContracts
import Foundation
import GRDB
import Logging
import PostgresSupport
import TestSupport
import Testing
@testable import BookingHandler

/// The two stores the handler runs on: SQLite (one machine) and PostgreSQL
/// (several), each real — a file, and the run's shared server with a schema
/// per test.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres
    var testDescription: String { rawValue }
}

/// Where one test's store lives; ``open(insertLease:committedCapacity:)``
/// again is "another handler process on the same database".
struct StoreFixture: Sendable {
    let kind: StoreKind
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)")
    let databaseURL: String?

    init(_ kind: StoreKind) throws {
        self.kind = kind
        databaseURL = kind == .postgres ? try TestPostgres.url(schemaPrefix: "store") : nil
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func open(insertLease: TimeInterval = 5, committedCapacity: Int = 10_000) async throws -> any BookingStore {
        switch kind {
        case .sqlite:
            return try SQLiteBookingStore(path: directory.appendingPathComponent("db.sqlite").path, insertLease: insertLease,
                                          committedCapacity: committedCapacity)
        case .postgres:
            return try await PostgresBookingStore.open(settings: PostgresSettings(url: databaseURL!), logger: Logger(label: "store-test"),
                                                       waitSeconds: 0, insertLease: insertLease, committedCapacity: committedCapacity)
        }
    }

    func remove() {
        try? FileManager.default.removeItem(at: directory)
    }
}

/// BookingStore and CommandProcessor on each store: group commit, the
/// inbox, the outbox lease — one suite, both engines.
@Suite("Booking store")
struct StoreTests {
    /// Two handler processes started together on a fresh data directory
    /// both open and migrate the database: neither may fail (without the
    /// migration lock the second found the tables half made, "table room
    /// already exists"). Eight openers at once, on twenty fresh files.
    @Test func storesOpenedTogetherOnAFreshFileAllSucceed() async throws {
        let dir = try TemporaryDirectory("open-race")
        defer { dir.remove() }
        for round in 0..<20 {
            let path = dir.appending("db-\(round).sqlite").path
            let opened = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await Task.detached { _ = try SQLiteBookingStore(path: path); return 1 }.value }
                }
                return try await group.reduce(0, +)
            }
            #expect(opened == 8)
            #expect(try await SQLiteBookingStore(path: path).counts().rooms == 0)
        }
    }

    /// Commits are fsynced (`synchronous = FULL`, 2) on the writer that
    /// group commit uses, not GRDB's WAL default NORMAL (1): a reply and an
    /// ack follow the commit, so the commit must survive a power cut.
    @Test func theSQLiteWriterSyncsEveryCommit() async throws {
        let dir = try TemporaryDirectory("sync")
        defer { dir.remove() }
        let store = try SQLiteBookingStore(path: dir.appending("db.sqlite").path)
        let level = try await store.pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(level == 2)
    }

    func makeProcessor(_ fixture: StoreFixture) async throws -> (any BookingStore, CommandProcessor) {
        let store = try await fixture.open()
        let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!
        let processor = CommandProcessor(store: store, now: { now })
        _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8}]"#.utf8))
        return (store, processor)
    }

    func create(_ start: String, _ end: String, key: String?) -> IncomingCommand {
        let body = #"{"room":"Berlin","date":"2026-11-23","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
        return IncomingCommand(body: Array(body.utf8), typeProperty: "booking.create", routingKey: "booking.create",
                               messageID: key, idempotencyKeyHeader: nil, userID: nil)
    }

    func replies(_ processor: CommandProcessor, _ commands: [IncomingCommand]) async throws -> [CommandReply] {
        try await withThrowingTaskGroup(of: CommandReply.self) { group in
            for command in commands {
                group.addTask {
                    guard case .handled(let reply, _, _, _) = try await processor.process(command) else {
                        throw CancellationError()
                    }
                    return reply
                }
            }
            var all: [CommandReply] = []
            for try await reply in group { all.append(reply) }
            return all
        }
    }

    /// A restart with the same `ROOMS_FILE` writes no room again (their
    /// `updatedAt` stays) but publishes every `room.registered` again (a
    /// projector on an empty model learns the rooms); a changed room is
    /// written.
    @Test(arguments: StoreKind.allCases)
    func roomsUnchangedInTheFileAreNotWrittenAgainButAnnounced(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!
        let processor = CommandProcessor(store: store, now: { now })
        let file = #"[{"name": "Berlin", "capacity": 8}, {"name": "Paris", "capacity": 4}]"#
        _ = try await processor.upsertRooms(fileContents: Data(file.utf8))
        let first = Dictionary(uniqueKeysWithValues: try await store.replayRooms().map { ($0.room.name, $0.updatedAt) })
        _ = try await processor.upsertRooms(fileContents: Data(file.replacingOccurrences(of: "4}", with: "6}").utf8))
        let second = Dictionary(uniqueKeysWithValues: try await store.replayRooms().map { ($0.room.name, $0.updatedAt) })
        #expect(second["Berlin"] == first["Berlin"], "an unchanged room is not written again")
        #expect(second["Paris"] != first["Paris"], "a changed room is written")
        #expect(try await store.room(named: "Paris")?.capacity == 6)
        #expect(try await store.counts().outboxPending == 4, "room.registered for every room, both times")
        // The events themselves (the unchanged room's is queued with the
        // multi-row path on PostgreSQL): every room's current state, once
        // per start, each under its own id.
        let events = store.takeCommitted(limit: 100) + (try await store.claimOutbox(limit: 100, lease: 60))
        #expect(events.count == 4 && Set(events.map(\.id)).count == 4 && Set(events.map(\.messageID)).count == 4)
        #expect(events.allSatisfy { $0.routingKey == EventType.roomRegistered.rawValue })
        let announced = try events.sorted { $0.id < $1.id }.map { try ContractJSON.decode(RoomRegistered.self, from: Data($0.body)).room }
        #expect(announced.map(\.name).sorted() == ["Berlin", "Berlin", "Paris", "Paris"])
        #expect(announced.suffix(2).first { $0.name == "Paris" }?.capacity == 6, "the second start announces the room as changed")
        #expect(announced.suffix(2).first { $0.name == "Berlin" }?.capacity == 8)
    }

    /// `occurredAt` has whole seconds: registrations of one room within
    /// one second get increasing instants (one second apart), so every
    /// projector keeps the last whatever order it applies them in; a
    /// replay and an unchanged room's announcement carry the last one.
    @Test(arguments: StoreKind.allCases)
    func registrationsOfARoomInOneSecondAreOrderedByOccurredAt(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!
        let processor = CommandProcessor(store: store, now: { now.addingTimeInterval(0.6) })
        for capacity in [8, 9, 10, 10] {
            _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": \#(capacity)}]"#.utf8))
        }
        let events = store.takeCommitted(limit: 100) + (try await store.claimOutbox(limit: 100, lease: 60))
        let announced = try events.sorted { $0.id < $1.id }.map { try ContractJSON.decode(RoomRegistered.self, from: Data($0.body)) }
        #expect(announced.map(\.room.capacity) == [8, 9, 10, 10])
        #expect(announced.map(\.occurredAt) == ["2026-11-22T10:00:00Z", "2026-11-22T10:00:01Z", "2026-11-22T10:00:02Z",
                                                 "2026-11-22T10:00:02Z"])
        #expect(try await store.replayRooms().map { ContractFormat.timestamp($0.updatedAt) } == ["2026-11-22T10:00:02Z"])
    }

    @Test(arguments: StoreKind.allCases)
    func concurrentRepeatsOfOneKeyHaveOneEffectAndOneReply(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        let all = try await replies(processor, Array(repeating: create("09:00", "10:00", key: "same"), count: 32))
        #expect(Set(all.map { "\($0)" }).count == 1, "every repeat gets the first reply")
        let counts = try await store.counts()
        #expect(counts.bookings == 1)
        #expect(counts.inbox == 1)
        #expect(counts.outboxPending == 1 + 2)  // room.registered + created + confirmed
    }

    /// PostgreSQL's text cannot hold U+0000, SQLite's can: an idempotency
    /// key with one is refused as a bad field on both engines (instead of a
    /// database error that would be retried until the delivery limit).
    /// Elsewhere NUL only reaches the stores inside JSON, escaped.
    @Test(arguments: StoreKind.allCases)
    func aKeyWithANulCharacterIsRefusedOnBothEngines(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        var header = create("09:00", "10:00", key: nil)
        header.idempotencyKeyHeader = "k\u{0}2"
        for command in [create("09:00", "10:00", key: "k\u{0}1"), header] {
            guard case .handled(.error(let error), _, _, _) = try await processor.process(command) else {
                Issue.record("not refused"); continue
            }
            #expect(error.code == .invalidField && error.field == "message_id")
        }
        #expect(try await store.counts().bookings == 0)
    }

    /// U+0000 in any string of a command is refused (1100) on both engines
    /// before the store sees it: PostgreSQL cannot compare an id holding
    /// it, and failed the command on every redelivery instead. An escaped
    /// backslash before `u0000` is text, not U+0000.
    @Test(arguments: StoreKind.allCases)
    func aNulInAnyStringIsRefusedOnBothEngines(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        func send(_ type: String, _ body: String) async throws -> CommandReply? {
            guard case .handled(let reply, _, _, _) = try await processor.process(IncomingCommand(
                body: Array(body.utf8), typeProperty: type, routingKey: type, messageID: UUID().uuidString,
                idempotencyKeyHeader: nil, userID: "ann")) else { return nil }
            return reply
        }
        let create = #"{"room":"Berlin","date":"2026-11-23","start":"11:00","end":"12:00","title":"TITLE","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
        for (type, body) in [("booking.create", create.replacingOccurrences(of: "TITLE", with: #"a\u0000b"#)),
                             ("booking.cancel", #"{"bookingId":"bk-\u0000"}"#),
                             ("booking.cancel", #"{"seriesId":"\u0000"}"#),
                             ("booking.confirm", #"{"bookingId":"\u0000"}"#),
                             ("room.close", #"{"room":"Ber\u0000lin","from":"2026-11-23","to":"2026-11-24","reason":"works"}"#)] {
            let error = try #require(try await send(type, body)?.errorValue, "\(type) \(body) was not answered")
            #expect(error.code == .invalidField && error.text == ContractLimits.nulRefusal, "\(type) \(body): \(error)")
        }
        #expect(try await store.counts().bookings == 0)
        let text = try #require(try await send("booking.create", create.replacingOccurrences(of: "TITLE", with: #"a\\u0000b"#))?
            .bookingValue)
        #expect(text.title == #"a\u0000b"#, "a backslash and u0000 is text")
    }

    @Test(arguments: StoreKind.allCases)
    func concurrentConflictingCommandsHaveExactlyOneWinner(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        let commands = (0..<32).map { i in create(i % 2 == 0 ? "09:00" : "09:30", "10:30", key: "k\(i)") }
        let all = try await replies(processor, commands)
        let winners = all.compactMap { reply -> Booking? in
            if case .booking(let b) = reply { return b }
            return nil
        }
        #expect(winners.count == 1)
        for reply in all {
            if case .error(let e) = reply {
                #expect(e.code == .overlap)
                #expect(e.conflicts == winners.map(\.id))
            }
        }
        #expect(try await store.counts().bookings == 1)
    }

    @Test(arguments: StoreKind.allCases)
    func aFailingCommandDoesNotSpoilTheOthersInItsGroup(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, _) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        let results = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<20 {
                group.addTask {
                    do {
                        try await enqueueOne(store, key: "job-\(i)", messageID: "m\(i)", thenFail: i % 5 == 0)
                        return true
                    } catch {
                        return false
                    }
                }
            }
            var out: [Bool] = []
            for await r in group { out.append(r) }
            return out
        }
        #expect(results.filter { $0 }.count == 16)
        let counts = try await store.counts()
        #expect(counts.inbox == 16, "the failed ones left no inbox entry")
        #expect(counts.outboxPending == 1 + 16, "…and no event")
        let handed = store.takeCommitted(limit: 100)
        #expect(handed.map(\.messageID).filter { $0.hasPrefix("m") }.count == 16,
                "the relay is handed the kept events only")
        #expect(handed.map(\.id) == handed.map(\.id).sorted(), "in commit order")
    }

    struct Boom: Error {}

    /// A command (through the inbox, key `key`) that enqueues one event,
    /// then either throws ``Boom`` or answers with a stored reply.
    func enqueueOne(_ store: any BookingStore, key: String, messageID: String, thenFail: Bool) async throws {
        _ = try await store.execute(key: InboxKey(scope: "", key: key, fingerprint: 0), commandType: "test") { tx in
            try tx.enqueue(routingKey: "test", messageID: messageID, body: Data("{}".utf8), orderKey: nil)
            if thenFail { throw Boom() }
            return .failure(.invalidField, "fine")
        }
    }

    /// A command alone in its group runs without a savepoint: its
    /// failure must still leave nothing behind, and the next one must work.
    @Test(arguments: StoreKind.allCases)
    func aLoneFailingCommandLeavesNothingBehind(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, _) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        _ = store.takeCommitted(limit: 100)  // room.registered
        for i in 0..<3 {  // one at a time: every group has one command
            await #expect(throws: Boom.self) {
                try await enqueueOne(store, key: "lone-\(i)", messageID: "failed-\(i)", thenFail: true)
            }
            try await enqueueOne(store, key: "kept-\(i)", messageID: "kept-\(i)", thenFail: false)
        }
        let counts = try await store.counts()
        #expect(counts.inbox == 3, "no inbox entry from the failed ones")
        #expect(counts.outboxPending == 1 + 3, "…and no event")
        #expect(store.takeCommitted(limit: 100).map(\.messageID) == ["kept-0", "kept-1", "kept-2"])
    }

    /// A statement the database refuses fails its command with that
    /// statement's own error, and the command keeps nothing. On PostgreSQL
    /// every statement after it is refused as "transaction aborted"
    /// (25P02), which says nothing, and a `COMMIT` after it answers
    /// `ROLLBACK`: the command must report the first error. (A store that
    /// sends statements without waiting for them, as the pass ledger does
    /// with ``PendingStatements``, fails here if it reports the last.)
    @Test(arguments: StoreKind.allCases)
    func aRefusedStatementFailsItsCommandWithItsOwnError(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, _) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        let before = try await store.counts()
        @Sendable func insertSeriesTwice(_ tx: any StoreTransaction) throws {
            for _ in 0..<2 {
                try tx.insertSeries(id: "s-1", room: "Berlin", requestedBy: nil, recurrence: Recurrence(.weekly, count: 2),
                                    onConflict: .skip, count: 2, now: Date())
            }
            try tx.setSeriesVersion(id: "s-1", 2)
        }
        do {
            _ = try await store.execute(key: InboxKey(scope: "", key: "dup-series", fingerprint: 0), commandType: "test") { tx in
                try insertSeriesTwice(tx)
                return .failure(.invalidField, "not reached")
            }
            Issue.record("a duplicate series id was stored")
        } catch {
            #expect(StoreErrors.isUniqueViolation(error), "\(StoreErrors.describe(error))")
        }
        // The same without the inbox (timers, room changes: `transaction`).
        do {
            try await store.transaction { tx in try insertSeriesTwice(tx) }
            Issue.record("a duplicate series id was stored")
        } catch {
            #expect(StoreErrors.isUniqueViolation(error), "\(StoreErrors.describe(error))")
        }
        #expect(try await store.counts().inbox == before.inbox, "no inbox entry")
        #expect(try await store.transaction { tx in try tx.series(id: "s-1") } == nil, "no series")
        try await enqueueOne(store, key: "after", messageID: "after", thenFail: false)
        #expect(try await store.counts().inbox == before.inbox + 1, "the next command works")
    }

    /// Events handed over in memory carry their value, from which the
    /// relay builds the `booking.public` copy without decoding the body:
    /// the value must be exactly what the body says, for a create's events
    /// and for a change's (with `previous`).
    @Test(arguments: StoreKind.allCases)
    func handedOverEventsCarryTheValueTheirBodyEncodes(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        _ = store.takeCommitted(limit: 100)  // room.registered
        guard case .handled(let created, _, _, _) = try await processor.process(create("09:00", "10:00", key: "v-1")),
              let id = created.bookingValue?.id else { Issue.record("no booking"); return }
        let cancel = IncomingCommand(body: Array(#"{"bookingId":"\#(id)","reason":"moved"}"#.utf8), typeProperty: "booking.cancel",
                                     routingKey: "booking.cancel", messageID: "v-2", idempotencyKeyHeader: nil, userID: nil)
        guard case .handled(let cancelled, _, _, _) = try await processor.process(cancel) else { Issue.record("not handled"); return }
        #expect(cancelled.isOK, "\(cancelled)")
        let handed = store.takeCommitted(limit: 100)
        #expect(handed.map(\.routingKey) == ["booking.created", "booking.confirmed", "booking.cancelled"])
        for event in handed {
            let value = try #require(event.value, "\(event.routingKey)")
            #expect(try ContractJSON.decode(BookingEvent.self, from: event.body) == value, "\(event.routingKey)")
            #expect(try ContractJSON.encode(PublicBookingEvent(value))
                    == ContractJSON.encode(PublicBookingEvent(ContractJSON.decode(BookingEvent.self, from: event.body))))
        }
        #expect(handed.last?.value?.previous?.attendees.first?.email == "ada@example.com", "a change carries previous")
    }

    @Test(arguments: StoreKind.allCases)
    func aRoomReRegisteredByAnotherProcessIsWhatTheNextCreateSees(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        // The first create caches Berlin (no approval needed: confirmed).
        guard case .handled(.booking(let first), _, _, let firstJSON) = try await processor.process(create("09:00", "10:00", key: "a")) else {
            Issue.record("not a booking")
            return
        }
        #expect(first.status == .confirmed)
        #expect(try firstJSON.map { try ContractJSON.decode(CommandReply.self, from: $0) } == .booking(first),
                "the reply bytes are the reply")
        #expect(store.cachedRoom(named: "Berlin")?.room.requiresApproval == false)
        // Another handler process changes the room behind this one's cache.
        let other = CommandProcessor(store: try await fixture.open())
        _ = try await other.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8, "requiresApproval": true}]"#.utf8))
        guard case .handled(.booking(let second), _, _, _) = try await processor.process(create("11:00", "12:00", key: "b")) else {
            Issue.record("not a booking")
            return
        }
        #expect(second.status == .pending, "validated against the stored room, not the cached one")
        #expect(store.cachedRoom(named: "Berlin")?.room.requiresApproval == true)
        // And a capacity cut makes a prepared create invalid.
        _ = try await other.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 1}]"#.utf8))
        let two = #"{"room":"Berlin","date":"2026-11-23","start":"13:00","end":"14:00","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"},{"name":"Bob","email":"bob@example.com","phone":"0170 7654321"}]}"#
        let result = try await processor.process(IncomingCommand(body: Array(two.utf8), typeProperty: "booking.create",
                                                                 routingKey: "booking.create", messageID: "c",
                                                                 idempotencyKeyHeader: nil, userID: nil))
        guard case .handled(.error(let error), _, _, _) = result else {
            Issue.record("expected an error, got \(result)")
            return
        }
        #expect(error.code == .overCapacity)
    }

    @Test(arguments: StoreKind.allCases)
    func committedEventsReachThisRelayInMemoryAndNoOtherRelayWithinTheLease(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, _) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        _ = store.takeCommitted(limit: 100)  // room.registered
        try await store.transaction { tx in
            for i in 0..<5 { try tx.enqueue(routingKey: "e", messageID: "m\(i)", body: Data("{}".utf8), orderKey: nil) }
        }
        // A second handler process on the same database.
        let other = try await fixture.open()
        #expect(try await other.claimOutbox(limit: 10, lease: 60).isEmpty, "claimed by the writer from the start")
        #expect(try await store.claimOutbox(limit: 10, lease: 60).isEmpty, "…and not handed out twice by the writer's own sweep")
        let handed = store.takeCommitted(limit: 3)
        #expect(handed.map(\.messageID) == ["m0", "m1", "m2"])
        #expect(store.takeCommitted(limit: 10).map(\.messageID) == ["m3", "m4"])
        #expect(store.takeCommitted(limit: 10).isEmpty)
        try await store.markPublished([handed[0].id])
        try await store.releaseClaims(Array(handed.dropFirst().map(\.id)))
        #expect(try await other.claimOutbox(limit: 10, lease: 60).map(\.messageID) == ["m1", "m2"],
                "released events are the other relay's; published ones never come back")
        #expect(try await store.counts().outboxPending == 1 + 4)
    }

    @Test(arguments: StoreKind.allCases)
    func aSweepNeverHandsOutWhatWaitsInMemoryEvenAfterItsLease(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        // Lease 0: every claim made at insert has already run out.
        let store = try await fixture.open(insertLease: 0)
        try await store.transaction { tx in
            for i in 0..<3 { try tx.enqueue(routingKey: "e", messageID: "m\(i)", body: Data("{}".utf8), orderKey: nil) }
        }
        // The relay sweeps first, then takes from memory: no event twice.
        #expect(try await store.claimOutbox(limit: 10, lease: 60).isEmpty)
        #expect(store.takeCommitted(limit: 10).map(\.messageID) == ["m0", "m1", "m2"])
    }

    @Test(arguments: StoreKind.allCases)
    func aFailedPublishSendsEverythingBackThroughTheTableInCommitOrder(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, _) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        _ = store.takeCommitted(limit: 100)  // room.registered
        func add(_ ids: ClosedRange<Int>) async throws {
            try await store.transaction { tx in
                for i in ids { try tx.enqueue(routingKey: "e", messageID: "m\(i)", body: Data("{}".utf8), orderKey: nil) }
            }
        }
        try await add(0...2)
        let inFlight = store.takeCommitted(limit: 1)  // m0 is being published…
        try await add(3...4)                           // …while m3, m4 are committed
        try await store.suspendHandOver(releasing: inFlight.map(\.id))  // m0 was not confirmed
        #expect(store.handOverSuspended)
        #expect(store.takeCommitted(limit: 10).isEmpty, "memory was given back to the table")
        try await add(5...5)                           // committed while suspended: unclaimed, not in memory
        #expect(store.takeCommitted(limit: 10).isEmpty)
        let table = try await store.claimOutbox(limit: 10, lease: 60)
        #expect(table.map(\.messageID) == ["m0", "m1", "m2", "m3", "m4", "m5"], "all of them, oldest first")
        try await store.markPublished(table.map(\.id))
        try await store.resumeHandOver()
        #expect(!store.handOverSuspended)
        try await add(6...6)
        #expect(try await store.claimOutbox(limit: 10, lease: 60).isEmpty, "claimed by its writer again")
        #expect(store.takeCommitted(limit: 10).map(\.messageID) == ["m6"])
    }

    /// Two handler processes writing one booking one after the other: the
    /// second one's event waits, unclaimed, until the first one's is
    /// published, and then goes out through the table — never before it.
    /// Other bookings' events are not held up, and one process's own events
    /// of a booking keep going through memory in commit order.
    @Test(arguments: StoreKind.allCases)
    func eventsOfOneBookingFromTwoProcessesLeaveInCommitOrder(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let a = try await fixture.open()
        let b = try await fixture.open()  // another handler process on the same database
        func add(_ store: any BookingStore, _ name: String, key: String) async throws {
            try await store.transaction { tx in
                try tx.enqueue(routingKey: "e", messageID: name, body: Data("{}".utf8), orderKey: key)
            }
        }
        try await add(a, "a1", key: "booking:1")
        try await add(a, "a2", key: "booking:1")        // a's own: behind a1 in a's memory
        try await add(b, "b3", key: "booking:1")        // behind a1 and a2, which a holds
        try await add(b, "b4", key: "booking:2")        // another booking: not held up
        #expect(b.takeCommitted(limit: 10).map(\.messageID) == ["b4"])
        #expect(try await b.claimOutbox(limit: 10, lease: 60).isEmpty, "b3 waits for a1 and a2, even unclaimed")
        #expect(try await a.claimOutbox(limit: 10, lease: 60).isEmpty, "…whichever relay sweeps")

        let first = a.takeCommitted(limit: 1)
        #expect(first.map(\.messageID) == ["a1"])
        try await a.markPublished(first.map(\.id))
        #expect(try await b.claimOutbox(limit: 10, lease: 60).isEmpty, "a2 is still unpublished")
        // a2's publish fails: released to the table, it goes first.
        let second = a.takeCommitted(limit: 10)
        #expect(second.map(\.messageID) == ["a2"])
        try await a.suspendHandOver(releasing: second.map(\.id))
        let next = try await b.claimOutbox(limit: 10, lease: 60)
        #expect(next.map(\.messageID) == ["a2"], "the older event first, alone")
        // While b holds a2 (claimed, unpublished), a's next event of the
        // booking waits too, though a's hand-over is back on.
        try await a.resumeHandOver()
        try await add(a, "a5", key: "booking:1")
        #expect(a.takeCommitted(limit: 10).isEmpty)
        try await b.markPublished(next.map(\.id))
        let rest = try await a.claimOutbox(limit: 10, lease: 60)
        #expect(rest.map(\.messageID) == ["b3"], "b3 before a5")
        try await a.markPublished(rest.map(\.id))
        let last = try await b.claimOutbox(limit: 10, lease: 60)
        #expect(last.map(\.messageID) == ["a5"])
        try await b.markPublished(last.map(\.id))
        #expect(try await a.counts().outboxPending == 1, "only b4, still in b's hands")
    }

    @Test(arguments: StoreKind.allCases)
    func aFullMemorySuspendsTheHandOverInsteadOfDroppingEvents(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open(committedCapacity: 3)
        try await store.transaction { tx in
            for i in 0..<2 { try tx.enqueue(routingKey: "e", messageID: "m\(i)", body: Data("{}".utf8), orderKey: nil) }
        }
        #expect(!store.handOverSuspended)
        try await store.transaction { tx in
            for i in 2..<4 { try tx.enqueue(routingKey: "e", messageID: "m\(i)", body: Data("{}".utf8), orderKey: nil) }
        }
        #expect(store.handOverSuspended)
        #expect(store.takeCommitted(limit: 10).isEmpty)
        #expect(try await store.claimOutbox(limit: 10, lease: 60).map(\.messageID) == ["m0", "m1", "m2", "m3"])
    }

    /// Antarctica/Troll moves its clocks by two hours: its autumn day is
    /// 25 h 45 min long from 00:00 to 23:45. The overlap query's lower bound
    /// must still reach the start of a booking that long.
    @Test(arguments: StoreKind.allCases)
    func theLongestPossibleBookingStillConflicts(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (_, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Troll", "capacity": 4, "timeZone": "Antarctica/Troll", "opens": "00:00", "closes": "23:45"}]"#.utf8))
        func book(_ start: String, _ end: String, _ key: String) async throws -> CommandReply {
            let body = #"{"room":"Troll","date":"2027-10-31","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
            guard case .handled(let reply, _, _, _) = try await processor.process(IncomingCommand(
                body: Array(body.utf8), typeProperty: "booking.create", routingKey: "booking.create", messageID: key,
                idempotencyKeyHeader: nil, userID: nil)) else { throw CancellationError() }
            return reply
        }
        guard case .booking(let whole) = try await book("00:00", "23:45", "long") else {
            Issue.record("the whole day could not be booked")
            return
        }
        let startsAt = ISO8601DateFormatter().date(from: whole.startsAt)!, endsAt = ISO8601DateFormatter().date(from: whole.endsAt)!
        #expect(endsAt.timeIntervalSince(startsAt) == 25.75 * 3600)
        guard case .error(let error) = try await book("23:00", "23:45", "late") else {
            Issue.record("booked twice")
            return
        }
        #expect(error.code == .overlap)
        #expect(error.conflicts == [whole.id])
    }

    @Test(arguments: StoreKind.allCases)
    func outboxClaimsAreLeasedInOrderAndMarkedOnce(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, _) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        try await store.transaction { tx in
            for i in 0..<5 { try tx.enqueue(routingKey: "e", messageID: "m\(i)", body: Data("{}".utf8), orderKey: nil) }
        }
        // As if the writer had died: its claims are given up.
        try await store.releaseClaims(store.takeCommitted(limit: 100).map(\.id))
        let first = try await store.claimOutbox(limit: 3, lease: 60)
        #expect(first.map(\.messageID).dropFirst(0).count == 3)
        let second = try await store.claimOutbox(limit: 10, lease: 60)
        #expect(Set(first.map(\.id)).isDisjoint(with: second.map(\.id)), "a claimed event is not handed out again")
        #expect((first + second).map(\.id) == (first + second).map(\.id).sorted(), "oldest first")
        try await store.markPublished(first.map(\.id))
        try await store.releaseClaims(second.map(\.id))
        let third = try await store.claimOutbox(limit: 10, lease: 60)
        #expect(third.map(\.id) == second.map(\.id), "released events come back; published ones never")
    }

    @Test(arguments: StoreKind.allCases)
    func pruningDropsOldInboxEntriesAndPublishedEventsOnly(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        let (store, processor) = try await makeProcessor(fixture)
        defer { fixture.remove() }
        _ = try await processor.process(create("09:00", "10:00", key: "old"))
        let claimed = store.takeCommitted(limit: 2)
        try await store.markPublished(claimed.map(\.id))
        let before = try await store.counts()
        #expect(before.inbox == 1)
        #expect(before.outboxPending == 1)  // one of the three events is still unpublished
        try await store.prune(olderThan: -1)  // everything counts as old
        let after = try await store.counts()
        #expect(after.inbox == 0)
        #expect(after.outboxPending == 1, "unpublished events are never pruned")
        #expect(after.bookings == 1, "bookings are not touched")
        // The pruned key is processed again: the slot is now taken by itself.
        guard case .handled(let reply, _, let duplicate, _) = try await processor.process(create("09:00", "10:00", key: "old")) else {
            Issue.record("not handled")
            return
        }
        #expect(!duplicate)
        #expect(reply.isOK == false)
    }

    /// A replay page's stored JSON (`replayBookingJSON`) is, on either
    /// store, each booking's newest version byte for byte as the contract's
    /// encoder writes the booking `replayBookings` returns, in id order, in
    /// the same pages.
    @Test(arguments: StoreKind.allCases)
    func replayedJSONIsTheNewestVersionAsTheEncoderWritesIt(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        try await store.transaction { tx in
            _ = try tx.upsertRoom(Fixture.berlin, at: Date())
            for i in [4, 0, 6, 2, 5, 1, 3] {
                for version in 1...(1 + i % 3) {
                    var booking = Fixture.booking(id: "b-\(i)", status: i == 3 && version > 1 ? .cancelled : .confirmed)
                    booking.version = version
                    booking.title = "Zoë \"\(i)\" v\(version)"
                    try tx.save(booking, startsAt: Date(), endsAt: Date())
                }
            }
        }
        var after: String?
        var seen: [String] = []
        while true {
            let rows = try await store.replayBookingJSON(after: after, limit: 3)
            let decoded = try await store.replayBookings(after: after, limit: 3)
            #expect(rows.map(\.id) == decoded.map(\.id))
            #expect(try rows.map(\.json) == decoded.map { [UInt8](try ContractJSON.encode($0)) })
            guard let last = rows.last else { break }
            seen += rows.map(\.id)
            after = last.id
        }
        #expect(seen == (0..<7).map { "b-\($0)" })
        let newest = try await store.replayBookings(after: nil, limit: 10)
        #expect(newest.map(\.version) == (0..<7).map { 1 + $0 % 3 })
        #expect(newest.map(\.title) == (0..<7).map { "Zoë \"\($0)\" v\(1 + $0 % 3)" })
    }

    /// Versions no cursor can need any longer are pruned by an index on the
    /// superseded ones (the prune runs on the writer: a scan of the whole
    /// history there held every command behind it, 0.43 s at a million
    /// bookings on PostgreSQL), and only they go: the current version stays.
    @Test(arguments: StoreKind.allCases)
    func supersededVersionsArePrunedThroughTheirIndex(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        try await store.transaction { tx in
            _ = try tx.upsertRoom(Fixture.berlin, at: Date())
            for version in 1...3 {
                var booking = Fixture.booking(id: "b-1", status: .confirmed)
                booking.version = version
                try tx.save(booking, startsAt: Date(), endsAt: Date())
            }
        }
        let predicate = "\(StoreRules.prunableVersionsCondition) 1e12"  // the stores' own condition
        let plan: String
        let versions: () throws -> Int
        switch kind {
        case .sqlite:
            let db = try DatabaseQueue(path: fixture.directory.appendingPathComponent("db.sqlite").path)
            plan = try await db.read { db in
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN DELETE FROM booking_version WHERE \(predicate)")
                    .map { $0["detail"] as String }.joined(separator: "\n")
            }
            versions = { try db.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM booking_version") ?? -1 } }
        case .postgres:
            let schema = String(fixture.databaseURL!.split(separator: "=").last!)
            // Sequential scans priced out: the plan names the index whenever it can use it.
            plan = try TestPostgres.control("psql", ["-c", "SET search_path TO \(schema)", "-c", "SET enable_seqscan = off", "-c",
                                                     "EXPLAIN SELECT ctid FROM booking_version WHERE \(predicate) LIMIT 5000"])
            versions = {
                Int(try TestPostgres.control("psql", ["-tA", "-c", "SELECT COUNT(*) FROM \(schema).booking_version"])
                    .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
            }
        }
        #expect(plan.contains("booking_version_superseded"), "the prune's plan: \(plan)")
        #expect(try versions() == 3)
        try await store.prune(olderThan: 60, now: Date().addingTimeInterval(StoreRules.cursorLifetime + 60))
        #expect(try versions() == 1, "the superseded versions go, the current one stays")
        #expect(try await store.booking(id: "b-1")?.version == 3)
        await store.close()
    }

    /// A create's checks read together (``StoreTransaction/createChecks(room:slot:window:)``,
    /// one statement on PostgreSQL) keep their order and their windows:
    /// closure (1112) before quota (1113) before overlap (2000), closures
    /// by the slot, overlaps by the slot widened by the room's buffer.
    /// Every create after the first runs on the cached room, the path
    /// that reads them together.
    @Test(arguments: StoreKind.allCases)
    func aCreatesChecksKeepTheirOrderAndWindows(_ kind: StoreKind) async throws {
        let fixture = try StoreFixture(kind)
        defer { fixture.remove() }
        let store = try await fixture.open()
        let now = ISO8601DateFormatter().date(from: "2026-11-22T10:00:00Z")!
        let processor = CommandProcessor(store: store, now: { now })
        _ = try await processor.upsertRooms(fileContents: Data(#"[{"name": "Berlin", "capacity": 8, "bufferMinutes": 15, "maxActiveBookings": 1}]"#.utf8))
        func create(_ start: String, _ end: String, as user: String) async throws -> ErrorCode? {
            let body = #"{"room":"Berlin","date":"2026-11-23","start":"\#(start)","end":"\#(end)","title":"T","attendees":[{"name":"Ada","email":"ada@example.com","phone":"0170 1234567"}]}"#
            let command = IncomingCommand(body: Array(body.utf8), typeProperty: "booking.create", routingKey: "booking.create",
                                          messageID: UUID().uuidString, idempotencyKeyHeader: nil, userID: user)
            guard case .handled(let reply, _, _, _) = try await processor.process(command) else { throw CancellationError() }
            if case .error(let error) = reply { return error.code }
            return nil
        }
        #expect(try await create("09:00", "10:00", as: "alice") == nil)
        #expect(store.cachedRoom(named: "Berlin") != nil, "the next creates take the cached path")
        let closedFrom = ContractFormat.instant(date: "2026-11-23", time: "13:00", timeZone: "Europe/Berlin")!
        let closedTo = ContractFormat.instant(date: "2026-11-23", time: "14:00", timeZone: "Europe/Berlin")!
        try await store.transaction { tx in
            try tx.insertClosure(RoomClosure(id: "c-1", room: "Berlin", from: ContractFormat.timestamp(closedFrom),
                                             to: ContractFormat.timestamp(closedTo), reason: "floor polishing"),
                                 from: closedFrom, to: closedTo)
        }
        #expect(try await create("13:00", "13:30", as: "bob") == .roomClosed)
        #expect(try await create("13:30", "14:30", as: "alice") == .roomClosed, "closed before over quota")
        #expect(try await create("15:00", "16:00", as: "alice") == .quotaExceeded)
        #expect(try await create("10:00", "11:00", as: "bob") == .overlap, "inside the 15-minute buffer only")
        #expect(try await create("08:00", "09:00", as: "bob") == .overlap, "inside the buffer before it")
        #expect(try await create("14:00", "15:00", as: "bob") == nil, "the closure ends where this starts")
        #expect(try await create("10:15", "11:00", as: "carol") == nil, "the buffer's edge is free")
        await store.close()
    }
}
