import Foundation

/// JSON coding for every message of the contract.
///
/// Each call returns a new coder, so nothing mutable is shared between
/// tasks. Dates travel as strings (``ContractFormat/timestamp(_:)``), so no
/// date strategy is involved. Keys are sorted and slashes are not escaped,
/// which makes the output stable and readable (`"https://…"`, not `"https:\/\/…"`).
public enum ContractJSON {
    /// A new encoder: `.sortedKeys`, `.withoutEscapingSlashes`.
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// A new encoder like ``encoder()`` that also pretty-prints (for files
    /// and logs, not for the wire).
    public static func prettyEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
        return encoder
    }

    /// A new decoder with default settings (unknown keys are ignored, so the
    /// contract can grow by adding optional fields).
    public static func decoder() -> JSONDecoder {
        JSONDecoder()
    }

    /// Encodes `value` with ``encoder()``.
    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        try encoder().encode(value)
    }

    /// Decodes a `T` from `data` with ``decoder()``.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try decoder().decode(type, from: data)
    }

    /// Decodes a `T` from a message body given as bytes.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try decoder().decode(type, from: Data(bytes))
    }

    /// The field a decoding error is about, as a path such as `start`,
    /// `attendees[0].email` or `booking.id`; nil when the error concerns the
    /// body as a whole (not JSON, or not an object).
    public static func fieldPath(of error: DecodingError) -> String? {
        let path: [any CodingKey]
        switch error {
        case .keyNotFound(let key, let context): path = context.codingPath + [key]
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            path = context.codingPath
        @unknown default: return nil
        }
        guard !path.isEmpty else { return nil }
        var text = ""
        for key in path {
            if let index = key.intValue, key.stringValue.hasPrefix("Index ") || key.stringValue == String(index) {
                text += "[\(index)]"
            } else {
                text += text.isEmpty ? key.stringValue : "." + key.stringValue
            }
        }
        return text
    }

    /// The reply for a body that failed to decode: ``ErrorCode/invalidField``
    /// naming the field when the error points at one, else
    /// ``ErrorCode/invalidJSON``. ``BodyTooLarge`` gives ``ErrorCode/invalidJSON``
    /// with the text `body is larger than 256 KiB (N bytes)`. Any other
    /// error gives ``ErrorCode/invalidJSON``.
    public static func replyError(for error: any Error) -> ReplyError {
        if let tooLarge = error as? BodyTooLarge {
            return ReplyError(code: .invalidJSON, text: tooLarge.description)
        }
        guard let decodingError = error as? DecodingError else {
            return ReplyError(code: .invalidJSON, text: "body is not valid JSON")
        }
        guard let field = fieldPath(of: decodingError) else {
            return ReplyError(code: .invalidJSON, text: "body is not valid JSON or not a JSON object")
        }
        switch decodingError {
        case .keyNotFound:
            return ReplyError(code: .invalidField, text: "\(field) is missing", field: field)
        default:
            return ReplyError(code: .invalidField, text: "\(field) is invalid", field: field)
        }
    }
}

// MARK: Pre-encoded bookings

/// A booking encoded once, and the messages that carry it built around
/// those bytes, so the booking handler encodes a booking once per command
/// instead of once per row, event and reply. Each result is byte for byte
/// what ``ContractJSON/encode(_:)`` produces for the same value (sorted
/// keys: `booking` sorts before `eventId`, `occurredAt` and `ok`); the
/// contract tests check that.
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
    /// (a release for want of check-in). Both sort after `occurredAt`, in
    /// this order, so they go last.
    public func event(eventId: String, occurredAt: String, previous: Data? = nil, released: Bool = false) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(json.count + eventId.utf8.count + occurredAt.utf8.count + (previous?.count ?? 0) + 64)
        out.append(contentsOf: #"{"booking":"#.utf8)
        out.append(contentsOf: json)
        out.append(contentsOf: #","eventId":"#.utf8)
        JSONBytes.string(eventId, to: &out)
        out.append(contentsOf: #","occurredAt":"#.utf8)
        JSONBytes.string(occurredAt, to: &out)
        if let previous {
            out.append(contentsOf: #","previous":"#.utf8)
            out.append(contentsOf: previous)
        }
        if released { out.append(contentsOf: #","released":true"#.utf8) }
        out.append(UInt8(ascii: "}"))
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
}
