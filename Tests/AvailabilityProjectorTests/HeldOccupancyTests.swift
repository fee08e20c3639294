import AvailabilityProjector
import BookingContracts
import Foundation
import Testing

/// Contract v1.2 holds in the read model: a held booking takes its slot
/// exactly as before (availability answers unchanged) but in a mask of its
/// own, so the page can draw it apart from pending ones; confirming it
/// makes it booked, its lapse frees it, and a rebuild, a restart and an
/// older model file all end with the same masks.
@Suite("Held slots in the read model")
struct HeldOccupancyTests {
    let day = RoomDay(room: "Berlin", date: "2026-11-23")

    /// The slots of `[from, to)`; `to` may be `24:00`, the end of the day.
    func slots(_ from: String, _ to: String) -> SlotMask {
        SlotMask(fromMinute: ContractFormat.minutes(ofTime: from)!, toMinute: to == "24:00" ? 24 * 60 : ContractFormat.minutes(ofTime: to)!)
    }

    /// The four masks share 48 bytes: each reads back exactly what was
    /// written, in the low and in the high word, and none leaks into
    /// another; `busy` is their union.
    @Test func theFourMasksArePackedWithoutMixing() {
        // Slots on both sides of 64 (16:00) and up to the last one (23:45).
        let confirmed = slots("15:30", "16:30"), pending = slots("22:00", "23:00")
        let inProgress = slots("23:45", "24:00"), held = slots("08:00", "09:00").union(slots("20:00", "21:00"))
        var o = DayOccupancy(confirmed: confirmed, pending: pending, inProgress: inProgress, held: held)
        #expect(o.confirmed == confirmed && o.pending == pending && o.inProgress == inProgress && o.held == held)
        #expect(o.busy == confirmed.union(pending).union(inProgress).union(held))
        o.pending = .empty
        #expect(o.pending.isEmpty && o.confirmed == confirmed && o.held == held && o.inProgress == inProgress)
        o.held = .all
        #expect(o.held == .all && o.confirmed == confirmed && o.inProgress == inProgress && o.pending.isEmpty)
        o = DayOccupancy(held: slots("07:00", "08:00"))
        #expect(!o.isEmpty && DayOccupancy().isEmpty)
        #expect(MemoryLayout<DayOccupancy>.stride == 48, "a fourth mask must not grow every stored room-day")
    }

    /// Held, pending and confirmed bookings land in their own masks, and
    /// every one of them is taken.
    @Test func heldPendingAndConfirmedAreDistinctAndAllTaken() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        _ = try await store.apply(state("h", "09:00", "10:00", .held))
        _ = try await store.apply(state("p", "11:00", "12:00", .pending))
        _ = try await store.apply(state("c", "13:00", "14:00", .confirmed))
        let o = store.index.snapshot.occupancy(day)
        #expect(o.held.availStrings == ["09:00 - 10:00"])
        #expect(o.pending.availStrings == ["11:00 - 12:00"])
        #expect(o.confirmed.availStrings == ["13:00 - 14:00"])
        let engine = QueryEngine(index: store.index)
        #expect(try query(engine, AvailabilityQuery(date: .date(.calendarDate(day.date))))[0].avail
                    == ["07:00 - 09:00", "10:00 - 11:00", "12:00 - 13:00", "14:00 - 19:00"])
        // A restart reads the masks back from the file.
        let reopened = try ProjectorStore(path: dir.appendingPathComponent("model.sqlite").path)
        #expect(reopened.index.snapshot.occupancy(day) == o)
    }

    /// Confirming the hold turns its slot booked (no change to publish:
    /// it was taken and stays taken); a second hold that lapses frees its slot.
    @Test func aConfirmedHoldIsBookedAndALapsedHoldFreesTheSlot() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        _ = try await store.apply(.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"))
        let held = try await store.apply(state("h1", "09:00", "10:00", .held))
        #expect(held.changes.map(\.avail) == [["07:00 - 09:00", "10:00 - 19:00"]], "held is taken")
        let confirmed = try await store.apply(state("h1", "09:00", "10:00", .confirmed, version: 2))
        #expect(confirmed.applied && confirmed.changes.isEmpty)
        var o = store.index.snapshot.occupancy(day)
        #expect(o.confirmed.availStrings == ["09:00 - 10:00"] && o.held.isEmpty)

        _ = try await store.apply(state("h2", "15:00", "16:00", .held))
        #expect(store.index.snapshot.occupancy(day).held.availStrings == ["15:00 - 16:00"])
        // The timer cancels it at holdExpiresAt: booking.cancelled, version 2.
        let lapsed = try await store.apply(state("h2", "15:00", "16:00", .cancelled, version: 2))
        #expect(lapsed.changes.map(\.avail) == [["07:00 - 09:00", "10:00 - 19:00"]], "the slot is free again")
        o = store.index.snapshot.occupancy(day)
        #expect(o.held.isEmpty && o.confirmed.availStrings == ["09:00 - 10:00"])

        // Cancelled alone, the day has no row left.
        _ = try await store.apply(state("h1", "09:00", "10:00", .cancelled, version: 3))
        #expect(try await store.counts().roomDays == 0)
        #expect(store.index.snapshot.days.isEmpty)
    }

    /// A rebuild from the handler's replay (held bookings come as
    /// `booking.created` with status held) reproduces the held mask.
    @Test func aRebuildReproducesHeldSlots() async throws {
        let (store, dir) = try makeStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let changes: [ModelChange] = [.room(berlinRoom, occurredAt: "2026-11-01T10:00:00Z"),
                                      state("h", "09:00", "10:00", .held), state("p", "11:00", "12:00", .pending)]
        for change in changes { _ = try await store.apply(change) }
        let live = store.index.snapshot.occupancy(day)
        #expect(try await store.beginRebuild(replayId: "r1"))
        #expect(try await store.applyReplayed(changes, replayId: "r1"))
        let result = try #require(try await store.finishRebuild(replayId: "r1"))
        #expect(result.changes.isEmpty)
        #expect(store.index.snapshot.occupancy(day) == live)
        #expect(live.held.availStrings == ["09:00 - 10:00"] && live.pending.availStrings == ["11:00 - 12:00"])
    }

    /// A model file written before held slots had a mask of their own
    /// (held folded into pending, no held columns) is upgraded when opened:
    /// the days with held bookings are recomputed, the others kept.
    @Test func anOlderModelFileIsUpgraded() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("projector-held-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("model.sqlite").path
        let nine = slots("09:00", "10:00").lo, eleven = slots("11:00", "12:00").lo
        // The old schema, written by Python's sqlite3 (this target links no SQLite library of its own).
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.executescript('''
            CREATE TABLE room (name TEXT PRIMARY KEY, json BLOB NOT NULL, occurredAt TEXT NOT NULL);
            CREATE TABLE booking (id TEXT PRIMARY KEY, room TEXT NOT NULL, date TEXT NOT NULL, startMin INTEGER NOT NULL,
              endMin INTEGER NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL, prevDate TEXT);
            CREATE TABLE roomday (room TEXT NOT NULL, date TEXT NOT NULL, confirmedLo INTEGER NOT NULL,
              confirmedHi INTEGER NOT NULL, pendingLo INTEGER NOT NULL, pendingHi INTEGER NOT NULL,
              inProgressLo INTEGER NOT NULL DEFAULT 0, inProgressHi INTEGER NOT NULL DEFAULT 0,
              PRIMARY KEY (room, date)) WITHOUT ROWID;
            CREATE TABLE closure (id TEXT PRIMARY KEY, room TEXT NOT NULL, json BLOB NOT NULL, removed INTEGER NOT NULL DEFAULT 0);
            INSERT INTO booking VALUES ('h', 'Berlin', '2026-11-23', 540, 600, 'held', 1, NULL);
            INSERT INTO booking VALUES ('p', 'Berlin', '2026-11-24', 660, 720, 'pending', 1, NULL);
            INSERT INTO roomday VALUES ('Berlin', '2026-11-23', 0, 0, \(nine), 0, 0, 0);
            INSERT INTO roomday VALUES ('Berlin', '2026-11-24', 0, 0, \(eleven), 0, 0, 0);
            ''')
            db.commit()
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, path]
        try process.run()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0)

        let store = try ProjectorStore(path: path)
        let held = store.index.snapshot.occupancy(day)
        #expect(held.held.availStrings == ["09:00 - 10:00"] && held.pending.isEmpty)
        #expect(store.index.snapshot.occupancy(RoomDay(room: "Berlin", date: "2026-11-24")).pending.availStrings == ["11:00 - 12:00"])
    }
}
