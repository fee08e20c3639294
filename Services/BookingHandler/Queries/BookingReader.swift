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
/// Privacy: an attendee's e-mail and phone are shown only when the booking
/// has no requester, or the caller (the broker-verified `user_id`) is its
/// requester, an approver of its room or an admin; everyone else reads
/// names only, and `attendeeEmail` matches only bookings whose contact
/// details the caller may see.
public struct BookingReader: Sendable {
    let store: BookingStore
    let policy: CallerPolicy
    let now: @Sendable () -> Date

    /// - Parameter now: the clock for cursor expiry.
    public init(store: BookingStore, policy: CallerPolicy, now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = store
        self.policy = policy
        self.now = now
    }

    /// Whether `caller` may see the contact details of `booking` in `room`.
    public func maySeeContacts(_ booking: Booking, room: Room?, caller: Caller) -> Bool {
        guard let owner = booking.requestedBy, !owner.isEmpty else { return true }
        guard let name = caller.name else { return false }
        return name == owner || policy.administrators.contains(name) || (room?.approvers ?? []).contains(name)
    }

    /// `booking.get`: the booking (names only when the caller may not see
    /// contacts), or 2001.
    public func get(_ query: GetBooking, caller: Caller) async throws -> BookingQueryReply {
        if let refusal = admit(caller) { return .error(refusal) }
        guard !query.bookingId.isEmpty, let booking = try await store.booking(id: query.bookingId) else {
            return .error(ReplyError(code: .bookingNotFound, text: "booking '\(query.bookingId.prefix(100))' not found",
                                     field: "bookingId"))
        }
        let room = try await store.room(named: booking.room)
        return .booking(BookingView(booking, contacts: maySeeContacts(booking, room: room, caller: caller)))
    }

    /// `booking.list`: one page. The first page fixes the snapshot (the
    /// newest committed version); its cursor carries it, so the following
    /// pages return every booking that matched then exactly once, as it was
    /// then, whatever changed in between.
    public func list(_ query: ListBookings, caller: Caller) async throws -> BookingQueryReply {
        if let refusal = admit(caller) { return .error(refusal) }
        let plan: ListPlan
        switch ListPlan.make(query, now: now()) {
        case .failure(let error): return .error(error)
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
        if query.seriesId != nil {
            // No series exist yet (contract v1.1, "Recurring bookings").
            return .bookings([], nextCursor: nil)
        }
        var page: [BookingView] = []
        var rooms: [String: Room?] = [:]
        var lastReturned: (startsAt: Int64, id: String)?
        var more = false
        // Rows the window's zones or the e-mail filter drop are read past in
        // batches until the page is full or the window is exhausted.
        let batch = min(plan.limit * 2 + 1, 2001)
        scan: while true {
            let rows = try await store.listVersions(at: snapshot, from: plan.widest.from, to: plan.widest.to, room: query.room,
                                                    statuses: plan.statuses, requestedBy: query.requestedBy,
                                                    after: after, limit: batch)
            for row in rows {
                after = (row.startsAt, row.booking.id)
                guard plan.overlaps(row.booking) else { continue }
                if rooms[row.booking.room] == nil { rooms[row.booking.room] = try await store.room(named: row.booking.room) }
                let contacts = maySeeContacts(row.booking, room: rooms[row.booking.room] ?? nil, caller: caller)
                if let email = plan.attendeeEmail {
                    guard contacts, row.booking.attendees.contains(where: { Self.normalised($0.email) == email }) else { continue }
                }
                if page.count == plan.limit {
                    more = true
                    break scan
                }
                page.append(BookingView(row.booking, contacts: contacts))
                lastReturned = (row.startsAt, row.booking.id)
            }
            if rows.count < batch { break }
        }
        let next = more ? lastReturned.map {
            ListCursor(snapshot: snapshot, startsAt: $0.startsAt, id: $0.id, key: plan.key,
                       issuedAt: plan.cursor?.issuedAt ?? now().timeIntervalSince1970).encoded
        } : nil
        return .bookings(page, nextCursor: next)
    }

    private func admit(_ caller: Caller) -> ReplyError? {
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

    static func make(_ q: ListBookings, now: Date) -> Result<ListPlan, ReplyError> {
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
            guard let decoded = ListCursor(encoded: text), decoded.key == key else {
                return invalid("cursor", "cursor is not a nextCursor of this query (same filters and limit)")
            }
            if now.timeIntervalSince1970 - decoded.issuedAt > BookingStore.cursorLifetime {
                return invalid("cursor", "cursor expired (older than \(Int(BookingStore.cursorLifetime / 60)) minutes); list again from the first page")
            }
            cursor = decoded
        }
        return .success(ListPlan(limit: limit, statuses: statuses, attendeeEmail: email, from: q.from, to: q.to,
                                 widest: widest, key: key, cursor: cursor))
    }

    /// Whether `booking` overlaps [from, to), dates taken in the booking's zone.
    func overlaps(_ booking: Booking) -> Bool {
        guard let startsAt = ContractFormat.parseTimestamp(booking.startsAt),
              let endsAt = ContractFormat.parseTimestamp(booking.endsAt),
              let lower = Self.instant(from, zone: booking.timeZone),
              let upper = Self.instant(to, zone: booking.timeZone) else { return false }
        return startsAt < upper && endsAt > lower
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

    /// Base64url of its JSON, no padding.
    var encoded: String {
        let data = (try? JSONEncoder().encode(self)) ?? Data()
        return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    init?(encoded text: String) {
        guard text.utf8.count <= 2000 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), let cursor = try? JSONDecoder().decode(ListCursor.self, from: data)
        else { return nil }
        self = cursor
    }
}
