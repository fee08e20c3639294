import BookingContracts
import Foundation

/// Answers `booking.get` and `booking.list` (contract v1.1, "Reading
/// bookings") from the handler's own database.
///
/// Why the handler and not a read model fed by events: its database is
/// where a booking is committed before the command's reply is sent, so a
/// client that got a reply finds the booking with its next query
/// (read-your-writes, in every handler process sharing the file), and it
/// needs no other service to answer. Reads run on SQLite's WAL readers, so
/// they do not wait for the writer and the writer does not wait for them.
///
/// Privacy (contract v1.2): a caller reads a booking in full when it (the
/// broker-verified `user_id`) is the booking's requester, an approver of
/// its room or an admin, and, for a booking made without `user_id`, when
/// it is anonymous; everyone else reads the busy view (when and where, not
/// who or what). `attendeeEmail`, and `requestedBy` naming someone else,
/// match only bookings the caller reads in full.
public struct BookingReader: Sendable {
    let store: any ReadStore
    let policy: CallerPolicy
    let now: @Sendable () -> Date
    /// Signs and checks `nextCursor`s.
    let cursorKey: CursorKey
    /// The most rows one page reads (``maxRowsPerPage``; tests set less).
    let rowsPerPage: Int

    /// - Parameters:
    ///   - now: the clock for cursor expiry.
    ///   - cursorKey: `LIST_CURSOR_KEY` (``CursorKey/resolve(setting:dataDirectory:)``);
    ///     default a key of this reader's own.
    public init(store: any ReadStore, policy: CallerPolicy, now: @escaping @Sendable () -> Date = { Date() },
                cursorKey: CursorKey = .random(), rowsPerPage: Int = BookingReader.maxRowsPerPage) {
        self.store = store
        self.policy = policy
        self.now = now
        self.cursorKey = cursorKey
        self.rowsPerPage = max(1, rowsPerPage)
    }

    /// The view `caller` gets of `booking` in `room`.
    public func visibility(_ booking: Booking, room: Room?, caller: Caller) -> BookingVisibility {
        visibility(requestedBy: booking.requestedBy, room: room, caller: caller)
    }

    /// The view `caller` gets of a booking requested by `requestedBy` in
    /// `room` (``BookingReader`` says who reads what).
    public func visibility(requestedBy: String?, room: Room?, caller: Caller) -> BookingVisibility {
        Self.visibility(requestedBy: requestedBy, approvers: room?.approvers ?? [], caller: caller,
                        administrators: policy.administrators)
    }

    /// The rule itself, for every path that shows another caller's booking.
    public static func visibility(requestedBy: String?, approvers: [String], caller: Caller,
                                  administrators: Set<String>) -> BookingVisibility {
        guard let name = caller.name else {
            // Anonymous: only bookings made without user_id (which any
            // anonymous caller may change in the embedded default).
            return (requestedBy ?? "").isEmpty ? .full : .busy
        }
        if administrators.contains(name) { return .full }
        guard let owner = requestedBy, !owner.isEmpty else { return .busy }
        return name == owner || approvers.contains(name) ? .full : .busy
    }

    /// `booking.get`: the booking in the caller's view, or 2001.
    public func get(_ query: GetBooking, caller: Caller) async throws -> BookingQueryReply {
        if let refusal = admit(caller) { return .error(refusal) }
        guard !query.bookingId.isEmpty, let booking = try await store.booking(id: query.bookingId) else {
            return .error(ReplyError(code: .bookingNotFound, text: "booking '\(query.bookingId.prefix(100))' not found",
                                     field: "bookingId"))
        }
        let room = try await store.room(named: booking.room)
        let view = visibility(booking, room: room, caller: caller)
        guard view == .full, booking.status == .waitlisted else { return .booking(BookingView(booking, visibility: view)) }
        return .booking(BookingView(try await placed(booking, room: room), visibility: view))
    }

    /// A waitlisted booking with its current ``Booking/waitlist`` place
    /// (contract v1.2), computed from the committed waitlist of its room:
    /// positions are not stored, since every promotion or cancellation
    /// ahead would otherwise rewrite the waiters behind it.
    func placed(_ booking: Booking, room: Room?) async throws -> Booking {
        var placed = booking
        let waiters = try await store.waiters(room: booking.room)
        placed.waitlist = WaitlistPlace(position: BookingRules.waitlistPosition(of: booking.id, in: waiters,
                                                                              bufferSeconds: room?.bufferSeconds ?? 0))
        return placed
    }

    /// `booking.list`: one page. The first page fixes the snapshot (the
    /// newest committed version); its cursor carries it, so the following
    /// pages return every booking that matched then exactly once, as it was
    /// then, whatever changed in between.
    public func list(_ query: ListBookings, caller: Caller) async throws -> BookingQueryReply {
        try ContractJSON.decode(BookingQueryReply.self, from: Data(try await listReply(query, caller: caller)))
    }

    /// ``list(_:caller:)`` as the reply body the responder sends: the
    /// stored JSON of each booking spliced into the envelope, not decoded
    /// and re-encoded (that was most of a query's cost).
    public func listReply(_ query: ListBookings, caller: Caller) async throws -> [UInt8] {
        if let refusal = admit(caller) { return try Self.encoded(.error(refusal)) }
        let plan: ListPlan
        switch ListPlan.make(query, now: now(), cursorKey: cursorKey) {
        case .failure(let error): return try Self.encoded(.error(error))
        case .success(let p): plan = p
        }
        let snapshot: Int64
        var after: (startsAt: Int64, id: String)?
        if let cursor = plan.cursor {
            snapshot = cursor.snapshot
            after = (cursor.startsAt, cursor.id)
        } else {
            snapshot = try await store.snapshotSeq()
        }
        // The envelope as ContractJSON writes it (sorted keys).
        var body = Array(#"{"bookings":["#.utf8)
        var listed = 0
        var rooms: [String: Room?] = [:]
        var bounds: [String: (from: Int64, to: Int64)?] = [:]
        // Where the next page starts; nil: this is the last page.
        var resume: (startsAt: Int64, id: String)?
        // Rows the window's zones or the filters drop are read past in
        // batches until the page is full, the window is exhausted, or
        // ``maxRowsPerPage`` rows were read: then the page
        // ends short (even empty) with a cursor where the reading stopped,
        // so no filter makes one query walk a year of rows.
        let batch = min(plan.limit * 2 + 1, 2001)
        var scanned = 0
        scan: while true {
            let want = min(batch, rowsPerPage - scanned)
            let rows = try await store.listVersions(at: snapshot, from: plan.widest.from, to: plan.widest.to, room: query.room,
                                                    statuses: plan.statuses, requestedBy: query.requestedBy,
                                                    seriesId: query.seriesId, after: after, limit: want)
            scanned += rows.count
            for row in rows {
                let previous = after
                after = (row.startsAt, row.id)
                if bounds[row.timeZone] == nil { bounds[row.timeZone] = plan.bounds(zone: row.timeZone) }
                guard let window = bounds[row.timeZone] ?? nil, row.startsAt < window.to, row.endsAt > window.from else { continue }
                if rooms[row.room] == nil { rooms[row.room] = try await store.room(named: row.room) }
                let full = visibility(requestedBy: row.requestedBy, room: rooms[row.room] ?? nil, caller: caller) == .full
                // Filters on who: only over what the caller reads in full, so
                // that a match never tells about another caller's booking.
                if plan.requestedByOther(caller), !full { continue }
                if let email = plan.attendeeEmail {
                    guard full, let booking = try? ContractJSON.decode(Booking.self, from: Data(row.json)),
                          booking.attendees.contains(where: { Self.normalised($0.email) == email }) else { continue }
                }
                if listed == plan.limit {
                    // One more match: the next page starts right before it.
                    resume = previous
                    break scan
                }
                if listed > 0 { body.append(UInt8(ascii: ",")) }
                if full, Self.isWaitlisted(row.json),
                   let booking = try? ContractJSON.decode(Booking.self, from: Data(row.json)) {
                    // Its current place (v1.2); a waitlisted row is never busy-only here.
                    let placed = try await self.placed(booking, room: rooms[row.room] ?? nil)
                    placed.appendJSON(to: &body)
                } else if full {
                    body += row.json
                } else if let booking = try? ContractJSON.decode(Booking.self, from: Data(row.json)) {
                    body += booking.busyJSON
                } else {
                    continue
                }
                listed += 1
            }
            if rows.count < want { break }
            if scanned >= rowsPerPage {
                resume = after
                break
            }
        }
        body += Array(#"],"nextCursor":"#.utf8)
        if let last = resume {
            let cursor = ListCursor(snapshot: snapshot, startsAt: last.startsAt, id: last.id, key: plan.key,
                                    issuedAt: plan.cursor?.issuedAt ?? now().timeIntervalSince1970)
            // Base64url: nothing in it needs escaping.
            body += Array("\"\(cursor.encoded(signedWith: cursorKey))\",\"ok\":true}".utf8)
        } else {
            body += Array(#"null,"ok":true}"#.utf8)
        }
        return body
    }

    /// Whether a stored booking's JSON has status `waitlisted`: the bytes
    /// `"status":"waitlisted"` can only be the member itself (quotes inside
    /// strings are escaped), so rows are not decoded to find out.
    static func isWaitlisted(_ json: [UInt8]) -> Bool {
        let needle = Array(#""status":"waitlisted""#.utf8)
        guard json.count >= needle.count else { return false }
        return json.indices.dropLast(needle.count - 1).contains { json[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    /// The most booking versions one `booking.list` page reads, whatever
    /// its filters (contract v1.2: pages may be short or empty while
    /// `nextCursor` is not null). Ten of the largest pages' batches.
    public static let maxRowsPerPage = 2000

    static func encoded(_ reply: BookingQueryReply) throws -> [UInt8] {
        [UInt8](try ContractJSON.encode(reply))
    }

    func admit(_ caller: Caller) -> ReplyError? {
        if policy.requireUserID, caller == .anonymous {
            return ReplyError(code: .notPermitted, text: "queries must carry the AMQP user_id property (REQUIRE_USER_ID is set)")
        }
        return nil
    }

    /// How `attendeeEmail` compares: the whole address without regard to
    /// case. (Stored addresses keep the local part's case, as RFC 5321
    /// allows it to matter; for finding one's bookings, a search that
    /// missed `Carol@…` for `carol@…` would only confuse.)
    static func normalised(_ email: String) -> String {
        email.lowercased()
    }
}

/// A `booking.list` checked and resolved: what to read, how many, where
/// the window lies.
struct ListPlan {
    let limit: Int
    let statuses: [BookingStatus]?
    let attendeeEmail: String?
    /// The `requestedBy` filter, when given.
    let requestedBy: String?
    let from: WindowBound
    let to: WindowBound
    /// Instants enclosing the window in every zone (dates: ±14 h).
    let widest: (from: Date, to: Date)
    /// Identifies the query's filters; a cursor only continues its own query.
    let key: String
    let cursor: ListCursor?

    /// UTC offsets reach from −12 h to +14 h: a local date's start lies
    /// within 14 h of its UTC midnight.
    static let zoneSlack: TimeInterval = 14 * 3600

    static func make(_ q: ListBookings, now: Date, cursorKey: CursorKey) -> Result<ListPlan, ReplyError> {
        func invalid(_ field: String, _ text: String) -> Result<ListPlan, ReplyError> {
            .failure(ReplyError(code: .invalidField, text: text, field: field))
        }
        let limit = q.limit ?? ListBookings.defaultLimit
        guard (1...ListBookings.maxLimit).contains(limit) else {
            return invalid("limit", "limit must be 1 to \(ListBookings.maxLimit), got \(limit)")
        }
        var statuses: [BookingStatus]?
        if let names = q.status {
            var parsed: [BookingStatus] = []
            for (index, name) in names.enumerated() {
                guard let status = BookingStatus(rawValue: name) else {
                    return invalid("status[\(index)]", "unknown status '\(name.prefix(40))'; one of \(BookingStatus.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                parsed.append(status)
            }
            guard !parsed.isEmpty else { return invalid("status", "status must name at least one status when given") }
            statuses = parsed
        }
        var email: String?
        if let given = q.attendeeEmail {
            guard let normalised = BookingRules.isValidEmail(given) else {
                return invalid("attendeeEmail", "attendeeEmail is not an e-mail address")
            }
            email = BookingReader.normalised(normalised)
        }
        let lower = Self.earliest(q.from), upper = Self.earliest(q.to)
        let widest = (from: lower.addingTimeInterval(-(Self.isDate(q.from) ? zoneSlack : 0)),
                      to: upper.addingTimeInterval(Self.isDate(q.to) ? zoneSlack : 0))
        guard upper > lower else { return invalid("to", "to (\(q.to.text)) must be after from (\(q.from.text))") }
        if upper.timeIntervalSince(lower) > Double(ListBookings.maxWindowDays) * 86_400 {
            return invalid("to", "the window spans more than \(ListBookings.maxWindowDays) days")
        }
        let key = Self.key(q, statuses: statuses, email: email, limit: limit)
        var cursor: ListCursor?
        if let text = q.cursor {
            guard let decoded = ListCursor(encoded: text, key: cursorKey), decoded.key == key else {
                return invalid("cursor", "cursor is not a nextCursor of this query (same filters and limit)")
            }
            if now.timeIntervalSince1970 - decoded.issuedAt > StoreRules.cursorLifetime {
                return invalid("cursor", "cursor expired (older than \(Int(StoreRules.cursorLifetime / 60)) minutes); list again from the first page")
            }
            cursor = decoded
        }
        return .success(ListPlan(limit: limit, statuses: statuses, attendeeEmail: email, requestedBy: q.requestedBy,
                                 from: q.from, to: q.to,
                                 widest: widest, key: key, cursor: cursor))
    }

    /// Whether the query filters by a requester other than `caller`.
    func requestedByOther(_ caller: Caller) -> Bool {
        guard let requestedBy else { return false }
        return requestedBy != caller.name
    }

    /// The window [from, to) in UNIX seconds for bookings in `zone` (dates
    /// are that zone's local days); nil for a zone this system does not
    /// know, which then matches nothing.
    func bounds(zone: String) -> (from: Int64, to: Int64)? {
        guard let lower = Self.instant(from, zone: zone), let upper = Self.instant(to, zone: zone) else { return nil }
        // Bookings lie on whole seconds: a fraction in an instant bound
        // moves it to the second that includes it.
        return (Int64(lower.timeIntervalSince1970.rounded(.down)), Int64(upper.timeIntervalSince1970.rounded(.up)))
    }

    static func isDate(_ bound: WindowBound) -> Bool {
        if case .date = bound { return true }
        return false
    }

    /// The bound's instant; a date at UTC midnight (for checks of order
    /// and span, which hold in every zone alike).
    static func earliest(_ bound: WindowBound) -> Date {
        switch bound {
        case .instant(let date): return date
        case .date(let text): return ContractFormat.instant(date: text, time: "00:00", timeZone: "UTC") ?? .distantPast
        }
    }

    /// The bound in `zone`: a date is the first instant of that local day.
    static func instant(_ bound: WindowBound, zone: String) -> Date? {
        switch bound {
        case .instant(let date): return date
        case .date(let text):
            guard let tz = TimeZone(identifier: zone), let day = ContractFormat.calendarDate(text) else { return nil }
            // Midnight may not exist (a zone that springs forward at 00:00):
            // the day then starts at the first instant after the gap.
            for minutes in stride(from: 0, to: 24 * 60, by: 15) {
                if let first = LocalTime.instants(year: day.year, month: day.month, day: day.day, minutes: minutes, zone: tz).first {
                    return first
                }
            }
            return nil
        }
    }

    static func key(_ q: ListBookings, statuses: [BookingStatus]?, email: String?, limit: Int) -> String {
        let parts: [String] = [q.from.text, q.to.text, q.room ?? "", statuses.map { $0.map(\.rawValue).joined(separator: ",") } ?? "*",
                               q.requestedBy ?? "", email ?? "", q.seriesId ?? "", String(limit)]
        // The inbox's fingerprint (FNV-1a 64) serves here as well.
        let hash = InboxKey.fingerprint(commandType: BookingQueryType.list.rawValue,
                                        body: Array(parts.joined(separator: "\u{1f}").utf8))
        return String(UInt64(bitPattern: hash), radix: 36)
    }
}

/// The opaque `nextCursor` of `booking.list`: the snapshot, where the last
/// page ended, which query it belongs to, when the listing began.
struct ListCursor: Codable, Equatable {
    /// Snapshot `seq`.
    let snapshot: Int64
    let startsAt: Int64
    let id: String
    /// ``ListPlan/key``.
    let key: String
    /// When the first page was read (UNIX seconds).
    let issuedAt: Double

    private enum CodingKeys: String, CodingKey {
        case snapshot = "s", startsAt = "t", id = "i", key = "k", issuedAt = "a"
    }

    init(snapshot: Int64, startsAt: Int64, id: String, key: String, issuedAt: Double) {
        self.snapshot = snapshot
        self.startsAt = startsAt
        self.id = id
        self.key = key
        self.issuedAt = issuedAt
    }

    /// Base64url (no padding) of its JSON sealed with `key` (``CursorKey``).
    func encoded(signedWith key: CursorKey) -> String {
        Self.base64url(key.seal((try? JSONEncoder().encode(self)) ?? Data()))
    }

    /// The cursor of `text` when `key` sealed it; nil for anything else
    /// (forged, altered, sealed with another key, or not a cursor).
    init?(encoded text: String, key: CursorKey) {
        guard text.utf8.count <= 2000, let box = Self.data(base64url: text), let data = key.open(box),
              let cursor = try? JSONDecoder().decode(ListCursor.self, from: data)
        else { return nil }
        self = cursor
    }

    static func base64url(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func data(base64url text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
