import BookingContracts
import Foundation
import GRDB

/// Closures in the read model (contract v1.2): `room.closed` adds one,
/// `room.reopened` removes it. Rows are kept as tombstones once removed, so
/// a `room.closed` that arrives after its `room.reopened` (redelivery,
/// replay racing live events) cannot bring a closure back: ids are unique.
extension ProjectorStore {
    /// Stores `closure` in the tables with `prefix`.
    static func storeClosure(_ closure: RoomClosure, removed: Bool, _ db: Database, prefix p: String) throws {
        let json = try ContractJSON.encode(closure)
        if removed {
            try db.cachedStatement(sql: """
                INSERT INTO \(p)closure (id, room, json, removed) VALUES (?, ?, ?, 1)
                ON CONFLICT(id) DO UPDATE SET removed = 1
                """).execute(arguments: [closure.id, closure.room, json])
        } else {
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO \(p)closure (id, room, json, removed) VALUES (?, ?, ?, 0)")
                .execute(arguments: [closure.id, closure.room, json])
        }
    }

    /// Applies a closure event to the live model (and the rebuild in
    /// progress), updates the index and returns the room-days whose free
    /// slots changed: every day the closure touches. On the writer.
    func applyClosure(_ closure: RoomClosure, removed: Bool, _ db: Database, staging: Bool,
                      onCommit: CommitObserver) throws -> ApplyOutcome {
        // Its free times are computed from the index: missed days first
        // (failing, the closure is requeued before anything commits).
        try repairIndex(db)
        var isRemoved = removed
        try db.inTransaction(.immediate) {
            try Self.storeClosure(closure, removed: removed, db, prefix: Self.live)
            // A tombstone wins over a late `room.closed`.
            isRemoved = try Int.fetchOne(db, sql: "SELECT removed FROM closure WHERE id = ?", arguments: [closure.id]) == 1
            if staging {
                try Self.storeClosure(closure, removed: removed, db, prefix: Self.staging)
                rebuild.withLock { $0?.liveEvents += 1 }
            }
            return .commit
        }
        let before = index.snapshot
        index.update { $0.setClosure(closure, removed: isRemoved) }
        let after = index.snapshot
        let zone = after.rooms[closure.room]?.zone ?? .gmt
        var changes: [DayChange] = []
        for date in ClosureSpan(closure)?.dates(zone: zone) ?? [] {
            let day = RoomDay(room: closure.room, date: date)
            guard let info = after.rooms[day.room], let new = index.free(day, in: after) else { continue }
            if index.free(day, in: before) != new {
                changes.append(DayChange(day: day, timeZone: info.room.timeZone, avail: new.availStrings))
            }
        }
        let applied = before.closures[closure.room]?.map(\.closure.id) != after.closures[closure.room]?.map(\.closure.id)
        let days = (ClosureSpan(closure)?.dates(zone: zone) ?? []).map { RoomDay(room: closure.room, date: $0) }
        let announced = takeUnannounced() + changes
        onCommit(announced, applied ? days : [])
        // Not applied (a repeat): its days, so a redelivery republishes them.
        return ApplyOutcome(applied: applied, changes: announced, touched: applied ? [] : days)
    }
}
