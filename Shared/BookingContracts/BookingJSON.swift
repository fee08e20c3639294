import Foundation

// MARK: Booking-shaped bodies, written directly
//
// Why: the booking handler writes a booking, its event and the event's
// `booking.public` copy for every command, and `JSONEncoder` spent most of
// its time in the Codable machinery (boxed containers, a reference tree,
// generic metadata), about 8 % of the handler's CPU per booking
// (docs/performance.md, "Booking JSON is written by hand"). These writers produce the same
// bytes as ``ContractJSON/encode(_:)`` for the same value: keys in sorted
// order, absent optionals omitted, strings escaped as `JSONEncoder` does
// with `.withoutEscapingSlashes`. `BookingJSONTests` and
// `EncodedBookingTests` check that byte for byte; a field added to one of
// these types must be added here too, and those tests fail until it is.
// They write into `[UInt8]`: `Data`'s generic `append(contentsOf:)` casts
// dynamically on every call and cost as much as the writing itself.

/// A booking encoded once, and the messages that carry it built around
/// those bytes, so the booking handler encodes a booking once per command
/// instead of once per row, event and reply. Each result is byte for byte
/// what ``ContractJSON/encode(_:)`` produces for the same value (sorted
/// keys: `booking` sorts before `eventId`, `occurredAt` and `ok`).
public struct EncodedBooking: Sendable {
    /// The booking.
    public let booking: Booking
    /// `ContractJSON.encode(booking)`.
    public let json: Data

    /// Encodes `booking` (``Booking/appendJSON(to:contacts:)``).
    public init(_ booking: Booking) {
        self.booking = booking
        var json: [UInt8] = []
        json.reserveCapacity(384 + booking.attendees.count * 96)
        booking.appendJSON(to: &json)
        self.json = Data(json)
    }

    /// The body of a ``BookingEvent`` for this booking; `previous` is the
    /// encoded ``BookingSnapshot`` of the booking before the change (v1.1),
    /// nil for a booking's first events; `released` adds `"released":true`
    /// (a release for want of check-in).
    public func event(eventId: String, occurredAt: String, previous: Data? = nil, released: Bool = false,
                      promoted: Bool = false) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(json.count + eventId.utf8.count + occurredAt.utf8.count + (previous?.count ?? 0) + 64)
        JSONBytes.event(eventId: eventId, occurredAt: occurredAt, released: released ? true : nil,
                        promoted: promoted ? true : nil, to: &out,
                        booking: { $0.append(contentsOf: json) },
                        previous: previous.map { previous in { $0.append(contentsOf: previous) } })
        return Data(out)
    }

    /// The body of the success reply ``CommandReply/booking(_:)``.
    public var reply: Data {
        var out: [UInt8] = []
        out.reserveCapacity(json.count + 22)
        out.append(contentsOf: #"{"booking":"#.utf8)
        out.append(contentsOf: json)
        out.append(contentsOf: #","ok":true}"#.utf8)
        return Data(out)
    }

    /// The success reply with the busy view of the booking (contract v1.2:
    /// a reply that carries another caller's booking shows it busy).
    public var busyReply: Data {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(contentsOf: #"{"booking":"#.utf8)
        booking.appendBusyJSON(to: &out)
        out.append(contentsOf: #","ok":true}"#.utf8)
        return Data(out)
    }
}

extension Booking {
    /// Appends what ``ContractJSON/encode(_:)`` writes for this booking, or,
    /// with `contacts` false, for `BookingView(self, contacts: false)`
    /// (attendees reduced to their names).
    public func appendJSON(to out: inout [UInt8], contacts: Bool = true) {
        out.append(contentsOf: #"{"attendees":"#.utf8)
        Attendee.appendJSON(attendees, to: &out, contacts: contacts)
        JSONBytes.member(#","cancelReason":"#, cancelReason, to: &out)
        JSONBytes.member(#","date":"#, date, to: &out)
        JSONBytes.member(#","description":"#, description, to: &out)
        JSONBytes.member(#","end":"#, end, to: &out)
        JSONBytes.member(#","endsAt":"#, endsAt, to: &out)
        JSONBytes.member(#","holdExpiresAt":"#, holdExpiresAt, to: &out)
        JSONBytes.member(#","id":"#, id, to: &out)
        JSONBytes.member(#","requestedBy":"#, requestedBy, to: &out)
        JSONBytes.member(#","room":"#, room, to: &out)
        appendSeries(to: &out)
        JSONBytes.member(#","start":"#, start, to: &out)
        JSONBytes.member(#","startsAt":"#, startsAt, to: &out)
        JSONBytes.member(#","status":"#, status.rawValue, to: &out)
        JSONBytes.member(#","timeZone":"#, timeZone, to: &out)
        JSONBytes.member(#","title":"#, title, to: &out)
        JSONBytes.member(#","version":"#, version, to: &out)
        if let waitlist { JSONBytes.member(#","waitlist":{"position":"#, waitlist.position, to: &out); out.append(UInt8(ascii: "}")) }
        out.append(UInt8(ascii: "}"))
    }
}

extension Booking {
    /// Appends what ``ContractJSON/encode(_:)`` writes for
    /// `BookingView(busy: self)`: times, status, version and series only.
    public func appendBusyJSON(to out: inout [UInt8]) {
        JSONBytes.member(#"{"date":"#, date, to: &out)
        JSONBytes.member(#","end":"#, end, to: &out)
        JSONBytes.member(#","endsAt":"#, endsAt, to: &out)
        JSONBytes.member(#","id":"#, id, to: &out)
        JSONBytes.member(#","room":"#, room, to: &out)
        appendSeries(to: &out)
        JSONBytes.member(#","start":"#, start, to: &out)
        JSONBytes.member(#","startsAt":"#, startsAt, to: &out)
        JSONBytes.member(#","status":"#, status.rawValue, to: &out)
        JSONBytes.member(#","timeZone":"#, timeZone, to: &out)
        JSONBytes.member(#","version":"#, version, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// `,"series":{…}` when the booking is an occurrence of a series.
    private func appendSeries(to out: inout [UInt8]) {
        guard let series else { return }
        JSONBytes.member(#","series":{"count":"#, series.count, to: &out)
        JSONBytes.member(#","id":"#, series.id, to: &out)
        JSONBytes.member(#","index":"#, series.index, to: &out)
        JSONBytes.member(#","version":"#, series.version, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// ``appendBusyJSON(to:)`` as bytes.
    public var busyJSON: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        appendBusyJSON(to: &out)
        return out
    }
}

extension BookingSnapshot {
    /// Appends what ``ContractJSON/encode(_:)`` writes for
    /// `PublicSnapshot(self)`: times and status only.
    public func appendBusyJSON(to out: inout [UInt8]) {
        JSONBytes.member(#"{"date":"#, date, to: &out)
        JSONBytes.member(#","end":"#, end, to: &out)
        JSONBytes.member(#","endsAt":"#, endsAt, to: &out)
        JSONBytes.member(#","start":"#, start, to: &out)
        JSONBytes.member(#","startsAt":"#, startsAt, to: &out)
        JSONBytes.member(#","status":"#, status.rawValue, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// Appends what ``ContractJSON/encode(_:)`` writes for this snapshot,
    /// or, with `contacts` false, the snapshot with attendees reduced to
    /// their names.
    public func appendJSON(to out: inout [UInt8], contacts: Bool = true) {
        out.append(contentsOf: #"{"attendees":"#.utf8)
        Attendee.appendJSON(attendees, to: &out, contacts: contacts)
        JSONBytes.member(#","date":"#, date, to: &out)
        JSONBytes.member(#","description":"#, description, to: &out)
        JSONBytes.member(#","end":"#, end, to: &out)
        JSONBytes.member(#","endsAt":"#, endsAt, to: &out)
        JSONBytes.member(#","start":"#, start, to: &out)
        JSONBytes.member(#","startsAt":"#, startsAt, to: &out)
        JSONBytes.member(#","status":"#, status.rawValue, to: &out)
        JSONBytes.member(#","title":"#, title, to: &out)
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
                JSONBytes.member(#"{"email":"#, attendee.email, to: &out)
                JSONBytes.member(#","name":"#, attendee.name, to: &out)
                JSONBytes.member(#","phone":"#, attendee.phone, to: &out)
            } else {
                JSONBytes.member(#"{"name":"#, attendee.name, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
    }
}

extension BookingEvent {
    /// The body of this event's `booking.public` copy, the busy view
    /// (contract v1.2): byte for byte
    /// `ContractJSON.encode(PublicBookingEvent(self))`.
    public var publicJSON: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(320 + (booking.attendees.count + (previous?.attendees.count ?? 0)) * 32)
        JSONBytes.event(eventId: eventId, occurredAt: occurredAt, released: released, promoted: promoted, to: &out,
                        booking: { booking.appendBusyJSON(to: &$0) },
                        previous: previous.map { previous in { previous.appendBusyJSON(to: &$0) } })
        return out
    }
}

/// The pieces of the writers above, as `JSONEncoder` writes them.
enum JSONBytes {
    /// An event body: `{"booking":…,"eventId":…,"occurredAt":…` then
    /// `"previous"` and `"released"` when present (sorted-key order), the
    /// booking and the previous state written by the given closures.
    static func event(eventId: String, occurredAt: String, released: Bool?, promoted: Bool? = nil, to out: inout [UInt8],
                      booking: (inout [UInt8]) -> Void, previous: ((inout [UInt8]) -> Void)?) {
        out.append(contentsOf: #"{"booking":"#.utf8)
        booking(&out)
        member(#","eventId":"#, eventId, to: &out)
        member(#","occurredAt":"#, occurredAt, to: &out)
        if let previous {
            out.append(contentsOf: #","previous":"#.utf8)
            previous(&out)
        }
        if let promoted { out.append(contentsOf: (promoted ? #","promoted":true"# : #","promoted":false"#).utf8) }
        if let released { out.append(contentsOf: (released ? #","released":true"# : #","released":false"#).utf8) }
        out.append(UInt8(ascii: "}"))
    }

    /// `prefix` (the separator and the quoted key with its colon) and the
    /// string `value`.
    static func member(_ prefix: String, _ value: String, to out: inout [UInt8]) {
        out.append(contentsOf: prefix.utf8)
        string(value, to: &out)
    }

    /// `prefix` and the integer `value` in decimal.
    static func member(_ prefix: String, _ value: Int, to out: inout [UInt8]) {
        out.append(contentsOf: prefix.utf8)
        out.append(contentsOf: String(value).utf8)
    }

    /// Nothing when `value` is nil (an absent optional is omitted, as
    /// `encodeIfPresent` does), else ``member(_:_:to:)``.
    static func member(_ prefix: String, _ value: String?, to out: inout [UInt8]) {
        if let value { member(prefix, value, to: &out) }
    }

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
