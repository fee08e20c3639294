import Foundation

// MARK: Per-message bodies of the pass sender and the projector, written directly
//
// Why: each booking makes the projector write `availability.changed` (and
// its public copy) and the pass sender write a gateway request and a
// `pass.delivered` per attendee. Through `JSONEncoder` those were about
// 3 % of the projector's and 8 % of the pass sender's CPU per booking
// (docs/performance.md, "Message bodies are written by hand"). Like
// BookingJSON.swift, each writer produces exactly the bytes of
// ``ContractJSON/encode(_:)`` (sorted keys, absent optionals omitted,
// slashes not escaped); `MessageJSONTests` checks that byte for byte, and
// fails when a field is added to a type but not to its writer here.

extension AvailabilityChanged {
    /// ``ContractJSON/encode(_:)`` of this event, written directly.
    public var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + room.utf8.count + avail.count * 16)
        out.append(contentsOf: #"{"avail":["#.utf8)
        for (i, range) in avail.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            JSONBytes.string(range, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        JSONBytes.member(#","date":"#, date, to: &out)
        JSONBytes.member(#","eventId":"#, eventId, to: &out)
        JSONBytes.member(#","occurredAt":"#, occurredAt, to: &out)
        JSONBytes.member(#","room":"#, room, to: &out)
        JSONBytes.member(#","timeZone":"#, timeZone, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension PassDelivered {
    /// ``ContractJSON/encode(_:)`` of this event, written directly.
    public var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(200 + name.utf8.count + email.utf8.count + bookingId.utf8.count)
        JSONBytes.member(#"{"attendeeIndex":"#, attendeeIndex, to: &out)
        JSONBytes.member(#","bookingId":"#, bookingId, to: &out)
        JSONBytes.member(#","channel":"#, channel?.rawValue, to: &out)
        JSONBytes.member(#","email":"#, email, to: &out)
        JSONBytes.member(#","eventId":"#, eventId, to: &out)
        JSONBytes.member(#","name":"#, name, to: &out)
        JSONBytes.member(#","occurredAt":"#, occurredAt, to: &out)
        JSONBytes.member(#","phone":"#, phone, to: &out)
        JSONBytes.member(#","version":"#, version, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension SendPassRequest {
    /// ``ContractJSON/encode(_:)`` of this request, written directly.
    public var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(192 + booking.title.utf8.count + booking.description.utf8.count + passes.count * 96)
        out.append(contentsOf: #"{"booking":{"date":"#.utf8)
        out.append(contentsOf: String(booking.date).utf8)
        JSONBytes.member(#","description":"#, booking.description, to: &out)
        JSONBytes.member(#","room":"#, booking.room, to: &out)
        out.append(contentsOf: #","time_end":"#.utf8)
        out.append(contentsOf: String(booking.timeEnd).utf8)
        out.append(contentsOf: #","time_start":"#.utf8)
        out.append(contentsOf: String(booking.timeStart).utf8)
        JSONBytes.member(#","title":"#, booking.title, to: &out)
        out.append(contentsOf: #"},"passes":["#.utf8)
        for (i, pass) in passes.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            JSONBytes.member(#"{"email":"#, pass.email, to: &out)
            JSONBytes.member(#","name":"#, pass.name, to: &out)
            JSONBytes.member(#","number":"#, pass.number, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }
}
