import Foundation

// Replies from a newer booking handler. Contract v1.1 has consumers ignore
// status values they do not know; a client that decodes a reply strictly
// would call a booking made with a newer status unreadable and could not
// tell the caller whether it was made. These read what such a client
// needs and leave out what it cannot read.

/// A successful command reply from a newer handler, read in outline: one
/// this build cannot decode only because bookings in it carry a status it
/// does not know.
///
/// ``read(_:)`` checks that: it reads each unknown status as a known one
/// and decodes the result as strictly as ever, so a reply that is broken
/// in any other way — or a failure, or a bare `{"ok":true}` — gives nil
/// and stays unreadable.
public struct ReplyOutline: Sendable, Equatable {
    /// The reply's booking, for a booking command's reply.
    public var bookingId: String?
    /// That booking's status as sent, known to this build or not.
    public var status: String?
    /// The series, for a recurring `booking.create` or a cancel by series.
    public var seriesId: String?
    /// The closure, for `room.close` or `room.reopen`.
    public var closureId: String?
    /// Every booking in the reply whose status this build does not know
    /// (a list's in its order).
    public var unknown: [UnknownStatusBooking]

    /// Creates an outline.
    public init(bookingId: String? = nil, status: String? = nil, seriesId: String? = nil, closureId: String? = nil,
                unknown: [UnknownStatusBooking]) {
        self.bookingId = bookingId
        self.status = status
        self.seriesId = seriesId
        self.closureId = closureId
        self.unknown = unknown
    }

    /// The outline of `body`, or nil unless it is a successful
    /// ``CommandReply`` in every respect but unknown booking statuses.
    public static func read(_ body: [UInt8]) -> ReplyOutline? {
        guard let known = UnknownStatuses.readAsKnown(body),
              let reply = try? ContractJSON.decode(CommandReply.self, from: known.body), reply.isOK else { return nil }
        var outline = ReplyOutline(unknown: known.unknown)
        switch reply {
        case .booking(let booking): outline.bookingId = booking.id
        case .bookingView(let view): outline.bookingId = view.id
        case .series(let series): outline.seriesId = series.id
        case .seriesCancelled(let series): outline.seriesId = series.id
        case .closure(let closure): outline.closureId = closure.closure.id
        case .room, .replay, .error: break
        }
        if let id = outline.bookingId {
            // The booking's own status, as sent (an unknown one if it has one).
            outline.status = known.unknown.first(where: { $0.id == id })?.status ?? reply.bookingStatus
        }
        return outline
    }
}

extension CommandReply {
    /// The status of a `.booking` or `.bookingView` reply.
    fileprivate var bookingStatus: String? {
        switch self {
        case .booking(let booking): booking.status.rawValue
        case .bookingView(let view): view.status.rawValue
        default: nil
        }
    }
}

/// Finds the bookings of a JSON reply whose status this build does not know.
enum UnknownStatuses {
    /// `body` with every unknown booking status read as a known one (any:
    /// only to check the rest with the strict decoder), and the bookings
    /// that had one (arrays in their order). Nil when `body` is not a JSON
    /// object or has no such booking.
    static func readAsKnown(_ body: [UInt8]) -> (body: Data, unknown: [UnknownStatusBooking])? {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else { return nil }
        var unknown: [UnknownStatusBooking] = []
        let replaced = replace(object, &unknown)
        guard !unknown.isEmpty, let data = try? JSONSerialization.data(withJSONObject: replaced) else { return nil }
        return (data, unknown)
    }

    /// A booking is any object with a string `id` and a string `status`.
    private static func replace(_ value: Any, _ unknown: inout [UnknownStatusBooking]) -> Any {
        if var object = value as? [String: Any] {
            if let id = object["id"] as? String, let status = object["status"] as? String, BookingStatus(rawValue: status) == nil {
                unknown.append(UnknownStatusBooking(id: id, status: status))
                object["status"] = BookingStatus.confirmed.rawValue
            }
            // Keys sorted, so the order of `unknown` does not depend on hashing.
            for key in object.keys.sorted() where key != "status" {
                object[key] = replace(object[key]!, &unknown)
            }
            return object
        }
        if let array = value as? [Any] { return array.map { replace($0, &unknown) } }
        return value
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
            // Readable but for unknown statuses, or not at all.
            guard let known = UnknownStatuses.readAsKnown(body),
                  let reply = try? ContractJSON.decode(BookingQueryReply.self, from: known.body) else { throw strict }
            switch reply {
            case .booking(let view):
                throw known.unknown.first { $0.id == view.id } ?? known.unknown[0]
            case .bookings(let views, let cursor):
                // Ids are unique in a page; a left-out id drops only its own booking.
                let left = Set(known.unknown.map(\.id))
                return (.bookings(views.filter { !left.contains($0.id) }, nextCursor: cursor), known.unknown)
            case .closures, .error:
                throw strict
            }
        }
    }
}
