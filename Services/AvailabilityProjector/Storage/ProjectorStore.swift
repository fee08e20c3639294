import BookingContracts
import Foundation
import GRDB
import Synchronization

/// A booking as the read model keeps it: where, when (local wall-clock
/// minutes), status and the highest version seen.
public struct BookingState: Sendable, Equatable {
    public var id: String
    public var room: String
    public var date: String
    public var startMinute: Int
    public var endMinute: Int
    public var status: BookingStatus
    public var version: Int

    public init(id: String, room: String, date: String, startMinute: Int, endMinute: Int, status: BookingStatus,
                version: Int) {
        self.id = id
        self.room = room
        self.date = date
        self.startMinute = startMinute
        self.endMinute = endMinute
        self.status = status
        self.version = version
    }

    /// From an event's booking; nil when its date or times are unreadable.
    public init?(_ booking: Booking) {
        self.init(id: booking.id, room: booking.room, date: booking.date, start: booking.start, end: booking.end,
                  status: booking.status, version: booking.version)
    }

    /// From a booking's fields as the contract writes them (`date`,
    /// `start`, `end` local); nil when the id is empty or the date or a time
    /// is unreadable.
    public init?(id: String, room: String, date: String, start: String, end: String, status: BookingStatus, version: Int) {
        guard ContractFormat.calendarDate(date) != nil, let startMinute = ContractFormat.minutes(ofTime: start),
              let endMinute = ContractFormat.minutes(ofTime: end), !id.isEmpty else { return nil }
        self.init(id: id, room: room, date: date, startMinute: startMinute, endMinute: endMinute, status: status, version: version)
    }
}

/// A change to feed the read model.
public enum ModelChange: Sendable {
    /// `room.registered`: the room and the event's `occurredAt`.
    case room(Room, occurredAt: String)
    /// Any booking event: the booking's state after the change.
    case booking(BookingState)
    /// `room.closed` (`removed` false) or `room.reopened` (true), v1.2.
    case closure(RoomClosure, removed: Bool)
    /// A replayed booking whose status this projector does not know
    /// (v1.1: consumers ignore unknown status values). The model keeps
    /// what it knew of the booking: a rebuild carries the live model's row
    /// over, if there is one, and counts the booking as replayed, so the
    /// count check against the end marker still holds. Live events with
    /// such a status never become a change (``EventReader``).
    case keepBooking(id: String)
}

/// A room-day whose free slots changed, with its new `avail`.
public struct DayChange: Sendable, Equatable {
    public var day: RoomDay
    public var timeZone: String
    public var avail: [String]

    public init(day: RoomDay, timeZone: String, avail: [String]) {
        self.day = day
        self.timeZone = timeZone
        self.avail = avail
    }
}

/// What applying a change did.
public struct ApplyOutcome: Sendable {
    /// False when the change was a repeat or older than what the model has.
    public var applied: Bool
    /// Room-days (live model) whose `avail` changed: publish them.
    public var changes: [DayChange]
    /// For a booking change that was not applied: the room-days its stored
    /// row names (current and previous date), so a redelivered event can
    /// publish their `avail` again (see docs/projector.md).
    public var touched: [RoomDay]
}

/// Called on the writer right after a change's commit and index update,
/// in commit order: the room-days whose free slots it changed, and every
/// room-day an applied change wrote, changed or not (a booking's day and
/// previous day, a closure's days; empty when it was not applied).
public typealias CommitObserver = @Sendable (_ changes: [DayChange], _ written: [RoomDay]) -> Void

/// The projector's SQLite read model (GRDB, WAL) in `$DATA_DIR`, and the
/// in-memory ``AvailabilityIndex`` it keeps in step.
///
/// Tables: `room` (name, json, occurredAt), `booking` (id, room, date,
/// startMin, endMin, status, version, prevDate — cancelled bookings stay
/// as tombstones with their version), `roomday` (occupancy bitmaps —
/// confirmed, pending, in progress, held — of every room-day with bookings
/// that take time). A rebuild fills `rebuild_*`
/// copies of the three tables, which replace the live ones in one
/// transaction. Every write runs on GRDB's single writer, and the index
/// is updated there right after the commit, so it follows commit order.
public final class ProjectorStore: Sendable {
    let pool: DatabasePool
    public let index: AvailabilityIndex
    let rebuild = Mutex<RebuildProgress?>(nil)
    /// Changes waiting for the writer (``apply(_:onCommit:)``), and
    /// whether a writer job that takes them is queued.
    let queued = Mutex<QueuedApplies>(QueuedApplies())
    /// Transactions ``apply(_:onCommit:)`` committed (tests: batching).
    let applyTransactions = Atomic<Int>(0)
    /// Transactions ``applyReplayed(_:replayId:)`` began (tests).
    let replayTransactions = Atomic<Int>(0)
    /// Tests: an error to throw instead of applying a change, as a failed
    /// statement would.
    let applyFault = Mutex<(@Sendable (ModelChange) -> (any Error)?)?>(nil)
    /// Tests: an error to throw from the index update after a commit, as a
    /// failed read of the committed occupancy would.
    let indexFault = Mutex<(any Error)?>(nil)
    /// Committed room-days whose index update failed: the index misses
    /// them until ``repairIndex(_:)`` reads them again. Only days: a
    /// redelivered booking event is a no-op by version and would never
    /// update them, while a redelivered `room.registered` applies again
    /// (ties go to the later arrival) and announces the room's days
    /// itself. Touched on the writer only.
    let staleDays = Mutex<Set<RoomDay>>([])
    /// What reading missed days into the index changed, until the next
    /// commit or republish announces it (``takeUnannounced()``): the event
    /// that missed them may never say so again (a later event of the same
    /// booking moves `touched` elsewhere; the delivery limit). Touched on
    /// the writer only.
    let unannounced = Mutex<[DayChange]>([])

    /// A rebuild in progress.
    public struct RebuildProgress: Sendable, Equatable {
        public var replayId: String
        public var rooms = 0
        public var bookings = 0
        /// Closures replayed (v1.2).
        public var closures = 0
        public var liveEvents = 0
        /// A cancel was accepted: the swap will refuse (``requestRebuildCancel(replayId:)``).
        public var cancelRequested = false
        /// The swap has begun: too late to cancel.
        public var swapping = false
    }

    /// Asks the rebuild `replayId` not to swap its tables in. True when it
    /// will not (accepted before the swap began); false when it is not
    /// running or its swap has begun (the cancel is too late).
    public func requestRebuildCancel(replayId: String) -> Bool {
        rebuild.withLock { progress in
            guard progress?.replayId == replayId, progress?.swapping == false else { return false }
            progress?.cancelRequested = true
            return true
        }
    }

    static let live = ""
    /// Whether timestamp `a` is a later instant than `b`; unparseable text
    /// falls back to text order (the contract's own form sorts correctly).
    static func isNewer(_ a: String, than b: String) -> Bool {
        if let x = instant(a), let y = instant(b) { return x > y }
        return a > b
    }

    /// The contract's `YYYY-MM-DDTHH:mm:ssZ`, else any ISO 8601 instant
    /// (fractions, offsets) another producer might write. Rooms change
    /// rarely, so a formatter per call is fine here.
    static func instant(_ text: String) -> Date? {
        if let date = ContractFormat.parseTimestamp(text) { return date }
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions.insert(.withFractionalSeconds)
        return formatter.date(from: text)
    }

    static let staging = "rebuild_"

    /// Opens (creating as needed) the read model at `path` and loads the index.
    public init(path: String, index: AvailabilityIndex = AvailabilityIndex()) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(15)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        // FULL on the writer too (GRDB sets NORMAL there when it turns WAL
        // on): an event is acked after its commit, so a commit lost to a
        // power cut or an OS crash would leave the model stale until the
        // next rebuild, with nothing to say so.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        self.index = index
        try pool.write { db in
            try Self.createTables(db, prefix: Self.live, ifNotExists: true)
            try db.execute(sql: "DROP TABLE IF EXISTS rebuild_room; DROP TABLE IF EXISTS rebuild_booking; DROP TABLE IF EXISTS rebuild_roomday; DROP TABLE IF EXISTS rebuild_seen; DROP TABLE IF EXISTS rebuild_closure")
        }
        let state = try pool.read { db in try Self.loadState(db) }
        index.replace(with: state)
    }

    static func createTables(_ db: Database, prefix p: String, ifNotExists: Bool) throws {
        let ine = ifNotExists ? "IF NOT EXISTS " : ""
        try db.execute(sql: """
            CREATE TABLE \(ine)\(p)room (name TEXT PRIMARY KEY, json BLOB NOT NULL, occurredAt TEXT NOT NULL);
            CREATE TABLE \(ine)\(p)booking (id TEXT PRIMARY KEY, room TEXT NOT NULL, date TEXT NOT NULL,
              startMin INTEGER NOT NULL, endMin INTEGER NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL,
              prevDate TEXT);
            CREATE TABLE \(ine)\(p)roomday (room TEXT NOT NULL, date TEXT NOT NULL, confirmedLo INTEGER NOT NULL,
              confirmedHi INTEGER NOT NULL, pendingLo INTEGER NOT NULL, pendingHi INTEGER NOT NULL,
              inProgressLo INTEGER NOT NULL DEFAULT 0, inProgressHi INTEGER NOT NULL DEFAULT 0,
              heldLo INTEGER NOT NULL DEFAULT 0, heldHi INTEGER NOT NULL DEFAULT 0,
              PRIMARY KEY (room, date)) WITHOUT ROWID;
            CREATE TABLE \(ine)\(p)closure (id TEXT PRIMARY KEY, room TEXT NOT NULL, json BLOB NOT NULL,
              removed INTEGER NOT NULL DEFAULT 0);
            """)
        // A model written before v1.1 has no in-progress columns: add them
        // (no booking of such a model is in progress).
        let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(\(p)roomday)").map { $0["name"] as String }
        if !columns.contains("inProgressLo") {
            try db.execute(sql: """
                ALTER TABLE \(p)roomday ADD COLUMN inProgressLo INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE \(p)roomday ADD COLUMN inProgressHi INTEGER NOT NULL DEFAULT 0;
                """)
        }
        // A model written before held slots had their own mask counted
        // them as pending: add the columns and recompute the days that
        // have held bookings (only those; every other row is right as it is).
        if !columns.contains("heldLo") {
            try db.execute(sql: """
                ALTER TABLE \(p)roomday ADD COLUMN heldLo INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE \(p)roomday ADD COLUMN heldHi INTEGER NOT NULL DEFAULT 0;
                """)
            let days = try Row.fetchAll(db, sql: "SELECT DISTINCT room, date FROM \(p)booking WHERE status = 'held'")
            for row in days { try recompute(RoomDay(room: row[0], date: row[1]), db, prefix: p) }
        }
        // Index names must be unique in the file: a rebuilt table keeps its
        // index's name when renamed, so every generation gets its own.
        let suffix = ifNotExists ? "0" : UUID().uuidString.prefix(8).lowercased()
        let existing = try String.fetchAll(db, sql: """
            SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name LIKE 'booking_room_date_%'
            """, arguments: [p + "booking"])
        if existing.isEmpty {
            try db.execute(sql: "CREATE INDEX booking_room_date_\(suffix) ON \(p)booking (room, date)")
        }
    }

    static func loadState(_ db: Database) throws -> AvailabilityIndex.State {
        var state = AvailabilityIndex.State()
        for data in try Data.fetchAll(db, sql: "SELECT json FROM room") {
            let room = try ContractJSON.decode(Room.self, from: data)
            state.rooms[room.name] = RoomInfo(room: room)
        }
        state.sortRooms()
        for data in try Data.fetchAll(db, sql: "SELECT json FROM closure WHERE removed = 0") {
            state.setClosure(try ContractJSON.decode(RoomClosure.self, from: data), removed: false)
        }
        let rows = try Row.fetchCursor(db, sql: """
            SELECT room, date, confirmedLo, confirmedHi, pendingLo, pendingHi, inProgressLo, inProgressHi, heldLo, heldHi
            FROM roomday
            """)
        while let row = try rows.next() {
            let occupancy = DayOccupancy(
                confirmed: SlotMask(lo: UInt64(bitPattern: row[2] as Int64), hi: UInt64(bitPattern: row[3] as Int64)),
                pending: SlotMask(lo: UInt64(bitPattern: row[4] as Int64), hi: UInt64(bitPattern: row[5] as Int64)),
                inProgress: SlotMask(lo: UInt64(bitPattern: row[6] as Int64), hi: UInt64(bitPattern: row[7] as Int64)),
                held: SlotMask(lo: UInt64(bitPattern: row[8] as Int64), hi: UInt64(bitPattern: row[9] as Int64)))
            state.set(RoomDay(room: row[0], date: row[1]), occupancy)
        }
        return state
    }

    // MARK: Applying changes

    /// Applies one change to the live model (and to the rebuild in
    /// progress, if any), commits, updates the index, and returns what to
    /// publish. `onCommit` runs on the writer right after the index update,
    /// in commit order (the change publisher queues there).
    ///
    /// Booking and room changes that wait for the writer together commit
    /// in one transaction (``applyQueued(_:)``); a closure runs alone.
    public func apply(_ change: ModelChange, onCommit: @escaping CommitObserver = { _, _ in }) async throws
        -> ApplyOutcome {
        if case .closure(let closure, let removed) = change {
            return try await pool.writeWithoutTransaction { db in
                try self.applyClosure(closure, removed: removed, db, staging: self.rebuild.withLock { $0 != nil },
                                      onCommit: onCommit)
            }
        }
        return try await withCheckedThrowingContinuation { continuation in
            let startWriter = queued.withLock { q -> Bool in
                q.items.append(QueuedApply(change: change, onCommit: onCommit, continuation: continuation))
                defer { q.writerQueued = true }
                return !q.writerQueued
            }
            if startWriter { pool.asyncWriteWithoutTransaction { db in self.applyQueued(db) } }
        }
    }

    /// Applies many booking states at once, one transaction, each room-day
    /// recomputed once (bulk loading: benchmarks, tests). Returns the
    /// room-days whose `avail` changed.
    @discardableResult
    public func applyBulk(_ changes: [ModelChange]) async throws -> [DayChange] {
        try await pool.writeWithoutTransaction { db in
            var days = Set<RoomDay>()
            var rooms: [Room] = []
            try db.inTransaction(.immediate) {
                for change in changes {
                    if case .closure = change { continue }  // not bulk-loaded
                    let r = try Self.apply(change, db, prefix: Self.live, recompute: false)
                    days.formUnion(r.days)
                    if let room = r.room { rooms.append(room) }
                }
                for day in days { try Self.recompute(day, db, prefix: Self.live) }
                return .commit
            }
            var all: [DayChange] = []
            for room in rooms { all += try self.updateIndex(db, days: [], room: room) }
            all += try self.updateIndex(db, days: days, room: nil)
            return all
        }
    }

    /// The changes of one room-day set: reads the new occupancy, updates
    /// the index, compares free slots before and after. Runs on the writer.
    func updateIndex(_ db: Database, days: Set<RoomDay>, room: Room?) throws -> [DayChange] {
        if let fault = indexFault.withLock({ $0 }) { throw fault }
        var occupancies: [(RoomDay, DayOccupancy)] = []
        for day in days { occupancies.append((day, try Self.occupancy(day, db, prefix: Self.live))) }
        // The free slots before, computed from a snapshot that is dropped
        // before the update: a snapshot held across it would make the
        // update copy every collection it touches (all rooms, every date's
        // rooms) instead of changing them in place.
        // The dates either side of a changed one compare too, for rooms
        // with a buffer (which reaches across midnight).
        let candidates = occupancies.isEmpty ? [] : index.snapshot.withNeighbours(days)
        let freeBefore: [RoomDay: SlotMask] = candidates.isEmpty ? [:] : {
            let before = index.snapshot
            var free: [RoomDay: SlotMask] = [:]
            for day in candidates { free[day] = index.free(day, in: before) }
            return free
        }()
        // A room the index did not know yet: bookings and closures of it
        // that overtook its `room.registered` (the consumer runs several
        // deliveries at once) were stored without an announcement, as a
        // day of an unknown room has no free time. Its days are announced
        // now.
        let newRoom = room.flatMap { index.snapshot.rooms[$0.name] == nil ? $0 : nil }
        index.update { state in
            if let room { state.upsert(room) }
            for (day, occupancy) in occupancies { state.set(day, occupancy) }
        }
        guard !occupancies.isEmpty || newRoom != nil else { return [] }
        let after = index.snapshot
        var compared = candidates.union(after.withNeighbours(days))
        if let newRoom, let info = after.rooms[newRoom.name] {
            var stored = Set<RoomDay>()
            for (date, rooms) in after.days where rooms[newRoom.name] != nil {
                stored.insert(RoomDay(room: newRoom.name, date: date))
            }
            // A booking-free date next to a booked one may lose time to its buffer.
            compared.formUnion(after.withNeighbours(stored))
            for span in after.closures[newRoom.name] ?? [] {
                for date in span.dates(zone: info.zone) { compared.insert(RoomDay(room: newRoom.name, date: date)) }
            }
        }
        var changes: [DayChange] = []
        for day in compared.sorted() {
            guard let info = after.rooms[day.room], let new = index.free(day, in: after) else { continue }
            if freeBefore[day] != new {
                changes.append(DayChange(day: day, timeZone: info.room.timeZone, avail: new.availStrings))
            }
        }
        return changes
    }

    /// Applies `change` to the tables with `prefix`; returns whether it was
    /// newer, the room-days to recompute (already recomputed unless
    /// `recompute` is false), and the room when it replaced the stored one.
    static func apply(_ change: ModelChange, _ db: Database, prefix p: String, recompute: Bool = true) throws
        -> (applied: Bool, days: Set<RoomDay>, touched: [RoomDay], room: Room?) {
        switch change {
        case .room(let room, let occurredAt):
            // Rooms carry no version: the newest occurredAt wins (ties: the later arrival).
            let stored = try String.fetchOne(db.cachedStatement(sql: "SELECT occurredAt FROM \(p)room WHERE name = ?"),
                                             arguments: [room.name])
            // Compared as instants, not text: producers may write fractions
            // of a second or an offset ("…00Z" vs "…00.5Z" sorts wrong as text).
            if let stored, Self.isNewer(stored, than: occurredAt) { return (false, [], [], nil) }
            try db.cachedStatement(sql: """
                INSERT INTO \(p)room (name, json, occurredAt) VALUES (?, ?, ?)
                ON CONFLICT(name) DO UPDATE SET json = excluded.json, occurredAt = excluded.occurredAt
                """).execute(arguments: [room.name, try ContractJSON.encode(room), occurredAt])
            return (true, [], [], room)

        case .closure(let closure, let removed):
            try storeClosure(closure, removed: removed, db, prefix: p)
            return (true, [], [], nil)

        case .keepBooking(let id):
            // Only a rebuild has something to keep: the live row, unless
            // the rebuild already holds that version or a newer one (a
            // stale live event staged during the rebuild holds an older).
            guard p != live else { return (false, [], [], nil) }
            try db.cachedStatement(sql: """
                INSERT INTO \(p)booking (id, room, date, startMin, endMin, status, version, prevDate)
                SELECT id, room, date, startMin, endMin, status, version, prevDate FROM \(live)booking WHERE id = ?
                ON CONFLICT(id) DO UPDATE SET room = excluded.room, date = excluded.date, startMin = excluded.startMin,
                  endMin = excluded.endMin, status = excluded.status, version = excluded.version, prevDate = excluded.prevDate
                WHERE excluded.version > \(p)booking.version
                """).execute(arguments: [id])
            guard db.changesCount > 0, let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT room, date FROM \(p)booking WHERE id = ?"), arguments: [id]) else {
                return (false, [], [], nil)
            }
            let day = RoomDay(room: row[0], date: row[1])
            if recompute { try Self.recompute(day, db, prefix: p) }
            return (true, [day], [], nil)

        case .booking(let b):
            let existing = try Row.fetchOne(db.cachedStatement(sql: "SELECT room, date, version, prevDate FROM \(p)booking WHERE id = ?"),
                                            arguments: [b.id])
            if let existing, (existing["version"] as Int) >= b.version {
                var touched = [RoomDay(room: existing["room"], date: existing["date"])]
                if let prev = existing["prevDate"] as String? { touched.append(RoomDay(room: existing["room"], date: prev)) }
                return (false, [], touched, nil)
            }
            let oldDay = existing.map { RoomDay(room: $0["room"], date: $0["date"]) }
            try db.cachedStatement(sql: """
                INSERT INTO \(p)booking (id, room, date, startMin, endMin, status, version, prevDate)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(id) DO UPDATE SET room = excluded.room, date = excluded.date, startMin = excluded.startMin,
                  endMin = excluded.endMin, status = excluded.status, version = excluded.version, prevDate = excluded.prevDate
                """).execute(arguments: [b.id, b.room, b.date, b.startMinute, b.endMinute, b.status.rawValue, b.version,
                                         oldDay?.date])
            var days: Set<RoomDay> = [RoomDay(room: b.room, date: b.date)]
            if let oldDay { days.insert(oldDay) }
            if recompute { for day in days { try Self.recompute(day, db, prefix: p) } }
            return (true, days, [], nil)
        }
    }

    /// Recomputes the `roomday` row of `day` from its bookings.
    static func recompute(_ day: RoomDay, _ db: Database, prefix p: String) throws {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT startMin, endMin, status FROM \(p)booking
            WHERE room = ? AND date = ? AND status IN ('pending', 'confirmed', 'inProgress', 'completed', 'held')
            """), arguments: [day.room, day.date])
        let occupancy = DayOccupancy(bookings: rows.map { row in
            (row[0] as Int, row[1] as Int, BookingStatus(rawValue: row[2]) ?? .cancelled)
        })
        try store(occupancy, of: day, db, prefix: p)
    }

    /// Computes every `roomday` row from the bookings in one ordered scan:
    /// how a rebuild's room-days are made when it finishes (recomputing a
    /// room-day per replayed booking cost one query per booking, a room-day
    /// with eight bookings eight times over).
    static func recomputeAll(_ db: Database, prefix p: String) throws {
        try db.execute(sql: "DELETE FROM \(p)roomday")
        let cursor = try Row.fetchCursor(db.cachedStatement(sql: """
            SELECT room, date, startMin, endMin, status FROM \(p)booking
            WHERE status IN ('pending', 'confirmed', 'inProgress', 'completed', 'held')
            ORDER BY room, date
            """))
        var current: RoomDay?
        var bookings: [(start: Int, end: Int, status: BookingStatus)] = []
        func flush() throws {
            guard let day = current, !bookings.isEmpty else { return }
            try store(DayOccupancy(bookings: bookings), of: day, db, prefix: p)
            bookings.removeAll(keepingCapacity: true)
        }
        while let row = try cursor.next() {
            let room: String = row[0], date: String = row[1]
            if current?.room != room || current?.date != date {
                try flush()
                current = RoomDay(room: room, date: date)
            }
            bookings.append((row[2] as Int, row[3] as Int, BookingStatus(rawValue: row[4]) ?? .cancelled))
        }
        try flush()
    }

    /// Writes (or, when empty, deletes) the `roomday` row of `day`.
    static func store(_ occupancy: DayOccupancy, of day: RoomDay, _ db: Database, prefix p: String) throws {
        if occupancy.isEmpty {
            try db.cachedStatement(sql: "DELETE FROM \(p)roomday WHERE room = ? AND date = ?").execute(arguments: [day.room, day.date])
        } else {
            try db.cachedStatement(sql: """
                INSERT INTO \(p)roomday (room, date, confirmedLo, confirmedHi, pendingLo, pendingHi, inProgressLo, inProgressHi,
                  heldLo, heldHi)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(room, date) DO UPDATE SET confirmedLo = excluded.confirmedLo, confirmedHi = excluded.confirmedHi,
                  pendingLo = excluded.pendingLo, pendingHi = excluded.pendingHi,
                  inProgressLo = excluded.inProgressLo, inProgressHi = excluded.inProgressHi,
                  heldLo = excluded.heldLo, heldHi = excluded.heldHi
                """).execute(arguments: [day.room, day.date,
                                         Int64(bitPattern: occupancy.confirmed.lo), Int64(bitPattern: occupancy.confirmed.hi),
                                         Int64(bitPattern: occupancy.pending.lo), Int64(bitPattern: occupancy.pending.hi),
                                         Int64(bitPattern: occupancy.inProgress.lo), Int64(bitPattern: occupancy.inProgress.hi),
                                         Int64(bitPattern: occupancy.held.lo), Int64(bitPattern: occupancy.held.hi)])
        }
    }

    static func occupancy(_ day: RoomDay, _ db: Database, prefix p: String) throws -> DayOccupancy {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT confirmedLo, confirmedHi, pendingLo, pendingHi, inProgressLo, inProgressHi, heldLo, heldHi FROM \(p)roomday
            WHERE room = ? AND date = ?
            """), arguments: [day.room, day.date]) else { return .free }
        return DayOccupancy(confirmed: SlotMask(lo: UInt64(bitPattern: row[0] as Int64), hi: UInt64(bitPattern: row[1] as Int64)),
                            pending: SlotMask(lo: UInt64(bitPattern: row[2] as Int64), hi: UInt64(bitPattern: row[3] as Int64)),
                            inProgress: SlotMask(lo: UInt64(bitPattern: row[4] as Int64), hi: UInt64(bitPattern: row[5] as Int64)),
                            held: SlotMask(lo: UInt64(bitPattern: row[6] as Int64), hi: UInt64(bitPattern: row[7] as Int64)))
    }

    // MARK: Rebuild

    /// The rebuild in progress, if any.
    public var rebuildProgress: RebuildProgress? { rebuild.withLock { $0 } }

    /// Starts a rebuild into fresh `rebuild_*` tables; from now on live
    /// changes go to both models. False when one is already running.
    public func beginRebuild(replayId: String) async throws -> Bool {
        try await pool.writeWithoutTransaction { db in
            guard self.rebuild.withLock({ $0 == nil }) else { return false }
            try db.inTransaction(.immediate) {
                try db.execute(sql: "DROP TABLE IF EXISTS rebuild_room; DROP TABLE IF EXISTS rebuild_booking; DROP TABLE IF EXISTS rebuild_roomday; DROP TABLE IF EXISTS rebuild_seen; DROP TABLE IF EXISTS rebuild_closure")
                try Self.createTables(db, prefix: Self.staging, ifNotExists: false)
                // Which rooms and bookings the replay delivered, so a message
                // delivered twice (a redelivered replay command replays again
                // under the same id) is counted once against the end marker.
                try db.execute(sql: "CREATE TABLE rebuild_seen (key TEXT PRIMARY KEY) WITHOUT ROWID")
                return .commit
            }
            self.rebuild.withLock { $0 = RebuildProgress(replayId: replayId) }
            return true
        }
    }

    /// Applies a replayed change to the rebuild (only for `replayId`);
    /// false when no such rebuild is running.
    public func applyReplayed(_ change: ModelChange, replayId: String) async throws -> Bool {
        try await applyReplayed([change], replayId: replayId)
    }

    /// Applies replayed changes of `replayId`, in order, in one transaction
    /// (a rebuild's messages arrive by the thousand: a transaction each
    /// capped it at the writer's round trip per message). Returns false
    /// when no such rebuild is running. When a change throws, nothing of
    /// the batch is kept and its halves are applied again, each halved
    /// again while it fails, in order, so only the changes that fail are
    /// missing (the rebuild then reports them). Halving, not one change
    /// at a time: a batch of pages holds up to 25,000 changes, and one bad
    /// change costs about 2 log₂ n transactions instead of n.
    public func applyReplayed(_ changes: [ModelChange], replayId: String) async throws -> Bool {
        guard !changes.isEmpty else { return rebuild.withLock { $0?.replayId == replayId } }
        do {
            return try await applyReplayedTogether(changes, replayId: replayId)
        } catch {
            guard changes.count > 1, !Self.failsEveryChange(error) else { throw error }
            let middle = changes.count / 2
            var failure: (any Error)?
            for half in [changes[..<middle], changes[middle...]] {
                do {
                    _ = try await applyReplayed(Array(half), replayId: replayId)
                } catch {
                    failure = failure ?? error
                }
            }
            if let failure { throw failure }
            return true
        }
    }

    /// Errors no change of a batch can escape — the disk is full, the
    /// file read-only or broken, the task cancelled: halving would only
    /// repeat them, about 2n transactions for a batch of n.
    static func failsEveryChange(_ error: any Error) -> Bool {
        if error is CancellationError { return true }
        guard let error = error as? DatabaseError else { return false }
        switch error.resultCode {
        case .SQLITE_FULL, .SQLITE_READONLY, .SQLITE_IOERR, .SQLITE_CORRUPT, .SQLITE_NOTADB, .SQLITE_CANTOPEN,
             .SQLITE_NOMEM, .SQLITE_INTERRUPT, .SQLITE_PERM, .SQLITE_AUTH:
            return true
        default:
            return false
        }
    }

    private func applyReplayedTogether(_ changes: [ModelChange], replayId: String) async throws -> Bool {
        try await pool.writeWithoutTransaction { db in
            guard self.rebuild.withLock({ $0?.replayId == replayId }) else { return false }
            var counted = (rooms: 0, bookings: 0, closures: 0)
            self.replayTransactions.add(1, ordering: .relaxed)
            try db.inTransaction(.immediate) {
                counted = (0, 0, 0)
                for change in changes {
                    if let fault = self.applyFault.withLock({ $0?(change) }) { throw fault }
                    _ = try Self.apply(change, db, prefix: Self.staging, recompute: false)
                    let key: String
                    switch change {
                    case .room(let room, _): key = "room:" + room.name
                    case .booking(let booking): key = "booking:" + booking.id
                    case .closure(let closure, _): key = "closure:" + closure.id
                    case .keepBooking(let id): key = "booking:" + id
                    }
                    try db.cachedStatement(sql: "INSERT OR IGNORE INTO rebuild_seen (key) VALUES (?)").execute(arguments: [key])
                    guard db.changesCount > 0 else { continue }
                    switch change {
                    case .room: counted.rooms += 1
                    case .booking, .keepBooking: counted.bookings += 1
                    case .closure: counted.closures += 1
                    }
                }
                return .commit
            }
            self.rebuild.withLock { progress in
                progress?.rooms += counted.rooms
                progress?.bookings += counted.bookings
                progress?.closures += counted.closures
            }
            return true
        }
    }

    /// Abandons the rebuild (its tables are dropped).
    public func abortRebuild(replayId: String) async throws {
        try await pool.writeWithoutTransaction { db in
            guard self.rebuild.withLock({ $0?.replayId == replayId }) else { return }
            self.rebuild.withLock { $0 = nil }
            try db.execute(sql: "DROP TABLE IF EXISTS rebuild_room; DROP TABLE IF EXISTS rebuild_booking; DROP TABLE IF EXISTS rebuild_roomday; DROP TABLE IF EXISTS rebuild_seen; DROP TABLE IF EXISTS rebuild_closure")
        }
    }

    /// Whether a rebuild has ever completed on this file (``finishRebuild``
    /// records it in the swap's transaction). Rooms alone do not say so:
    /// live `room.registered` events reach an empty model before any fill.
    public func hasBeenFilled() async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'model_filled')") ?? false
        }
    }

    /// Replaces the live model with the rebuild in one transaction, reloads
    /// the index and returns the room-days whose `avail` differs (normally
    /// none: the rebuild reproduces what the events built).
    public func finishRebuild(replayId: String, onCommit: @Sendable ([DayChange]) -> Void = { _ in }) async throws
        -> (progress: RebuildProgress, changes: [DayChange])? {
        try await pool.writeWithoutTransaction { db in
            // From here a cancel is too late; one accepted before wins.
            let claimed = self.rebuild.withLock { progress -> RebuildProgress? in
                guard progress?.replayId == replayId, progress?.cancelRequested == false else { return nil }
                progress?.swapping = true
                return progress
            }
            guard let progress = claimed else { return nil }
            try db.inTransaction(.immediate) {
                try Self.recomputeAll(db, prefix: Self.staging)
                // The replay has no reopened closures (the handler deletes
                // them): the live tombstones are kept — and win over a late
                // or redelivered `room.closed` staged during the rebuild —
                // or that event would close the room again.
                // `model_filled` records that this file holds a whole model
                // (a replica fills itself until it does).
                try db.execute(sql: """
                    INSERT INTO rebuild_closure (id, room, json, removed) SELECT id, room, json, removed FROM closure WHERE removed = 1
                        ON CONFLICT (id) DO UPDATE SET removed = 1;
                    CREATE TABLE IF NOT EXISTS model_filled (at TEXT NOT NULL);
                    INSERT INTO model_filled (at) VALUES (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
                    DROP TABLE room; DROP TABLE booking; DROP TABLE roomday; DROP TABLE closure; DROP TABLE IF EXISTS rebuild_seen;
                    ALTER TABLE rebuild_closure RENAME TO closure;
                    ALTER TABLE rebuild_room RENAME TO room;
                    ALTER TABLE rebuild_booking RENAME TO booking;
                    ALTER TABLE rebuild_roomday RENAME TO roomday;
                    """)
                return .commit
            }
            self.rebuild.withLock { $0 = nil }
            let before = self.index.snapshot
            let after = try Self.loadState(db)
            self.index.replace(with: after)
            var changes: [DayChange] = []
            var days = Set<RoomDay>()
            for (date, rooms) in before.days { for room in rooms.keys { days.insert(RoomDay(room: room, date: date)) } }
            for (date, rooms) in after.days { for room in rooms.keys { days.insert(RoomDay(room: room, date: date)) } }
            // Closed days have no occupancy row: the days of every closure
            // before or after compare too, as local dates in the room's zone
            // (before and after the swap: a rebuild may carry a new one).
            for state in [before, after] {
                for (room, spans) in state.closures {
                    let zones = [before.rooms[room]?.zone, after.rooms[room]?.zone].compactMap { $0 }
                    for span in spans {
                        for zone in zones.isEmpty ? [TimeZone.gmt] : zones {
                            for date in span.dates(zone: zone) { days.insert(RoomDay(room: room, date: date)) }
                        }
                    }
                }
            }
            // The index was just read from the file: nothing is missed any
            // more, and repaired days not announced yet go out with their
            // value now (as their earlier value would be stale).
            self.staleDays.withLock { $0 = [] }
            let pending = Set(self.takeUnannounced().map(\.day))
            // Neighbours only of the days the rebuild changed (or of rooms
            // whose buffer it changed): every day's would cost the writer
            // two date computations per room-day of the whole model.
            let changed = days.filter { day in
                before.occupancy(day) != after.occupancy(day)
                    || before.rooms[day.room]?.bufferSlots != after.rooms[day.room]?.bufferSlots
            }
            days.formUnion(before.withNeighbours(changed).union(after.withNeighbours(changed)))
            for day in days.union(pending).sorted() {
                guard let info = after.rooms[day.room], let new = self.index.free(day, in: after) else { continue }
                if pending.contains(day) || self.index.free(day, in: before) != new {
                    changes.append(DayChange(day: day, timeZone: info.room.timeZone, avail: new.availStrings))
                }
            }
            onCommit(changes)
            return (progress, changes)
        }
    }

    // MARK: Reads

    /// Counts of the live model (tests, metrics, readiness).
    public func counts() async throws -> (rooms: Int, bookings: Int, roomDays: Int) {
        try await pool.read { db in
            (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM room") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM booking") ?? 0,
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM roomday") ?? 0)
        }
    }

    /// A stored booking (tests).
    public func booking(id: String) async throws -> BookingState? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM booking WHERE id = ?", arguments: [id]).map { row in
                BookingState(id: row["id"], room: row["room"], date: row["date"], startMinute: row["startMin"],
                             endMinute: row["endMin"], status: BookingStatus(rawValue: row["status"]) ?? .cancelled,
                             version: row["version"])
            }
        }
    }
}
