import Foundation
import BookingContracts
import Testing

/// `json` padded with trailing spaces (valid JSON whitespace) to exactly
/// `count` bytes.
private func padded(_ json: String, to count: Int) -> [UInt8] {
    var body = Array(json.utf8)
    body += [UInt8](repeating: UInt8(ascii: " "), count: count - body.count)
    return body
}

/// The smallest valid body of each command type.
private func minimalBody(_ type: CommandType) -> String {
    switch type {
    case .registerRoom: #"{"name":"Berlin","capacity":8}"#
    case .createBooking:
        #"{"room":"Berlin","date":"2026-11-23","start":"09:00","end":"10:00","title":"T","attendees":[]}"#
    case .confirmBooking: #"{"bookingId":"b-1"}"#
    case .cancelBooking, .rejectBooking: #"{"bookingId":"b-1","reason":"r"}"#
    case .rescheduleBooking: #"{"bookingId":"b-1","date":"2026-11-23","start":"09:00","end":"10:00"}"#
    case .replayBookings: #"{"queue":"availability-projector.replay"}"#
    case .updateBooking: #"{"bookingId":"b-1","title":"T"}"#
    case .checkinBooking: #"{"bookingId":"b-1"}"#
    case .closeRoom: #"{"room":"Berlin","from":"2026-12-24","to":"2026-12-28","reason":"r"}"#
    case .reopenRoom: #"{"room":"Berlin","closureId":"c-1"}"#
    }
}

/// The 256 KiB body limit, checked before JSON decoding.
@Suite("Body size limit")
struct BodyLimitTests {
    @Test func limitIs256KiB() {
        #expect(ContractLimits.maxBodyBytes == 262_144)
        #expect(ContractLimits.maxTitleBytes == 400)
        #expect(ContractLimits.maxDescriptionBytes == 4_000)
        #expect(ContractLimits.maxNameBytes == 200)
        #expect(ContractLimits.maxReasonBytes == 1_000)
        #expect(ContractLimits.maxImageURLBytes == 2_048)
    }

    @Test(arguments: CommandType.allCases)
    func commandBodyAtTheLimitDecodes(_ type: CommandType) throws {
        let body = padded(minimalBody(type), to: ContractLimits.maxBodyBytes)
        #expect(body.count == 262_144)
        #expect(try Command.decode(type: type, body: body).type == type)
    }

    @Test(arguments: CommandType.allCases)
    func commandBodyOneByteOverIsRefused(_ type: CommandType) {
        let body = padded(minimalBody(type), to: ContractLimits.maxBodyBytes + 1)
        #expect(throws: BodyTooLarge(byteCount: 262_145)) { try Command.decode(type: type, body: body) }
    }

    /// Not JSON at all: still the size error, so nothing looked at the bytes.
    @Test func sizeIsCheckedBeforeDecoding() {
        let body = [UInt8](repeating: 0xFF, count: 300_000)
        #expect(throws: BodyTooLarge(byteCount: 300_000)) { try Command.decode(type: .createBooking, body: body) }
    }

    /// One letter and a million combining marks (about 2 MB): one character,
    /// refused by the body check before JSON decoding.
    @Test func combiningMarksBody() throws {
        let title = "a" + String(repeating: "\u{0301}", count: 1_000_000)
        let body = Array(#"{"title":""#.utf8) + Array(title.utf8) + Array(#""}"#.utf8)
        #expect(body.count > 2_000_000)
        #expect(throws: BodyTooLarge.self) { try Command.decode(type: .createBooking, body: body) }
    }

    @Test func replyErrorIs1000NamingTheLimit() {
        let error = ContractJSON.replyError(for: BodyTooLarge(byteCount: 300_000))
        #expect(error.code == .invalidJSON)
        #expect(error.text == "body is larger than 256 KiB (300000 bytes)")
        #expect(error.field == nil)
    }

    @Test func availabilityQueryBody() throws {
        #expect(try AvailabilityQuery.decode(body: padded(#"{"name":"ber"}"#, to: 262_144)).name == "ber")
        #expect(throws: BodyTooLarge(byteCount: 262_145)) {
            try AvailabilityQuery.decode(body: padded(#"{"name":"ber"}"#, to: 262_145))
        }
        #expect(try AvailabilityQuery.decode(body: Array("{}".utf8)) == AvailabilityQuery())
    }
}

/// ``ContractLimits/hasNULString(_:)`` finds U+0000 as JSON writes it, and
/// only that: every case is checked against what JSONSerialization decodes.
@Suite("U+0000 in a body")
struct NULStringTests {
    /// A body the decoder reads as UTF-16 or UTF-32 holds zero bytes, and
    /// its escapes are not where a UTF-8 scan looks: refused whatever it says.
    @Test func aBodyInUTF16OrUTF32IsCaught() {
        let text = #"{"bookingId":"bk-1"}"#
        for encoding in [String.Encoding.utf16LittleEndian, .utf16BigEndian, .utf32LittleEndian] {
            #expect(ContractLimits.hasNULString([UInt8](text.data(using: encoding)!)), "\(encoding)")
        }
        #expect(!ContractLimits.hasNULString(Array(text.utf8)))
    }

    @Test(arguments: [
        (#"{"a":"\u0000"}"#, true),
        (#"{"a":"x\u0000y"}"#, true),
        (#"{"\u0000":"a"}"#, true),
        (#"{"a":"\\u0000"}"#, false),      // a backslash, then the text u0000
        (#"{"a":"\\\u0000"}"#, true),      // a backslash, then U+0000
        (#"{"a":"\u00001"}"#, true),
        (#"{"a":"\u0001"}"#, false),
        (#"{"a":"\u0100"}"#, false),
        (#"{"a":"\"u0000"}"#, false),
        (#"{"a":"u0000"}"#, false),
        (#"{"a":"\u000"}"#, false),        // not JSON; not U+0000 either
    ])
    func findsTheEscapeOnly(_ json: String, _ expected: Bool) throws {
        #expect(ContractLimits.hasNULString(Array(json.utf8)) == expected, "\(json)")
        if let decoded = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String] {
            let holds = decoded.contains { $0.key.unicodeScalars.contains("\u{0}") || $0.value.unicodeScalars.contains("\u{0}") }
            #expect(holds == expected, "JSONSerialization disagrees on \(json)")
        }
    }
}
