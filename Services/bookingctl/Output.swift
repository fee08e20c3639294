import BookingContracts
import Foundation

/// Human and JSON renderings of what the services answer.
enum Output {
    static func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try ContractJSON.prettyEncoder().encode(value), as: UTF8.self)
    }

    static func describe(_ booking: Booking) -> String {
        var lines = [
            "booking \(booking.id)  \(booking.status.rawValue)  version \(booking.version)",
            "  \(booking.room)  \(booking.date) \(booking.start)–\(booking.end) (\(booking.timeZone))",
            "  \(booking.title)" + (booking.description.map { " — \($0)" } ?? ""),
        ]
        if let requestedBy = booking.requestedBy { lines.append("  requested by \(requestedBy)") }
        if let reason = booking.cancelReason { lines.append("  cancelled: \(reason)") }
        for (index, attendee) in booking.attendees.enumerated() {
            lines.append("  attendee \(index): \(attendee.name) <\(attendee.email)> \(attendee.phone)")
        }
        return lines.joined(separator: "\n")
    }

    static func describe(_ room: Room) -> String {
        var lines = ["room \(room.name)  capacity \(room.capacity)  \(room.timeZone) \(room.opens)–\(room.closes)"
                     + (room.requiresApproval ? "  (bookings need approval)" : "")]
        let details = [room.location, room.size].compactMap { $0 }.filter { !$0.isEmpty }
        if !details.isEmpty { lines.append("  " + details.joined(separator: ", ")) }
        if !room.equipment.isEmpty { lines.append("  equipment: " + room.equipment.joined(separator: ", ")) }
        return lines.joined(separator: "\n")
    }

    static func describe(_ error: ReplyError) -> String {
        var text = "error \(error.code.rawValue): \(error.text)"
        if let field = error.field { text += " (field: \(field))" }
        if let conflicts = error.conflicts, !conflicts.isEmpty {
            text += "\n  conflicts with: " + conflicts.joined(separator: ", ")
        }
        return text
    }

    /// A fixed-width table: one row per room with its free ranges.
    static func table(_ rooms: [RoomAvailability]) -> String {
        if rooms.isEmpty { return "no rooms match" }
        return columns(header: ["ROOM", "CAP", "EQUIPMENT", "FREE"], rows: rooms.map { room in
            [room.name, String(room.capacity), room.equipment.joined(separator: ","),
             room.avail.isEmpty ? "(fully booked)" : room.avail.joined(separator: ", ")]
        })
    }

    /// Rows under a header, every column but the last padded to its widest cell.
    static func columns(header: [String], rows: [[String]]) -> String {
        var widths = header.map(\.count)
        for row in rows {
            for (i, cell) in row.enumerated().dropLast() { widths[i] = max(widths[i], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, cell in
                i == cells.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
        return ([line(header)] + rows.map(line)).joined(separator: "\n")
    }
}
