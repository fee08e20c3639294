/// The `date` of an availability query: everything ``DateSpec`` accepts,
/// plus `"now"` (today's local date; free ranges are reported from the
/// current quarter-hour on, see docs/contract/README.md).
public enum AvailabilityDate: Codable, Sendable, Hashable, CustomStringConvertible {
    /// `"now"`.
    case now
    /// `"YYYY-MM-DD"`, `"today"` or UNIX seconds.
    case date(DateSpec)

    /// The JSON string of ``now``.
    public static let nowLiteral = "now"

    /// Decodes `"now"` or a ``DateSpec``; other values throw `DecodingError`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let string = try? container.decode(String.self), string == AvailabilityDate.nowLiteral {
            self = .now
        } else {
            self = .date(try DateSpec(from: decoder))
        }
    }

    /// Encodes `"now"` or the ``DateSpec``.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .now:
            var container = encoder.singleValueContainer()
            try container.encode(AvailabilityDate.nowLiteral)
        case .date(let spec): try spec.encode(to: encoder)
        }
    }

    /// Parses a query-string value: `now`, `today`, `YYYY-MM-DD` or decimal UNIX seconds.
    public init?(queryValue: String) {
        if queryValue == AvailabilityDate.nowLiteral {
            self = .now
        } else if let spec = DateSpec(queryValue: queryValue) {
            self = .date(spec)
        } else {
            return nil
        }
    }

    /// The JSON form as text.
    public var description: String {
        switch self {
        case .now: AvailabilityDate.nowLiteral
        case .date(let spec): spec.description
        }
    }
}

/// Availability query (RPC body on `availability.queries`, or the query
/// string of HTTP `GET /rooms`). Every field is optional; absent filters do
/// not filter.
public struct AvailabilityQuery: Codable, Sendable, Equatable {
    /// Which local date; default `today`.
    public var date: AvailabilityDate?
    /// Case-insensitive substring of the room name.
    public var name: String?
    /// The room must have all of these.
    public var equipment: [String]?
    /// The room's capacity must be at least this.
    public var minCapacity: Int?
    /// With ``freeTo``: the room must be free for the whole range `freeFrom`–`freeTo`
    /// (alone: from `freeFrom` for one grid step).
    public var freeFrom: String?
    /// With ``freeFrom``: end of the range that must be free (alone: from opening until `freeTo`).
    public var freeTo: String?
    /// When true: only rooms free for the next 60 minutes from now.
    public var availableNextHour: Bool?
    /// v1.2: how many days from `date` on (1–31, default 1); with more
    /// than one, each room carries ``RoomAvailability/days``.
    public var days: Int?

    /// Creates a query.
    public init(date: AvailabilityDate? = nil, name: String? = nil, equipment: [String]? = nil,
                minCapacity: Int? = nil, freeFrom: String? = nil, freeTo: String? = nil,
                availableNextHour: Bool? = nil, days: Int? = nil) {
        self.days = days
        self.date = date
        self.name = name
        self.equipment = equipment
        self.minCapacity = minCapacity
        self.freeFrom = freeFrom
        self.freeTo = freeTo
        self.availableNextHour = availableNextHour
    }

    /// Decodes an RPC query body: ``BodyTooLarge`` for a body over
    /// ``ContractLimits/maxBodyBytes`` (checked before any decoding), else
    /// `DecodingError`. Map either with ``ContractJSON/replyError(for:)``.
    public static func decode(body: [UInt8]) throws -> AvailabilityQuery {
        try ContractLimits.checkBody(body)
        return try ContractJSON.decode(AvailabilityQuery.self, from: body)
    }
}

/// One room of an availability reply, in the legacy `getrooms` shape. The
/// reply body is a JSON array of these (``AvailabilityReply``).
public struct RoomAvailability: Codable, Sendable, Equatable {
    /// Room name.
    public var name: String
    /// Free text; `""` when the room has none (legacy clients expect the key).
    public var location: String
    /// Equipment tags.
    public var equipment: [String]
    /// Free text; `""` when the room has none.
    public var size: String
    /// Capacity.
    public var capacity: Int
    /// Image URLs.
    public var images: [String]
    /// Free ranges of the day, `HH:mm - HH:mm`, merged, 15-minute steps,
    /// between opening and closing; `[]` when fully booked.
    public var avail: [String]
    /// v1.2: why the room is closed the whole day (its weekly hours, or a
    /// closure's reason), beside `"avail": []`, so a closed day reads
    /// differently from a full one; omitted on days it is open.
    public var closed: String?
    /// v1.2: with `days` > 1 in the query, `date` and the days after it
    /// (``avail`` stays the first day's); omitted otherwise.
    public var days: [DayAvailability]?

    /// Creates an entry.
    public init(name: String, location: String = "", equipment: [String] = [], size: String = "",
                capacity: Int, images: [String] = [], avail: [String], closed: String? = nil,
                days: [DayAvailability]? = nil) {
        self.days = days
        self.name = name
        self.location = location
        self.equipment = equipment
        self.size = size
        self.capacity = capacity
        self.images = images
        self.avail = avail
        self.closed = closed
    }

    /// The entry for `room` with the given free ranges.
    public init(room: Room, avail: [String], closed: String? = nil, days: [DayAvailability]? = nil) {
        self.init(name: room.name, location: room.location ?? "", equipment: room.equipment,
                  size: room.size ?? "", capacity: room.capacity, images: room.images, avail: avail, closed: closed,
                  days: days)
    }
}

/// The availability reply body: rooms in the legacy `getrooms` shape.
public typealias AvailabilityReply = [RoomAvailability]
