import BookingContracts
import Foundation

/// A `room.close` checked: the room, the instants and the reason.
public struct ValidatedClosure: Sendable, Equatable {
    public let room: Room
    public let from: Date
    public let to: Date
    public let reason: String
}

extension BookingRules {
    /// Longest closure, in days: a closure cancels what it covers in one
    /// transaction, so its length bounds that transaction's work. A longer
    /// shutdown is several closures (or a re-registration with `hours`).
    public static let maxClosureDays = 366

    /// Validates `room.close` (contract v1.2), first failure wins:
    /// the room exists (1101, field `room`); `reason` 1 to
    /// ``maxReasonBytes`` bytes after trimming (1100, field `reason`);
    /// `from` and `to` each a UTC instant on the 15-minute grid (else 1103)
    /// or a local date, the start of that day in the room's zone (else 1100,
    /// naming the field); `to` after `from` (1104, field `to`); at most
    /// ``maxClosureDays`` long (1100, field `to`).
    public static func validateClosure(_ command: CloseRoom, room: Room?) -> Result<ValidatedClosure, ReplyError> {
        guard let room else {
            return .failure(ReplyError(code: .unknownRoom, text: "room '\(command.room.prefix(100))' does not exist", field: "room"))
        }
        let reason = command.reason.trimmingWhitespace()
        if reason.isEmpty {
            return .failure(invalid("reason", "a closure needs a reason (it is shown on the page and in every cancellation)"))
        }
        if let error = Self.reason(reason) { return .failure(error) }
        let from: Date, to: Date
        switch closureBound(command.from, field: "from", room: room) {
        case .failure(let error): return .failure(error)
        case .success(let instant): from = instant
        }
        switch closureBound(command.to, field: "to", room: room) {
        case .failure(let error): return .failure(error)
        case .success(let instant): to = instant
        }
        if to <= from {
            return .failure(ReplyError(code: .endNotAfterStart, text: "to \(command.to.prefix(40)) is not after from \(command.from.prefix(40))",
                                       field: "to"))
        }
        if to.timeIntervalSince(from) > Double(maxClosureDays) * 86_400 + 3600 {
            return .failure(invalid("to", "a closure is at most \(maxClosureDays) days long; close a longer time in parts"))
        }
        return .success(ValidatedClosure(room: room, from: from, to: to, reason: reason))
    }

    /// One bound of a closure: an instant on the grid, or the start of a
    /// local date in the room's zone.
    static func closureBound(_ text: String, field: String, room: Room) -> Result<Date, ReplyError> {
        if let instant = ContractFormat.parseTimestamp(text) {
            let step = Double(ContractFormat.gridMinutes * 60)
            guard instant.timeIntervalSince1970.truncatingRemainder(dividingBy: step) == 0 else {
                return .failure(ReplyError(code: .offGrid, text: "\(field) \(text) is not on the \(ContractFormat.gridMinutes)-minute grid",
                                           field: field))
            }
            return .success(instant)
        }
        if ContractFormat.calendarDate(text) != nil,
           let start = ContractFormat.instant(date: text, time: "00:00", timeZone: room.timeZone) {
            return .success(start)
        }
        return .failure(invalid(field, "\(field) \"\(text.prefix(40))\" is neither a UTC instant (YYYY-MM-DDTHH:mm:ssZ) nor a date (YYYY-MM-DD)"))
    }

    /// 1112 naming `closure`: a booking from `startsAt` to `endsAt` falls
    /// into it. Buffers never apply against closures (contract v1.2).
    public static func closedRefusal(_ closure: RoomClosure, room: String) -> ReplyError {
        ReplyError(code: .roomClosed, text: "\(room) is closed from \(closure.from) to \(closure.to): \(closure.reason)",
                   field: "start", closure: closure)
    }

    /// The reason a booking cancelled by a closure carries.
    public static func closedReason(_ reason: String) -> String {
        String(("room closed: " + reason).utf8.prefix(maxReasonBytes)) ?? "room closed"
    }
}
