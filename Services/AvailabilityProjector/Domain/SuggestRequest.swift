import BookingContracts
import Foundation

/// One end of a suggestion window: an instant, or a local date that stands
/// for the start of that day in each room's zone.
public enum WindowBound: Sendable, Equatable {
    /// UNIX seconds.
    case instant(Int64)
    /// `YYYY-MM-DD`.
    case date(String)

    /// Reads `YYYY-MM-DD`, or an instant (`…Z`, or ISO 8601 with an offset).
    init?(_ text: String) {
        if ContractFormat.calendarDate(text) != nil, text.utf8.count == 10 {
            self = .date(text)
        } else if let instant = ProjectorStore.instant(text) {
            self = .instant(Int64(instant.timeIntervalSince1970.rounded(.down)))
        } else {
            return nil
        }
    }

    /// The bound as an instant in `zone`.
    func instant(zone: TimeZone) -> Int64? {
        switch self {
        case .instant(let seconds): seconds
        case .date(let date): LocalClock.startOfDay(date, zone: zone)
        }
    }

    /// The bound as UTC seconds for comparing two bounds (a date at its UTC midnight).
    var utcSeconds: Int64 {
        switch self {
        case .instant(let seconds): return seconds
        case .date(let date):
            let d = ContractFormat.calendarDate(date)!
            return CivilDays.days(year: d.year, month: d.month, day: d.day) * 86_400
        }
    }
}

/// A checked `availability.suggest` query, ready to run.
public struct CheckedSuggest: Sendable, Equatable {
    public var from: WindowBound
    public var to: WindowBound
    public var durationMinutes: Int
    public var stepMinutes: Int
    public var limit: Int
    /// Lower-cased, or nil for any name.
    public var name: String?
    /// Lower-cased, trimmed, empty items dropped.
    public var equipment: [String]
    public var minCapacity: Int?
}

extension QueryEngine {
    /// Checks a decoded suggestion query against the contract's limits:
    /// 1100 with `field` for a missing or invalid value, `to` not after
    /// `from` or more than 31 days apart (calendar days between two dates,
    /// 24-hour days otherwise, a date then read at its UTC midnight).
    public static func check(_ q: SuggestQuery) -> Result<CheckedSuggest, ReplyError> {
        func invalid(_ field: String, _ text: String) -> Result<CheckedSuggest, ReplyError> {
            .failure(ReplyError(code: .invalidField, text: text, field: field))
        }
        guard let fromText = q.from, !fromText.isEmpty else { return invalid("from", "from is required (a date or an instant)") }
        guard let from = WindowBound(fromText) else {
            return invalid("from", "from must be YYYY-MM-DD or an instant such as 2026-11-30T09:00:00Z")
        }
        guard let toText = q.to, !toText.isEmpty else { return invalid("to", "to is required (a date or an instant)") }
        guard let to = WindowBound(toText) else {
            return invalid("to", "to must be YYYY-MM-DD or an instant such as 2026-12-04T18:00:00Z")
        }
        let span = to.utcSeconds - from.utcSeconds
        if span <= 0 { return invalid("to", "to must be after from") }
        let maxSpan = Int64(SuggestContract.maxWindowDays) * 86_400
        if span > maxSpan {
            return invalid("to", "from and to are at most \(SuggestContract.maxWindowDays) days apart")
        }
        guard let duration = q.durationMinutes else { return invalid("durationMinutes", "durationMinutes is required") }
        guard SuggestContract.durationRange.contains(duration), duration % ContractFormat.gridMinutes == 0 else {
            return invalid("durationMinutes", "durationMinutes must be 15 to 720, a multiple of 15")
        }
        let step = q.stepMinutes ?? SuggestContract.defaultStep
        guard SuggestContract.stepRange.contains(step), step % ContractFormat.gridMinutes == 0 else {
            return invalid("stepMinutes", "stepMinutes must be 15 to 240, a multiple of 15")
        }
        let limit = q.limit ?? SuggestContract.defaultLimit
        guard SuggestContract.limitRange.contains(limit) else { return invalid("limit", "limit must be 1 to 100") }
        if let min = q.minCapacity, min < 0 { return invalid("minCapacity", "minCapacity must not be negative") }
        let name = q.name.flatMap { $0.isEmpty ? nil : $0.lowercased() }
        let equipment = RoomInfo.equipmentFilter(q.equipment)
        return .success(CheckedSuggest(from: from, to: to, durationMinutes: duration, stepMinutes: step, limit: limit,
                                       name: name, equipment: equipment, minCapacity: q.minCapacity))
    }

    /// Parses an RPC body (a JSON object).
    public static func parseSuggest(body: [UInt8]) -> Result<CheckedSuggest, ReplyError> {
        do {
            return check(try SuggestQuery.decode(body: body))
        } catch {
            return .failure(ContractJSON.replyError(for: error))
        }
    }

    /// Parses `GET /suggest` parameters (the body's names; `equipment` may
    /// repeat or be comma-separated; unknown keys are ignored).
    public static func parseSuggest(parameters: [(String, String)]) -> Result<CheckedSuggest, ReplyError> {
        func first(_ key: String) -> String? { parameters.first { $0.0 == key }.map { $0.1 }.flatMap { $0.isEmpty ? nil : $0 } }
        var q = SuggestQuery(from: first("from"), to: first("to"), name: first("name"))
        let equipment = parameters.filter { $0.0 == "equipment" }.flatMap { $0.1.split(separator: ",").map(String.init) }
        q.equipment = equipment.isEmpty ? nil : equipment
        for (key, path) in [("durationMinutes", \SuggestQuery.durationMinutes), ("minCapacity", \.minCapacity),
                            ("limit", \.limit), ("stepMinutes", \.stepMinutes)] {
            guard let text = first(key) else { continue }
            guard let n = Int(text) else {
                return .failure(ReplyError(code: .invalidField, text: "\(key) must be a whole number", field: key))
            }
            q[keyPath: path] = n
        }
        return check(q)
    }
}
