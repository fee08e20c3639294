import BookingContracts
import Foundation
import PhoneNumbers

extension BookingRules {
    /// Region whose national dialling rules apply to a phone number without
    /// country code: Germany, as the contract says.
    public static let defaultPhoneRegion = "DE"
    /// Longest e-mail address, in UTF-8 bytes (RFC 5321 path limit).
    public static let maxEmailLength = 254
    /// Longest local part of an e-mail address, in UTF-8 bytes (RFC 5321).
    public static let maxEmailLocalPartLength = 64
    /// Longest attendee name, in UTF-8 bytes, after trimming (``ContractLimits``).
    public static let maxAttendeeNameBytes = ContractLimits.maxNameBytes

    /// Validates and normalises the attendees of a booking.
    ///
    /// Checks, first failure wins: at least one attendee (1100, field
    /// `attendees`); at most `capacity` (1106, field `attendees`); then each
    /// attendee in order, and within one attendee name, e-mail, phone:
    /// - name non-empty after trimming (1110, field `attendees[i].name`) and
    ///   at most ``maxAttendeeNameBytes`` UTF-8 bytes (1100, same field: a
    ///   size limit like every other field's, see ``ContractLimits``);
    /// - e-mail valid per ``isValidEmail(_:)`` (1111, field `attendees[i].email`);
    /// - phone normalisable to E.164, numbers without country code being
    ///   German (3000, field `attendees[i].phone`).
    ///
    /// Returns the attendees in the same order with names trimmed, e-mails
    /// normalised (see ``isValidEmail(_:)``) and phones in E.164.
    public static func attendees(_ input: [AttendeeInput], capacity: Int) -> Result<[Attendee], ReplyError> {
        if input.isEmpty {
            return .failure(ReplyError(code: .invalidField, text: "at least one attendee is required",
                                       field: "attendees"))
        }
        if input.count > capacity {
            return .failure(ReplyError(code: .overCapacity,
                                       text: "\(input.count) attendees exceed the room's capacity of \(capacity)",
                                       field: "attendees"))
        }
        var result: [Attendee] = []
        result.reserveCapacity(input.count)
        for (index, attendee) in input.enumerated() {
            let name = attendee.name.trimmingWhitespace()
            if name.isEmpty {
                return .failure(ReplyError(code: .attendeeNameInvalid,
                                           text: "attendee \(index): name must not be empty",
                                           field: "attendees[\(index)].name"))
            }
            if name.utf8.count > maxAttendeeNameBytes {
                return .failure(ReplyError(code: .invalidField,
                                           text: "attendee \(index): name is longer than \(maxAttendeeNameBytes) bytes (UTF-8)",
                                           field: "attendees[\(index)].name"))
            }
            guard let email = isValidEmail(attendee.email) else {
                return .failure(ReplyError(code: .attendeeEmailInvalid,
                                           text: "attendee \(index): e-mail address is not valid",
                                           field: "attendees[\(index)].email"))
            }
            let phone: String
            do {
                phone = try PhoneNumbers.normalizeE164(attendee.phone, defaultRegion: defaultPhoneRegion)
            } catch {
                return .failure(ReplyError(code: .attendeePhoneInvalid,
                                           text: "attendee \(index): \(error.description)",
                                           field: "attendees[\(index)].phone"))
            }
            result.append(Attendee(name: name, email: email, phone: phone))
        }
        return .success(result)
    }

    /// The normalised form of an e-mail address, or nil when it is not valid.
    ///
    /// A pragmatic subset of RFC 5322, after trimming surrounding whitespace:
    /// - at most ``maxEmailLength`` (254) UTF-8 bytes;
    /// - exactly one `@`;
    /// - a non-empty local part of at most 64 bytes without whitespace or
    ///   control characters (kept as given: local parts may be case-sensitive);
    /// - a domain of at least two dot-separated labels, each 1–63 ASCII
    ///   letters, digits or hyphens, not starting or ending with a hyphen
    ///   (internationalised domains in their `xn--` form); lowercased.
    ///
    /// `"ada@Example.COM"` → `"ada@example.com"`; `"a@b"`, `"a b@c.de"`,
    /// `"@x.de"`, `"x@"` → nil.
    public static func isValidEmail(_ input: String) -> String? {
        let text = input.trimmingWhitespace()
        guard !text.isEmpty, text.utf8.count <= maxEmailLength else { return nil }
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let local = parts[0], domain = parts[1]

        guard !local.isEmpty, local.utf8.count <= maxEmailLocalPartLength,
              local.unicodeScalars.allSatisfy({ !$0.properties.isWhitespace && $0.properties.generalCategory != .control
                  && $0.properties.generalCategory != .format })
        else { return nil }

        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2 else { return nil }
        for label in labels {
            let bytes = Array(label.utf8)
            guard (1...63).contains(bytes.count), bytes.first != UInt8(ascii: "-"), bytes.last != UInt8(ascii: "-"),
                  bytes.allSatisfy({ isASCIILetterOrDigit($0) || $0 == UInt8(ascii: "-") })
            else { return nil }
        }
        return String(local) + "@" + domain.lowercased()
    }

    private static func isASCIILetterOrDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
