import Foundation

/// The `date` of a booking command: a local calendar date in the room's time
/// zone, given as `"YYYY-MM-DD"`, `"today"` or a UNIX timestamp in seconds
/// (JSON integer), which names the local date that instant falls on.
///
/// Decoding accepts a JSON string (`"today"` or `YYYY-MM-DD` shape) or a
/// JSON integer and throws a `DecodingError` for anything else (booleans,
/// arrays, objects, null, fractions, other strings). Whether a
/// `YYYY-MM-DD` string names a real day is checked by ``isValid``.
public enum DateSpec: Codable, Sendable, Hashable, CustomStringConvertible {
    /// `"2026-11-23"`.
    case calendarDate(String)
    /// `"today"`: the room's local date at the time the command is processed.
    case today
    /// UNIX seconds: the room's local date at that instant.
    case unixSeconds(Int64)

    /// The JSON string of ``today``.
    public static let todayLiteral = "today"

    /// Decodes a string or an integer.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let string = try? container.decode(String.self) {
            self = try DateSpec.parseString(string, in: container)
            return
        }
        if (try? container.decode(Bool.self)) != nil {
            throw DecodingError.typeMismatch(
                DateSpec.self,
                .init(codingPath: container.codingPath,
                      debugDescription: "date must be \"YYYY-MM-DD\", \"today\" or UNIX seconds, not a boolean"))
        }
        if let seconds = try? container.decode(Int64.self) {
            self = .unixSeconds(seconds)
            return
        }
        throw DecodingError.typeMismatch(
            DateSpec.self,
            .init(codingPath: container.codingPath,
                  debugDescription: "date must be \"YYYY-MM-DD\", \"today\" or an integer of UNIX seconds"))
    }

    static func parseString(_ string: String, in container: any SingleValueDecodingContainer) throws -> DateSpec {
        if let spec = DateSpec(string: string) { return spec }
        throw DecodingError.dataCorrupted(
            .init(codingPath: container.codingPath,
                  debugDescription: "date must be \"YYYY-MM-DD\" or \"today\", got \"\(string)\""))
    }

    /// Encodes a string or an integer, as received.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .calendarDate(let text): try container.encode(text)
        case .today: try container.encode(DateSpec.todayLiteral)
        case .unixSeconds(let seconds): try container.encode(seconds)
        }
    }

    /// Parses the string forms: `"today"` or anything shaped `NNNN-NN-NN`
    /// (not checked against the calendar); nil otherwise.
    public init?(string: String) {
        if string == DateSpec.todayLiteral {
            self = .today
            return
        }
        let u = Array(string.utf8)
        guard u.count == 10, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-"),
              u.enumerated().allSatisfy({ $0.offset == 4 || $0.offset == 7 || (48...57).contains($0.element) })
        else { return nil }
        self = .calendarDate(string)
    }

    /// Parses a query-string value (HTTP `?date=`): `today`, `YYYY-MM-DD`
    /// or decimal UNIX seconds.
    public init?(queryValue: String) {
        if let spec = DateSpec(string: queryValue) {
            self = spec
        } else if !queryValue.isEmpty, queryValue.utf8.allSatisfy({ (48...57).contains($0) }),
                  let seconds = Int64(queryValue) {
            self = .unixSeconds(seconds)
        } else {
            return nil
        }
    }

    /// False for a ``calendarDate(_:)`` that is not a real Gregorian day
    /// (e.g. `2026-02-30`) and for ``unixSeconds(_:)`` outside
    /// `0...maxUnixSeconds` (before 1970 or past year 9999).
    public var isValid: Bool {
        switch self {
        case .calendarDate(let text): return ContractFormat.calendarDate(text) != nil
        case .unixSeconds(let seconds): return (0...DateSpec.maxUnixSeconds).contains(seconds)
        case .today: return true
        }
    }

    /// The largest UNIX timestamp accepted: 9999-12-31T23:59:59Z, the last
    /// instant with a four-digit year. Together with the lower bound 0 this
    /// keeps every date computation far from integer overflow.
    public static let maxUnixSeconds: Int64 = 253_402_300_799

    /// The local calendar date (`YYYY-MM-DD`) this names in `timeZone` when
    /// processed at `now`; nil for an invalid date or unknown zone.
    public func resolve(in timeZone: String, now: Date = Date()) -> String? {
        switch self {
        case .calendarDate(let text): return ContractFormat.calendarDate(text) == nil ? nil : text
        case .today: return ContractFormat.localDate(of: now, timeZone: timeZone)
        case .unixSeconds(let seconds):
            return ContractFormat.localDate(of: Date(timeIntervalSince1970: TimeInterval(seconds)), timeZone: timeZone)
        }
    }

    /// The JSON form as text: the date, `today` or the number.
    public var description: String {
        switch self {
        case .calendarDate(let text): text
        case .today: DateSpec.todayLiteral
        case .unixSeconds(let seconds): String(seconds)
        }
    }
}
