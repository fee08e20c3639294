/// Contract v1.2, "Suggestions: 'find me a room'": `availability.suggest`
/// (routing key on ``Topology/bookingQueriesExchange``, answered by the
/// availability projector; also `GET /suggest` over HTTP with the same
/// names) and `days` on `availability.query`.
public enum SuggestContract {
    /// Routing key (and `type`) of a suggestion query on
    /// ``Topology/bookingQueriesExchange``; it reaches
    /// ``Topology/availabilityQueriesQueue``.
    public static let suggestKey = "availability.suggest"
    /// `durationMinutes`: 15–720, a multiple of 15.
    public static let durationRange = 15...720
    /// `stepMinutes`: 15–240, a multiple of 15; default 15.
    public static let stepRange = 15...240
    /// Default `stepMinutes`.
    public static let defaultStep = 15
    /// `limit`: 1–100; default 10.
    public static let limitRange = 1...100
    /// Default `limit`.
    public static let defaultLimit = 10
    /// The longest window: 31 days (calendar days between two dates,
    /// 24-hour days otherwise).
    public static let maxWindowDays = 31
    /// `days` on `availability.query`: 1–31, default 1.
    public static let daysRange = 1...31
    /// With `days` > 1, rooms × days of one answer may be at most this.
    public static let maxRoomDays = 2_000
}

/// `availability.suggest` body: which rooms are free for `durationMinutes`
/// somewhere in `[from, to)`, best first.
public struct SuggestQuery: Codable, Sendable, Equatable {
    /// Start of the window: an instant (`…Z` or with an offset) or a local
    /// date (`YYYY-MM-DD`: the start of that day in each room's zone).
    public var from: String?
    /// End of the window, exclusive, in the same forms as ``from``.
    public var to: String?
    /// How long, 15–720 minutes on the 15-minute grid.
    public var durationMinutes: Int?
    /// The room's capacity must be at least this.
    public var minCapacity: Int?
    /// The room must have all of these (case-insensitive).
    public var equipment: [String]?
    /// Case-insensitive substring of the room name.
    public var name: String?
    /// How many suggestions at most: 1–100, default 10.
    public var limit: Int?
    /// Candidate starts lie on multiples of this from local midnight:
    /// 15–240 minutes, a multiple of 15, default 15.
    public var stepMinutes: Int?

    /// Creates a query.
    public init(from: String? = nil, to: String? = nil, durationMinutes: Int? = nil, minCapacity: Int? = nil,
                equipment: [String]? = nil, name: String? = nil, limit: Int? = nil, stepMinutes: Int? = nil) {
        self.from = from
        self.to = to
        self.durationMinutes = durationMinutes
        self.minCapacity = minCapacity
        self.equipment = equipment
        self.name = name
        self.limit = limit
        self.stepMinutes = stepMinutes
    }

    /// Decodes an RPC body: ``BodyTooLarge`` over
    /// ``ContractLimits/maxBodyBytes`` (before decoding), else
    /// `DecodingError`; map either with ``ContractJSON/replyError(for:)``.
    public static func decode(body: [UInt8]) throws -> SuggestQuery {
        try ContractLimits.checkBody(body)
        return try ContractJSON.decode(SuggestQuery.self, from: body)
    }
}

/// One suggestion: a room free from `start` to `end` on local `date`.
public struct Suggestion: Codable, Sendable, Equatable, Hashable {
    /// The room's name.
    public var room: String
    /// Local date in the room's zone, `YYYY-MM-DD`.
    public var date: String
    /// Local start, `HH:mm`.
    public var start: String
    /// Local end, `HH:mm` (same date).
    public var end: String
    /// The start as a UTC instant (`…Z`).
    public var startsAt: String
    /// The end as a UTC instant (`…Z`).
    public var endsAt: String
    /// The room's IANA zone.
    public var timeZone: String
    /// The room's capacity.
    public var capacity: Int

    /// Creates a suggestion.
    public init(room: String, date: String, start: String, end: String, startsAt: String, endsAt: String,
                timeZone: String, capacity: Int) {
        self.room = room
        self.date = date
        self.start = start
        self.end = end
        self.startsAt = startsAt
        self.endsAt = endsAt
        self.timeZone = timeZone
        self.capacity = capacity
    }
}

/// The success reply of `availability.suggest`: `{"ok": true,
/// "suggestions": [ … ]}`, earliest `startsAt` first, then the smallest
/// capacity, then the room name. A failure is ``CommandReply/error(_:)``.
public struct SuggestReply: Codable, Sendable, Equatable {
    /// Always true here.
    public var ok: Bool
    /// The suggestions, best first; empty when nothing fits.
    public var suggestions: [Suggestion]

    /// Creates a reply.
    public init(suggestions: [Suggestion]) {
        ok = true
        self.suggestions = suggestions
    }

    /// Decodes a reply body: the suggestions, or the error it carries.
    public static func decode(body: [UInt8]) throws -> Result<[Suggestion], ReplyError> {
        if let reply = try? ContractJSON.decode(SuggestReply.self, from: body), reply.ok {
            return .success(reply.suggestions)
        }
        if case .error(let error) = try ContractJSON.decode(CommandReply.self, from: body) { return .failure(error) }
        throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "neither suggestions nor an error"))
    }
}

/// One day of a room in an availability answer with `days` > 1:
/// `{"date": "…", "avail": [ … ]}`, and `closed` when the whole day is.
public struct DayAvailability: Codable, Sendable, Equatable {
    /// Local date in the room's zone.
    public var date: String
    /// Free ranges of that day, as ``RoomAvailability/avail``.
    public var avail: [String]
    /// Why the room is closed all that day, as ``RoomAvailability/closed``.
    public var closed: String?

    /// Creates a day.
    public init(date: String, avail: [String], closed: String? = nil) {
        self.date = date
        self.avail = avail
        self.closed = closed
    }
}
