import BookingContracts
import Foundation

/// Human and JSON renderings of what the services answer.
enum Output {
    static func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try ContractJSON.prettyEncoder().encode(value), as: UTF8.self)
    }

    /// A JSON body this build cannot decode in full (a newer handler's
    /// reply), printed in the same layout as ``json(_:)``.
    static func json(raw: [UInt8]) throws -> String {
        let object = try JSONSerialization.jsonObject(with: Data(raw))
        return String(decoding: try JSONSerialization.data(withJSONObject: object,
                                                           options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]),
                      as: UTF8.self)
    }

    static func describe(_ booking: Booking) -> String {
        var lines = [
            "booking \(booking.id)  \(booking.status.rawValue)  version \(booking.version)",
            "  \(booking.room)  \(booking.date) \(booking.start)–\(booking.end) (\(booking.timeZone))",
            "  \(booking.title)" + (booking.description.map { " — \($0)" } ?? ""),
        ]
        if let requestedBy = booking.requestedBy { lines.append("  requested by \(requestedBy)") }
        if let reason = booking.cancelReason { lines.append("  cancelled: \(reason)") }
        if booking.status == .held, let expiry = booking.holdExpiresAt {
            lines.append("  held until \(expiry): confirm it (bookingctl confirm \(booking.id)) or it lapses")
        }
        if let place = booking.waitlist { lines.append("  waitlist position \(place.position)") }
        if let series = booking.series {
            lines.append("  series \(series.id): occurrence \(series.index + 1) of \(series.count) (series version \(series.version))")
        }
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
        if room.hours != nil {
            let days = WeeklyHours.keys.enumerated().map { index, key in
                switch room.hours(weekday: index) {
                case .open(let opens, let closes):
                    "\(key) \(ContractFormat.time(fromMinutes: opens))–\(ContractFormat.time(fromMinutes: closes))"
                case .closed: "\(key) closed"
                }
            }
            lines.append("  hours: " + days.joined(separator: ", "))
        }
        if let buffer = room.bufferMinutes, buffer > 0 { lines.append("  \(buffer) minutes between bookings") }
        if let quota = room.maxActiveBookings { lines.append("  at most \(quota) active bookings per requester") }
        return lines.joined(separator: "\n")
    }

    /// A closure, one line.
    static func describe(_ closure: RoomClosure) -> String {
        "closure \(closure.id)  \(closure.room)  \(closure.from) – \(closure.to)  \(closure.reason)"
    }

    /// A `room.close` or `room.reopen` reply.
    static func describe(_ reply: ClosureReply) -> String {
        guard let cancelled = reply.cancelled else { return "removed " + describe(reply.closure) }
        var lines = [describe(reply.closure), "  \(cancelled.count) booking\(cancelled.count == 1 ? "" : "s") cancelled"]
        for booking in cancelled {
            lines.append("  \(booking.date) \(booking.start)–\(booking.end)  \(booking.status.rawValue)  \(booking.id)")
        }
        return lines.joined(separator: "\n")
    }

    static func describe(_ error: ReplyError) -> String {
        var text = "error \(error.code.rawValue): \(error.text)"
        if let field = error.field { text += " (field: \(field))" }
        if let date = error.date { text += "\n  occurrence: \(date)" }
        if let limit = error.limit { text += "\n  limit: \(limit)" }
        if let closure = error.closure {
            text += "\n  closure \(closure.id): \(closure.from) – \(closure.to) (\(closure.reason))"
        }
        if let dates = error.conflictDates, !dates.isEmpty {
            text += "\n  conflicting dates: " + dates.joined(separator: ", ")
        }
        if let conflicts = error.conflicts, !conflicts.isEmpty {
            text += "\n  conflicts with: " + conflicts.joined(separator: ", ")
        }
        return text
    }

    /// A booked series: its id, then one line per occurrence and per
    /// skipped date.
    static func describe(_ series: SeriesBooked) -> String {
        var lines = ["series \(series.id)  \(series.recurrence.frequency)"
                     + (series.recurrence.until.map { " until \($0)" } ?? "")
                     + (series.recurrence.count.map { " × \($0)" } ?? "")
                     + "  \(series.bookings.count) booked, \(series.skipped.count) skipped"]
        for booking in series.bookings {
            lines.append("  \(booking.date) \(booking.start)–\(booking.end)  \(booking.status.rawValue)  \(booking.id)")
        }
        for skip in series.skipped {
            lines.append("  \(skip.date)  skipped: \(skip.code.rawValue) \(skip.text)")
        }
        return lines.joined(separator: "\n")
    }

    /// The outcome of a cancel by series.
    static func describe(_ series: SeriesCancelled) -> String {
        var lines = ["series \(series.id)  version \(series.version)  \(series.cancelled.count) cancelled"]
        for booking in series.cancelled {
            lines.append("  \(booking.date) \(booking.start)–\(booking.end)  cancelled  \(booking.id)")
        }
        for skip in series.skipped {
            lines.append("  \(skip.date)  kept: \(skip.code.rawValue) \(skip.text)")
        }
        return lines.joined(separator: "\n")
    }

    /// A fixed-width table: one row per room with its free ranges.
    static func table(_ rooms: [RoomAvailability]) -> String {
        if rooms.isEmpty { return "no rooms match" }
        // v1.2 `days` > 1: one line per room and day, in the reply's order.
        if rooms.contains(where: { ($0.days?.count ?? 0) > 1 }) {
            return columns(header: ["DATE", "ROOM", "CAP", "EQUIPMENT", "FREE"], rows: rooms.flatMap { room in
                (room.days ?? []).map { day in
                    [day.date, room.name, String(room.capacity), room.equipment.joined(separator: ","),
                     free(day.avail, closed: day.closed)]
                }
            })
        }
        return columns(header: ["ROOM", "CAP", "EQUIPMENT", "FREE"], rows: rooms.map { room in
            [room.name, String(room.capacity), room.equipment.joined(separator: ","), free(room.avail, closed: room.closed)]
        })
    }

    /// A day's free ranges, or why there are none.
    static func free(_ avail: [String], closed: String?) -> String {
        if !avail.isEmpty { return avail.joined(separator: ", ") }
        return closed.map { "(closed: \($0))" } ?? "(fully booked)"
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
