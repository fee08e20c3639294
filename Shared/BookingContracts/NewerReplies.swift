import Foundation

// Replies from a newer booking handler. Contract v1.1 has consumers ignore
// status values they do not know; a client that decodes a reply strictly
// would call a booking made with a newer status unreadable and could not
// tell the caller whether it was made. These read what such a client
// needs and leave out what it cannot read.

/// The top of a command reply, read leniently: success or failure, the
/// booking's id and status as text, and a failure's code and text.
///
/// For a client whose ``CommandReply`` decoding failed on a reply that is
/// still JSON with `ok`: typically a booking with a status this build does
/// not know. Every member but `ok` is nil where the reply lacks it or has
/// it in another shape.
public struct ReplyOutline: Decodable, Sendable, Equatable {
    /// The reply's `ok`.
    public var ok: Bool
    /// `booking.id`, when the reply carries a booking.
    public var bookingId: String?
    /// `booking.status` as sent, known to this build or not.
    public var status: String?
    /// `error.code` of a failure reply.
    public var errorCode: Int?
    /// `error.text` of a failure reply.
    public var errorText: String?

    /// Creates an outline.
    public init(ok: Bool, bookingId: String? = nil, status: String? = nil, errorCode: Int? = nil, errorText: String? = nil) {
        self.ok = ok
        self.bookingId = bookingId
        self.status = status
        self.errorCode = errorCode
        self.errorText = errorText
    }

    private enum Keys: String, CodingKey { case ok, booking, error }
    private enum BookingKeys: String, CodingKey { case id, status }
    private enum ErrorKeys: String, CodingKey { case code, text }

    /// Needs only `ok`; reads the rest where it has the expected type.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        ok = try c.decode(Bool.self, forKey: .ok)
        let booking = try? c.nestedContainer(keyedBy: BookingKeys.self, forKey: .booking)
        bookingId = try? booking?.decode(String.self, forKey: .id)
        status = try? booking?.decode(String.self, forKey: .status)
        let error = try? c.nestedContainer(keyedBy: ErrorKeys.self, forKey: .error)
        errorCode = try? error?.decode(Int.self, forKey: .code)
        errorText = try? error?.decode(String.self, forKey: .text)
    }
}

/// A booking a reply carried with a status this build does not know
/// (a newer handler's). Thrown by
/// ``BookingQueryReply/decodeIgnoringUnknownStatuses(_:)`` for a single
/// booking, which cannot be left out.
public struct UnknownStatusBooking: Error, Sendable, Equatable {
    /// The booking's id ("" if the reply had none).
    public var id: String
    /// Its status as sent.
    public var status: String

    /// Creates the value.
    public init(id: String, status: String) {
        self.id = id
        self.status = status
    }
}

extension BookingQueryReply {
    /// Decodes a query reply as v1.1 asks of a client that meets a newer
    /// handler: bookings of a list whose status this build does not know
    /// are left out and returned beside the reply; everything else is
    /// decoded as strictly as ever.
    ///
    /// - Throws: ``UnknownStatusBooking`` for a single booking
    ///   (`booking.get`) with such a status; the strict decoding error for
    ///   a reply that is unreadable for any other reason.
    public static func decodeIgnoringUnknownStatuses(_ body: [UInt8]) throws
        -> (reply: BookingQueryReply, leftOut: [UnknownStatusBooking])
    {
        do {
            return (try ContractJSON.decode(BookingQueryReply.self, from: body), [])
        } catch let strict {
            guard var object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else { throw strict }
            if let single = object["booking"] as? [String: Any], let unknown = Self.unknownStatus(single) {
                throw unknown
            }
            guard let list = object["bookings"] as? [Any] else { throw strict }
            var kept: [Any] = [], leftOut: [UnknownStatusBooking] = []
            for item in list {
                if let booking = item as? [String: Any], let unknown = Self.unknownStatus(booking) {
                    leftOut.append(unknown)
                } else {
                    kept.append(item)
                }
            }
            // Nothing left out: the reply is unreadable for another reason.
            guard !leftOut.isEmpty else { throw strict }
            object["bookings"] = kept
            return (try ContractJSON.decode(BookingQueryReply.self, from: try JSONSerialization.data(withJSONObject: object)),
                    leftOut)
        }
    }

    private static func unknownStatus(_ booking: [String: Any]) -> UnknownStatusBooking? {
        guard let status = booking["status"] as? String, BookingStatus(rawValue: status) == nil else { return nil }
        return UnknownStatusBooking(id: booking["id"] as? String ?? "", status: status)
    }
}
