import CPhoneNumber
import Synchronization

/// Phone-number normalisation to E.164, backed by Google's libphonenumber
/// (through the `CPhoneNumber` C interface).
///
/// Everything here is safe to call from any thread, task or actor:
/// libphonenumber's `PhoneNumberUtil` is a thread-safe singleton, and the
/// cache of numbers normalised before is behind a lock.
///
/// ```swift
/// try PhoneNumbers.normalizeE164("0170 1234567")          // "+491701234567"
/// try PhoneNumbers.normalizeE164("020 7946 0958", defaultRegion: "GB")
///                                                         // "+442079460958"
/// ```
public enum PhoneNumbers {
    /// Inputs longer than this many characters (after trimming) are
    /// rejected with ``PhoneNumberError/Reason/tooLong`` without being
    /// parsed.
    public static let maximumInputLength = 64

    /// Normalises a phone number as a person would type it into its
    /// E.164 form: `"+"`, the country calling code and the national
    /// number, with no spaces or punctuation (e.g. `"+491701234567"`).
    ///
    /// - Parameters:
    ///   - input: The number as typed, e.g. `"0170 1234567"`,
    ///     `"+49 170 1234567"`, `"0049 170 1234567"` or `"(030) 1234567"`.
    ///     Leading and trailing whitespace is ignored. An extension
    ///     (`"… ext. 12"`) is dropped, as E.164 has none.
    ///   - defaultRegion: The ISO 3166-1 alpha-2 region (e.g. `"DE"`,
    ///     `"GB"`, `"US"`; case-insensitive) whose national dialling
    ///     rules apply when `input` has no international prefix. Pass
    ///     `""` to accept only international numbers (`"+…"`).
    /// - Returns: The E.164 string.
    /// - Throws: ``PhoneNumberError`` if the input is empty, too long, not
    ///   a phone number, of an unknown country, or not a valid number for
    ///   its region (libphonenumber's `IsValidNumber`).
    public static func normalizeE164(
        _ input: String,
        defaultRegion: String = "DE"
    ) throws(PhoneNumberError) -> String {
        try normalize(input, defaultRegion: defaultRegion).e164
    }

    /// Like ``normalizeE164(_:defaultRegion:)``, but also tells which
    /// region the number belongs to.
    ///
    /// - Returns: The E.164 form and the number's region code.
    /// - Throws: ``PhoneNumberError``, as ``normalizeE164(_:defaultRegion:)``.
    public static func normalize(
        _ input: String,
        defaultRegion: String = "DE"
    ) throws(PhoneNumberError) -> NormalizedPhoneNumber {
        let trimmed = input.trimmingWhitespace()
        guard !trimmed.isEmpty else { throw PhoneNumberError(.empty) }
        guard trimmed.count <= maximumInputLength else { throw PhoneNumberError(.tooLong) }
        // A NUL would silently cut the C string short: "0170\u{0}junk".
        guard !trimmed.utf8.contains(0) else { throw PhoneNumberError(.notANumber) }

        let region = defaultRegion.trimmingWhitespace().uppercased()
        // Region codes are 2 letters ("DE") or libphonenumber's "001";
        // anything else can only be a mistake.
        guard region.utf8.count <= 3, !region.utf8.contains(0) else {
            throw PhoneNumberError(.unknownCountry)
        }

        let key = NormalizedCache.Key(input: Array(trimmed.utf8), region: region)
        if let known = cache.value(for: key) { return known }
        let normalized = try parse(trimmed, region: region)
        cache.store(normalized, for: key)
        return normalized
    }

    /// libphonenumber's answer for an input already trimmed and checked,
    /// and a region code already upper-cased; no cache.
    static func parse(_ trimmed: String, region: String) throws(PhoneNumberError) -> NormalizedPhoneNumber {
        // Always big enough (see CPhoneNumber.h); a bit of slack anyway.
        let e164Capacity = Int(CPHONE_E164_BUFFER_SIZE) + 7
        let regionCapacity = Int(CPHONE_REGION_BUFFER_SIZE) + 4

        let (status, e164, regionCode) = trimmed.withCString { cInput in
            region.withCString { cRegion in
                withUnsafeTemporaryAllocation(of: CChar.self, capacity: e164Capacity) { out in
                    withUnsafeTemporaryAllocation(of: CChar.self, capacity: regionCapacity) { regionOut in
                        let status = cphone_normalize_e164(
                            cInput, cRegion,
                            out.baseAddress, out.count,
                            regionOut.baseAddress, regionOut.count
                        )
                        guard status == CPHONE_OK else { return (status, "", "") }
                        return (
                            status,
                            String(cString: out.baseAddress!),
                            String(cString: regionOut.baseAddress!)
                        )
                    }
                }
            }
        }

        switch status {
        case CPHONE_OK:
            return NormalizedPhoneNumber(e164: e164, regionCode: regionCode)
        case CPHONE_ERR_NOT_A_NUMBER:
            throw PhoneNumberError(.notANumber)
        case CPHONE_ERR_COUNTRY_CODE:
            throw PhoneNumberError(.unknownCountry)
        case CPHONE_ERR_INVALID:
            throw PhoneNumberError(.invalid)
        default:  // ARGUMENT, BUFFER_TOO_SMALL, INTERNAL: not the input's fault
            throw PhoneNumberError(.internal(code: Int(status)))
        }
    }

    /// Numbers normalised before. libphonenumber spends tens of
    /// microseconds per number in ICU regular expressions (parse, validity,
    /// region: 4–6 % of the booking handler's CPU for a one-attendee
    /// booking), and the same people book again and again. The result
    /// depends only on the trimmed input and the region (the library's
    /// metadata is compiled in), so a hit is exactly what a parse returns.
    /// Only successes are kept; errors are rare and parsed each time. A
    /// success is at most 250 bytes long (libphonenumber rejects longer
    /// input), so the cache holds about a megabyte at most.
    static let cache = NormalizedCache(capacity: 4_096)
}

/// A bounded map from (input, region) to its normalised number, emptied
/// when full: bounded memory whatever the inputs, and no bookkeeping per
/// hit, which a least-recently-used order would need.
final class NormalizedCache: Sendable {
    /// The input's bytes, not a `String`: strings that are canonically
    /// equivalent compare equal in Swift ("K" and U+212A KELVIN SIGN), but
    /// libphonenumber reads bytes and may answer them differently.
    struct Key: Hashable, Sendable {
        let input: [UInt8]
        let region: String
    }

    let capacity: Int
    private let entries = Mutex<[Key: NormalizedPhoneNumber]>([:])

    init(capacity: Int) {
        self.capacity = capacity
    }

    func value(for key: Key) -> NormalizedPhoneNumber? {
        entries.withLock { $0[key] }
    }

    func store(_ value: NormalizedPhoneNumber, for key: Key) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[key] = value
        }
    }

    /// How many numbers are kept (tests).
    var count: Int { entries.withLock { $0.count } }
}

/// A phone number in E.164 form together with the region it belongs to.
public struct NormalizedPhoneNumber: Sendable, Hashable {
    /// The E.164 form, e.g. `"+491701234567"`.
    public let e164: String
    /// The region the number belongs to: an ISO 3166-1 alpha-2 code such
    /// as `"DE"`, or `"001"` for non-geographic numbers (e.g. `+800 …`).
    public let regionCode: String

    /// Creates a value from its parts; no validation is done.
    public init(e164: String, regionCode: String) {
        self.e164 = e164
        self.regionCode = regionCode
    }
}

/// Why a phone number could not be normalised.
///
/// Its ``description`` names the reason only, never the input, so that it
/// can be logged without leaking personal data.
public struct PhoneNumberError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kinds of failure.
    public enum Reason: Sendable, Equatable {
        /// The input was empty or whitespace only.
        case empty
        /// The input was longer than ``PhoneNumbers/maximumInputLength``.
        case tooLong
        /// The input is not a phone number (no digits, far too short or
        /// long, or garbage).
        case notANumber
        /// The country could not be determined: a national number with
        /// an unknown or empty default region, or an unknown country
        /// calling code.
        case unknownCountry
        /// The input parses but is not a valid number for its region
        /// (wrong length or an unassigned range).
        case invalid
        /// A failure inside the library, not caused by the input; `code`
        /// is the `CPHONE_ERR_*` status.
        case `internal`(code: Int)
    }

    /// Why normalisation failed.
    public let reason: Reason

    /// Creates an error with the given reason.
    public init(_ reason: Reason) {
        self.reason = reason
    }

    public var description: String {
        switch reason {
        case .empty: "phone number is empty"
        case .tooLong: "phone number is too long (over \(PhoneNumbers.maximumInputLength) characters)"
        case .notANumber: "not a phone number"
        case .unknownCountry: "phone number's country could not be determined"
        case .invalid: "phone number is not valid for its region"
        case .internal(let code): "phone number library failure (code \(code))"
        }
    }
}

extension String {
    /// `self` without leading and trailing whitespace and newlines
    /// (Foundation-free).
    fileprivate func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else {
            return ""
        }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
