import Foundation

// MARK: Booking-shaped bodies, written directly
//
// Why: the booking handler writes a booking, its event and the event's
// `booking.public` copy for every command, and `JSONEncoder` spent most of
// its time in the Codable machinery (boxed containers, a reference tree,
// generic metadata), about 8 % of the handler's CPU per booking
// (docs/performance.md, fourth round). These writers produce the same
// bytes as ``ContractJSON/encode(_:)`` for the same value: keys in sorted
// order, absent optionals omitted, strings escaped as `JSONEncoder` does
// with `.withoutEscapingSlashes`. `BookingJSONTests` checks that byte for
// byte on random values; a field added to one of these types must be added
// here too, and that test fails until it is. They write into `[UInt8]`:
// `Data`'s generic `append(contentsOf:)` casts dynamically on every call
// and cost as much as the writing itself.

extension Booking {
    /// Appends what ``ContractJSON/encode(_:)`` writes for this booking, or,
    /// with `contacts` false, for `BookingView(self, contacts: false)`
    /// (attendees reduced to their names).
    public func appendJSON(to out: inout [UInt8], contacts: Bool = true) {
        out.append(contentsOf: #"{"attendees":"#.utf8)
        Attendee.appendJSON(attendees, to: &out, contacts: contacts)
        if let cancelReason {
            out.append(contentsOf: #","cancelReason":"#.utf8)
            JSONBytes.string(cancelReason, to: &out)
        }
        out.append(contentsOf: #","date":"#.utf8)
        JSONBytes.string(date, to: &out)
        if let description {
            out.append(contentsOf: #","description":"#.utf8)
            JSONBytes.string(description, to: &out)
        }
        out.append(contentsOf: #","end":"#.utf8)
        JSONBytes.string(end, to: &out)
        out.append(contentsOf: #","endsAt":"#.utf8)
        JSONBytes.string(endsAt, to: &out)
        out.append(contentsOf: #","id":"#.utf8)
        JSONBytes.string(id, to: &out)
        if let requestedBy {
            out.append(contentsOf: #","requestedBy":"#.utf8)
            JSONBytes.string(requestedBy, to: &out)
        }
        out.append(contentsOf: #","room":"#.utf8)
        JSONBytes.string(room, to: &out)
        if let series {
            out.append(contentsOf: #","series":{"count":"#.utf8)
            out.append(contentsOf: String(series.count).utf8)
            out.append(contentsOf: #","id":"#.utf8)
            JSONBytes.string(series.id, to: &out)
            out.append(contentsOf: #","index":"#.utf8)
            out.append(contentsOf: String(series.index).utf8)
            out.append(contentsOf: #","version":"#.utf8)
            out.append(contentsOf: String(series.version).utf8)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #","start":"#.utf8)
        JSONBytes.string(start, to: &out)
        out.append(contentsOf: #","startsAt":"#.utf8)
        JSONBytes.string(startsAt, to: &out)
        out.append(contentsOf: #","status":"#.utf8)
        JSONBytes.string(status.rawValue, to: &out)
        out.append(contentsOf: #","timeZone":"#.utf8)
        JSONBytes.string(timeZone, to: &out)
        out.append(contentsOf: #","title":"#.utf8)
        JSONBytes.string(title, to: &out)
        out.append(contentsOf: #","version":"#.utf8)
        out.append(contentsOf: String(version).utf8)
        out.append(UInt8(ascii: "}"))
    }
}

extension BookingSnapshot {
    /// Appends what ``ContractJSON/encode(_:)`` writes for this snapshot,
    /// or, with `contacts` false, for `PublicSnapshot(self)`.
    public func appendJSON(to out: inout [UInt8], contacts: Bool = true) {
        out.append(contentsOf: #"{"attendees":"#.utf8)
        Attendee.appendJSON(attendees, to: &out, contacts: contacts)
        out.append(contentsOf: #","date":"#.utf8)
        JSONBytes.string(date, to: &out)
        if let description {
            out.append(contentsOf: #","description":"#.utf8)
            JSONBytes.string(description, to: &out)
        }
        out.append(contentsOf: #","end":"#.utf8)
        JSONBytes.string(end, to: &out)
        out.append(contentsOf: #","endsAt":"#.utf8)
        JSONBytes.string(endsAt, to: &out)
        out.append(contentsOf: #","start":"#.utf8)
        JSONBytes.string(start, to: &out)
        out.append(contentsOf: #","startsAt":"#.utf8)
        JSONBytes.string(startsAt, to: &out)
        out.append(contentsOf: #","status":"#.utf8)
        JSONBytes.string(status.rawValue, to: &out)
        out.append(contentsOf: #","title":"#.utf8)
        JSONBytes.string(title, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// `ContractJSON.encode(self)`, written directly.
    public var json: Data {
        var out: [UInt8] = []
        out.reserveCapacity(256 + attendees.count * 96)
        appendJSON(to: &out)
        return Data(out)
    }
}

extension Attendee {
    /// Appends `attendees` as a JSON array: each `{"email","name","phone"}`,
    /// or `{"name"}` only when `contacts` is false (``AttendeeView``).
    static func appendJSON(_ attendees: [Attendee], to out: inout [UInt8], contacts: Bool) {
        out.append(UInt8(ascii: "["))
        for (index, attendee) in attendees.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            if contacts {
                out.append(contentsOf: #"{"email":"#.utf8)
                JSONBytes.string(attendee.email, to: &out)
                out.append(contentsOf: #","name":"#.utf8)
                JSONBytes.string(attendee.name, to: &out)
                out.append(contentsOf: #","phone":"#.utf8)
                JSONBytes.string(attendee.phone, to: &out)
            } else {
                out.append(contentsOf: #"{"name":"#.utf8)
                JSONBytes.string(attendee.name, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
    }
}

extension BookingEvent {
    /// The body of this event's `booking.public` copy (contract v1.1):
    /// byte for byte `ContractJSON.encode(PublicBookingEvent(self))`.
    public var publicJSON: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(320 + (booking.attendees.count + (previous?.attendees.count ?? 0)) * 32)
        out.append(contentsOf: #"{"booking":"#.utf8)
        booking.appendJSON(to: &out, contacts: false)
        out.append(contentsOf: #","eventId":"#.utf8)
        JSONBytes.string(eventId, to: &out)
        out.append(contentsOf: #","occurredAt":"#.utf8)
        JSONBytes.string(occurredAt, to: &out)
        if let previous {
            out.append(contentsOf: #","previous":"#.utf8)
            previous.appendJSON(to: &out, contacts: false)
        }
        if let released { out.append(contentsOf: (released ? #","released":true"# : #","released":false"#).utf8) }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// The scalars of the writers above, as `JSONEncoder` writes them.
enum JSONBytes {
    /// A JSON string literal as JSONEncoder writes it with
    /// `.withoutEscapingSlashes`: quote, backslash and control characters
    /// escaped, everything else (including non-ASCII) as UTF-8.
    static func string(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        defer { out.append(UInt8(ascii: "\"")) }
        // Ids and timestamps never need escaping: one copy, not a byte loop.
        if !string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(contentsOf: string.utf8)
            return
        }
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
    }
}
