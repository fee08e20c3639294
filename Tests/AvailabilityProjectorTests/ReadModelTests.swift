@testable import AvailabilityProjector
import GRDB
import BookingContracts
import Foundation
import Testing

func makeStore() throws -> (ProjectorStore, URL) {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("projector-unit-\(UUID().uuidString.prefix(8))")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return (try ProjectorStore(path: dir.appendingPathComponent("model.sqlite").path), dir)
}

func state(_ id: String, room: String = "Berlin", date: String = "2026-11-23", _ start: String, _ end: String,
           _ status: BookingStatus = .confirmed, version: Int = 1) -> ModelChange {
    .booking(BookingState(id: id, room: room, date: date, startMinute: ContractFormat.minutes(ofTime: start)!,
                          endMinute: ContractFormat.minutes(ofTime: end)!, status: status, version: version))
}

let berlinRoom = Room(name: "Berlin", location: "2nd floor", equipment: ["beamer", "tv"], size: "22m2", capacity: 8)

func query(_ engine: QueryEngine, _ q: AvailabilityQuery) throws -> AvailabilityReply {
    let checked = try QueryEngine.check(q).get()
    return engine.reply(checked)
}

@Suite("Read model")
struct ReadModelTests {
    @Test func bookingsChangeTheDayAndReportChanges() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let created = try await store.apply(state("b1", "09:00", "10:30"))
        #expect(created.applied)
        #expect(created.changes == [DayChange(day: RoomDay(room: "Berlin", date: "2026-11-23"), timeZone: "Europe/Berlin",
                                              avail: ["07:00 - 09:00", "10:30 - 19:00"])])
        let engine = QueryEngine(index: store.index)
        #expect(try query(engine, AvailabilityQuery(date: .date(.calendarDate("2026-11-23")))).map(\.avail)
                    == [["07:00 - 09:00", "10:30 - 19:00"]])
    }

    /// A buffer reaches across midnight, as the handler counts it: a
    /// booking late on one date takes the start of the next, one early on
    /// a date the end of the one before, and each change is announced for
    /// every date whose free time it changed.
    @Test func aBufferReachesAcrossMidnight() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let night = Room(name: "Night", capacity: 2, opens: "00:00", closes: "23:45", bufferMinutes: 30)
        _ = try await store.apply(.room(night, occurredAt: "2026-11-01T10:00:00Z"))
        let late = try await store.apply(state("late", room: "Night", date: "2026-11-23", "23:00", "23:45"))
        #expect(late.changes.map(\.day.date) == ["2026-11-23", "2026-11-24"])
        #expect(late.changes.last?.avail == ["00:15 - 23:45"])
        let early = try await store.apply(state("early", room: "Night", date: "2026-11-25", "00:00", "00:30"))
        #expect(early.changes.map(\.day.date) == ["2026-11-24", "2026-11-25"])
        #expect(early.changes.first?.avail == ["00:15 - 23:30"])
        let engine = QueryEngine(index: store.index)
        #expect(try query(engine, AvailabilityQuery(date: .date(.calendarDate("2026-11-24")), name: "Night")).map(\.avail)
                == [["00:15 - 23:30"]])
        // Cancelling the late booking gives the next date its start back.
        let cancelled = try await store.apply(state("late", room: "Night", date: "2026-11-23", "23:00", "23:45", .cancelled,
                                                    version: 2))
        #expect(cancelled.changes.map(\.day.date) == ["2026-11-23", "2026-11-24"])
        #expect(cancelled.changes.last?.avail == ["00:00 - 23:30"])
        // A booking that overtook its room's registration: the date after
        // it is announced with the room, though it has no booking itself.
        let latecomer = Room(name: "Latecomer", capacity: 2, opens: "00:00", closes: "23:45", bufferMinutes: 30)
        _ = try await store.apply(state("first", room: "Latecomer", date: "2026-12-31", "23:00", "23:45"))
        let registered = try await store.apply(.room(latecomer, occurredAt: "2026-11-01T10:00:00Z"))
        #expect(registered.changes.map(\.day.date) == ["2026-12-30", "2026-12-31", "2027-01-01"])
        #expect(registered.changes.last?.avail == ["00:15 - 23:45"])
        // A room without a buffer: nothing crosses midnight.
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let plain = try await store.apply(state("b1", date: "2026-11-23", "18:00", "19:00"))
        #expect(plain.changes.map(\.day.date) == ["2026-11-23"])
    }

    /// A rebuild that brings a booking late on a date announces the next
    /// date too, though neither model has a booking on it.
    @Test func aRebuildAnnouncesTheDateABufferReachesInto() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let room = ModelChange.room(Room(name: "Night", capacity: 2, opens: "00:00", closes: "23:45", bufferMinutes: 30),
                                    occurredAt: "2026-11-01T10:00:00Z")
        _ = try await store.apply(room)
        #expect(try await store.beginRebuild(replayId: "r1"))
        #expect(try await store.applyReplayed([room, state("late", room: "Night", date: "2026-11-23", "23:00", "23:45")],
                                              replayId: "r1"))
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes.map(\.day.date) == ["2026-11-23", "2026-11-24"])
        #expect(result.changes.last?.avail == ["00:15 - 23:45"])
    }

    /// A rebuild whose replay changes only a room's buffer (its bookings
    /// as before) announces the booked date and the date the new buffer
    /// reaches into, which has no booking of its own.
    @Test func aRebuildThatChangesOnlyABufferAnnouncesTheDateItReachesInto() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(Room(name: "Night", capacity: 2, opens: "00:00", closes: "23:45"),
                                        occurredAt: "2026-11-01T10:00:00Z"))
        let late = state("late", room: "Night", date: "2026-11-23", "23:00", "23:45")
        _ = try await store.apply(late)
        let buffered = ModelChange.room(Room(name: "Night", capacity: 2, opens: "00:00", closes: "23:45", bufferMinutes: 30),
                                        occurredAt: "2026-11-02T10:00:00Z")
        #expect(try await store.beginRebuild(replayId: "r1"))
        #expect(try await store.applyReplayed([buffered, late], replayId: "r1"))
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes.map(\.day.date) == ["2026-11-23", "2026-11-24"])
        #expect(result.changes.map(\.avail) == [["00:00 - 22:30"], ["00:15 - 23:45"]])

        // And one that takes the buffer away again frees both.
        #expect(try await store.beginRebuild(replayId: "r2"))
        #expect(try await store.applyReplayed([.room(Room(name: "Night", capacity: 2, opens: "00:00", closes: "23:45"),
                                                     occurredAt: "2026-11-03T10:00:00Z"), late], replayId: "r2"))
        let back = try #require(try await store.finishRebuild(replayId: "r2"))
        #expect(back.changes.map(\.day.date) == ["2026-11-23", "2026-11-24"])
        #expect(back.changes.map(\.avail) == [["00:00 - 23:00"], ["00:00 - 23:45"]])
    }

    /// Events can overtake their room's `room.registered`: a booking and a
    /// closure stored before the room are announced when it arrives; a
    /// room already known announces nothing by itself.
    @Test func daysStoredBeforeTheirRoomAreAnnouncedWhenItArrives() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let early = try await store.apply(state("b1", "09:00", "10:30"))
        #expect(early.applied && early.changes.isEmpty, "no free time to tell of a room not yet known")
        _ = try await store.apply(.closure(RoomClosure(id: "c1", room: "Berlin", from: "2026-11-24T23:00:00Z",
                                                       to: "2026-11-25T23:00:00Z", reason: "painting"), removed: false))
        let room = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        #expect(room.changes == [
            DayChange(day: RoomDay(room: "Berlin", date: "2026-11-23"), timeZone: "Europe/Berlin",
                      avail: ["07:00 - 09:00", "10:30 - 19:00"]),
            DayChange(day: RoomDay(room: "Berlin", date: "2026-11-25"), timeZone: "Europe/Berlin", avail: []),
        ])
        let again = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-02T10:00:00Z"))
        #expect(again.changes.isEmpty, "a known room: nothing changed")
    }

    @Test func repeatedAndOlderVersionsChangeNothing() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("b1", "09:00", "10:00", version: 2))
        let repeated = try await store.apply(state("b1", "09:00", "10:00", version: 2))
        #expect(!repeated.applied)
        #expect(repeated.changes.isEmpty)
        #expect(repeated.touched == [RoomDay(room: "Berlin", date: "2026-11-23")])
        let older = try await store.apply(state("b1", "12:00", "13:00", version: 1))
        #expect(!older.applied)
        #expect(try await store.booking(id: "b1")?.startMinute == 9 * 60)
    }

    @Test func cancelBeforeCreateIsNotResurrected() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let cancel = try await store.apply(state("b1", "09:00", "10:00", .cancelled, version: 2))
        #expect(cancel.applied)
        #expect(cancel.changes.isEmpty)  // the day was free and stays free
        let create = try await store.apply(state("b1", "09:00", "10:00", .confirmed, version: 1))
        #expect(!create.applied)
        #expect(try await store.booking(id: "b1")?.status == .cancelled)
        #expect(store.index.snapshot.days.isEmpty)
    }

    @Test func rescheduleChangesTwoDays() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("b1", date: "2026-11-23", "09:00", "10:00", version: 1))
        let moved = try await store.apply(state("b1", date: "2026-11-24", "13:00", "14:00", version: 2))
        #expect(moved.changes.map(\.day.date) == ["2026-11-23", "2026-11-24"])
        #expect(moved.changes.map(\.avail) == [["07:00 - 19:00"], ["07:00 - 13:00", "14:00 - 19:00"]])
    }

    @Test func confirmingAPendingBookingKeepsAvailButColoursTheBar() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let pending = try await store.apply(state("b1", "09:00", "10:00", .pending, version: 1))
        #expect(pending.changes.count == 1)
        let confirmed = try await store.apply(state("b1", "09:00", "10:00", .confirmed, version: 2))
        #expect(confirmed.applied)
        #expect(confirmed.changes.isEmpty)  // avail is the same: no availability.changed
        let day = store.index.snapshot.occupancy(RoomDay(room: "Berlin", date: "2026-11-23"))
        #expect(day.confirmed.availStrings == ["09:00 - 10:00"])
        #expect(day.pending.isEmpty)
    }

    @Test func bookingsBeforeTheirRoomCountOnceTheRoomArrives() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let early = try await store.apply(state("b1", "09:00", "10:00"))
        #expect(early.changes.isEmpty)  // unknown room: nothing to publish yet
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let engine = QueryEngine(index: store.index)
        #expect(try query(engine, AvailabilityQuery(date: .date(.calendarDate("2026-11-23"))))[0].avail
                    == ["07:00 - 09:00", "10:00 - 19:00"])
        // An older registration does not replace a newer one.
        var old = berlinRoom
        old.capacity = 2
        _ = try await store.apply(.room(old, occurredAt: "2026-10-01T10:00:00Z"))
        #expect(store.index.snapshot.rooms["Berlin"]?.room.capacity == 8)
        // Instants, not text: 10:00:00.5 is later than 10:00:00 although
        // "…00Z" sorts after "…00.5Z" as text.
        var newer = berlinRoom
        newer.capacity = 12
        _ = try await store.apply(.room(newer, occurredAt: "2026-11-01T10:00:00.500Z"))
        #expect(store.index.snapshot.rooms["Berlin"]?.room.capacity == 12)
        _ = try await store.apply(.room(old, occurredAt: "2026-11-01T10:00:00Z"))
        #expect(store.index.snapshot.rooms["Berlin"]?.room.capacity == 12)
    }

    @Test func reopeningKeepsTheModel() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("b1", "09:00", "10:00", .pending))
        let reopened = try ProjectorStore(path: dir.appendingPathComponent("model.sqlite").path)
        #expect(reopened.index.snapshot.occupancy(RoomDay(room: "Berlin", date: "2026-11-23")).pending.availStrings == ["09:00 - 10:00"])
        #expect(reopened.index.snapshot.sortedRooms.map(\.room.name) == ["Berlin"])
    }

    @Test func rebuildEqualsTheLiveModelAndKeepsNewerLiveEvents() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let changes: [ModelChange] = [
            .room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"),
            state("b1", "09:00", "10:00", version: 1), state("b2", "11:00", "12:00", .pending, version: 1),
            state("b3", date: "2026-11-24", "07:00", "19:00", version: 1), state("b4", "15:00", "16:00", .cancelled, version: 2),
        ]
        for change in changes { _ = try await store.apply(change) }
        let engine = QueryEngine(index: store.index)
        let days = ["2026-11-23", "2026-11-24", "2026-11-25"]
        let before = try days.map { try query(engine, AvailabilityQuery(date: .date(.calendarDate($0)))) }

        #expect(try await store.beginRebuild(replayId: "r1"))
        #expect(try await store.beginRebuild(replayId: "r2") == false)
        // A live event during the rebuild: b2 confirmed (v2) …
        _ = try await store.apply(state("b2", "11:00", "12:00", .confirmed, version: 2))
        // … then the replay, read before that change, still has b2 v1.
        for change in changes { #expect(try await store.applyReplayed(change, replayId: "r1")) }
        #expect(try await store.applyReplayed(state("b9", "08:00", "09:00"), replayId: "other") == false)
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes.isEmpty)
        #expect(result.progress.rooms == 1 && result.progress.bookings == 4 && result.progress.liveEvents == 1)
        let after = try days.map { try query(engine, AvailabilityQuery(date: .date(.calendarDate($0)))) }
        #expect(after == before)
        #expect(try await store.booking(id: "b2")?.status == .confirmed)
        #expect(try await store.counts().bookings == 4)
        // A second rebuild works (index names do not clash).
        #expect(try await store.beginRebuild(replayId: "r3"))
        try await store.abortRebuild(replayId: "r3")
        #expect(store.rebuildProgress == nil)
    }

    /// Commits are fsynced (`synchronous = FULL`, 2) on the writer, not
    /// GRDB's WAL default NORMAL (1): an event is acked after its commit.
    @Test func theWriterSyncsEveryCommit() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let level = try await store.pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(level == 2)
    }

    /// A replayed booking whose status this projector does not know (a
    /// newer handler's) is ignored as a live event would be: the rebuild
    /// keeps the live model's state of it, counts it as replayed, and the
    /// swap changes no room-day; one the live model never had stays out.
    @Test func aReplayedUnknownStatusKeepsTheLastKnownState() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("b1", "09:00", "10:00", version: 1))
        #expect(try await store.beginRebuild(replayId: "r1"))
        #expect(try await store.applyReplayed([.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"),
                                               .keepBooking(id: "b1"), .keepBooking(id: "never-seen"),
                                               state("b2", "12:00", "13:00")], replayId: "r1"))
        // Redelivered: counted once.
        #expect(try await store.applyReplayed(.keepBooking(id: "b1"), replayId: "r1"))
        #expect(store.rebuildProgress?.bookings == 3, "every replayed booking counts, known status or not")
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes.map(\.avail) == [["07:00 - 09:00", "10:00 - 12:00", "13:00 - 19:00"]],
                "only b2's day changes: b1 is still busy")
        #expect(try await store.booking(id: "b1")?.version == 1)
        #expect(try await store.booking(id: "never-seen") == nil)
        // Live, the same status is not a change at all (EventReader).
        #expect(try await store.apply(.keepBooking(id: "b1")).applied == false)

        // A stale live event staged during a rebuild (b1 v1, the live
        // model has v2) does not win over the kept newer state.
        _ = try await store.apply(state("b1", "14:00", "15:00", version: 2))
        #expect(try await store.beginRebuild(replayId: "r2"))
        _ = try await store.apply(state("b1", "09:00", "10:00", version: 1))
        #expect(try await store.applyReplayed([.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"),
                                               .keepBooking(id: "b1"), state("b2", "12:00", "13:00")], replayId: "r2"))
        let second = try #require(try await store.finishRebuild(replayId: "r2"))
        #expect(second.changes.isEmpty, "\(second.changes)")
        #expect(try await store.booking(id: "b1")?.version == 2)
    }

    /// The replay carries no reopened closures (the handler deletes them):
    /// the live tombstone survives the swap, so a late `room.closed` of a
    /// reopened closure does not close the room again.
    @Test func aReopenedClosureStaysReopenedAcrossARebuild() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let closure = RoomClosure(id: "c1", room: "Berlin", from: "2026-11-24T23:00:00Z", to: "2026-11-25T23:00:00Z",
                                  reason: "painting")
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(.closure(closure, removed: false))
        _ = try await store.apply(.closure(closure, removed: true))
        #expect(try await store.beginRebuild(replayId: "r1"))
        #expect(try await store.applyReplayed(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"), replayId: "r1"))
        // A late `room.closed` during the rebuild (the live model ignores it; the staging must not keep it).
        _ = try await store.apply(.closure(closure, removed: false))
        _ = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(store.index.snapshot.closures["Berlin"]?.isEmpty ?? true, "\(store.index.snapshot.closures)")
        // The `room.closed` again, e.g. redelivered after a failed confirm.
        _ = try await store.apply(.closure(closure, removed: false))
        #expect(store.index.snapshot.closures["Berlin"]?.isEmpty ?? true, "\(store.index.snapshot.closures)")
    }

    /// A closure the rebuild brings (the live model had missed it) is
    /// announced on the local dates it covers in the room's zone: in Tokyo
    /// 20:00–08:00 closes the morning of the next local day, a date the
    /// closure's UTC span never reaches.
    @Test func aClosureARebuildBringsIsAnnouncedOnItsLocalDates() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        var tokyo = Room(name: "Tokyo", capacity: 8)
        tokyo.timeZone = "Asia/Tokyo"
        _ = try await store.apply(.room(tokyo, occurredAt: "2026-11-01T10:00:00Z"))
        #expect(try await store.beginRebuild(replayId: "r1"))
        _ = try await store.applyReplayed(.room(tokyo, occurredAt: "2026-11-01T10:00:00Z"), replayId: "r1")
        let night = RoomClosure(id: "c1", room: "Tokyo", from: "2026-12-24T11:00:00Z", to: "2026-12-24T23:00:00Z", reason: "party")
        _ = try await store.applyReplayed(.closure(night, removed: false), replayId: "r1")
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes.map(\.day) == [RoomDay(room: "Tokyo", date: "2026-12-25")], "\(result.changes)")
    }

    /// A replica fills itself until a rebuild has completed on its file;
    /// rooms written by live events do not count as a filled model.
    @Test func onlyACompletedRebuildMarksTheModelFilled() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        #expect(try await store.hasBeenFilled() == false)
        #expect(try await store.beginRebuild(replayId: "r1"))
        try await store.abortRebuild(replayId: "r1")
        #expect(try await store.hasBeenFilled() == false, "an aborted rebuild fills nothing")
        #expect(try await store.beginRebuild(replayId: "r2"))
        _ = try await store.applyReplayed(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"), replayId: "r2")
        _ = try #require(try await store.finishRebuild(replayId: "r2"))
        #expect(try await store.hasBeenFilled())
        let reopened = try ProjectorStore(path: dir.appendingPathComponent("model.sqlite").path)
        #expect(try await reopened.hasBeenFilled())
    }

    /// A cancel accepted after the replay ended, while the swap waits for
    /// the writer, keeps the live model; once the swap has begun a cancel
    /// is refused (too late), never reported as done.
    @Test func aCancelBeforeTheSwapKeepsTheLiveModelAndOneAfterItIsRefused() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("live", "09:00", "10:00"))
        #expect(try await store.beginRebuild(replayId: "r1"))
        _ = try await store.applyReplayed(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"), replayId: "r1")
        // The swap queues behind the held writer; the cancel comes meanwhile.
        let release = await store.holdWriter()
        let swap = Task { try await store.finishRebuild(replayId: "r1") }
        #expect(store.requestRebuildCancel(replayId: "r1"))
        release()
        #expect(try await swap.value == nil, "cancelled: no swap")
        #expect(try await store.booking(id: "live") != nil, "the live model is kept")
        try await store.abortRebuild(replayId: "r1")

        #expect(try await store.beginRebuild(replayId: "r2"))
        _ = try await store.applyReplayed(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"), replayId: "r2")
        #expect(store.requestRebuildCancel(replayId: "other") == false, "not that rebuild")
        _ = try #require(try await store.finishRebuild(replayId: "r2"))
        #expect(store.requestRebuildCancel(replayId: "r2") == false, "swapped: nothing to cancel")
        #expect(try await store.booking(id: "live") == nil, "the rebuilt model, without the stale booking")
    }

    @Test func rebuildReportsDaysThatDiffered() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("stale", "09:00", "10:00"))  // the handler no longer has it
        #expect(try await store.beginRebuild(replayId: "r1"))
        _ = try await store.applyReplayed(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"), replayId: "r1")
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes == [DayChange(day: RoomDay(room: "Berlin", date: "2026-11-23"), timeZone: "Europe/Berlin",
                                             avail: ["07:00 - 19:00"])])
    }

    /// A rebuild's changes applied a batch per transaction give the model
    /// and the counts that one change at a time gives: a booking replayed
    /// twice in one batch (a redelivered page) counts once, older versions
    /// after newer ones are ignored.
    @Test func aReplayedBatchEqualsTheSameChangesOneAtATime() async throws {
        let changes: [ModelChange] = [
            .room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"),
            state("b1", "09:00", "10:00", version: 2), state("b2", "11:00", "12:00", .pending, version: 1),
            state("b1", "13:00", "14:00", version: 1), state("b2", "11:00", "12:00", .pending, version: 1),
            state("b3", date: "2026-11-24", "07:00", "19:00", version: 1),
        ]
        var answers: [AvailabilityReply] = []
        var progress: [ProjectorStore.RebuildProgress] = []
        for batched in [false, true] {
            let (store, dir) = try makeStore()
            defer { try? FileManager.default.removeItem(at: dir) }
            #expect(try await store.beginRebuild(replayId: "r1"))
            if batched {
                #expect(try await store.applyReplayed(changes, replayId: "r1"))
                #expect(try await store.applyReplayed(changes, replayId: "other") == false)
            } else {
                for change in changes { #expect(try await store.applyReplayed(change, replayId: "r1")) }
            }
            let result = try #require(try await store.finishRebuild(replayId: "r1"))
            progress.append(result.progress)
            answers.append(try query(QueryEngine(index: store.index), AvailabilityQuery(date: .date(.calendarDate("2026-11-23")))))
        }
        #expect(progress[0].rooms == 1 && progress[0].bookings == 3, "\(progress[0])")
        #expect(progress[1].rooms == progress[0].rooms && progress[1].bookings == progress[0].bookings)
        #expect(answers[0] == answers[1])
    }

    /// Rooms registered one event at a time in any order, some twice, are
    /// listed once each in name order and in size order (the index keeps
    /// both sorted by inserting, not by sorting every room each time).
    @Test func roomsUpsertedInAnyOrderStaySortedAndUnique() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        var names = (0..<60).map { String(format: "Room %02d", $0) }
        var rng = SystemRandomNumberGenerator()
        names.shuffle(using: &rng)
        var capacity: [String: Int] = [:]
        for (i, name) in (names + names.prefix(20)).enumerated() {
            var room = berlinRoom
            room.name = name
            room.capacity = Int.random(in: 1...6, using: &rng)  // a second registration may change it
            capacity[name] = room.capacity
            _ = try await store.apply(.room(room, occurredAt: String(format: "2026-11-01T10:%02d:%02dZ", i / 60, i % 60)))
        }
        let snapshot = store.index.snapshot
        #expect(snapshot.sortedRooms.map(\.room.name) == names.sorted())
        #expect(snapshot.rooms.count == 60)
        let bySize = names.sorted { (capacity[$0]!, $0) < (capacity[$1]!, $1) }
        #expect(snapshot.roomsBySize.map(\.room.name) == bySize)
        #expect(snapshot.roomsBySize.map(\.room.capacity) == bySize.map { capacity[$0]! })
    }
}
