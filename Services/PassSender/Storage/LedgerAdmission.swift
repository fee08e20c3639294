import BookingContracts
import Foundation

/// Admission: what a booking event or retry message claims (see docs/pass-sender.md, "Kinds" and "Delivery and the ledger").
extension PassLedger {
    // MARK: Admission

    /// Admits a booking event (`booking.confirmed`, `.rescheduled`,
    /// `.updated`, `.cancelled`, `.rejected`) and claims what it makes the
    /// pass sender send, in one transaction (docs/pass-sender.md, "Kinds"):
    ///
    /// - dropped when a newer version is known, or when the booking was
    ///   cancelled (a redelivered cancellation of the same version resumes
    ///   its notices);
    /// - records the version (and, when it moves the booking or confirms
    ///   other times, that the times hold from it), the snapshot with
    ///   `previous`, and marks older versions' unsent work `dropped`: this
    ///   version decides (except `removed` and `rescheduled` notices still
    ///   owed, ``supersede(_:booking:keepMovesFrom:claimer:)``);
    /// - claims per kind the recipients the contract names, each by
    ///   (booking, version, kind, normalised e-mail); a row that exists is
    ///   left alone unless it is `attempting` (a previous process died
    ///   sending it). Passes only for a confirmed booking.
    public func admit(event type: EventType, booking: Booking, previous: BookingSnapshot?) async throws -> Admission {
        try await admitCollecting(event: type, booking: booking, previous: previous).admission
    }

    /// An admission, and the booking's outbox rows that earlier messages
    /// left unpublished (a crash or a failed publish between commit and
    /// confirm), read in the admission's own transaction — the dispatcher
    /// hands them on to be published before this message's follow-ups, so
    /// the pass sender needs no read of its own per message for them.
    public struct Admitted: Sendable {
        public var admission: Admission
        /// Oldest first.
        public var leftovers: [OutboxRow]
    }

    /// ``admit(event:booking:previous:)`` and the booking's leftovers (``Admitted``).
    public func admitCollecting(event type: EventType, booking: Booking, previous: BookingSnapshot?) async throws -> Admitted {
        let claimer = Claimer(owner: owner, lease: claimLease, now: now())
        return try await storeWrite("admit event", lockKey: booking.id) { db in
            Admitted(admission: try Self.admission(db, event: type, booking: booking, previous: previous, claimer: claimer),
                     leftovers: try Self.unpublished(db, bookingId: booking.id, limit: Self.leftoverLimit))
        }
    }

    /// No bound in practice: a booking's outbox rows are a few per attendee and message.
    static let leftoverLimit = Int(Int32.max)

    private static func admission(_ db: any LedgerSQL, event type: EventType, booking: Booking, previous: BookingSnapshot?,
                                  claimer: Claimer) throws -> Admission {
        var previous = previous
        let now = claimer.now
        let isEnd = type == .bookingCancelled || type == .bookingRejected
        let row = try db.row("SELECT latestVersion, cancelled, timesVersion FROM booking WHERE id = ?", booking.id)
        let latest = row?.int("latestVersion") ?? 0
        let drop: DropReason? = if let row, row.bool("cancelled") == true, !(isEnd && latest == booking.version) { .cancelled }
            else if latest > booking.version { .stale } else { nil }
        if let drop {
            guard type == .bookingUpdated else { return .dropped(drop) }
            return try Self.lateRemovals(db, booking: booking, previous: previous, latestVersion: latest, claimer: claimer,
                                         otherwise: drop)
        }
        // An older version's work another instance is sending now: this
        // version waits for it. Dropping it under that instance would let
        // its pass go out unseen by this version (no `cancelled` or
        // `rescheduled` notice for it, or an old pass after the new one).
        try Self.olderClaimsHeld(db, bookingId: booking.id, below: booking.version, claimer: claimer)
        var timesVersion = row?.int("timesVersion") ?? 0
        // An update or an approval whose times are not those the last
        // passes were for: a reschedule between them was not admitted here
        // (another instance or a requeue took it out of order; arriving
        // later it is stale). The event tells the old pass holders and
        // sends new passes in its place, the old times as its `previous`.
        // The same event coming again finds the old times in what it
        // stored as its `previous` the first time.
        let mayStandIn = type == .bookingUpdated || (type == .bookingConfirmed && booking.status == .confirmed)
        let timed = (type == .bookingUpdated || type == .bookingConfirmed) && timesVersion > 0 && timesVersion < booking.version
            ? try Self.snapshot(db, bookingId: booking.id, version: timesVersion) : nil
        let timesDiffer = timed.map { !Self.sameTimes(BookingSnapshot($0), booking) } ?? false
        var moved = false
        // Only with the event's `previous`: without it the event names no
        // one it removed, and the older snapshot's attendees would.
        if mayStandIn, var old = previous, let timed, timesDiffer {
            (old.date, old.start, old.end, old.startsAt, old.endsAt) = (timed.date, timed.start, timed.end, timed.startsAt,
                                                                        timed.endsAt)
            previous = old
            moved = true
        } else if mayStandIn, row != nil, timesVersion == booking.version,
                  let stored = try Self.storedPrevious(db, bookingId: booking.id, version: booking.version),
                  !Self.sameTimes(stored, booking) {
            previous = stored
            moved = true
        }
        // An approval of the same times leaves the version of the last
        // move: a `rescheduled` notice it still owes is kept (supersede).
        let approvesSameTimes = type == .bookingConfirmed && timed != nil && !timesDiffer
        if (type == .bookingConfirmed && !approvesSameTimes) || type == .bookingRescheduled || timesVersion == 0 || moved {
            timesVersion = booking.version
        }
        // `OR` of two booleans: SQLite's integers and PostgreSQL's
        // booleans alike (a cancellation is for ever).
        try db.execute("""
            INSERT INTO booking (id, latestVersion, cancelled, timesVersion, updatedAt) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET latestVersion = excluded.latestVersion,
                                          cancelled = (booking.cancelled OR excluded.cancelled),
                                          timesVersion = excluded.timesVersion, updatedAt = excluded.updatedAt
            """, booking.id, booking.version, isEnd, timesVersion, now)
        try Self.storeSnapshot(db, booking, previous)
        try Self.storeOccurrence(db, booking)
        try Self.supersede(db, booking: booking, keepMovesFrom: isEnd ? nil : timesVersion, claimer: claimer)

        let confirmed = booking.status == .confirmed
        var jobs: [NoticeJob] = []
        func claim(_ kind: NoticeKind, where wanted: (Attendee) throws -> Bool) throws {
            let list = NoticeJob.recipients(kind, booking, previous)
            let indexes = try list.indices.filter { try wanted(list[$0]) }
            let work = try Self.claim(db, booking: booking, kind: kind, recipients: list, indexes: indexes, claimer: claimer)
            jobs.append(NoticeJob(kind: kind, booking: booking, previous: previous, work: work))
        }
        // A reschedule this event stands in for: who held a pass is told.
        func claimMoved() throws {
            guard moved else { return }
            let held = try Self.passHolders(db, bookingId: booking.id, from: 0, below: booking.version)
            try claim(.rescheduled) { held.contains(Self.normalised($0.email)) }
        }
        // Who was ever sent a pass: a query only the events that notify need.
        func passesEverSent() throws -> Set<String> { try Self.passHolders(db, bookingId: booking.id, from: 0, below: .max) }
        switch type {
        case .bookingCancelled, .bookingRejected:
            let everHeld = try passesEverSent()
            try claim(.cancelled) { everHeld.contains(Self.normalised($0.email)) }
        case .bookingRescheduled:
            // Passes for the previous time are void; who held one is told.
            let held = try Self.passHolders(db, bookingId: booking.id, from: 0, below: booking.version)
            try claim(.rescheduled) { held.contains(Self.normalised($0.email)) }
            if confirmed { try claim(.pass) { _ in true } }
        case .bookingConfirmed:
            try claimMoved()
            if confirmed { try claim(.pass) { _ in true } }
        case .bookingUpdated:
            try claimMoved()
            let everHeld = try passesEverSent()
            let current = Set(booking.attendees.map { Self.normalised($0.email) })
            try claim(.removed) { !current.contains(Self.normalised($0.email)) && everHeld.contains(Self.normalised($0.email)) }
            if confirmed {
                // Added attendees, and anyone whose pass for these times
                // has not gone out (its older version's retry is void now)
                // or was voided by a `removed` notice since (removed, then
                // added again).
                let valid = try Self.passHolders(db, bookingId: booking.id, from: timesVersion, below: .max,
                                                 unlessRemovedSince: true)
                try claim(.pass) { !valid.contains(Self.normalised($0.email)) }
            }
        default:
            throw UnusableMessage(description: "event type \(type.rawValue) is not handled by the pass sender")
        }
        if !confirmed && !isEnd && jobs.allSatisfy(\.work.isEmpty) { return .dropped(.notConfirmed) }
        return .proceed(jobs.filter { !$0.work.isEmpty })
    }

    /// Whether `a` is for the same local and absolute times as `b`.
    static func sameTimes(_ a: BookingSnapshot, _ b: Booking) -> Bool {
        a.date == b.date && a.start == b.start && a.end == b.end && a.startsAt == b.startsAt && a.endsAt == b.endsAt
    }

    /// The `previous` the ledger stored with `version`'s snapshot, if any.
    static func storedPrevious(_ db: any LedgerSQL, bookingId: String, version: Int) throws -> BookingSnapshot? {
        try db.row("SELECT previous FROM snapshot WHERE bookingId = ? AND version = ?", bookingId, version)
            .flatMap { $0.data("previous") }
            .flatMap { try? ContractJSON.decode(BookingSnapshot.self, from: $0) }
    }

    /// An update that arrives after a newer version (or the cancellation)
    /// was admitted — two instances, or a redelivery, took them out of
    /// order. The newer version decides everything else, but only this one
    /// names the people it removed: those who held a pass and are neither
    /// back among the newest version's attendees nor removed again since
    /// (that removal's notice tells them) are still told, as an operator's
    /// retry of an overtaken removal would (``admission(_:retry:claimer:)``).
    private static func lateRemovals(_ db: any LedgerSQL, booking: Booking, previous: BookingSnapshot?, latestVersion: Int,
                                     claimer: Claimer, otherwise drop: DropReason) throws -> Admission {
        guard previous != nil, let latest = try Self.snapshot(db, bookingId: booking.id, version: latestVersion) else {
            return .dropped(drop)
        }
        let current = Set(booking.attendees.map { Self.normalised($0.email) })
        let backAtLatest = Set(latest.attendees.map { Self.normalised($0.email) })
        let everHeld = try Self.passHolders(db, bookingId: booking.id, from: 0, below: .max)
        let list = NoticeJob.recipients(.removed, booking, previous)
        let indexes = try list.indices.filter { index in
            let email = Self.normalised(list[index].email)
            guard !current.contains(email), everHeld.contains(email), !backAtLatest.contains(email) else { return false }
            return try !Self.removedSince(db, bookingId: booking.id, email: email, after: booking.version)
        }
        guard !indexes.isEmpty else { return .dropped(drop) }
        // Kept for a retry message that carries no booking (the back-off's).
        try Self.storeSnapshot(db, booking, previous)
        let work = try Self.claim(db, booking: booking, kind: .removed, recipients: list, indexes: indexes, claimer: claimer)
        guard !work.isEmpty else { return .dropped(drop) }
        return .proceed([NoticeJob(kind: .removed, booking: booking, previous: previous, work: work)])
    }

    /// Throws ``ClaimHeld`` when a version below `version` of the booking
    /// has work another instance claimed and whose lease still runs.
    static func olderClaimsHeld(_ db: any LedgerSQL, bookingId: String, below version: Int, claimer: Claimer) throws {
        let held = try db.rows("""
            SELECT MAX(leaseUntil) AS held_until FROM notice
            WHERE bookingId = ? AND version < ? AND status = 'attempting'
              AND claimedBy IS NOT NULL AND claimedBy <> ? AND leaseUntil > ?
            """, bookingId, version, claimer.owner, claimer.now)
        if let until = held.first?.double("held_until") {
            throw ClaimHeld(bookingId: bookingId, until: Date(timeIntervalSince1970: until))
        }
    }

    /// Thrown when a retry message cannot be used (poison).
    public struct UnusableMessage: Error, CustomStringConvertible {
        public let description: String
    }

    /// Admits a retry message. A back-off retry claims a row only when the
    /// ledger agrees on its attempt count (so a second delivery of the same
    /// message sends nothing); an operator retry claims a row only when it
    /// is `failed` (resetting its attempts) or was being attempted for that
    /// same request when a previous process died. Delivered rows are never
    /// claimed. Dropped when a newer version of the booking is known, or,
    /// except for `cancelled` notices, when it was cancelled — except a
    /// `removed` notice, which still goes to those not back among the
    /// newest version's attendees, and a `rescheduled` notice while no
    /// newer version moved the booking again (nor cancelled it), which
    /// still goes to those among the newest version's attendees.
    public func admit(retry message: PassRetryMessage) async throws -> Admission {
        try await admitCollecting(retry: message).admission
    }

    /// ``admit(retry:)`` and the booking's leftovers (``Admitted``). An
    /// unusable message throws ``UnusableMessage`` and returns no leftovers.
    public func admitCollecting(retry message: PassRetryMessage) async throws -> Admitted {
        let claimer = Claimer(owner: owner, lease: claimLease, now: now())
        return try await storeWrite("admit retry", lockKey: message.bookingId) { db in
            Admitted(admission: try Self.admission(db, retry: message, claimer: claimer),
                     leftovers: try Self.unpublished(db, bookingId: message.bookingId, limit: Self.leftoverLimit))
        }
    }

    private static func admission(_ db: any LedgerSQL, retry message: PassRetryMessage, claimer: Claimer) throws -> Admission {
        let now = claimer.now
        let kind = message.noticeKind
        let bookingRow = try db.row("SELECT latestVersion, cancelled, timesVersion FROM booking WHERE id = ?", message.bookingId)
        // Who is an attendee again at the newest version: a `removed`
        // notice overtaken by a newer version (or the cancellation) still
        // goes to everyone else, since no later notice names them.
        var backAtLatest: Set<String> = []
        var overtaken = false
        // A `rescheduled` notice overtaken by a newer version of the same
        // times still goes to those of the newest version's attendees it
        // was owed to: no later notice tells them their old pass is void.
        var movedAndKept: Booking?
        if let bookingRow {
            let latestVersion = bookingRow.int("latestVersion") ?? 0
            let drop: DropReason? = bookingRow.bool("cancelled") == true && kind != .cancelled ? .cancelled
                : latestVersion > message.version ? .stale : nil
            if let drop {
                // Moved since (a reschedule, or an event that stood in
                // for one): that move's notice told them.
                let movedSince = (bookingRow.int("timesVersion") ?? 0) > message.version
                guard kind == .removed || (kind == .rescheduled && drop == .stale && !movedSince),
                      let latest = try Self.snapshot(db, bookingId: message.bookingId, version: latestVersion) else {
                    return .dropped(drop)
                }
                if kind == .removed {
                    backAtLatest = Set(latest.attendees.map { Self.normalised($0.email) })
                } else {
                    movedAndKept = latest
                }
                overtaken = true
            }
        }
        var booking = message.booking
        var previous = message.previous
        if booking == nil, let row = try db.row("SELECT json, previous FROM snapshot WHERE bookingId = ? AND version = ?",
                                                message.bookingId, message.version) {
            booking = try? ContractJSON.decode(Booking.self, from: row.data("json") ?? Data())
            if previous == nil, let data = row.data("previous") {
                previous = try? ContractJSON.decode(BookingSnapshot.self, from: data)
            }
        }
        guard let booking, booking.id == message.bookingId, booking.version == message.version else {
            throw UnusableMessage(description: "no snapshot of booking \(message.bookingId) v\(message.version) (neither in the message nor in the ledger)")
        }
        if (kind == .rescheduled || kind == .removed) && previous == nil {
            throw UnusableMessage(description: "a \(kind.rawValue) retry of booking \(booking.id) v\(booking.version) without the booking's previous state")
        }
        // Moved again since: the newer move's notice tells them.
        if let latest = movedAndKept, !Self.sameTimes(BookingSnapshot(latest), booking) { return .dropped(.stale) }
        let stillAttending = Set(movedAndKept?.attendees.map { Self.normalised($0.email) } ?? [])
        if bookingRow == nil {
            try db.execute("""
                INSERT INTO booking (id, latestVersion, cancelled, timesVersion, updatedAt) VALUES (?, ?, ?, ?, ?)
                """, booking.id, booking.version, kind == .cancelled, booking.version, now)
        }
        // Untrusted counts: an attempt count past any PASS_MAX_ATTEMPTS
        // (1...100) would overflow or dodge the limit, a repeated index
        // would send one attendee twice in a call.
        if let bad = message.passes.first(where: { !(0...100).contains($0.attempts) }) {
            throw UnusableMessage(description: "attempts \(bad.attempts) of attendee \(bad.attendeeIndex) is outside 0...100")
        }
        if Set(message.passes.map(\.attendeeIndex)).count != message.passes.count {
            throw UnusableMessage(description: "an attendee index is listed twice")
        }
        try Self.storeSnapshot(db, booking, previous)
        try Self.storeOccurrence(db, booking)
        let list = NoticeJob.recipients(kind, booking, previous)
        var work: [PassWork] = []
        for p in message.passes.sorted(by: { $0.attendeeIndex < $1.attendeeIndex }) {
            guard list.indices.contains(p.attendeeIndex) else {
                throw UnusableMessage(description: "attendee index \(p.attendeeIndex) is not in booking \(booking.id) v\(booking.version) (\(kind.rawValue))")
            }
            let email = Self.normalised(list[p.attendeeIndex].email)
            if backAtLatest.contains(email) { continue }
            if movedAndKept != nil && !stillAttending.contains(email) { continue }
            // Added back and removed again since: the newer removal's notice tells them.
            if overtaken, try Self.removedSince(db, bookingId: booking.id, email: email, after: message.version) { continue }
            let key = RowKey(bookingId: booking.id, version: booking.version, kind: kind, email: email)
            let existing = try Self.row(db, key)
            switch message.kind {
            case .backoff:
                if let existing {
                    guard existing.status == .scheduled || existing.status == .attempting,
                          existing.attempts == p.attempts else { continue }
                    if existing.status == .attempting { try claimer.mayTakeOver(existing) }
                    try Self.setStatus(db, key, .attempting, now: now)
                    try claimer.stamp(db, key)
                    work.append(Self.work(existing, index: p.attendeeIndex))
                } else {
                    try db.execute("""
                        INSERT INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, firstFailureAt,
                                            lastFailureAt, lastErrorCode, lastErrorText, updatedAt, claimedBy, leaseUntil)
                        VALUES (?, ?, ?, ?, ?, 'attempting', ?, ?, ?, ?, ?, ?, ?, ?)
                        """, booking.id, booking.version, kind.rawValue, email, p.attendeeIndex, p.attempts,
                        p.firstFailureAt, p.lastFailureAt, p.lastErrorCode, p.lastErrorText, now, claimer.owner, claimer.until)
                    work.append(p)
                }
            case .operator:
                let token = message.retryToken ?? ""
                if let existing {
                    let storedToken = try db.rows(
                        "SELECT retryToken FROM notice WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                        key.arguments).first?.string("retryToken")
                    if existing.status == .failed && (token.isEmpty || storedToken != token) {
                        try db.execute("""
                            UPDATE notice SET status = 'attempting', attempts = 0, firstFailureAt = NULL, lastFailureAt = NULL,
                                   lastErrorCode = NULL, lastErrorText = NULL, retryToken = ?, updatedAt = ?
                            WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?
                            """, [.text(token), .double(now)] + key.arguments)
                        try claimer.stamp(db, key)
                        work.append(PassWork(attendeeIndex: p.attendeeIndex, attempts: 0))
                    } else if existing.status == .attempting && !token.isEmpty && storedToken == token {
                        try claimer.mayTakeOver(existing)
                        try claimer.stamp(db, key)
                        work.append(Self.work(existing, index: p.attendeeIndex))
                    }
                } else {
                    try db.execute("""
                        INSERT INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, retryToken, updatedAt,
                                            claimedBy, leaseUntil)
                        VALUES (?, ?, ?, ?, ?, 'attempting', 0, ?, ?, ?, ?)
                        """, booking.id, booking.version, kind.rawValue, email, p.attendeeIndex, token, now,
                        claimer.owner, claimer.until)
                    work.append(PassWork(attendeeIndex: p.attendeeIndex, attempts: 0))
                }
            }
        }
        return .proceed([NoticeJob(kind: kind, booking: booking, previous: previous, work: work)])
    }

    /// Claims `indexes` of `recipients` for `kind` at the booking's version:
    /// a new row as `attempting`, or an `attempting` row of a process that
    /// died; anything else is someone else's (or done).
    static func claim(_ db: any LedgerSQL, booking: Booking, kind: NoticeKind, recipients: [Attendee], indexes: [Int],
                      claimer: Claimer) throws -> [PassWork] {
        var work: [PassWork] = []
        var seen = Set<String>()
        for index in indexes {
            let email = normalised(recipients[index].email)
            // Two entries differing only in case are one person: told once.
            guard seen.insert(email).inserted else { continue }
            let key = RowKey(bookingId: booking.id, version: booking.version, kind: kind, email: email)
            if let existing = try row(db, key) {
                if existing.status == .attempting {
                    try claimer.mayTakeOver(existing)
                    try claimer.stamp(db, key)
                    work.append(self.work(existing, index: index))
                }
            } else {
                try db.execute("""
                    INSERT INTO notice (bookingId, version, kind, email, attendeeIndex, status, attempts, updatedAt, claimedBy, leaseUntil)
                    VALUES (?, ?, ?, ?, ?, 'attempting', 0, ?, ?, ?)
                    """, booking.id, booking.version, kind.rawValue, email, index, claimer.now, claimer.owner, claimer.until)
                work.append(PassWork(attendeeIndex: index, attempts: 0))
            }
        }
        return work
    }

    /// Whether `email` has a `removed` notice of a version after `version`
    /// that is not dropped (sent, or still to be sent).
    static func removedSince(_ db: any LedgerSQL, bookingId: String, email: String, after version: Int) throws -> Bool {
        try db.row("""
            SELECT 1 AS one FROM notice WHERE bookingId = ? AND email = ? AND kind = 'removed' AND version > ? AND status <> 'dropped'
            """, bookingId, email, version) != nil
    }

    /// Normalised e-mails with a delivered pass of a version in `from..<below`;
    /// with `unlessRemovedSince`, not counting a pass that a later `removed`
    /// notice (sent or still to be sent) declared void.
    static func passHolders(_ db: any LedgerSQL, bookingId: String, from: Int, below: Int,
                            unlessRemovedSince: Bool = false) throws -> Set<String> {
        Set(try db.rows("""
            SELECT p.email FROM notice p
            WHERE p.bookingId = ? AND p.kind = 'pass' AND p.status = 'delivered' AND p.version >= ? AND p.version < ?
              AND NOT (? AND EXISTS (SELECT 1 FROM notice r WHERE r.bookingId = p.bookingId AND r.email = p.email
                                     AND r.kind = 'removed' AND r.version > p.version AND r.status != 'dropped'))
            """, bookingId, from, below, unlessRemovedSince).compactMap { $0.string("email") })
    }
}

/// Who claims rows in one admission, and until when (see ``PassLedger``,
/// "Several instances on one ledger").
struct Claimer: Sendable {
    let owner: String
    let now: Double
    let until: Double

    init(owner: String, lease: TimeInterval, now: Date) {
        self.owner = owner
        self.now = now.timeIntervalSince1970
        until = self.now + lease
    }

    /// Throws ``PassLedger/ClaimHeld`` when `existing` (an `attempting` row)
    /// is another instance's claim whose lease still runs. Rows of this
    /// process, rows claimed before claims were recorded, and rows whose
    /// claimer let the lease run out (it died) may be taken over.
    func mayTakeOver(_ existing: PassRecord) throws {
        guard let by = existing.claimedBy, by != owner, let lease = existing.leaseUntil, lease > now else { return }
        throw PassLedger.ClaimHeld(bookingId: existing.bookingId, until: Date(timeIntervalSince1970: lease))
    }

    /// Marks the row as this instance's claim.
    func stamp(_ db: any LedgerSQL, _ key: PassLedger.RowKey) throws {
        try db.execute("UPDATE notice SET claimedBy = ?, leaseUntil = ? WHERE bookingId = ? AND version = ? AND kind = ? AND email = ?",
                       [.text(owner), .double(until)] + key.arguments)
    }
}
