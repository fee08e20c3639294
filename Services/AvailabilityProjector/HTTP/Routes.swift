import BookingContracts
import Foundation
import Hummingbird
import Metrics

/// The projector's HTTP API and page, added to its ``OpsServer`` router:
/// - `GET /rooms?date=…&name=…&equipment=…&minCapacity=…&freeFrom=…&freeTo=…&availableNextHour=true&days=…`
///   — the contract's query; 200 with the legacy `getrooms` array, 400 with
///   `{"ok":false,"error":…}` for bad parameters;
/// - `GET /suggest?from=…&to=…&durationMinutes=…&minCapacity=…&equipment=…&name=…&limit=…&stepMinutes=…`
///   — `availability.suggest` (v1.2); 200 `{"ok":true,"suggestions":[…]}`, 400 error;
/// - `GET /rooms/{name}?date=…` — one room's entry; 404 (1101) when unknown;
/// - `GET /api/day?date=YYYY-MM-DD&name=…&equipment=…` — what the page
///   draws: per room the segments of 07:00–19:00 (free, booked, pending,
///   in progress, held, buffer, closed);
/// - `GET /api/week?room=…&date=…` — one room's seven days from `date`
///   in the shape of `/api/day` (the page's week view);
/// - `GET /api/revision` — `{"revision":N}`, grows with every change (the
///   page polls it);
/// - `GET /api/page` — `{"booking": true|false}`: whether the page books;
/// - `POST /api/book` — books one suggestion as `PAGE_USER` (only when
///   configured; 404 otherwise), answers ``PageBookingAnswer``;
/// - `GET /` — the page.
public enum ProjectorRoutes {
    static let json: HTTPFields = [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"]

    public static func add(to router: Router<BasicRequestContext>, engine: QueryEngine, booker: PageBooker? = nil) {
        // First: it applies to the routes added after it only.
        router.add(middleware: QueryTracingMiddleware())
        addPage(to: router, engine: engine, booker: booker)
        router.get("rooms") { request, _ -> Response in
            let started = DispatchTime.now()
            defer { ProjectorMetrics.httpQueryDuration.recordInterval(since: started) }
            switch QueryEngine.parse(parameters: parameters(request)).flatMap(engine.replyBody) {
            case .success(let body):
                return respond(.ok, body)
            case .failure(let error):
                return failure(.badRequest, error)
            }
        }
        router.get("suggest") { request, _ -> Response in
            let started = DispatchTime.now()
            defer { ProjectorMetrics.httpQueryDuration.recordInterval(since: started) }
            switch QueryEngine.parseSuggest(parameters: parameters(request)) {
            case .success(let query):
                return respond(.ok, engine.suggestJSON(query))
            case .failure(let error):
                return failure(.badRequest, error)
            }
        }
        router.get("rooms/:name") { request, context -> Response in
            let name = pathParameter(context.parameters.get("name"))
            var params = parameters(request).filter { $0.0 == "date" }
            params.append(("name", name))
            switch QueryEngine.parse(parameters: params) {
            case .success(let query):
                guard let answer = engine.answers(query).first(where: { $0.info.room.name == name }) else {
                    return failure(.notFound, ReplyError(code: .unknownRoom, text: "unknown room '\(name.prefix(100))'", field: "name"))
                }
                var out: [UInt8] = []
                QueryEngine.appendEntry(answer, to: &out)
                return respond(.ok, out)
            case .failure(let error):
                return failure(.badRequest, error)
            }
        }
        router.get("api/revision") { _, _ -> Response in
            respond(.ok, Array(#"{"revision":\#(engine.index.revision)}"#.utf8))
        }
        router.get("api/day") { request, _ -> Response in
            let params = parameters(request)
            var q = params.filter { ["date", "name", "equipment"].contains($0.0) }
            if !q.contains(where: { $0.0 == "date" }) { q.append(("date", "today")) }
            switch QueryEngine.parse(parameters: q) {
            case .success(let query):
                let revision = engine.index.revision
                let day = DayView(answers: engine.answers(query), revision: revision,
                                  date: params.first { $0.0 == "date" }?.1 ?? "today")
                return respond(.ok, [UInt8]((try? ContractJSON.encode(day)) ?? Data()))
            case .failure(let error):
                return failure(.badRequest, error)
            }
        }
        router.get("/") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-cache"],
                     body: .init(byteBuffer: ByteBuffer(string: ProjectorPage.html)))
        }
    }

    /// The query's parameters, decoded as a form is encoded
    /// (`application/x-www-form-urlencoded`, what `URLSearchParams` and
    /// HTML forms send): `+` is a space, then `%XX` escapes, in keys and
    /// values alike. (Hummingbird's `queryParameters` leaves `+` and keys
    /// as sent, so `name=Big+Hall` would look for "Big+Hall".) A malformed
    /// escape is kept as sent and fails as an unknown value, not silently.
    static func parameters(_ request: Request) -> [(String, String)] {
        formParameters(request.uri.query)
    }

    static func formParameters(_ query: String?) -> [(String, String)] {
        guard let query, !query.isEmpty else { return [] }
        func decode(_ part: Substring) -> String {
            let spaced = part.replacingOccurrences(of: "+", with: " ")
            return spaced.removingPercentEncoding ?? String(part)
        }
        return query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            guard let equals = pair.firstIndex(of: "=") else { return (decode(pair), "") }
            return (decode(pair[..<equals]), decode(pair[pair.index(after: equals)...]))
        }
    }

    /// A path parameter as the client meant it: percent escapes decoded
    /// (`/rooms/Z%C3%BCrich` is Zürich); `+` in a path is a plus.
    static func pathParameter(_ raw: String?) -> String {
        guard let raw else { return "" }
        return raw.removingPercentEncoding ?? raw
    }

    static func respond(_ status: HTTPResponse.Status, _ body: [UInt8]) -> Response {
        Response(status: status, headers: json, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func failure(_ status: HTTPResponse.Status, _ error: ReplyError) -> Response {
        ProjectorMetrics.queries.increment("http", "rejected")
        return respond(status, [UInt8]((try? ContractJSON.encode(CommandReply.error(error))) ?? Data()))
    }
}

/// `GET /api/day`: the page's data.
public struct DayView: Codable, Sendable, Equatable {
    public struct Segment: Codable, Sendable, Equatable {
        public var from: String
        public var to: String
        /// `free`, `booked`, `pending`, `inProgress`, `held` (v1.2: a hold
        /// awaiting its requester's confirmation), `buffer` (v1.2: the
        /// room's time between bookings) or `closed`.
        public var state: String
        /// For time a closure covers (v1.2): its reason.
        public var reason: String?
    }

    public struct RoomRow: Codable, Sendable, Equatable {
        public var name: String
        public var location: String
        public var capacity: Int
        public var equipment: [String]
        public var timeZone: String
        public var date: String
        public var avail: [String]
        /// Why the room is closed all day (v1.2), or nil.
        public var closed: String?
        /// 07:00–19:00 in order, adjacent segments of equal state merged.
        public var segments: [Segment]
    }

    public var date: String
    public var revision: Int
    public var rooms: [RoomRow]

    /// The window the page draws.
    public static let window = (from: 7 * 60, to: 19 * 60)

    init(answers: [QueryEngine.Answer], revision: Int, date: String) {
        self.revision = revision
        self.date = answers.first?.date ?? date
        rooms = answers.map { a in
            RoomRow(name: a.info.room.name, location: a.info.room.location ?? "", capacity: a.info.room.capacity,
                    equipment: a.info.room.equipment, timeZone: a.info.room.timeZone, date: a.date,
                    avail: a.free.availStrings, closed: a.closedReason, segments: Self.segments(a))
        }
    }

    static func segments(_ a: QueryEngine.Answer) -> [Segment] {
        var result: [Segment] = []
        let first = window.from / SlotMask.minutes, last = window.to / SlotMask.minutes
        let zone = a.info.zone
        let day = RoomDay(room: a.info.room.name, date: a.date)
        for slot in first..<last {
            let state: String
            // A closure's slot names the closure (the page greys it with its reason).
            let reason = a.closures.first { $0.slots(on: day.date, zone: zone).contains(slot) }?.closure.reason
            if a.occupancy.inProgress.contains(slot) { state = "inProgress" }
            else if a.occupancy.confirmed.contains(slot) { state = "booked" }
            else if a.occupancy.pending.contains(slot) { state = "pending" }
            else if a.occupancy.held.contains(slot) { state = "held" }
            else if a.closed.contains(slot) { state = "closed" }
            else if !a.free.contains(slot) { state = "buffer" }
            else { state = "free" }
            let to = SlotMask.clock((slot + 1) * SlotMask.minutes)
            let closureReason = state == "closed" ? reason : nil
            if let lastSegment = result.last, lastSegment.state == state, lastSegment.reason == closureReason {
                result[result.count - 1].to = to
            } else {
                result.append(Segment(from: SlotMask.clock(slot * SlotMask.minutes), to: to, state: state, reason: closureReason))
            }
        }
        return result
    }
}
