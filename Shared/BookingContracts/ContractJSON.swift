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

    /// Appends `string` as a JSON string literal, as ``encoder()`` writes
    /// it (quote, backslash and control characters escaped; the rest as
    /// UTF-8), for bodies written without an encoder.
    public static func appendString(_ string: String, to out: inout [UInt8]) {
        JSONBytes.string(string, to: &out)
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
