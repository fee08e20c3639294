/// Size limits on what callers send, in UTF-8 bytes.
///
/// Why bytes: they are what a message costs to carry, store, index and put
/// on a pass, and they cannot be gamed. Characters (grapheme clusters)
/// can: one letter followed by a thousand combining marks is one
/// character and 2,001 bytes, and counting graphemes means walking the
/// whole text through Unicode segmentation first. A byte count is O(1) for
/// native Swift strings and never looser than a character count.
///
/// The body limit is checked before JSON decoding (``Command/decode(type:body:)``,
/// ``AvailabilityQuery/decode(body:)``); the field limits by the booking
/// handler's validation, as 1100 with `field` naming the field path. The
/// JSON Schemas in `docs/contract/schemas/` carry the same numbers as
/// `maxLength`, which counts characters and so is an upper bound the byte
/// limit never exceeds; the byte limit is the binding one.
public enum ContractLimits {
    /// Largest command or query body: 256 KiB. Larger bodies are refused
    /// with 1000 before any decoding.
    public static let maxBodyBytes = 262_144
    /// Longest booking `title`.
    public static let maxTitleBytes = 400
    /// Longest booking `description`.
    public static let maxDescriptionBytes = 4_000
    /// Longest attendee `name`, room `name`, `location`, `size` and
    /// `equipment` item.
    public static let maxNameBytes = 200
    /// Longest free-text `reason` (`booking.cancel`).
    public static let maxReasonBytes = 1_000
    /// Longest room image URL (only `http` and `https` are accepted).
    public static let maxImageURLBytes = 2_048

    /// Whether a JSON `body` has a string holding U+0000 (written `\u0000`:
    /// JSON has no other way). A lexical scan: an escaped backslash
    /// followed by `u0000` (`"\\u0000"`) is not one. The handler refuses
    /// commands and queries holding one (1100, ``nulRefusal``): PostgreSQL's
    /// text cannot store or compare U+0000, so an id holding it failed in
    /// the database on every redelivery, holding a consumer slot each time,
    /// instead of being answered.
    public static func hasNULString(_ body: [UInt8]) -> Bool {
        // A zero byte: a body in UTF-16 or UTF-32, which the decoder takes
        // too and whose escapes this scan would not see (UTF-8 JSON never
        // holds one raw).
        if body.contains(0) { return true }
        var i = 0
        let n = body.count
        while i < n {
            guard body[i] == UInt8(ascii: "\\") else {
                i += 1
                continue
            }
            if i + 5 < n, body[i + 1] == UInt8(ascii: "u"), body[i + 2] == UInt8(ascii: "0"), body[i + 3] == UInt8(ascii: "0"),
               body[i + 4] == UInt8(ascii: "0"), body[i + 5] == UInt8(ascii: "0") {
                return true
            }
            i += 2  // the escaped character is not the start of another escape
        }
        return false
    }

    /// The text of the 1100 for a body with U+0000 (``hasNULString(_:)``).
    public static let nulRefusal = "no string may contain U+0000"

    /// Throws ``BodyTooLarge`` when `body` exceeds ``maxBodyBytes``.
    public static func checkBody(_ body: [UInt8]) throws(BodyTooLarge) {
        if body.count > maxBodyBytes { throw BodyTooLarge(byteCount: body.count) }
    }
}

/// A message body larger than ``ContractLimits/maxBodyBytes``; reported as
/// 1000 by ``ContractJSON/replyError(for:)``, like any body that cannot be
/// decoded.
public struct BodyTooLarge: Error, Sendable, Equatable, CustomStringConvertible {
    /// The body's size in bytes.
    public var byteCount: Int

    /// Creates the error for a body of `byteCount` bytes.
    public init(byteCount: Int) { self.byteCount = byteCount }

    /// `body is larger than 256 KiB (300000 bytes)`.
    public var description: String {
        "body is larger than \(ContractLimits.maxBodyBytes / 1024) KiB (\(byteCount) bytes)"
    }
}
