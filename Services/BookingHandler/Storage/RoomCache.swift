import BookingContracts
import Foundation
import Synchronization

/// Decoded rooms keyed by name, each with the JSON it came from, so a
/// command neither decodes its room again nor waits for the database to
/// validate against it. Only ever a hint: readers compare the JSON with the
/// row (another process may have re-registered the room).
final class RoomCache: Sendable {
    private let entries = Mutex<[String: CachedRoom]>([:])
    /// Rooms are a catalog, not user data; the bound only guards memory
    /// against a runaway registrar.
    static let capacity = 10_000

    func get(_ name: String) -> CachedRoom? {
        entries.withLock { $0[name] }
    }

    func put(_ entry: CachedRoom) {
        entries.withLock { entries in
            if entries.count >= Self.capacity, entries[entry.room.name] == nil { entries.removeAll(keepingCapacity: true) }
            entries[entry.room.name] = entry
        }
    }
}
