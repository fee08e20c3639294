import BookingContracts
import Foundation

extension BookingReader {
    /// `room.closures` (contract v1.2): the room's closures overlapping
    /// [from, to), in start order; a date bound is the start of that day in
    /// the room's zone. Without `from`, from now; without `to`, without end:
    /// a bare `{"room": …}` lists every closure that has not ended.
    /// Closures hold nothing private, so every caller reads them alike.
    /// 1101 for an unknown room, 1104 when `to` is not after `from`.
    public func closures(_ query: ListClosures, caller: Caller) async throws -> BookingQueryReply {
        if let refusal = admit(caller) { return .error(refusal) }
        guard let room = try await store.room(named: query.room) else {
            return .error(ReplyError(code: .unknownRoom, text: "room '\(query.room.prefix(100))' does not exist", field: "room"))
        }
        let from = query.from.flatMap { ListPlan.instant($0, zone: room.timeZone) } ?? now()
        // The end of the contract's instants (year 9999).
        let to = query.to.flatMap { ListPlan.instant($0, zone: room.timeZone) } ?? Date(timeIntervalSince1970: 253_402_300_799)
        guard to > from else {
            return .error(ReplyError(code: .endNotAfterStart, text: "to is not after from", field: "to"))
        }
        return .closures(try await store.closures(room: room.name, from: from, to: to))
    }
}
