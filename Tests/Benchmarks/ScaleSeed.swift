import BookingContracts
import BookingHandler
import Foundation
import TestSupport

/// A large office's booking history, written through the handler's own
/// store API (`StoreTransaction.save` and `insertSeries` inside
/// `TimerStore.transaction`): the same statements, the same encoders
/// (`EncodedBooking`) and so the same rows a command writes, with no
/// inbox or outbox rows — those of commands older than the retention
/// period are pruned, so a store holding this history holds none.
///
/// The shape, deterministic for a seed:
/// - `rooms` rooms named `Room BB-RR` (building `BB`, 50 rooms each), so
///   `name: "Room 07-"` picks 50 of them;
/// - two years of weekdays, 584 days back to 146 days ahead (nothing
///   today or tomorrow, so no timer of the seeded bookings is due while a
///   benchmark runs); five two-hour windows a day from 08:00, each booking
///   30–90 minutes inside one (07:00–08:00 and 18:00–19:00 stay free for
///   the benchmark's own creates);
/// - about a fifth in weekly series of 4–12 occurrences (3 % of draws
///   start one), the rest single;
/// - past: 78 % completed, 14 % cancelled (some released for no check-in),
///   5 % rejected, 3 % cancelled by the requester; ahead: 80 % confirmed,
///   8 % pending, 12 % cancelled;
/// - 1–8 attendees, requesters out of 5,000 people, requester 0 being
///   `ownUser` (the benchmark's broker user, so that it can list its own).
struct ScaleSeed {
    var bookings: Int
    var rooms: Int
    var ownUser: String
    var seed: UInt64 = 42

    static let pastDays = 584
    static let futureDays = 146
    static let windowsPerDay = 5
    static let requesters = 5_000
    static let zone = "Europe/Berlin"

    static func roomName(_ index: Int) -> String { String(format: "Room %02d-%02d", index / 50, index % 50) }

    /// The rooms as the handler's `ROOMS_FILE` registers them.
    static func roomList(_ count: Int) -> [RegisterRoom] {
        (0..<count).map { i in
            RegisterRoom(name: roomName(i), location: "Building \(i / 50), floor \(i % 50 / 10)",
                         equipment: i % 3 == 0 ? ["beamer", "video"] : ["tv"], size: "\(12 + i % 40)m2", capacity: 4 + i % 16)
        }
    }

    func requester(_ index: Int) -> String { index == 0 ? ownUser : String(format: "person-%04d", index) }

    /// Every weekday of the span, as (local date, days from today).
    static func days(from today: Date = Date()) -> [(date: String, offset: Int)] {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: zone)!
        let start = calendar.startOfDay(for: today)
        var result: [(String, Int)] = []
        for offset in -pastDays...futureDays where offset < 0 || offset >= 2 {
            let day = calendar.date(byAdding: .day, value: offset, to: start)!
            let weekday = calendar.component(.weekday, from: day)
            guard weekday != 1 && weekday != 7 else { continue }
            let c = calendar.dateComponents([.year, .month, .day], from: day)
            result.append((String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!), offset))
        }
        return result
    }

    /// One booking to write, and the series to record first when it is
    /// the first occurrence of one.
    struct Item {
        var booking: Booking
        var startsAt: Date
        var endsAt: Date
        var newSeries: (id: String, count: Int, requestedBy: String)?
    }

    /// Generates the history room by room and hands it to `write` in
    /// batches of about `batch` bookings; returns how many were written.
    func generate(batch: Int = 5_000, _ write: ([Item]) async throws -> Void) async throws -> Int {
        var rng = SplitMix(seed: seed)
        let days = Self.days()
        let weeks = (days.count + 4) / 5
        let slotCount = days.count * Self.windowsPerDay
        var instants: [Int: Date] = [:]
        func instant(_ day: Int, _ minute: Int) -> Date {
            let key = day * 1440 + minute
            if let known = instants[key] { return known }
            let value = ContractFormat.instant(date: days[day].date, time: hhmm(minute), timeZone: Self.zone)!
            instants[key] = value
            return value
        }
        var pending: [Item] = []
        var written = 0
        for room in 0..<rooms {
            let target = bookings / rooms + (room < bookings % rooms ? 1 : 0)
            guard target > 0 else { continue }
            var taken = [Bool](repeating: false, count: slotCount)
            var count = 0
            let name = Self.roomName(room)
            func make(slot: Int, requester: String, series: SeriesRef?, title: String) -> Item {
                let day = slot / Self.windowsPerDay, window = slot % Self.windowsPerDay
                let begin = (8 + 2 * window) * 60 + Int(rng.next() % 2) * 30
                let length = [30, 60, 60, 90][Int(rng.next() % 4)]
                let end = min(begin + length, (10 + 2 * window) * 60)
                let past = days[day].offset < 0
                let roll = Int(rng.next() % 100)
                var status = BookingStatus.confirmed, version = 2
                var reason: String?
                if past {
                    switch roll {
                    case ..<78: status = .completed; version = 4
                    case ..<88: status = .cancelled; version = 3
                    case ..<92: status = .cancelled; version = 3; reason = "released: nobody checked in"
                    case ..<97: status = .rejected; version = 2; reason = "room needed for maintenance"
                    default: status = .cancelled; version = 2; reason = "plans changed"
                    }
                } else {
                    switch roll {
                    case ..<80: status = .confirmed; version = 2
                    case ..<88: status = .pending; version = 1
                    default: status = .cancelled; version = 3; reason = "plans changed"
                    }
                }
                let attendees = (0..<(1 + Int(rng.next() % 8))).map { k -> Attendee in
                    let person = Int(rng.next() % 20_000)
                    return Attendee(name: "Person \(person)", email: "person\(person)@example.com",
                                    phone: String(format: "+49170%07d", person * 7 + k))
                }
                let startsAt = instant(day, begin), endsAt = instant(day, end)
                let booking = Booking(
                    id: uuid(&rng), room: name, date: days[day].date, start: hhmm(begin), end: hhmm(end),
                    timeZone: Self.zone, startsAt: ContractFormat.timestamp(startsAt), endsAt: ContractFormat.timestamp(endsAt),
                    title: title, description: rng.next() % 4 == 0 ? "Agenda in the shared folder" : nil, status: status,
                    attendees: attendees, requestedBy: requester, version: version, cancelReason: status == .cancelled || status == .rejected ? reason : nil,
                    series: series)
                return Item(booking: booking, startsAt: startsAt, endsAt: endsAt, newSeries: nil)
            }
            var attempts = 0
            while count < target, attempts < target * 20 {
                attempts += 1
                let requester = self.requester(Int(rng.next() % UInt64(Self.requesters)))
                if rng.next() % 100 < 3, target - count >= 4 {
                    // A weekly series: the same window of the same weekday, week after week.
                    let length = min(target - count, 4 + Int(rng.next() % 9))
                    let weekday = Int(rng.next() % 5), window = Int(rng.next() % UInt64(Self.windowsPerDay))
                    let firstWeek = Int(rng.next() % UInt64(max(1, weeks - length)))
                    let slots = (firstWeek..<(firstWeek + length)).map { ($0 * 5 + weekday) * Self.windowsPerDay + window }
                        .filter { $0 < slotCount && !taken[$0] }
                    guard slots.count == length else { continue }
                    let id = uuid(&rng)
                    for (index, slot) in slots.enumerated() {
                        taken[slot] = true
                        var item = make(slot: slot, requester: requester,
                                        series: SeriesRef(id: id, index: index, count: length, version: 1), title: "Weekly sync")
                        if index == 0 { item.newSeries = (id, length, requester) }
                        pending.append(item)
                    }
                    count += length
                } else {
                    let slot = Int(rng.next() % UInt64(slotCount))
                    guard !taken[slot] else { continue }
                    taken[slot] = true
                    let title = "Meeting \(written + pending.count)"
                    pending.append(make(slot: slot, requester: requester, series: nil, title: title))
                    count += 1
                }
            }
            if pending.count >= batch {
                try await write(pending)
                written += pending.count
                pending.removeAll(keepingCapacity: true)
            }
        }
        if !pending.isEmpty {
            try await write(pending)
            written += pending.count
        }
        return written
    }

    /// Writes the history into `store` through its own transactions.
    func write(into store: any TimerStore, progress: ((Int) -> Void)? = nil) async throws -> Int {
        var done = 0
        return try await generate { items in
            try await store.transaction { tx in
                for item in items {
                    if let series = item.newSeries {
                        try tx.insertSeries(id: series.id, room: item.booking.room, requestedBy: series.requestedBy,
                                            recurrence: Recurrence(.weekly, count: series.count), onConflict: .reject,
                                            count: series.count, now: item.startsAt.addingTimeInterval(-14 * 86_400))
                    }
                    try tx.save(EncodedBooking(item.booking), startsAt: item.startsAt, endsAt: item.endsAt)
                }
            }
            done += items.count
            progress?(done)
        }
    }
}

/// A version 4 UUID in the contract's lowercase form, drawn from `rng`, so
/// that one seed gives the same ids twice (the bulk path's check).
extension ScaleSeed {
    /// The bulk path for PostgreSQL: the rows ``write(into:progress:)``
    /// writes — `booking`, `booking_version` (its `seq` from the same
    /// sequence, in the same order) and `series`, with the same encoders
    /// (`EncodedBooking`, `ContractJSON`) and the same derived columns as
    /// `PostgresTransaction.save` and `insertSeries` — loaded with
    /// `COPY … FROM` through `psql` in batches of `batch`. About two
    /// orders of magnitude faster than a statement per row; the benchmark
    /// checks that both paths give the same rows (``ScaleBenchmark/checkBulkPath``).
    func copy(into schema: String, directory: URL, batch: Int = 100_000, progress: ((Int) -> Void)? = nil) async throws -> Int {
        func text(_ value: String?) -> String {
            guard let value else { return "" }
            return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        }
        func number(_ value: Int64?) -> String { value.map(String.init) ?? "" }
        let bookingsFile = directory.appendingPathComponent("booking.csv")
        let versionsFile = directory.appendingPathComponent("booking_version.csv")
        let seriesFile = directory.appendingPathComponent("series.csv")
        defer { for f in [bookingsFile, versionsFile, seriesFile] { try? FileManager.default.removeItem(at: f) } }
        var done = 0
        return try await generate(batch: batch) { items in
            var bookings = "", versions = "", series = ""
            bookings.reserveCapacity(items.count * 1_200)
            versions.reserveCapacity(items.count * 1_200)
            for item in items {
                let booking = item.booking
                if let s = item.newSeries {
                    let recurrence = String(decoding: try ContractJSON.encode(Recurrence(.weekly, count: s.count)), as: UTF8.self)
                    let createdAt = item.startsAt.addingTimeInterval(-14 * 86_400).timeIntervalSince1970
                    series += [text(s.id), text(booking.room), text(s.requestedBy), text(recurrence), text(ConflictPolicy.reject.rawValue),
                               "1", String(s.count), "\(createdAt)"].joined(separator: ",") + "\n"
                }
                let json = text(String(decoding: EncodedBooking(booking).json, as: UTF8.self))
                let start = Int64(item.startsAt.timeIntervalSince1970), end = Int64(item.endsAt.timeIntervalSince1970)
                let due = BookingRules.earliestDue(status: booking.status, startsAt: item.startsAt, endsAt: item.endsAt)
                    .map { StoreRules.dueSeconds($0) }
                bookings += [text(booking.id), text(booking.room), text(booking.status.rawValue), String(start), String(end),
                             String(booking.version), json, number(due), text(booking.series?.id)].joined(separator: ",") + "\n"
                versions += [text(booking.id), String(booking.version), text(booking.room), text(booking.status.rawValue), String(start),
                             String(end), text(booking.requestedBy), json, text(booking.series?.id)].joined(separator: ",") + "\n"
            }
            try bookings.write(to: bookingsFile, atomically: false, encoding: .utf8)
            try versions.write(to: versionsFile, atomically: false, encoding: .utf8)
            try series.write(to: seriesFile, atomically: false, encoding: .utf8)
            _ = try TestPostgres.control("psql", [
                "-q", "-v", "ON_ERROR_STOP=1",
                "-c", "\\copy \(schema).series (id, room, requestedBy, recurrence, onConflict, version, count, createdAt) FROM '\(seriesFile.path)' WITH (FORMAT csv)",
                "-c", "\\copy \(schema).booking (id, room, status, startsAt, endsAt, version, json, nextDueAt, seriesId) FROM '\(bookingsFile.path)' WITH (FORMAT csv)",
                "-c", "\\copy \(schema).booking_version (id, version, room, status, startsAt, endsAt, requestedBy, json, seriesId) FROM '\(versionsFile.path)' WITH (FORMAT csv)",
            ])
            done += items.count
            progress?(done)
        }
    }
}

private func uuid(_ rng: inout SplitMix) -> String {
    let a = rng.next(), b = rng.next()
    let hex = String(format: "%016llx%016llx", a, (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000)
    let c = Array(hex)
    return String(c[0..<8]) + "-" + String(c[8..<12]) + "-4" + String(c[13..<16]) + "-" + String(c[16..<20]) + "-" + String(c[20..<32])
}

private func hhmm(_ minutes: Int) -> String { String(format: "%02d:%02d", minutes / 60, minutes % 60) }

/// Distinct free slots for the benchmark's own creates: 07:00–08:00 and
/// 18:00–19:00 in quarter hours, which ``ScaleSeed`` leaves free, on the
/// weekdays from 30 days ahead, one room after another.
final class ScaleSlots: @unchecked Sendable {  // all state behind `lock`
    private let lock = NSLock()
    private let rooms: Int
    private let dates: [String]
    private var index = 0
    private var issuedInRound = 0

    init(rooms: Int) {
        self.rooms = rooms
        dates = ScaleSeed.days().filter { $0.offset >= 30 }.map(\.date)
    }

    static let quarters = [7 * 60, 7 * 60 + 15, 7 * 60 + 30, 7 * 60 + 45, 18 * 60, 18 * 60 + 15, 18 * 60 + 30, 18 * 60 + 45]

    func next(limit: Int) -> [UInt8]? {
        lock.withLock {
            guard issuedInRound < limit else { return nil }
            issuedInRound += 1
            let room = index % rooms, quarter = index / rooms % Self.quarters.count
            let date = dates[(index / rooms / Self.quarters.count) % dates.count]
            index += 1
            let start = Self.quarters[quarter]
            let json = #"{"room":"\#(ScaleSeed.roomName(room))","date":"\#(date)","start":"\#(hhmm(start))","end":"\#(hhmm(start + 15))","title":"Benchmark","attendees":[{"name":"Ada Lovelace","email":"ada@example.com","phone":"0170 1234567"},{"name":"Grace Hopper","email":"grace@example.com","phone":"+1 212 555 0100"}]}"#
            return Array(json.utf8)
        }
    }

    func resetLimit() { lock.withLock { issuedInRound = 0 } }
}
